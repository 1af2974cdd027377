package filelog

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowSyncs makes every sync of h take d longer.
func slowSyncs(h *hookFS, d time.Duration) {
	h.setHook(func(op, _ string, _ []byte, _ int64) error {
		if op == "sync" {
			time.Sleep(d)
		}
		return nil
	})
}

// TestGatherJoinsOneSync: writers that come back as soon as their record
// is durable share one sync, instead of splitting into two groups of half
// their number that take turns (each group's callers come back while the
// other's sync runs).
func TestGatherJoinsOneSync(t *testing.T) {
	h := &hookFS{}
	// Generous waits, so that a loaded machine's slow wake-ups do not
	// end a gathering early; the rule, not the figures, is under test.
	l := mustCreate(t, t.TempDir(), Options{fs: h, gatherQuiet: 20 * time.Millisecond, gatherMax: 200 * time.Millisecond})
	defer l.Close()
	slowSyncs(h, 5*time.Millisecond)
	const writers, rounds = 16, 20
	ctx := context.Background()
	syncs := l.SyncCount()
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				id := gid(w*rounds + r)
				if err := l.LogCommit(ctx, commitRec(id, 2)); err != nil {
					failed.Store(err)
					return
				}
				if err := l.Forget(ctx, id); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	n := l.SyncCount() - syncs
	perSync := float64(writers*rounds) / float64(n)
	// Every writer in every sync would give 16; two groups taking turns, 8.
	if perSync < 12 {
		t.Errorf("%d commits took %d syncs, %.1f per sync; want at least 12 of the %d writers in each", writers*rounds, n, perSync, writers)
	}
}

// heldGroup commits one record whose sync is held until the queue holds
// n more, then lets the sync return. With n+1 of at least gatherFewest,
// the writer then gathers for the first caller to come back and join the
// n, which it does not. It returns when the first commit returned, and a
// channel that receives the n commits' errors.
func heldGroup(t *testing.T, l *Log, h *hookFS, n int) <-chan error {
	t.Helper()
	gate := make(chan struct{})
	var first atomic.Bool
	h.setHook(func(op, _ string, _ []byte, _ int64) error {
		if op == "sync" && first.CompareAndSwap(false, true) {
			<-gate
		}
		return nil
	})
	ctx := context.Background()
	firstDone := make(chan error, 1)
	go func() { firstDone <- l.LogCommit(ctx, commitRec(gid(0), 2)) }()
	for !first.Load() {
		time.Sleep(time.Millisecond)
	}
	queued := make(chan error, n)
	for i := 1; i <= n; i++ {
		go func() { queued <- l.LogCommit(ctx, commitRec(gid(i), 2)) }()
	}
	for {
		l.mu.Lock()
		q := l.queuedDurable
		l.mu.Unlock()
		if q == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	return queued
}

// waitQueued waits for the n commits of heldGroup and returns how long
// they took from now.
func waitQueued(t *testing.T, queued <-chan error, n int) time.Duration {
	t.Helper()
	start := time.Now()
	for range n {
		if err := <-queued; err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start)
}

// TestGatherEnds: when callers of the last group do not come back, the
// records queued wait no longer than the quiet time, or the gathering's
// bound if that comes first.
func TestGatherEnds(t *testing.T) {
	for _, c := range []struct {
		name         string
		quiet, bound time.Duration
		want         time.Duration // about how long the records wait
	}{
		{"when quiet", 300 * time.Millisecond, time.Minute, 300 * time.Millisecond},
		{"at its bound", time.Minute, 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &hookFS{}
			l := mustCreate(t, t.TempDir(), Options{fs: h, gatherQuiet: c.quiet, gatherMax: c.bound})
			defer l.Close()
			d := waitQueued(t, heldGroup(t, l, h, 7), 7)
			if d < c.want/2 || d > 20*c.want {
				t.Errorf("the seven records queued behind the first waited %v after it returned; want about %v (quiet time %v, bound %v)", d, c.want, c.quiet, c.bound)
			}
		})
	}
}

// TestGatherDoesNotDelayClose: Close writes what is queued at once, and
// its callers learn that it is durable.
func TestGatherDoesNotDelayClose(t *testing.T) {
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h, gatherQuiet: time.Minute, gatherMax: time.Minute})
	seven := heldGroup(t, l, h, 7)
	time.Sleep(20 * time.Millisecond) // the writer is gathering
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, seven, 7)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close and the records queued took %v during a gathering of a minute", d)
	}
}

// TestSmallGroupDoesNotGather: after a group smaller than gatherFewest
// the writer does not wait: a caller that does not come back delays no
// one (one or two writers gain nothing from the wait).
func TestSmallGroupDoesNotGather(t *testing.T) {
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h, gatherQuiet: time.Minute, gatherMax: time.Minute})
	defer l.Close()
	n := gatherFewest - 2 // with the first, one fewer than gatherFewest
	if d := waitQueued(t, heldGroup(t, l, h, n), n); d > 20*time.Second {
		t.Errorf("the %d records queued behind the first waited %v after it returned", n, d)
	}
}

