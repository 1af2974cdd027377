package filelog

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/xadb/xa/xa"
)

// TestModel: random sequences of commit, forget, heuristic, clear and
// reopen, with segments small enough to rotate and compact, match an
// in-memory model.
func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		dir, err := os.MkdirTemp(t.TempDir(), "model")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts := Options{NoSync: true, SegmentSize: rapid.SampledFrom([]int64{200, 1024, 1 << 20}).Draw(rt, "segmentSize")}
		l, err := Open(dir, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { l.Close() }()

		commits := map[string]xa.CommitRecord{}
		heuristics := map[string][]xa.HeuristicRecord{} // by XID text
		idGen := rapid.IntRange(0, 15)
		xidGen := rapid.IntRange(0, 5)
		var maxLive int64
		timeGen := rapid.Int64Range(1_600_000_000_000_000_000, 1_600_000_000_000_001_000)

		rt.Repeat(map[string]func(*rapid.T){
			"commit": func(rt *rapid.T) {
				id := gid(idGen.Draw(rt, "id"))
				rec := xa.CommitRecord{ID: id, Logged: time.Unix(0, timeGen.Draw(rt, "logged"))}
				for b := range rapid.IntRange(0, 3).Draw(rt, "branches") {
					rec.Branches = append(rec.Branches, xa.BranchRecord{
						RM: fmt.Sprintf("rm%d", b), XID: id.Branch(b),
						Origin: xa.Origin{Session: rapid.Uint64().Draw(rt, "session")},
					})
				}
				if err := l.LogCommit(ctx, rec); err != nil {
					rt.Fatal(err)
				}
				commits[id.String()] = rec
			},
			"forget": func(rt *rapid.T) {
				id := gid(idGen.Draw(rt, "id"))
				if err := l.Forget(ctx, id); err != nil {
					rt.Fatal(err)
				}
				delete(commits, id.String())
			},
			"heuristic": func(rt *rapid.T) {
				h := xa.HeuristicRecord{
					RM:     rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "rm"),
					XID:    gid(xidGen.Draw(rt, "xid")).Branch(0),
					Action: rapid.SampledFrom([]xa.Outcome{xa.OutcomeCommit, xa.OutcomeRollback}).Draw(rt, "action"),
					Forced: rapid.Bool().Draw(rt, "forced"),
					Time:   time.Unix(0, timeGen.Draw(rt, "time")),
					Reason: rapid.StringN(0, 20, -1).Draw(rt, "reason"),
				}
				if err := l.LogHeuristic(ctx, h); err != nil {
					rt.Fatal(err)
				}
				k := h.XID.String()
				heuristics[k] = append(heuristics[k], h)
			},
			"clear": func(rt *rapid.T) {
				x := gid(xidGen.Draw(rt, "xid")).Branch(0)
				if err := l.ClearHeuristic(ctx, x); err != nil {
					rt.Fatal(err)
				}
				delete(heuristics, x.String())
			},
			"reopen": func(rt *rapid.T) {
				if err := l.Close(); err != nil {
					rt.Fatal(err)
				}
				if l, err = Open(dir, opts); err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				got, err := l.Commits(ctx)
				if err != nil {
					rt.Fatal(err)
				}
				var want []xa.CommitRecord
				for _, c := range commits {
					want = append(want, c)
				}
				if g, w := commitSet(rt, got), commitSet(rt, want); !slices.Equal(g, w) {
					rt.Fatalf("Commits: %d records, model has %d", len(got), len(want))
				}
				for i := 1; i < len(got); i++ {
					if got[i].Logged.Before(got[i-1].Logged) {
						rt.Fatalf("Commits not oldest first")
					}
				}
				for i := range 16 {
					r, ok, err := l.Lookup(ctx, gid(i))
					w, wok := commits[gid(i).String()]
					if err != nil || ok != wok || ok && enc(rt, r) != enc(rt, w) {
						rt.Fatalf("Lookup(%d) = %v, %v; model %v", i, ok, err, wok)
					}
				}
				hs, err := l.Heuristics(ctx)
				if err != nil {
					rt.Fatal(err)
				}
				var wantH []xa.HeuristicRecord
				for _, h := range heuristics {
					wantH = append(wantH, h...)
				}
				if g, w := heurSet(rt, hs), heurSet(rt, wantH); !slices.Equal(g, w) {
					rt.Fatalf("Heuristics: %d records, model has %d", len(hs), len(wantH))
				}
				// Compaction keeps the segments within what the live
				// data needs (it runs on rotation, so allow for the
				// most live data there has been).
				var live int64
				for _, c := range commits {
					live += int64(frameHeader + len(enc(rt, c)))
				}
				for _, h := range wantH {
					live += int64(frameHeader + len(enc(rt, h)))
				}
				maxLive = max(maxLive, live)
				if n, _ := dirSize(rt, dir); n > minSegments+int(2*maxLive/opts.SegmentSize)+2 {
					rt.Fatalf("%d segments for at most %d live bytes", n, maxLive)
				}
			},
		})
	})
}
