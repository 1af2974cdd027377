package filelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// TestGatherStress runs writers that come back at once or after a pause,
// with syncs of random duration, small segments (rotation and
// compaction), forgets, callers whose context ends while they wait, and an
// end by Close at a random moment or by a sync that fails. It checks that
// every record acknowledged was synced when its caller learned it (the
// test file system knows what each sync covered), that the log comes back
// with exactly the records acknowledged and not forgotten (plus, perhaps,
// those whose callers gave up or learned of the failure), and that no call
// waits without bound: a record left queued with the writer asleep (a
// gathering whose timer is not armed, a lost kick) hangs its caller.
func TestGatherStress(t *testing.T) {
	for i, c := range []struct {
		writers int
		fail    bool
		noSync  bool
	}{
		{writers: 5}, {writers: 16}, {writers: 40}, {writers: 16, fail: true},
		{writers: 5, fail: true}, {writers: 24, noSync: true},
	} {
		seed := uint64(time.Now().UnixNano())
		t.Run(fmt.Sprintf("writers=%d,fail=%v,nosync=%v", c.writers, c.fail, c.noSync), func(t *testing.T) {
			t.Logf("seed %d", seed)
			gatherStress(t, rand.New(rand.NewPCG(seed, uint64(i))), c.writers, c.fail, c.noSync)
		})
	}
}

func gatherStress(t *testing.T, rng *rand.Rand, writers int, fail, noSync bool) {
	dir := t.TempDir()
	h := &hookFS{}
	var rmu sync.Mutex
	rnd := func(n int) int {
		rmu.Lock()
		defer rmu.Unlock()
		return rng.IntN(n)
	}
	l := mustCreate(t, dir, Options{fs: h, SegmentSize: 16 << 10, NoSync: noSync})
	failAt := int64(-1)
	if fail {
		failAt = int64(10 + rnd(40))
	}
	var syncs atomic.Int64
	errInjected := errors.New("injected sync failure")
	h.setHook(func(op, name string, _ []byte, _ int64) error {
		if op == "sync" && strings.HasSuffix(name, ".wal") {
			if syncs.Add(1) == failAt {
				return errInjected
			}
			if d := rnd(8); d < 5 {
				time.Sleep(time.Duration(d) * 300 * time.Microsecond)
			}
		}
		return nil
	})
	// acked: records whose LogCommit returned nil; maybe: whose outcome
	// the caller does not know; forgotten: Forget returned nil.
	var mu sync.Mutex
	acked, maybe, forgotten := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	// synced reports whether frame lies in a range of a segment file that
	// a sync covered.
	synced := func(frame []byte) bool {
		h.gate.Lock() // no write half done
		defer h.gate.Unlock()
		names, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				continue // removed by compaction meanwhile
			}
			s, _ := h.unsynced(name)
			for off := 0; ; {
				i := bytes.Index(b[off:], frame)
				if i < 0 {
					break
				}
				if int64(off+i+len(frame)) <= s {
					return true
				}
				off += i + 1
			}
		}
		return false
	}
	const bound = 5 * time.Second // no call waits this long
	var longest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rec := commitRec(gid(w*100_000+i), 2)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rnd(10) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rnd(500))*time.Microsecond)
				}
				start := time.Now()
				err := l.LogCommit(ctx, rec)
				cancel()
				d := time.Since(start)
				if d > time.Duration(longest.Load()) {
					longest.Store(int64(d)) // racy max, good enough
				}
				if d > bound {
					problem("LogCommit of %v waited %v", rec.ID, d)
				}
				k := rec.ID.String()
				switch {
				case err == nil:
					if !noSync && !synced(appendFrame(nil, RecordCommit, mustMarshal(t, rec))) {
						problem("LogCommit of %v returned before its record was synced", rec.ID)
					}
					mu.Lock()
					acked[k] = true
					mu.Unlock()
				case errors.Is(err, ErrClosed):
					return
				case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, xa.ErrOutcomeUnknown):
					continue // not queued
				case errors.Is(err, xa.ErrOutcomeUnknown) || errors.Is(err, ErrFailed):
					mu.Lock()
					maybe[k] = true
					mu.Unlock()
					if errors.Is(err, ErrFailed) {
						return
					}
					continue
				default:
					problem("LogCommit of %v: %v", rec.ID, err)
					return
				}
				if rnd(3) > 0 {
					if err := l.Forget(context.Background(), rec.ID); err == nil {
						mu.Lock()
						forgotten[k] = true
						mu.Unlock()
					} else if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFailed) {
						problem("Forget of %v: %v", rec.ID, err)
					}
				}
				switch rnd(8) {
				case 0:
					time.Sleep(time.Duration(rnd(3000)) * time.Microsecond) // a caller that goes on to phase 2
				case 1:
					time.Sleep(time.Duration(rnd(60)) * time.Microsecond) // around the quiet time
				}
			}
		})
	}
	time.Sleep(time.Duration(100+rnd(300)) * time.Millisecond)
	for deadline := time.Now().Add(bound); fail && syncs.Load() < failAt && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	cerr := l.Close()
	if d := time.Since(start); d > bound {
		problem("Close took %v", d)
	}
	close(stop)
	wg.Wait()
	if fail {
		if !errors.Is(cerr, errInjected) {
			t.Errorf("Close after an injected sync failure (at sync %d of %d): %v", failAt, syncs.Load(), cerr)
		}
	} else if cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	for _, p := range problems {
		t.Error(p)
	}
	h.setHook(nil)
	l2 := mustOpen(t, dir, Options{NoSync: true})
	defer l2.Close()
	recs, err := l2.Commits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		got[r.ID.String()] = true
	}
	mu.Lock()
	defer mu.Unlock()
	lost, extra := 0, 0
	for k := range acked {
		if !forgotten[k] && !got[k] {
			lost++
		}
	}
	for k := range got {
		if !acked[k] && !maybe[k] || acked[k] && forgotten[k] && !fail {
			extra++
		}
	}
	if lost > 0 || extra > 0 {
		t.Errorf("after reopen: %d records acknowledged and not forgotten are missing, %d are there that should not be", lost, extra)
	}
	if !fail && (len(acked) < 100 || len(segFiles(t, dir)) < 2) || len(acked) == 0 {
		t.Errorf("only %d records acknowledged, %d segments: the test exercises too little", len(acked), len(segFiles(t, dir)))
	}
	t.Logf("%d acknowledged, %d forgotten, %d unknown, %d syncs, longest call %v, %d live after reopen",
		len(acked), len(forgotten), len(maybe), syncs.Load(), time.Duration(longest.Load()), len(got))
}
