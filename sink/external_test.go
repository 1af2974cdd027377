package sink_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestExternalZombieCommitter: a committer of an earlier generation lands
// nothing after a restart began, whoever's handle it commits (issue 13,
// item 4). Members 0 and 1 of generation 1; member 1 is the job's global
// committer (one committer may commit every member's handles). Checkpoint
// 5 completes and is committed. Checkpoint 6 is pre-committed, but the
// job restarts from checkpoint 5: generation 2 registers. The zombie
// committer of generation 1 then commits member 0's handle of checkpoint
// 6. Before, the generation fence covered a member deciding its own
// handles only: the decision landed, generation 2's Restore found it
// decided, committed it, and the replay of checkpoint 6's records wrote
// them again (900 rows for 600 records). Now the decision is refused in
// the database (ErrFenced), Restore fences checkpoint 6, and the replay
// writes each record once. Registering a generation again is refused
// too: an earlier one (ErrFenced) and one a member registered already
// (ErrConfig).
func TestExternalZombieCommitter(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run(progress, func(t *testing.T) {
			t.Parallel()
			externalZombieCommitter(t, progress)
		})
	}
}

func externalZombieCommitter(t *testing.T, progress string) {
	e := newEnvOn(t, progress)
	recs := records(gen(600, 3))
	ctx := testCtx(t)
	s1 := e.open()
	var gen1 [2]*sink.External[sink.Handle]
	for m := range gen1 {
		x, err := s1.External(ctx, uint32(m), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Restore(ctx, nil, 0); err != nil {
			t.Fatal(err)
		}
		gen1[m] = x
	}
	// Member 0 writes, member 1 pre-commits empty transactions; member 1
	// commits both members' handles.
	checkpoint := func(xs [2]*sink.External[sink.Handle], from, to int, cp uint64) [2]sink.Handle {
		t.Helper()
		if err := xs[0].Write(ctx, recs[from:to]); err != nil {
			t.Fatal(err)
		}
		var hs [2]sink.Handle
		for m, x := range xs {
			h, err := x.PreCommit(ctx, cp)
			if err != nil {
				t.Fatal(err)
			}
			hs[m] = roundTrip(t, h)
		}
		return hs
	}
	h5 := checkpoint(gen1, 0, 300, 5)
	for _, h := range h5 {
		if err := gen1[1].Commit(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	h6 := checkpoint(gen1, 300, 600, 6)

	// The job restarts from checkpoint 5: generation 2 registers.
	s2 := e.open()
	var gen2 [2]*sink.External[sink.Handle]
	for m := range gen2 {
		x, err := s2.External(ctx, uint32(m), 2)
		if err != nil {
			t.Fatal(err)
		}
		gen2[m] = x
	}
	// The zombie committer of generation 1 commits member 0's handle of
	// checkpoint 6.
	zerr := gen1[1].Commit(ctx, h6[0])
	t.Logf("the generation-1 committer's Commit of member 0's checkpoint 6 after generation 2 registered: %v", zerr)
	if !errors.Is(zerr, sink.ErrFenced) {
		t.Errorf("the zombie committer's Commit of another member's handle: %v, want ErrFenced", zerr)
	}
	// A generation is registered once per member, and never below the
	// highest.
	if _, err := s2.External(ctx, 0, 1); !errors.Is(err, sink.ErrFenced) {
		t.Errorf("registering generation 1 after generation 2: %v, want ErrFenced", err)
	} else {
		t.Logf("generation 1 again: %v", err)
	}
	if _, err := s2.External(ctx, 0, 2); !errors.Is(err, sink.ErrConfig) {
		t.Errorf("registering member 0 of generation 2 again: %v, want ErrConfig", err)
	} else {
		t.Logf("member 0 of generation 2 again: %v", err)
	}
	if _, err := s2.External(ctx, 2, 2); err != nil {
		t.Errorf("a new member of generation 2: %v", err)
	}
	sink.Abandon(s1)

	// Generation 2 restores from checkpoint 5 and replays checkpoint 6's
	// records.
	for m, x := range gen2 {
		if err := x.Restore(ctx, []sink.Handle{h5[m]}, 5); err != nil {
			t.Fatal(err)
		}
	}
	h7 := checkpoint(gen2, 300, 600, 7)
	for m, h := range h7 {
		if err := gen2[m].Commit(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	e.settle(s2)
	my, pg := e.counts()
	t.Logf("after the replay: %s %v, %s %v", tgMy, my, tgPg, pg)
	e.exactlyOnce(600)
}

// TestExternalFenceWaitsForRegistration: a zombie committer's decision
// and a registration of a later generation run at the same time. The
// decision reads the sink's generation fence under a shared lock, in its
// own statement, so it waits for the registration in flight and reads
// what it committed: refused. (A plain read of the registered generations
// would see the registration's snapshot-old state and decide: then the
// registration returns, the new generation's Restore finds the checkpoint
// decided and commits it, and the caller's replay duplicates its
// records.) The registration in flight is held open by hand: its
// transaction has raised the fence row and not committed yet.
func TestExternalFenceWaitsForRegistration(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run(progress, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, progress)
			ctx := testCtx(t)
			s := e.open()
			x, err := s.External(ctx, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Restore(ctx, nil, 0); err != nil {
				t.Fatal(err)
			}
			if err := x.Write(ctx, records(gen(30, 3))); err != nil {
				t.Fatal(err)
			}
			h, err := x.PreCommit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			// A registration of generation 2, in flight.
			commit := e.holdFence(ctx, 2)
			done := make(chan error, 1)
			go func() { done <- x.Commit(ctx, h) }()
			select {
			case err := <-done:
				commit()
				t.Fatalf("the decision did not wait for the registration in flight: Commit returned %v", err)
			case <-time.After(time.Second):
			}
			commit()
			err = <-done
			t.Logf("Commit once the registration committed: %v", err)
			if !errors.Is(err, sink.ErrFenced) {
				t.Fatalf("Commit: %v, want ErrFenced", err)
			}
			sink.Abandon(s)
			// Generation 2's Restore from no checkpoint fences it.
			s2 := e.open()
			x2, err := s2.External(ctx, 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := x2.Restore(ctx, nil, 0); err != nil {
				t.Fatal(err)
			}
			e.settle(s2)
			if my, pg := e.counts(); my.rows != 0 || pg.rows != 0 {
				t.Fatalf("the refused checkpoint landed: %v, %v", my, pg)
			}
		})
	}
}

// holdFence raises the sink's generation fence to generation in a
// transaction left open, as a registration in flight; the function
// returned commits it.
func (e *env) holdFence(ctx context.Context, generation int) (commit func()) {
	e.t.Helper()
	const q = "UPDATE xa_sink_generations SET generation = %d WHERE sink = '%s'"
	if e.cfg.Progress == tgPg {
		c, err := pgxConnect(ctx, e.pg.DSN())
		if err != nil {
			e.t.Fatal(err)
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if tag, err := tx.Exec(ctx, fmt.Sprintf(q, generation, e.name)); err != nil || tag.RowsAffected() != 1 {
			e.t.Fatalf("raising the fence: %v, %v", tag, err)
		}
		return func() {
			if err := tx.Commit(context.Background()); err != nil {
				e.t.Error(err)
			}
			c.Close(context.Background())
		}
	}
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if res, err := tx.ExecContext(ctx, fmt.Sprintf(q, generation, e.name)); err != nil {
		e.t.Fatalf("raising the fence: %v", err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		e.t.Fatalf("raising the fence: %d rows", n)
	}
	return func() {
		if err := tx.Commit(); err != nil {
			e.t.Error(err)
		}
		db.Close()
	}
}

// TestExternalAbortIsFinal: Abort of a pre-committed handle is final, and
// a caller that keeps the handle in its checkpoint state anyway (a
// Flink-style caller that aborted a checkpoint it still holds pending) is
// told so, loudly, rather than having half of it land: the handle's
// Commit returns ErrAborted, and so does a Restore from a state that
// names it; none of its rows land (docs/sink.md: aborting only a handle
// whose checkpoint will never complete is the caller's duty).
func TestExternalAbortIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	recs := records(gen(300, 3))
	s := e.open()
	x, err := s.External(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Restore(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	h, err := x.PreCommit(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	h = roundTrip(t, h)
	if err := x.Abort(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(ctx, h); !errors.Is(err, sink.ErrAborted) {
		t.Errorf("Commit of an aborted handle: %v, want ErrAborted", err)
	}
	sink.Abandon(s)
	s2 := e.open()
	x2, err := s2.External(ctx, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	err = x2.Restore(ctx, []sink.Handle{h}, 3)
	t.Logf("Restore from a state naming the aborted handle: %v", err)
	if !errors.Is(err, sink.ErrAborted) {
		t.Errorf("Restore with an aborted handle: %v, want ErrAborted", err)
	}
	e.settle(s2)
	if my, pg := e.counts(); my.rows != 0 || pg.rows != 0 {
		t.Errorf("the aborted checkpoint landed: %v, %v", my, pg)
	}
}
