package filelog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/xadb/xa/xa"
)

// TestFailStop injects a failing write or sync and checks that the log
// stops: the caller of the failed group and every later call get an error,
// nothing is retried, and a reopened log holds every acknowledged record.
func TestFailStop(t *testing.T) {
	tests := []struct {
		name        string
		segmentSize int64
		op          string // the operation that fails
		err         error
	}{
		{name: "sync fails", op: "sync", err: syscall.EIO},
		{name: "write fails", op: "write", err: syscall.ENOSPC},
		{name: "write is cut short", op: "write", err: &partialWrite{n: 5, err: syscall.EIO}},
		{name: "new segment cannot be synced", segmentSize: 1, op: "sync", err: syscall.EIO},
		{name: "directory sync fails after rotation", segmentSize: 1, op: "syncdir", err: syscall.EIO},
		{name: "rename fails on rotation", segmentSize: 1, op: "rename", err: syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			h := &hookFS{}
			l := mustCreate(t, dir, Options{fs: h, SegmentSize: tt.segmentSize})
			var after atomic.Int64 // operations attempted after the fault
			var faulted atomic.Bool
			var seen int
			h.setHook(func(op, name string, p []byte, off int64) error {
				if faulted.Load() {
					// Removing the temporary file of a failed
					// segment creation is cleanup, not a retry.
					if !(op == "remove" && strings.HasSuffix(name, ".tmp")) {
						after.Add(1)
					}
					return nil
				}
				if op != tt.op {
					return nil
				}
				// Let the first group through, fail the second
				// matching operation.
				seen++
				if seen < 2 {
					return nil
				}
				faulted.Store(true)
				return tt.err
			})
			var acked []xa.CommitRecord
			var failErr error
			var abortsAcked []xa.GlobalID
			for i := 0; i < 20 && failErr == nil; i++ {
				if i%3 == 2 {
					if err := l.LogAbort(ctx, abortRec(i)); err != nil {
						failErr = err
					} else {
						abortsAcked = append(abortsAcked, gid(i))
					}
					continue
				}
				rec := commitRec(gid(i), 2)
				if err := l.LogCommit(ctx, rec); err != nil {
					failErr = err
				} else {
					acked = append(acked, rec)
				}
			}
			if !faulted.Load() {
				t.Fatal("the fault was never injected")
			}
			// The fault may hit the group of a LogCommit (it fails) or a
			// rotation after it (the next call fails).
			if failErr == nil {
				failErr = l.LogCommit(ctx, commitRec(gid(99), 1))
			}
			if !errors.Is(failErr, ErrFailed) {
				t.Fatalf("call after the fault: %v, want ErrFailed", failErr)
			}
			if err := l.LogCommit(ctx, commitRec(gid(100), 1)); !errors.Is(err, ErrFailed) {
				t.Errorf("LogCommit after the fault: %v", err)
			}
			if err := l.Forget(ctx, gid(0)); !errors.Is(err, ErrFailed) {
				t.Errorf("Forget after the fault: %v", err)
			}
			if _, _, err := l.Lookup(ctx, gid(0)); !errors.Is(err, ErrFailed) {
				t.Errorf("Lookup after the fault: %v", err)
			}
			if _, err := l.Commits(ctx); !errors.Is(err, ErrFailed) {
				t.Errorf("Commits after the fault: %v", err)
			}
			if _, err := l.Heuristics(ctx); !errors.Is(err, ErrFailed) {
				t.Errorf("Heuristics after the fault: %v", err)
			}
			if err := l.LogAbort(ctx, abortRec(100)); !errors.Is(err, ErrFailed) {
				t.Errorf("LogAbort after the fault: %v", err)
			}
			if _, _, err := l.LookupAbort(ctx, gid(0)); !errors.Is(err, ErrFailed) {
				t.Errorf("LookupAbort after the fault: %v", err)
			}
			if err := l.LogDelegation(ctx, xa.Delegation{Participant: "maria"}); !errors.Is(err, ErrFailed) {
				t.Errorf("LogDelegation after the fault: %v", err)
			}
			if err := l.ForgetAbort(ctx, gid(0)); !errors.Is(err, ErrFailed) {
				t.Errorf("ForgetAbort after the fault: %v", err)
			}
			if err := l.Close(); !errors.Is(err, ErrFailed) {
				t.Errorf("Close after the fault: %v, want the failure", err)
			}
			if n := after.Load(); n != 0 {
				t.Errorf("%d file writes or syncs after the fault; want none (nothing is retried)", n)
			}

			l = mustOpen(t, dir, Options{})
			defer mustClose(t, l)
			for _, rec := range acked {
				if got, ok, err := l.Lookup(ctx, rec.ID); err != nil || !ok || enc(t, got) != enc(t, rec) {
					t.Errorf("acknowledged record %v lost after the fault: %v %v", rec.ID, ok, err)
				}
			}
			for _, id := range abortsAcked {
				if _, ok, err := l.LookupAbort(ctx, id); err != nil || !ok {
					t.Errorf("acknowledged abort record %v lost after the fault: %v %v", id, ok, err)
				}
			}
		})
	}
}

// TestFailStopWakesEveryWaiter: all callers waiting when a sync fails get an
// error; those of the groups written and syncing (two: the first, whose sync
// fails, and the one of overlapMin records written while it ran, whose sync
// succeeds but which may not be acknowledged before the one written first)
// are told the outcome is unknown; those queued behind them, never written,
// that the log failed.
func TestFailStopWakesEveryWaiter(t *testing.T) {
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h})
	entered := make(chan struct{}, 2)
	gate := make(chan struct{})
	var syncs atomic.Int32
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op != "sync" {
			return nil
		}
		switch syncs.Add(1) {
		case 1:
			entered <- struct{}{}
			<-gate
			return syscall.EIO
		case 2:
			entered <- struct{}{}
			<-gate
		}
		return nil
	})
	ctx := context.Background()
	const total = overlapMin + 9 // the first, overlapMin in group 2, 8 queued
	errs := make(chan error, total)
	go func() { errs <- l.LogCommit(ctx, commitRec(gid(0), 2)) }()
	<-entered // group 1 is in its sync
	var wg sync.WaitGroup
	for i := 1; i <= overlapMin; i++ {
		wg.Go(func() { errs <- l.LogCommit(ctx, commitRec(gid(i), 2)) })
	}
	<-entered // group 2 is written and in its sync; queue more behind them
	for i := overlapMin + 1; i < total; i++ {
		wg.Go(func() { errs <- l.LogCommit(ctx, commitRec(gid(i), 2)) })
	}
	for {
		l.mu.Lock()
		n := len(l.queue)
		l.mu.Unlock()
		if n == total-1-overlapMin {
			break
		}
		select {
		case err := <-errs:
			t.Fatalf("a call returned before the sync failed: %v", err)
		default:
		}
	}
	close(gate)
	wg.Wait()
	unknown := 0
	for range total {
		err := <-errs
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("waiter got %v, want ErrFailed", err)
		}
		if errors.Is(err, xa.ErrOutcomeUnknown) {
			unknown++
		}
	}
	if unknown != 1+overlapMin {
		t.Errorf("%d callers told outcome unknown, want %d (the groups written); the queued ones were never written", unknown, 1+overlapMin)
	}
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close: %v", err)
	}
}
