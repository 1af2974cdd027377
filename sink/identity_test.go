package sink_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/xa"
)

// decidedNotCommitted runs an instance that stops once checkpoint 2 is
// decided, before phase two: both its branches are prepared, and the
// progress target holds its decision. It returns the checkpoint's refs.
func (e *env) decidedNotCommitted(g gensource.Config) (my, pg sink.Ref) {
	e.t.Helper()
	a := e.open()
	var h sink.Handle
	sink.SetHook(a, func(step string, hh sink.Handle) error {
		if step == "decided" && hh.Txn == 2 {
			h = hh
			sink.Abandon(a)
			return errCrash
		}
		return nil
	})
	if err := e.run(a, gensource.New(g)); !errors.Is(err, errCrash) && !errors.Is(err, sink.ErrClosed) {
		e.t.Fatalf("the instance: %v", err)
	}
	my, pg = h.Ref(tgMy), h.Ref(tgPg)
	if !e.myPrepared(my) || !e.pgPrepared(pg) {
		e.t.Fatalf("checkpoint 2's branches are not prepared: %s %v, %s %v", my, e.myPrepared(my), pg, e.pgPrepared(pg))
	}
	return my, pg
}

// myPrepared reports whether MariaDB lists ref's branch as prepared.
func (e *env) myPrepared(ref sink.Ref) bool {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(testCtx(e.t), "XA RECOVER")
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	x := ref.XID()
	for rows.Next() {
		var format, gl, bl int64
		var data []byte
		if err := rows.Scan(&format, &gl, &bl, &data); err != nil {
			e.t.Fatal(err)
		}
		if int32(format) == x.FormatID && string(data) == string(x.Gtrid)+string(x.Bqual) {
			return true
		}
	}
	return false
}

// pgPrepared reports whether PostgreSQL (e.pg's database) holds ref's
// branch prepared.
func (e *env) pgPrepared(ref sink.Ref) bool {
	e.t.Helper()
	n, err := e.pgCount(testCtx(e.t), "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", ref.XID().String())
	if err != nil {
		e.t.Fatal(err)
	}
	return n > 0
}

// withPG returns a copy of e whose target pg is the database db.
func (e *env) withPG(db *dbtest.DB) *env {
	e2 := *e
	e2.pg = db
	e2.cfg.Targets = append([]sink.TargetConfig(nil), e.cfg.Targets...)
	for i := range e2.cfg.Targets {
		if e2.cfg.Targets[i].Name == tgPg {
			e2.cfg.Targets[i].DSN = db.DSN()
		}
	}
	return &e2
}

// anotherPG returns a new database on the shared PostgreSQL server with
// the table events, as a mistaken configuration would find.
func anotherPG(t *testing.T) *dbtest.DB {
	db := dbtest.PostgresDB(t)
	if err := db.Server.Exec(testCtx(t), db.Name,
		"CREATE TABLE events (id bigserial PRIMARY KEY, k bigint NOT NULL, p text NOT NULL, pos text NOT NULL, v text, t timestamptz)"); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestProgressTargetIdentity: a decision is trusted only from the
// progress store that made it (issue 13). Checkpoint 2 is decided in the
// progress target (PostgreSQL) and its branches are prepared. The
// configuration's progress target then reaches another database (its DSN
// changed; an operator ran xactl sink setup there, by mistake). Before,
// the restore of an instance started there found no decision, fenced the
// checkpoint and rolled MariaDB's branch back, while the original
// progress store says committed: restored to the right database, the
// PostgreSQL branch committed and MariaDB's rows of checkpoint 2 were
// lost. Now setup refuses to bind the other database (MariaDB is bound to
// the original progress store), and an instance started there anyway
// (tables created by hand, never bound) is refused before anything is
// done, with an error that says which store to point at; back on the
// right database, every record lands once.
func TestProgressTargetIdentity(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, tgPg)
	g := gen(900, 3)
	my, pg := e.decidedNotCommitted(g)
	ctx := testCtx(t)

	wrong := e.withPG(anotherPG(t))
	if err := sink.Setup(ctx, wrong.progress()); err != nil {
		t.Fatal(err)
	}
	s := wrong.open()
	_, err := s.Bind(ctx)
	t.Logf("xactl sink setup on the other database: %v", err)
	if !errors.Is(err, xa.ErrIdentity) {
		t.Errorf("binding the sink to another progress store: %v, want an identity error", err)
	}
	err = wrong.run(s, gensource.New(g))
	t.Logf("an instance on the other progress database: %v", err)
	var ie *xa.IdentityError
	if !errors.As(err, &ie) || ie.Expected.IsZero() || ie.Fix == "" {
		t.Errorf("an instance on another progress store: %v, want an *xa.IdentityError naming the expected store", err)
	}
	if err := s.Sweep(ctx); !errors.Is(err, xa.ErrIdentity) {
		t.Errorf("a sweep on another progress store: %v, want an identity error", err)
	}
	if _, err := s.Status(ctx); !errors.Is(err, xa.ErrIdentity) {
		t.Errorf("status on another progress store: %v, want an identity error", err)
	}
	if !e.myPrepared(my) || !e.pgPrepared(pg) {
		t.Errorf("checkpoint 2, decided commit in the original progress store: MariaDB's branch prepared %v, PostgreSQL's %v; want both still prepared",
			e.myPrepared(my), e.pgPrepared(pg))
	}
	s.Close()

	b := e.open()
	if err := e.run(b, gensource.New(g)); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	e.exactlyOnce(900)
}

