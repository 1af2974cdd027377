package sink_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/gensource"
)

// records returns the generator's records in id order.
func records(g gensource.Config) []sink.Record {
	out := make([]sink.Record, 0, g.Records)
	for id := range g.Records {
		out = append(out, g.Record(id%g.Partitions, id/g.Partitions))
	}
	return out
}

// roundTrip marshals h to JSON and back, as a caller's checkpoint state
// would keep it.
func roundTrip(t *testing.T, h sink.Handle) sink.Handle {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var out sink.Handle
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// decidedOrder returns the checkpoint numbers of the sink's commit
// decisions in the order they were taken.
func decidedOrder(t *testing.T, e *env) []int64 {
	t.Helper()
	const q = "SELECT checkpoint FROM xa_sink_decisions WHERE sink = %s AND NOT aborted ORDER BY decided, checkpoint"
	var out []int64
	if e.cfg.Progress == tgPg {
		ctx := testCtx(t)
		c, err := pgxConnect(ctx, e.pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, fmt.Sprintf(q, "$1"), e.name)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var c int64
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(testCtx(t), fmt.Sprintf(q, "?"), e.name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var c int64
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestExternal: the externally driven API with handles kept as JSON.
// Committing a handle commits the earlier pending one first; after a crash,
// Restore commits the restored handle and fences the checkpoint that no
// state names; the caller replays from its checkpoint and everything lands
// once.
func TestExternal(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run(progress, func(t *testing.T) {
			t.Parallel()
			external(t, progress)
		})
	}
}

func external(t *testing.T, progress string) {
	e := newEnvOn(t, progress)
	g := gen(900, 3)
	recs := records(g)
	ctx := testCtx(t)

	s := e.open()
	x, err := s.External(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Restore(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	var state []sink.Handle
	pre := func(x *sink.External[sink.Handle], from, to int, cp uint64) sink.Handle {
		t.Helper()
		if err := x.Write(ctx, recs[from:to]); err != nil {
			t.Fatal(err)
		}
		h, err := x.PreCommit(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		return roundTrip(t, h)
	}
	h10 := pre(x, 0, 300, 10)
	h11 := pre(x, 300, 600, 11)
	if my, pg := e.counts(); my.rows != 0 || pg.rows != 0 {
		t.Fatalf("visible before commit: %v, %v", my, pg)
	}
	// Checkpoint 11 completes: 10 is committed first.
	if err := x.Commit(ctx, h11); err != nil {
		t.Fatal(err)
	}
	if got := decidedOrder(t, e); !slices.Equal(got, []int64{int64(h10.Txn), int64(h11.Txn)}) {
		t.Fatalf("decisions in the order %v, want %d then %d", got, h10.Txn, h11.Txn)
	}
	if my, _ := e.counts(); my.rows != 600 {
		t.Fatalf("after committing 11: %v", my)
	}
	// Checkpoint 12 is in the caller's state; 13 is pre-committed but its
	// checkpoint never completes: the process dies.
	state = append(state, pre(x, 600, 750, 12))
	h13 := pre(x, 750, 900, 13)

	// Generation 2 starts while generation 1 still runs: generation 1 is
	// a zombie. Its Commit (of 12, then 13) is refused and leaves both
	// prepared, for generation 2's Restore.
	s2 := e.open()
	x2, err := s2.External(ctx, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(ctx, h13); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("the zombie generation's Commit: %v, want ErrFenced", err)
	}
	if my, pg := e.counts(); my.rows != 600 || pg.rows != 600 {
		t.Fatalf("the zombie's Commit landed: %v, %v", my, pg)
	}
	sink.Abandon(s)

	if err := x2.Restore(ctx, state, 12); err != nil {
		t.Fatal(err)
	}
	if my, pg := e.counts(); my.rows != 750 || pg.rows != 750 {
		t.Fatalf("after restore: %v, %v; want checkpoint 12's 750 rows", my, pg)
	}
	if st, err := s2.Status(ctx); err != nil || len(st.Branches) != 0 {
		t.Fatalf("branches after restore (checkpoint 13's are to be rolled back): %+v, %v", st.Branches, err)
	}
	if err := x2.Commit(ctx, h13); !errors.Is(err, sink.ErrAborted) {
		t.Fatalf("committing the fenced checkpoint 13: %v, want ErrAborted", err)
	}
	// Replay from checkpoint 12; the first attempt is aborted.
	h14 := pre(x2, 750, 900, 14)
	if err := x2.Abort(ctx, h14); err != nil {
		t.Fatal(err)
	}
	h15 := pre(x2, 750, 900, 15)
	if err := x2.Commit(ctx, h15); err != nil {
		t.Fatal(err)
	}
	// Committing again only repeats phase two; aborting a committed one
	// is refused.
	if err := x2.Commit(ctx, state[0]); err != nil {
		t.Fatal(err)
	}
	if err := x2.Abort(ctx, h15); !errors.Is(err, sink.ErrDecided) {
		t.Fatalf("Abort of a committed checkpoint: %v, want ErrDecided", err)
	}
	e.settle(s2)
	e.exactlyOnce(900)
	st, err := s2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		if p.Checkpoint != 15 || p.Epoch != 2 {
			t.Errorf("progress %+v: want checkpoint 15 of generation 2", p)
		}
	}
}

// TestUpsert: a table written by upsert holds, after a crash and a
// restore, the last record of each partition; the insert tables hold every
// record once.
func TestUpsert(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cols := []sink.Column{{Name: "p", From: "partition"}, {Name: "k", From: "$.id"}, {Name: "seq", From: "$.seq"}}
	e.cfg.Tables = append(e.cfg.Tables,
		sink.Table{ID: "my.latest", Target: tgMy, Name: "latest", Columns: cols, Upsert: true, Key: []string{"p"}},
		sink.Table{ID: "pg.latest", Target: tgPg, Name: "latest", Columns: cols, Upsert: true, Key: []string{"p"}})
	g := gen(1000, 4)
	a := e.open()
	crashAt(a, "decided", 2)
	if err := e.run(a, gensource.New(g)); !errors.Is(err, errCrash) && !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("crashed instance: %v", err)
	}
	b := e.open()
	if err := e.run(b, gensource.New(g)); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	e.exactlyOnce(1000)
	for _, q := range []struct {
		name string
		dsn  string
	}{{tgMy, e.my.DSN()}, {tgPg, e.pg.DSN()}} {
		var latest map[string][2]int64
		if q.name == tgMy {
			latest = latestMy(t, q.dsn)
		} else {
			latest = latestPg(t, q.dsn)
		}
		for p := range 4 {
			seq := int64(g.Len(p) - 1)
			if got := latest[g.Partition(p)]; got != [2]int64{seq*4 + int64(p), seq} {
				t.Errorf("%s: latest of %s is %v, want id %d seq %d", q.name, g.Partition(p), got, seq*4+int64(p), seq)
			}
		}
	}
}

func latestMy(t *testing.T, dsn string) map[string][2]int64 {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(testCtx(t), "SELECT p, k, seq FROM latest")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var p string
		var k, seq int64
		if err := rows.Scan(&p, &k, &seq); err != nil {
			t.Fatal(err)
		}
		out[p] = [2]int64{k, seq}
	}
	return out
}

func latestPg(t *testing.T, dsn string) map[string][2]int64 {
	ctx := testCtx(t)
	c, err := pgxConnect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT p, k, seq FROM latest")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var p string
		var k, seq int64
		if err := rows.Scan(&p, &k, &seq); err != nil {
			t.Fatal(err)
		}
		out[p] = [2]int64{k, seq}
	}
	return out
}

// TestFileSource: newline-delimited JSON files, one partition each, read
// with a crash after a prepare and a restore: every line once.
func TestFileSource(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	var files []string
	id := 0
	for f := range 3 {
		var sb strings.Builder
		for range 400 {
			sb.WriteString(`{"id":` + itoa(id) + `,"v":"line"}` + "\n")
			if id%50 == 0 {
				sb.WriteString("\n") // empty lines are skipped
			}
			id++
		}
		path := filepath.Join(dir, "part"+itoa(f)+".ndjson")
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	// The generator's "time" column has no counterpart here.
	for i := range e.cfg.Tables {
		e.cfg.Tables[i].Columns = e.cfg.Tables[i].Columns[:4]
	}
	open := func() *filesource.Source {
		src, err := filesource.New(filesource.Config{Files: files, Batch: 90})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		return src
	}
	a := e.open()
	crashAt(a, "prepared", 3)
	if err := e.run(a, open()); !errors.Is(err, errCrash) {
		t.Fatalf("crashed instance: %v", err)
	}
	b := e.open()
	if err := e.run(b, open()); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	e.exactlyOnce(1200)
	st, err := readStatus(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		fi, err := os.Stat(p.Partition)
		if err != nil || p.Position != itoa(int(fi.Size())) {
			t.Errorf("progress of %s: %s, want the file's size (%v)", p.Partition, p.Position, err)
		}
	}
}
