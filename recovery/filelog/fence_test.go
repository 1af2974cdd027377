package filelog

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// TestFenceCountsRecordsBeingWritten: while a commit record is being
// written (its group is in a sync that does not return), others are written
// and in a second sync, and one more is queued behind them, none is visible
// to Lookup, yet LogAbort of any of their ids is refused; the same the
// other way round. After the syncs go through, and after a reopen, exactly
// the records that were let through are there.
func TestFenceCountsRecordsBeingWritten(t *testing.T) {
	for _, first := range []string{"commit", "abort"} {
		t.Run(first+" pending", func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			h := &hookFS{}
			l := mustCreate(t, dir, Options{fs: h})
			defer func() { l.closeOnce(t) }()
			entered, release := blockingSync(h)
			defer release()
			write2 := func(ctx context.Context, op string, i int) error {
				if op == "commit" {
					return l.LogCommit(ctx, commitRec(gid(i), 2))
				}
				return l.LogAbort(ctx, abortRec(i))
			}
			write := func(op string, i int) error { return write2(ctx, op, i) }
			other, fenced := "abort", xa.ErrCommitRecorded
			if first == "abort" {
				other, fenced = "commit", xa.ErrAbortRecorded
			}
			// gid(1) in the first sync, gid(2) ... in the second (a group
			// of overlapMin), the last queued behind them.
			last := 2 + overlapMin
			var ids []int
			for i := 1; i <= last; i++ {
				ids = append(ids, i)
			}
			errs := make(chan error, last)
			go func() { errs <- write(first, 1) }()
			<-entered // gid(1)'s record is being written: out of the queue, in a sync
			for i := 2; i < last; i++ {
				go func() { errs <- write(first, i) }()
			}
			<-entered // theirs too, in the second sync
			go func() { errs <- write(first, last) }()
			for {
				l.mu.Lock()
				n := len(l.queue)
				l.mu.Unlock()
				if n == 1 {
					break // the last record is queued behind them
				}
				time.Sleep(time.Millisecond)
			}
			for _, i := range ids {
				if _, ok, _ := l.Lookup(ctx, gid(i)); ok {
					t.Fatal("a commit record is visible before it is durable")
				}
				if _, ok, _ := l.LookupAbort(ctx, gid(i)); ok {
					t.Fatal("an abort record is visible before it is durable")
				}
			}
			for _, i := range ids {
				// A record let through would wait for the stuck sync:
				// give up on it soon.
				octx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				err := write2(octx, other, i)
				cancel()
				if !errors.Is(err, fenced) {
					t.Errorf("%s of gid(%d) while its %s record is pending: %v, want %v", other, i, first, err, fenced)
				}
			}
			if t.Failed() {
				return
			}
			// A refused record queued nothing.
			l.mu.Lock()
			n := len(l.queue)
			l.mu.Unlock()
			if n != 1 {
				t.Errorf("%d records queued after the refusals, want 1", n)
			}
			release()
			for range last {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			check := func(when string) {
				for _, i := range ids {
					_, c, _ := l.Lookup(ctx, gid(i))
					_, a, _ := l.LookupAbort(ctx, gid(i))
					if c != (first == "commit") || a != (first == "abort") {
						t.Errorf("%s: gid(%d): commit record %v, abort record %v; want only the %s", when, i, c, a, first)
					}
				}
			}
			check("after the syncs")
			mustClose(t, l)
			l = mustOpen(t, dir, Options{})
			check("after reopen")
			mustClose(t, l)
		})
	}
}

