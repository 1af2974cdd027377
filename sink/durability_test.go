package sink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
)

// TestDecisionDurableWithSyncCommitOff: the sink's decision on a
// PostgreSQL progress target is durable whatever synchronous_commit the
// role says (issue 13, item 3). The role has synchronous_commit = off (as
// many deployments set it for speed) and the WAL writer flushes every 10
// s: a COMMIT answers before its WAL is written. Checkpoint 2 is decided,
// MariaDB's branch commits on the strength of it, and PostgreSQL is
// killed (SIGKILL) before its own branch commits. Before, the decision
// and the positions were lost with the WAL buffers: after the restart the
// restore found the PostgreSQL branch undecided, fenced it and rolled it
// back, and checkpoint 2's records were read again: twice in MariaDB.
// Now the decision forces a flush in its own transaction: the row and the
// positions are there after the restart, the restore commits the
// PostgreSQL branch, and every record lands once.
func TestDecisionDurableWithSyncCommitOff(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t, dbtest.Setting("wal_writer_delay", "10000ms"))
	pgdb := srv.CreateDB(t)
	ctx := testCtx(t)
	if err := srv.Exec(ctx, pgdb.Name, "ALTER ROLE CURRENT_USER SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, dbtest.MySQLDB(t), pgdb, tgPg)
	if got := e.pgSetting(ctx, "synchronous_commit"); got != "off" {
		t.Fatalf("the role's synchronous_commit: %q, want off", got)
	}
	g := gen(900, 3)
	a := e.open()
	var decided sink.Handle
	sink.SetHook(a, func(step string, h sink.Handle) error {
		// Branches commit in target order: maria first; "phase2"
		// comes after its commit, before PostgreSQL's.
		if step == "phase2" && h.Txn == 2 {
			decided = h
			srv.Kill(t)
			sink.Abandon(a)
			return fmt.Errorf("%w: PostgreSQL killed after checkpoint 2's decision, MariaDB's branch committed", errCrash)
		}
		return nil
	})
	if err := e.run(a, gensource.New(g)); !errors.Is(err, errCrash) && !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("the instance: %v", err)
	}
	if decided.Txn == 0 {
		t.Fatal("checkpoint 2 never reached phase two")
	}
	srv.Start(t)
	my, _ := e.counts()
	n, err := e.pgCount(ctx, "SELECT count(*) FROM xa_sink_decisions WHERE sink = $1 AND incarnation = $2 AND checkpoint = $3 AND NOT aborted",
		e.name, int64(decided.Incarnation), int64(decided.Txn))
	if err != nil {
		t.Fatal(err)
	}
	moved, err := e.pgCount(ctx, "SELECT count(*) FROM xa_sink_progress WHERE sink = $1 AND checkpoint = $2", e.name, int64(decided.Txn))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after PostgreSQL's restart: checkpoint 2's decision rows %d, partitions at checkpoint 2 %d of %d; MariaDB holds %v", n, moved, len(decided.Partitions), my)
	if n != 1 || moved != int64(len(decided.Partitions)) {
		t.Errorf("checkpoint 2's decision was lost in PostgreSQL's crash (decision rows %d, partitions moved %d of %d), though MariaDB committed on its strength",
			n, moved, len(decided.Partitions))
	}
	b := e.open()
	if err := e.run(b, gensource.New(g)); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	e.exactlyOnce(900)
}

// pgSetting returns a setting as a new session of the PostgreSQL
// database sees it.
func (e *env) pgSetting(ctx context.Context, name string) string {
	e.t.Helper()
	c, err := pgxConnect(ctx, e.pg.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// pgCount runs a count query on the PostgreSQL database.
func (e *env) pgCount(ctx context.Context, q string, args ...any) (int64, error) {
	c, err := pgxConnect(ctx, e.pg.DSN())
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var n int64
	err = c.QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// TestFencesDurableWithSyncCommitOff: the sink's other fences on a
// PostgreSQL progress target are durable whatever synchronous_commit the
// role says (issue 13, item 3): an external member's registration (the
// generation fence), an abort marker (Abort claims it before rolling
// back), an instance's incarnation and the epochs it takes. Each is made,
// then PostgreSQL is killed at once (the tables are MariaDB's only, so
// nothing else flushes PostgreSQL's WAL meanwhile) and restarted: each
// must be there. Before, each was lost with the WAL buffers: a zombie of
// the generation, of the aborted checkpoint or of the partitions could
// then decide what had been fenced.
func TestFencesDurableWithSyncCommitOff(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t, dbtest.Setting("wal_writer_delay", "10000ms"))
	pgdb := srv.CreateDB(t)
	ctx := testCtx(t)
	if err := srv.Exec(ctx, pgdb.Name, "ALTER ROLE CURRENT_USER SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, dbtest.MySQLDB(t), pgdb, tgPg)
	e.cfg.Tables = e.cfg.Tables[:1] // MariaDB's events only
	// The set-up is on disk (it is durable too, but this test is about
	// what comes after it).
	if err := srv.Exec(ctx, pgdb.Name, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	crash := func() {
		srv.Kill(t)
		srv.Start(t)
	}
	count := func(what, q string, args ...any) {
		t.Helper()
		n, err := e.pgCount(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s after PostgreSQL's crash: %d", what, n)
		if n != 1 {
			t.Errorf("%s was lost in PostgreSQL's crash", what)
		}
	}

	// The registration of member 0 in generation 1.
	s := e.open()
	if _, err := s.External(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	crash()
	sink.Abandon(s)
	count("generation 1's fence", "SELECT count(*) FROM xa_sink_generations WHERE sink = $1 AND generation = 1", e.name)

	// An abort marker: checkpoint 1 of member 0 in generation 2 is
	// prepared, then aborted.
	s = e.open()
	x, err := s.External(ctx, 0, 2)
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
	if err := x.Abort(ctx, h); err != nil {
		t.Fatal(err)
	}
	crash()
	sink.Abandon(s)
	count("checkpoint 1's abort marker", "SELECT count(*) FROM xa_sink_decisions WHERE sink = $1 AND incarnation = $2 AND checkpoint = $3 AND aborted",
		e.name, int64(h.Incarnation), int64(h.Txn))

	// An incarnation and its epochs: the instance has written its
	// first checkpoint's rows (to MariaDB), nothing is prepared.
	s = e.open()
	var inc uint64
	sink.SetHook(s, func(step string, h sink.Handle) error {
		if step == "flushed" && inc == 0 {
			inc = h.Incarnation
			crash()
			sink.Abandon(s)
			return errCrash
		}
		return nil
	})
	if err := e.run(s, gensource.New(gen(300, 1))); !errors.Is(err, errCrash) && !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("the instance: %v", err)
	}
	count("the instance's incarnation", "SELECT count(*) FROM xa_sink_instances WHERE sink = $1 AND incarnation = $2", e.name, int64(inc))
	count("the epoch it took", "SELECT count(*) FROM xa_sink_progress WHERE sink = $1 AND owner = $2 AND epoch = 1", e.name, int64(inc))
}