// TestGatherWritesNoForgetAlone: forget records queued while the writer
// gathers wait for the next group, as they would without a gathering:
// the end of a gathering with only forget records queued writes nothing.
func TestGatherWritesNoForgetAlone(t *testing.T) {
	h := &hookFS{}
	const quiet = 10 * time.Millisecond
	l := mustCreate(t, t.TempDir(), Options{fs: h, gatherQuiet: quiet, gatherMax: time.Second})
	defer l.Close()
	queued := heldGroup(t, l, h, 7)
	// The seven are written once the gathering for the first caller
	// ends; hold their sync, and queue a forget record meanwhile.
	gate := make(chan struct{})
	var held, released atomic.Bool
	var writes atomic.Int32
	h.setHook(func(op, _ string, _ []byte, _ int64) error {
		switch {
		case op == "sync" && held.CompareAndSwap(false, true):
			<-gate
		case op == "write" && released.Load():
			writes.Add(1)
		}
		return nil
	})
	for !held.Load() {
		time.Sleep(time.Millisecond)
	}
	if err := l.Forget(context.Background(), gid(0)); err != nil {
		t.Fatal(err)
	}
	released.Store(true)
	close(gate)
	waitQueued(t, queued, 7)
	time.Sleep(20 * quiet) // the gathering for the seven has ended
	if n := writes.Load(); n != 0 {
		t.Errorf("%d writes after the sync of the seven, with only a forget record queued; want none", n)
	}
}

// TestGatherCountsEachCallerOnce: a caller that the sync woke and that
// queued its next record before the writer looked at the queue is one of
// the callers the gathering waits for, not one more. Counted twice, the
// gathering waits for a caller that does not exist, until its quiet time
// or its bound, though every caller is back.
func TestGatherCountsEachCallerOnce(t *testing.T) {
	h := &hookFS{}
	const n = 6 // the callers, at least gatherFewest
	var l *Log
	var hold atomic.Bool
	// OnSync runs after the acknowledged callers were woken: with hold
	// set, it waits (once) until the first caller has queued again, as a
	// caller on another core can before the writer gets on.
	onSync := func(int, int, time.Duration) {
		if !hold.CompareAndSwap(true, false) {
			return
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			l.mu.Lock()
			q := l.queuedDurable
			l.mu.Unlock()
			if q == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	l = mustCreate(t, t.TempDir(), Options{fs: h, OnSync: onSync, gatherQuiet: time.Minute, gatherMax: time.Minute})
	defer l.Close()
	gate := make(chan struct{})
	var first atomic.Bool
	h.setHook(func(op, _ string, _ []byte, _ int64) error {
		if op == "sync" && first.CompareAndSwap(false, true) {
			<-gate
		}
		return nil
	})
	ctx := context.Background()
	errs := make(chan error, n+1)
	go func() {
		// The first caller: alone in the first sync, then back at once.
		if err := l.LogCommit(ctx, commitRec(gid(0), 2)); err != nil {
			errs <- err
			return
		}
		errs <- l.LogCommit(ctx, commitRec(gid(100), 2))
	}()
	for !first.Load() {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < n; i++ {
		go func() { errs <- l.LogCommit(ctx, commitRec(gid(i), 2)) }()
	}
	for {
		l.mu.Lock()
		q := l.queuedDurable
		l.mu.Unlock()
		if q == n-1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	hold.Store(true)
	close(gate)
	// Every caller is back once the first one is: the n records go out
	// together at once, not after the minute of quiet time.
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("%d of the %d records still wait 10 s after every caller was back: the gathering waits for a caller that is not coming", n-i, n)
		}
	}
}

// TestGatherOverOnceQuiet: once no record has arrived for the quiet time,
// the gathering is over; a record arriving later is written at once
// instead of starting the wait again.
func TestGatherOverOnceQuiet(t *testing.T) {
	h := &hookFS{}
	const quiet = time.Second
	l := mustCreate(t, t.TempDir(), Options{fs: h, gatherQuiet: quiet, gatherMax: time.Minute})
	defer l.Close()
	// The seven are written once the gathering for the first caller ends
	// (a quiet time); after their sync the writer gathers for them, and
	// none comes back.
	waitQueued(t, heldGroup(t, l, h, 7), 7)
	time.Sleep(2 * quiet)
	start := time.Now()
	if err := l.LogCommit(context.Background(), commitRec(gid(100), 2)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > quiet/2 {
		t.Errorf("a record arriving %v after the last one waited %v; the quiet time, %v, had passed", 2*quiet, d, quiet)
	}
}