// TestFenceRaceSlowSyncs races LogCommit and LogAbort for the same ids with
// syncs slowed down, so that many records of both kinds wait in the queue
// and in flight at once: exactly one kind wins per id, and every replay
// (reopen, ReadSnapshot) agrees.
func TestFenceRaceSlowSyncs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := &hookFS{}
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "sync" {
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	l := mustCreate(t, dir, Options{fs: h, SegmentSize: 16 << 10}) // rotations and compaction too
	const ids, each = 400, 3
	var commitWins, abortWins, both, other atomic.Int64
	var wg sync.WaitGroup
	won := make([]int32, ids) // 1 commit, 2 abort
	start := make(chan struct{})
	for i := range ids {
		var c, a atomic.Int32
		var iwg sync.WaitGroup
		for k := range 2 * each {
			iwg.Add(1)
			wg.Go(func() {
				defer iwg.Done()
				<-start
				var err error
				if k%2 == 0 {
					err = l.LogCommit(ctx, commitRec(gid(i), 2))
					if err == nil {
						c.Add(1)
					} else if !errors.Is(err, xa.ErrAbortRecorded) {
						t.Error(err)
						other.Add(1)
					}
				} else {
					err = l.LogAbort(ctx, abortRec(i))
					if err == nil {
						a.Add(1)
					} else if !errors.Is(err, xa.ErrCommitRecorded) {
						t.Error(err)
						other.Add(1)
					}
				}
			})
		}
		wg.Go(func() {
			iwg.Wait()
			switch {
			case c.Load() > 0 && a.Load() > 0:
				both.Add(1)
			case c.Load() == each:
				commitWins.Add(1)
				won[i] = 1
			case a.Load() == each:
				abortWins.Add(1)
				won[i] = 2
			default:
				t.Errorf("gid(%d): %d commits and %d aborts acknowledged of %d each", i, c.Load(), a.Load(), each)
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("commit won %d ids, abort won %d, both %d; %d syncs", commitWins.Load(), abortWins.Load(), both.Load(), l.SyncCount())
	if both.Load() > 0 {
		t.Fatalf("%d of %d ids have both a commit and an abort acknowledged", both.Load(), ids)
	}
	if other.Load() > 0 {
		t.FailNow()
	}
	check := func(when string, r xa.RecoveryLog) {
		t.Helper()
		for i := range ids {
			_, c, err1 := r.Lookup(ctx, gid(i))
			_, a, err2 := r.LookupAbort(ctx, gid(i))
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			if c != (won[i] == 1) || a != (won[i] == 2) {
				t.Fatalf("%s: gid(%d): commit record %v, abort record %v; the winner was %d", when, i, c, a, won[i])
			}
		}
	}
	check("open", l)
	mustClose(t, l)
	s, err := ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	check("snapshot", s)
	l = mustOpen(t, dir, Options{})
	defer mustClose(t, l)
	check("reopened", l)
}

// TestDecisionTooLate: the deadline is Begun + Identity().Timeout by the
// log's clock, read when the record is enqueued: a coordinator that paused
// after its own check is refused, and nothing is logged.
func TestDecisionTooLate(t *testing.T) {
	ctx := context.Background()
	clock := newManualClock()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true, Now: clock.now})
	defer mustClose(t, l)
	id := gid(0) // begun at testStart
	clock.advance(testIdent.Timeout)
	if err := l.LogCommit(ctx, commitRec(id, 2)); err != nil {
		t.Fatalf("LogCommit at exactly Begun + Timeout: %v", err)
	}
	clock.advance(time.Millisecond)
	late := gid(-1) // begun a millisecond before gid(0)
	err := l.LogCommit(ctx, commitRec(late, 2))
	if !errors.Is(err, xa.ErrDecisionTooLate) || !errors.Is(err, xa.ErrTimeout) {
		t.Fatalf("LogCommit a millisecond late: %v, want ErrDecisionTooLate", err)
	}
	if _, ok, _ := l.Lookup(ctx, late); ok {
		t.Fatal("the late record was logged")
	}
	// Replacing a record does not escape the deadline either.
	if err := l.LogCommit(ctx, commitRec(id, 3)); !errors.Is(err, xa.ErrDecisionTooLate) {
		t.Fatalf("LogCommit again, late: %v", err)
	}
	// An abort is never too late.
	if err := l.LogAbort(ctx, xa.AbortRecord{ID: late}); err != nil {
		t.Fatal(err)
	}
}

// TestAbortRetentionByTheLogsClock: ForgetAbort keeps a record younger than
// xa.AbortRetention by the log's clock, whatever the caller's clock says,
// across a reopen, and drops it after; a record being written is kept.
func TestAbortRetentionByTheLogsClock(t *testing.T) {
	ctx := context.Background()
	clock := newManualClock()
	dir := t.TempDir()
	opts := Options{NoSync: true, Now: clock.now}
	l := mustCreate(t, dir, opts)
	if err := l.LogAbort(ctx, xa.AbortRecord{ID: gid(1), Logged: testStart.Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := l.LookupAbort(ctx, gid(1)); !a.Logged.Equal(testStart) {
		t.Fatalf("abort record logged at %v; want the log's clock, %v, not the caller's", a.Logged, testStart)
	}
	// gid(1) began at testStart: its commit deadline, testStart +
	// Timeout, is later than the abort's logging, and retention runs
	// from the deadline (the log would take its commit until then).
	clock.advance(xa.AbortRetention - time.Nanosecond)
	if err := l.ForgetAbort(ctx, gid(1)); !errors.Is(err, ErrRetained) {
		t.Fatalf("ForgetAbort %v after the logging: %v, want ErrRetained", xa.AbortRetention-time.Nanosecond, err)
	}
	clock.advance(testIdent.Timeout)
	if err := l.ForgetAbort(ctx, gid(1)); !errors.Is(err, ErrRetained) {
		t.Fatalf("ForgetAbort a nanosecond before deadline + retention: %v, want ErrRetained", err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, opts)
	if err := l.ForgetAbort(ctx, gid(1)); !errors.Is(err, ErrRetained) {
		t.Fatalf("ForgetAbort after reopen: %v, want ErrRetained", err)
	}
	if _, ok, _ := l.LookupAbort(ctx, gid(1)); !ok {
		t.Fatal("the retained record is gone")
	}
	// gid(1) began a millisecond after testStart.
	clock.advance(gid(1).Begun.Sub(testStart) + time.Nanosecond)
	if err := l.ForgetAbort(ctx, gid(1)); err != nil {
		t.Fatalf("ForgetAbort at the end of the retention: %v", err)
	}
	if _, ok, _ := l.LookupAbort(ctx, gid(1)); ok {
		t.Fatal("the forgotten record is still there")
	}
	// Forgotten, the id may be aborted again (a new record, a new
	// retention).
	if err := l.LogAbort(ctx, abortRec(1)); err != nil {
		t.Fatal(err)
	}
	if err := l.ForgetAbort(ctx, gid(1)); !errors.Is(err, ErrRetained) {
		t.Fatalf("ForgetAbort of the new record: %v", err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, opts)
	defer mustClose(t, l)
	if as, _ := l.Aborts(ctx); len(as) != 1 || !as[0].Logged.Equal(clock.now()) {
		t.Fatalf("after reopen: %+v; want the new record", as)
	}

	// A record still being written is kept.
	h := &hookFS{}
	l2 := mustCreate(t, t.TempDir(), Options{fs: h, Now: clock.now})
	entered, release := blockingSync(h)
	errc := make(chan error, 1)
	go func() { errc <- l2.LogAbort(ctx, abortRec(2)) }()
	<-entered
	clock.advance(2 * xa.AbortRetention)
	if err := l2.ForgetAbort(ctx, gid(2)); !errors.Is(err, ErrRetained) {
		t.Errorf("ForgetAbort of a record being written: %v, want ErrRetained", err)
	}
	release()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mustClose(t, l2)
}

// TestDelegationsAreNeverDead: delegations and live abort records survive
// any number of rotations and compactions, and a repeated delegation is
// written once.
func TestDelegationsAreNeverDead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true, SegmentSize: 2048})
	for _, p := range []string{"maria", "pg", "maria"} {
		if err := l.LogDelegation(ctx, xa.Delegation{Participant: p}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.LogAbort(ctx, abortRec(1)); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 3000; i++ {
		apply(t, ctx, l, step{op: "commit", i: i, n: 2})
		apply(t, ctx, l, step{op: "forget", i: i})
	}
	if n, _ := dirSize(t, dir); n > 4 {
		t.Errorf("%d segments", n)
	}
	check := func(when string, r xa.RecoveryLog) {
		t.Helper()
		ds, err := r.Delegations(ctx)
		if err != nil || len(ds) != 2 || ds[0].Participant != "maria" || ds[1].Participant != "pg" {
			t.Fatalf("%s: Delegations = %+v, %v", when, ds, err)
		}
		if _, ok, err := r.LookupAbort(ctx, gid(1)); !ok || err != nil {
			t.Fatalf("%s: the abort record is gone: %v", when, err)
		}
	}
	check("open", l)
	mustClose(t, l)
	if _, err := os.Stat(filepath.Join(dir, segmentName(1))); !os.IsNotExist(err) {
		t.Fatalf("segment 1 was never compacted away: %v", err)
	}
	rep, err := Verify(dir)
	if err != nil || rep.Records.Delegation != 2 || rep.Delegations != 2 {
		t.Fatalf("Verify: %v, %d delegation records, %d delegations; want 2 (one copy each)", err, rep.Records.Delegation, rep.Delegations)
	}
	l = mustOpen(t, dir, Options{NoSync: true})
	defer mustClose(t, l)
	check("reopened", l)
}

// TestReadSnapshotOfAnOpenLog: a snapshot of a log a Log has open says so,
// holds what is durable, changes nothing, and refuses writes.
func TestReadSnapshotOfAnOpenLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{})
	defer mustClose(t, l)
	for _, s := range []step{
		{op: "commit", i: 1, n: 2}, {op: "abort", i: 2}, {op: "delegation", rm: "maria"},
		{op: "heuristic", i: 3, act: xa.OutcomeRollback, rm: "maria"}, {op: "heuristic", i: 3, act: xa.OutcomeCommit, rm: "pg"},
		{op: "commit", i: 4, n: 1},
	} {
		apply(t, ctx, l, s)
	}
	before := dirHashes(t, dir)
	s, err := ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.InUse() {
		t.Error("the snapshot of an open log does not say it is in use")
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("ReadSnapshot modified the log")
	}
	if s.Identity() != l.Identity() {
		t.Errorf("snapshot identity %+v, log %+v", s.Identity(), l.Identity())
	}
	if v, w := viewOf(t, s), viewOf(t, l); !v.equal(w) {
		t.Errorf("snapshot %v, log %v", v, w)
	}
	for name, err := range map[string]error{
		"LogCommit":      s.LogCommit(ctx, commitRec(gid(9), 1)),
		"LogAbort":       s.LogAbort(ctx, abortRec(9)),
		"Forget":         s.Forget(ctx, gid(1)),
		"ForgetAbort":    s.ForgetAbort(ctx, gid(2)),
		"LogDelegation":  s.LogDelegation(ctx, xa.Delegation{Participant: "pg"}),
		"LogHeuristic":   s.LogHeuristic(ctx, heurRec(9, xa.OutcomeCommit)),
		"ClearHeuristic": s.ClearHeuristic(ctx, "maria", gid(3).Branch(0)),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("Snapshot.%s: %v, want ErrReadOnly", name, err)
		}
	}
}