// TestTargetIdentity: a target that reaches another database (its DSN
// changed) is refused. Checkpoint 2 is decided (progress in MariaDB) and
// its branches prepared; the configuration's target pg then reaches
// another PostgreSQL database, which lists nothing. Before, restore
// committed MariaDB's branch and saw nothing of PostgreSQL's; the
// instance wrote on into the other database, and a later instance's
// restore forgot checkpoint 2's decision (no branch of it listed any
// more); restored to the right database, the PostgreSQL branch had no
// decision and was rolled back: its rows lost. Now the instance is
// refused, nothing is resolved or written, and the right database gets
// every record once.
func TestTargetIdentity(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, tgMy)
	g := gen(900, 3)
	my, pg := e.decidedNotCommitted(g)
	ctx := testCtx(t)

	other := anotherPG(t)
	wrong := e.withPG(other)
	wrong.cfg.DecisionRetention = time.Millisecond
	for i := range 2 {
		s := wrong.open()
		err := wrong.run(s, gensource.New(g))
		t.Logf("instance %d with target pg on another database: %v", i+1, err)
		var ie *xa.IdentityError
		if !errors.As(err, &ie) || ie.Expected.IsZero() || ie.Fix == "" {
			t.Errorf("an instance with a target on another database: %v, want an *xa.IdentityError naming the expected store", err)
		}
		s.Close()
	}
	if n, err := wrong.pgCount(ctx, "SELECT count(*) FROM events"); err != nil || n != 0 {
		t.Errorf("the other database's events: %d rows (%v), want none", n, err)
	}
	if !e.pgPrepared(pg) {
		t.Errorf("PostgreSQL's branch of checkpoint 2 is no longer prepared")
	}
	t.Logf("MariaDB's branch of checkpoint 2 prepared: %v", e.myPrepared(my))

	b := e.open()
	if err := e.run(b, gensource.New(g)); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	e.exactlyOnce(900)
}

// TestRemovedTarget: a target taken out of the configuration while it
// holds a decided prepared branch (issue 13: "a sink target removed from
// the configuration while it holds decided branches"). Checkpoint 2 is
// decided (progress in MariaDB) and both its branches are prepared; the
// target pg is then taken out of the sink's targets and instances run
// without it. Their restore does not list pg: before, a restore forgot
// checkpoint 2's decision once no branch of it was listed (after
// DecisionRetention: 1 ms here), status showed nothing of pg, and when
// pg was put back its branch had no decision: fenced and rolled back,
// while MariaDB's had committed. Now the progress store still records
// pg: restore keeps every decision while a recorded target is not
// configured, Status names it, and put back, pg's branch commits.
func TestRemovedTarget(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, tgMy)
	g := gen(900, 3)
	_, pg := e.decidedNotCommitted(g)
	ctx := testCtx(t)

	without := *e
	without.cfg.Targets = e.cfg.Targets[:1]
	without.cfg.Tables = e.cfg.Tables[:1]
	without.cfg.DecisionRetention = time.Millisecond
	for i := range 2 {
		s := without.open()
		if err := without.run(s, gensource.New(g)); err != nil {
			t.Fatal(err)
		}
		st, err := s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("instance %d without target pg: status names removed targets %+v", i+1, st.Removed)
		if len(st.Removed) != 1 || st.Removed[0].Name != tgPg {
			t.Errorf("status without target pg: removed targets %+v, want pg", st.Removed)
		}
		s.Close()
	}
	if !e.pgPrepared(pg) {
		t.Fatalf("PostgreSQL's branch of checkpoint 2 is no longer prepared")
	}
	n, err := e.myCount(ctx, "SELECT count(*) FROM xa_sink_decisions WHERE sink = ? AND incarnation = ? AND checkpoint = ? AND NOT aborted",
		e.name, int64(pg.Incarnation), int64(pg.Checkpoint))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint 2's decision rows while pg is out of the configuration: %d", n)
	if n != 1 {
		t.Errorf("checkpoint 2's decision was forgotten while its branch on pg (out of the configuration) is prepared")
	}

	// pg is put back: its branch of checkpoint 2 commits.
	b := e.open()
	if err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	_, pgc := e.counts()
	t.Logf("PostgreSQL after pg was put back: %v", pgc)
	if pgc.rows != 396 || pgc.distinct != 396 {
		t.Errorf("PostgreSQL holds %v after pg was put back; want checkpoints 1 and 2: 396 rows, each once", pgc)
	}
}

// myCount runs a count query on the MariaDB database.
func (e *env) myCount(ctx context.Context, q string, args ...any) (int64, error) {
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	err = db.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// TestTargetParticipantIdentity: a target whose participant identity
// (the driver's xa_participant row, xa.Identified) is no longer the one
// recorded when it was bound is refused, even though its binding row is
// there (a database rebuilt from a dump of the target, say, given an
// identity of its own as the drivers ask). Here the PostgreSQL target's
// participant identity is made anew.
func TestTargetParticipantIdentity(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, tgMy)
	ctx := testCtx(t)
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "DELETE FROM xa_participant"); err != nil {
		t.Fatal(err)
	}
	s := e.open() // Init: the target gets a new identity
	err := e.run(s, gensource.New(gen(300, 3)))
	t.Logf("an instance with pg's participant identity made anew: %v", err)
	var ie *xa.IdentityError
	if !errors.As(err, &ie) || ie.Expected.ID == "" || ie.Found.ID == "" || ie.Expected.ID == ie.Found.ID {
		t.Fatalf("an instance with another participant identity: %v, want an *xa.IdentityError with both ids", err)
	}
	if my, pg := e.counts(); my.rows != 0 || pg.rows != 0 {
		t.Errorf("written: %v, %v", my, pg)
	}
}
