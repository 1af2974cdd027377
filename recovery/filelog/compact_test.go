package filelog

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/xadb/xa/xa"
)

func dirSize(t tb, dir string) (n int, size int64) {
	t.Helper()
	for _, p := range segFiles(t, dir) {
		st, err := os.Stat(p)
		if os.IsNotExist(err) { // removed by a compaction meanwhile
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		size += st.Size()
	}
	return n, size
}

// TestCompactionBoundsSpace runs 100k commit+forget cycles with a few
// records pending throughout: the directory stays small, and the pending
// records survive compaction and reopening.
func TestCompactionBoundsSpace(t *testing.T) {
	const (
		cycles  = 100_000
		segSize = 64 << 10
		writers = 8
	)
	ctx := context.Background()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true, SegmentSize: segSize})
	var pending []xa.CommitRecord
	logPending := func(i int) {
		rec := commitRec(gid(i), 3)
		if err := l.LogCommit(ctx, rec); err != nil {
			t.Fatal(err)
		}
		pending = append(pending, rec)
	}
	for i := range 5 {
		logPending(1_000_000 + i)
	}
	heur := []xa.HeuristicRecord{heurRec(1, xa.OutcomeCommit), heurRec(2, xa.OutcomeRollback), heurRecOn("pg", 2, xa.OutcomeCommit)}
	for _, h := range heur {
		if err := l.LogHeuristic(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	// Abort records within their retention and delegations are live too.
	for i := range 3 {
		if err := l.LogAbort(ctx, abortRec(3_000_000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.LogDelegation(ctx, xa.Delegation{Participant: "maria"}); err != nil {
		t.Fatal(err)
	}
	maxSegs, maxSize := 0, int64(0)
	for round := range 10 {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := w; i < cycles/10; i += writers {
					id := gid(round*cycles/10 + i)
					if err := l.LogCommit(ctx, commitRec(id, 2)); err != nil {
						t.Error(err)
						return
					}
					if err := l.Forget(ctx, id); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		logPending(2_000_000 + round) // one more long-pending record per round
		n, size := dirSize(t, dir)
		maxSegs, maxSize = max(maxSegs, n), max(maxSize, size)
	}
	t.Logf("at most %d segments, %d bytes; %d syncs", maxSegs, maxSize, l.SyncCount())
	if maxSegs > 4 || maxSize > 4*segSize {
		t.Errorf("log grew to %d segments, %d bytes; want at most 4 segments of %d bytes", maxSegs, maxSize, segSize)
	}
	check := func(when string) {
		got, err := l.Commits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := commitSet(t, got), commitSet(t, pending); !slices.Equal(g, w) {
			t.Errorf("%s: %d live commits, want the %d pending ones", when, len(got), len(pending))
		}
		h, err := l.Heuristics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := heurSet(t, h), heurSet(t, heur); !slices.Equal(g, w) {
			t.Errorf("%s: heuristics %d, want %d", when, len(h), len(heur))
		}
		if as, err := l.Aborts(ctx); err != nil || len(as) != 3 {
			t.Errorf("%s: %d aborts, %v; want 3", when, len(as), err)
		}
		if ds, err := l.Delegations(ctx); err != nil || len(ds) != 1 {
			t.Errorf("%s: delegations %+v, %v", when, ds, err)
		}
	}
	check("before reopen")
	mustClose(t, l)
	l = mustOpen(t, dir, Options{NoSync: true, SegmentSize: segSize})
	check("after reopen")
	mustClose(t, l)
	if rep, err := Verify(dir); err != nil || rep.TornTail != nil || rep.LiveCommits != len(pending) {
		t.Errorf("Verify: %v %+v", err, rep)
	}
}

// TestCompactionManyLiveRecords: when much of the log is live, the segment
// count stays within what the live data needs.
func TestCompactionManyLiveRecords(t *testing.T) {
	const segSize = 16 << 10
	ctx := context.Background()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true, SegmentSize: segSize})
	var live []xa.CommitRecord
	maxSegs := 0
	for i := range 20_000 {
		rec := commitRec(gid(i), 2)
		if err := l.LogCommit(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 { // one in ten stays pending
			live = append(live, rec)
		} else if err := l.Forget(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			n, _ := dirSize(t, dir)
			maxSegs = max(maxSegs, n)
		}
	}
	var liveBytes int64
	for _, r := range live {
		liveBytes += int64(len(enc(t, r)) + frameHeader)
	}
	limit := minSegments + 2*int(liveBytes/segSize) + 1
	t.Logf("%d live bytes, at most %d segments (limit %d)", liveBytes, maxSegs, limit)
	if maxSegs > limit {
		t.Errorf("%d segments, want at most %d", maxSegs, limit)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, Options{NoSync: true, SegmentSize: segSize})
	defer mustClose(t, l)
	got, _ := l.Commits(ctx)
	if g, w := commitSet(t, got), commitSet(t, live); !slices.Equal(g, w) {
		t.Errorf("after reopen: %d live commits, want %d", len(got), len(live))
	}
}

// TestLeftoverTempSegmentRemoved: a segment creation interrupted before its
// rename leaves a .tmp file that Open removes.
func TestLeftoverTempSegmentRemoved(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 40)
	tmp := filepath.Join(dir, segmentName(999)+".tmp")
	if err := os.WriteFile(tmp, []byte("half a hea"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir, Options{})
	mustClose(t, l)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("leftover temporary segment still there: %v", err)
	}
}
