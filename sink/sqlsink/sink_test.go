package sqlsink_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// TestCleanRun: every record once in both targets, positions at the end.
func TestCleanRun(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run(progress, func(t *testing.T) {
			t.Parallel()
			cleanRun(t, progress)
		})
	}
}

func cleanRun(t *testing.T, progress string) {
	e := newEnvOn(t, progress)
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

// TestThroughput measures a simple run: XA_SINK_BENCH=1 (records, default
// 200000, in XA_SINK_BENCH_RECORDS), into both targets, each alone, and
// both with upserts. The servers are the test rigs' (fsync-light).
func TestThroughput(t *testing.T) {
	if os.Getenv("XA_SINK_BENCH") == "" {
		t.Skip("XA_SINK_BENCH=1 measures throughput")
	}
	m := 200000
	if n, err := strconv.Atoi(os.Getenv("XA_SINK_BENCH_RECORDS")); err == nil {
		m = n
	}
	for _, tc := range []struct {
		name   string
		tables func(e *env) []sqlsink.Table
	}{
		{"both", func(e *env) []sqlsink.Table { return e.cfg.Tables }},
		{"mariadb", func(e *env) []sqlsink.Table { return e.cfg.Tables[:1] }},
		{"postgres", func(e *env) []sqlsink.Table { return e.cfg.Tables[1:] }},
		{"both-upsert", func(e *env) []sqlsink.Table {
			cols := []sqlsink.Column{{Name: "p", From: "partition"}, {Name: "k", From: "$.id"}, {Name: "seq", From: "$.seq"}}
			return []sqlsink.Table{
				{ID: "my.latest", Target: tgMy, Name: "latest", Columns: cols, Upsert: true, Key: []string{"p"}},
				{ID: "pg.latest", Target: tgPg, Name: "latest", Columns: cols, Upsert: true, Key: []string{"p"}},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Tables = tc.tables(e)
			s := e.open()
			obs := &tally{}
			opts := sink.RunOptions{CheckpointRecords: 20000, CheckpointInterval: time.Second, Observer: obs}
			g := gensource.Config{Records: m, Partitions: 8, Batch: 2000, Payload: 64}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := s.Run(ctx, gensource.New(g), opts); err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			t.Logf("%s: %d records in %v: %.0f records/s, %d checkpoints, up to %d pending", tc.name, m, d.Round(time.Millisecond),
				float64(m)/d.Seconds(), obs.committed.Load(), obs.maxPending.Load())
		})
	}
}
