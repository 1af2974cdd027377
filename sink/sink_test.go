package sink_test

import (
	"testing"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
)

// TestCleanRun: every record once in both targets, positions at the end.
func TestCleanRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	g := gen(2000, 4)
	src := gensource.New(g)
	obs := &tally{}
	opts := runOpts()
	opts.Observer = obs
	start := time.Now()
	if err := s.Run(testCtx(t), src, opts); err != nil {
		t.Fatal(err)
	}
	t.Logf("run: %v", time.Since(start))
	e.exactlyOnce(2000)
	if obs.committed.Load() < 10 || obs.aborted.Load() != 0 || obs.records.Load() != 2000 {
		t.Errorf("checkpoints: %d committed, %d aborted, %d records written", obs.committed.Load(), obs.aborted.Load(), obs.records.Load())
	}
	t.Logf("%d checkpoints committed, up to %d pending at once", obs.committed.Load(), obs.maxPending.Load())
	st, err := s.Status(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Partitions) != 4 || len(st.Branches) != 0 {
		t.Fatalf("status: %+v", st)
	}
	for p, ps := range st.Partitions {
		if want := g.Len(p); ps.Partition != g.Partition(p) || ps.Position != itoa(want) || ps.Epoch != 1 {
			t.Errorf("partition %d: %+v, want position %d at epoch 1", p, ps, want)
		}
	}
	ack := src.Acknowledged()
	for p := range 4 {
		if ack[g.Partition(p)] != itoa(g.Len(p)) {
			t.Errorf("acknowledged to the source: %v", ack)
		}
	}
	_ = sink.ErrFenced
}
