package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

var _ recovery.DecisionStore = (*RM)(nil)

// slowCommitDDL makes COMMIT of a transaction that inserted into kv take a
// while on the server: a deferred constraint trigger sleeps |v|
// milliseconds per row, then refuses a row with v < 0.
var slowCommitDDL = []string{
	"CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)",
	`CREATE FUNCTION kv_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_sleep(abs(NEW.v) / 1000.0);
		IF NEW.v < 0 THEN
			RAISE EXCEPTION 'deferred check refuses row %', NEW.k;
		END IF;
		RETURN NULL;
	END $$`,
	"CREATE CONSTRAINT TRIGGER kv_at_commit AFTER INSERT ON kv DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION kv_at_commit()",
}

// openLast opens a resource manager with decision table xa_decisions on
// dsn, closed when t ends.
func openLast(t testing.TB, dsn string) *RM {
	t.Helper()
	rm, err := Open(testCtx(t), Config{Name: "pg", DSN: dsn, MaxConns: 8, DecisionTable: "xa_decisions", Init: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(rm.Close)
	return rm
}

// lastRecord returns a fresh global id and a commit record naming one
// branch of another participant.
func lastRecord(t testing.TB) (xa.GlobalID, xa.CommitRecord) {
	t.Helper()
	g, err := xa.NewGlobalID(fmt.Sprintf("fence%d", xidSeq.Add(1)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return g, xa.CommitRecord{ID: g, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: "other", XID: g.Branch(0)}}}
}

// waitActivity polls pg_stat_activity of db until a backend matches cond
// (an SQL condition), or fails the test after ten seconds. stop, when it
// delivers, ends the wait early with a failure.
func waitActivity(t testing.TB, db *dbtest.DB, cond string, stop <-chan error) {
	t.Helper()
	c := raw(t, db)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := c.QueryRow(testCtx(t), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "+cond).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-stop:
			t.Fatalf("returned (%v) before any backend showed %s", err, cond)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backend showed %s", cond)
		}
	}
}

// markers counts the abort markers of id in db's decision table.
func markers(t testing.TB, db *dbtest.DB, id xa.GlobalID) int {
	t.Helper()
	var n int
	if err := raw(t, db).QueryRow(testCtx(t), "SELECT count(*) FROM xa_decisions WHERE gtrid = $1 AND aborted", id.String()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The fence between a last-resource commit and presumed abort. The
// commit's COMMIT is held in flight on the server by a sleeping deferred
// trigger, and the client's connection is cut meanwhile, so the client
// sees outcome unknown while the server goes on. A ClaimAbort issued then
// must wait for that commit: if it wins, ClaimAbort says
// ErrCommitRecorded and the decision is there; if it fails, the abort is
// claimed and no commit of the transaction can be stored afterwards.
func TestClaimAbortWaitsForCommitInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		v      int // the trigger sleeps |v| ms at COMMIT, then refuses v < 0
		commit bool
	}{
		{"commit wins", 3000, true},
		{"commit fails", -3000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.PostgresDB(t)
			mustExec(t, db, slowCommitDDL...)
			p, dsn := newProxy(t, db.DSN())
			viaProxy := openLast(t, dsn)
			direct := openLast(t, db.DSN())
			ctx := testCtx(t)

			g, rec := lastRecord(t)
			b, s := start(t, viaProxy, ctx, g.Branch(1))
			exec(t, s, "INSERT INTO kv VALUES (1, $1)", tc.v)
			// The client loses the server: pgx's cancel request for the
			// lost command does not get through either.
			p.partition()
			lost := p.loseReplyTo("xa_decisions")
			commitc := make(chan error, 1)
			go func() { commitc <- b.CommitLast(ctx, rec) }()

			// The decision row is inserted, uncommitted; COMMIT sleeps.
			waitActivity(t, db, "wait_event = 'PgSleep'", nil)

			// A claim whose context ends while it waits knows nothing.
			sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := direct.ClaimAbort(sctx, g, "test: short wait")
			cancel()
			t.Logf("ClaimAbort with 300ms to wait = %v", err)
			if err == nil || errors.Is(err, xa.ErrCommitRecorded) {
				t.Fatalf("ClaimAbort whose context ended during the commit = %v; want an error that says nothing", err)
			}

			began := time.Now()
			claimc := make(chan error, 1)
			go func() { claimc <- direct.ClaimAbort(ctx, g, "test: presumed abort") }()
			waitActivity(t, db, "wait_event_type = 'Lock' AND wait_event = 'transactionid'", claimc)
			err = <-claimc
			waited := time.Since(began)
			t.Logf("ClaimAbort = %v after %v", err, waited.Round(time.Millisecond))

			<-lost
			if cerr := <-commitc; !xa.OutcomeUnknown(cerr) {
				t.Fatalf("CommitLast with its connection cut mid-commit = %v; want outcome unknown", cerr)
			}
			if waited < 500*time.Millisecond {
				t.Errorf("ClaimAbort returned after %v: it did not wait for the commit in flight", waited)
			}
			dec, ok, derr := direct.Decision(ctx, g)
			if derr != nil {
				t.Fatal(derr)
			}
			if tc.commit {
				if !errors.Is(err, xa.ErrCommitRecorded) {
					t.Fatalf("ClaimAbort while the commit wins = %v; want ErrCommitRecorded", err)
				}
				if !ok || dec.ID != g || len(dec.Branches) != 1 {
					t.Fatalf("Decision = %+v, %v; want the commit", dec, ok)
				}
				wantValue(t, db, 1, tc.v)
				if n := markers(t, db, g); n != 0 {
					t.Fatalf("%d abort markers next to the commit", n)
				}
				if err := direct.ClaimAbort(ctx, g, "again"); !errors.Is(err, xa.ErrCommitRecorded) {
					t.Fatalf("ClaimAbort after the commit = %v; want ErrCommitRecorded", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ClaimAbort while the commit fails = %v; want nil", err)
			}
			if ok {
				t.Fatalf("Decision = %+v after a failed commit", dec)
			}
			wantAbsent(t, db, 1)
			if n := markers(t, db, g); n != 1 {
				t.Fatalf("%d abort markers, want 1", n)
			}
			if err := direct.ClaimAbort(ctx, g, "again"); err != nil {
				t.Fatalf("ClaimAbort again = %v; want nil (idempotent)", err)
			}
			// A late commit of the same transaction is refused.
			b2, s2 := start(t, direct, ctx, g.Branch(2))
			exec(t, s2, "INSERT INTO kv VALUES (2, 0)")
			if err := b2.CommitLast(ctx, rec); !errors.Is(err, xa.ErrAbortRecorded) || xa.OutcomeUnknown(err) {
				t.Fatalf("CommitLast after the abort was claimed = %v; want ErrAbortRecorded", err)
			}
			wantAbsent(t, db, 2)
		})
	}
}

// A CommitLast that meets an abort marker fails with ErrAbortRecorded,
// never outcome unknown: nothing committed, its session is released, and
// it also waits for a marker still being written. A deferred unique
// violation at COMMIT is a plain rollback, not the fence.
func TestCommitLastAfterClaimAbort(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)",
		"CREATE TABLE u (k INT UNIQUE DEFERRABLE INITIALLY DEFERRED)")
	rm := openLast(t, db.DSN())
	ctx := testCtx(t)

	g, rec := lastRecord(t)
	if err := rm.ClaimAbort(ctx, g, "test"); err != nil {
		t.Fatal(err)
	}
	if err := rm.ClaimAbort(ctx, g, "test again"); err != nil {
		t.Fatalf("ClaimAbort again = %v; want nil", err)
	}
	b, s := start(t, rm, ctx, g.Branch(1))
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	err := b.CommitLast(ctx, rec)
	t.Logf("CommitLast = %v", err)
	if !errors.Is(err, xa.ErrAbortRecorded) || xa.OutcomeUnknown(err) {
		t.Fatalf("CommitLast after ClaimAbort = %v; want ErrAbortRecorded", err)
	}
	wantAbsent(t, db, 1)
	if _, ok, err := rm.Decision(ctx, g); ok || err != nil {
		t.Fatalf("Decision = %v, %v; want none", ok, err)
	}
	if n := rm.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after CommitLast failed", n)
	}
	rm.mu.Lock()
	live := len(rm.live)
	rm.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d branches still tracked", live)
	}

	// A marker being written (uncommitted) makes the decision insert wait;
	// once it commits, the commit is refused.
	g2, rec2 := lastRecord(t)
	c := raw(t, db)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	marker, err := abortMarker(g2, "held", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO xa_decisions (gtrid, node, record, aborted) VALUES ($1, $2, $3, true)", g2.String(), g2.Node, marker); err != nil {
		t.Fatal(err)
	}
	b2, s2 := start(t, rm, ctx, g2.Branch(1))
	exec(t, s2, "INSERT INTO kv VALUES (2, 2)")
	commitc := make(chan error, 1)
	go func() { commitc <- b2.CommitLast(ctx, rec2) }()
	waitActivity(t, db, "wait_event_type = 'Lock' AND query LIKE '%xa_decisions%COMMIT%'", commitc)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-commitc; !errors.Is(err, xa.ErrAbortRecorded) || xa.OutcomeUnknown(err) {
		t.Fatalf("CommitLast that waited for a marker = %v; want ErrAbortRecorded", err)
	}
	wantAbsent(t, db, 2)

	// 23505 from the COMMIT (a deferred unique constraint) is no fence.
	g3, rec3 := lastRecord(t)
	b3, s3 := start(t, rm, ctx, g3.Branch(1))
	exec(t, s3, "INSERT INTO kv VALUES (3, 3)")
	exec(t, s3, "INSERT INTO u VALUES (1), (1)")
	err = b3.CommitLast(ctx, rec3)
	if !errors.Is(err, xa.ErrRolledBack) || errors.Is(err, xa.ErrAbortRecorded) || xa.OutcomeUnknown(err) {
		t.Fatalf("CommitLast failing on a deferred unique constraint = %v; want ErrRolledBack", err)
	}
	wantAbsent(t, db, 3)
	if _, ok, _ := rm.Decision(ctx, g3); ok {
		t.Fatal("the decision of a rolled back commit was stored")
	}
	// The session went back to the pool in a usable state.
	g4, rec4 := lastRecord(t)
	b4, s4 := start(t, rm, ctx, g4.Branch(1))
	exec(t, s4, "INSERT INTO kv VALUES (4, 4)")
	if err := b4.CommitLast(ctx, rec4); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 4, 4)
}

// Abort markers share the decision table with commit decisions but are
// never read, claimed over, or forgotten as commits; ForgetAborts keeps
// markers younger than the retention by the server's clock and never
// touches a commit.
func TestDecisionTableKinds(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	rm := openLast(t, db.DSN())
	ctx := testCtx(t)

	committed, rec := lastRecord(t)
	b, s := start(t, rm, ctx, committed.Branch(1))
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	if err := b.CommitLast(ctx, rec); err != nil {
		t.Fatal(err)
	}
	old, _ := lastRecord(t)
	fresh, _ := lastRecord(t)
	for _, id := range []xa.GlobalID{old, fresh} {
		if err := rm.ClaimAbort(ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if err := rm.ClaimAbort(ctx, committed, "test"); !errors.Is(err, xa.ErrCommitRecorded) {
		t.Fatalf("ClaimAbort of a committed transaction = %v; want ErrCommitRecorded", err)
	}
	decs, err := rm.Decisions(ctx)
	if err != nil || len(decs) != 1 || decs[0].ID != committed {
		t.Fatalf("Decisions = %+v, %v; want only %s", decs, err, committed)
	}
	for _, id := range []xa.GlobalID{old, fresh} {
		if rec, ok, err := rm.Decision(ctx, id); ok || err != nil {
			t.Fatalf("Decision(%s) = %+v, %v, %v: an abort marker read as a commit", id, rec, ok, err)
		}
	}

	// ForgetDecisions leaves the markers alone.
	if err := rm.ForgetDecisions(ctx, []xa.GlobalID{committed, old, fresh}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := rm.Decision(ctx, committed); ok {
		t.Fatal("ForgetDecisions kept the commit")
	}
	if markers(t, db, old) != 1 || markers(t, db, fresh) != 1 {
		t.Fatal("ForgetDecisions deleted abort markers")
	}

	// Two hours old by the server's clock: a marker, and a commit.
	kept, rec2 := lastRecord(t)
	b2, s2 := start(t, rm, ctx, kept.Branch(1))
	exec(t, s2, "INSERT INTO kv VALUES (2, 2)")
	if err := b2.CommitLast(ctx, rec2); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, fmt.Sprintf("UPDATE xa_decisions SET logged = now() - interval '2 hours' WHERE gtrid IN (%s, %s)",
		quoteLiteral(old.String()), quoteLiteral(kept.String())))
	n, err := rm.ForgetAborts(ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("ForgetAborts(1h) = %d, %v; want 1", n, err)
	}
	if markers(t, db, old) != 0 || markers(t, db, fresh) != 1 {
		t.Fatalf("after ForgetAborts(1h): old %d, fresh %d markers; want 0, 1", markers(t, db, old), markers(t, db, fresh))
	}
	if n, err := rm.ForgetAborts(ctx, 3*time.Hour); err != nil || n != 0 {
		t.Fatalf("ForgetAborts(3h) = %d, %v; want 0", n, err)
	}
	if n, err := rm.ForgetAborts(ctx, 0); err != nil || n != 1 {
		t.Fatalf("ForgetAborts(0) = %d, %v; want 1", n, err)
	}
	if _, ok, _ := rm.Decision(ctx, kept); !ok {
		t.Fatal("ForgetAborts deleted a commit decision")
	}
	if _, err := rm.ForgetAborts(ctx, -time.Second); err == nil {
		t.Fatal("negative retention accepted")
	}
}

// A decision table created by the old DDL (no "aborted" column) is
// migrated by Open: its rows stay commit decisions and abort markers can
// be claimed. Opening an up-to-date table takes no lock that would wait
// for a commit in flight.
func TestDecisionTableMigration(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE SCHEMA ops",
		"CREATE TABLE ops.xa_decisions (gtrid text PRIMARY KEY, node text NOT NULL, record bytea NOT NULL, logged timestamptz NOT NULL DEFAULT now())")
	ctx := testCtx(t)
	g, rec := lastRecord(t)
	payload, err := rec.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw(t, db).Exec(ctx, "INSERT INTO ops.xa_decisions (gtrid, node, record) VALUES ($1, $2, $3)", g.String(), g.Node, payload); err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context) (*RM, error) {
		rm, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), MaxConns: 4, DecisionTable: "ops.xa_decisions", SkipCheck: true, Init: true})
		if err == nil {
			t.Cleanup(rm.Close)
		}
		return rm, err
	}
	rm, err := open(ctx)
	if err != nil {
		t.Fatalf("Open on an old decision table: %v", err)
	}
	var typ, def string
	var notNull bool
	if err := raw(t, db).QueryRow(ctx, `SELECT data_type, column_default, is_nullable = 'NO' FROM information_schema.columns
		WHERE table_schema = 'ops' AND table_name = 'xa_decisions' AND column_name = 'aborted'`).Scan(&typ, &def, &notNull); err != nil {
		t.Fatalf("column aborted: %v", err)
	}
	if typ != "boolean" || def != "false" || !notNull {
		t.Fatalf("column aborted: %s default %s not null %v", typ, def, notNull)
	}
	decs, err := rm.Decisions(ctx)
	if err != nil || len(decs) != 1 || decs[0].ID != g {
		t.Fatalf("Decisions = %+v, %v; want the old row", decs, err)
	}
	if err := rm.ClaimAbort(ctx, g, "test"); !errors.Is(err, xa.ErrCommitRecorded) {
		t.Fatalf("ClaimAbort over an old commit row = %v; want ErrCommitRecorded", err)
	}
	g2, _ := lastRecord(t)
	if err := rm.ClaimAbort(ctx, g2, "test"); err != nil {
		t.Fatal(err)
	}
	if decs, _ := rm.Decisions(ctx); len(decs) != 1 {
		t.Fatalf("Decisions = %+v after a claim", decs)
	}

	// An up-to-date table is opened without ALTER TABLE, whose exclusive
	// lock would wait for every transaction that wrote the table.
	c := raw(t, db)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "LOCK TABLE ops.xa_decisions IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := open(sctx); err != nil {
		t.Fatalf("Open of an up-to-date table while a commit is in flight: %v", err)
	}
}

// A participant without a decision table is no decision store: it says
// so, and ClaimAbort refuses rather than pretend to fence anything.
func TestNoDecisionTable(t *testing.T) {
	t.Parallel()
	db, plain := setup(t)
	ctx := testCtx(t)
	if plain.HasDecisionTable() {
		t.Fatal("HasDecisionTable without a table")
	}
	if !openLast(t, db.DSN()).HasDecisionTable() {
		t.Fatal("no HasDecisionTable with a table")
	}
	g, _ := lastRecord(t)
	if err := plain.ClaimAbort(ctx, g, "test"); !errors.Is(err, xa.ErrMisconfigured) {
		t.Fatalf("ClaimAbort without a decision table = %v; want ErrMisconfigured", err)
	}
	if n, err := plain.ForgetAborts(ctx, 0); n != 0 || err != nil {
		t.Fatalf("ForgetAborts without a decision table = %d, %v", n, err)
	}
	if decs, err := plain.Decisions(ctx); len(decs) != 0 || err != nil {
		t.Fatalf("Decisions without a decision table = %v, %v", decs, err)
	}
}

// Recover gives each branch its age by the server's clock, read in the
// same query: positive, close to what the server says a moment later, and
// what Age returns whatever the caller's clock says.
func TestRecoverServerAge(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b, xa.VotePrepared)
	defer b.Rollback(ctx) //nolint:errcheck
	time.Sleep(1200 * time.Millisecond)

	ps, err := rm.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var server time.Duration
	var micros int64
	if err := raw(t, db).QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp() - prepared) * 1000000)::bigint FROM pg_prepared_xacts WHERE gid = $1",
		x.String()).Scan(&micros); err != nil {
		t.Fatal(err)
	}
	server = time.Duration(micros) * time.Microsecond
	var p xa.PreparedBranch
	for _, q := range ps {
		if q.XID.Equal(x) {
			p = q
		}
	}
	t.Logf("ServerAge %v, server's age a moment later %v", p.ServerAge, server)
	switch {
	case p.Raw == "":
		t.Fatalf("branch %v not listed: %+v", x, ps)
	case p.Prepared.IsZero():
		t.Fatal("Prepared is missing")
	case p.ServerAge < time.Second || p.ServerAge > server || server-p.ServerAge > 2*time.Second:
		t.Fatalf("ServerAge = %v; want at least 1s and at most the server's %v, close to it", p.ServerAge, server)
	}
	for _, shift := range []time.Duration{48 * time.Hour, -48 * time.Hour} {
		if age, ok := p.Age(time.Now().Add(shift)); !ok || age != p.ServerAge {
			t.Errorf("Age with the caller's clock off by %v = %v, %v; want the server's %v", shift, age, ok, p.ServerAge)
		}
	}

	// A server whose clock runs a day ahead of ours, simulated by
	// shadowing pg_prepared_xacts and clock_timestamp() in a schema that
	// comes before pg_catalog on this resource manager's search_path: the
	// prepare time is a day in our future, the age is still the branch's.
	mustExec(t, db, "CREATE SCHEMA skew",
		"CREATE FUNCTION skew.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT pg_catalog.clock_timestamp() + interval '1 day' $$",
		"CREATE VIEW skew.pg_prepared_xacts AS SELECT transaction, gid, prepared + interval '1 day' AS prepared, owner, database FROM pg_catalog.pg_prepared_xacts")
	skewed := openRM(t, db.DSN()+"&search_path=skew,pg_catalog")
	ps, err = skewed.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var q xa.PreparedBranch
	for _, r := range ps {
		if r.XID.Equal(x) {
			q = r
		}
	}
	age, ok := q.Age(time.Now())
	t.Logf("server a day ahead: Prepared %v from now, ServerAge %v, Age %v", time.Until(q.Prepared).Round(time.Minute), q.ServerAge, age)
	switch {
	case time.Until(q.Prepared) < 23*time.Hour:
		t.Fatalf("Prepared = %v: the skewed view is not in use", q.Prepared)
	case !ok || age != q.ServerAge || age < p.ServerAge || age > p.ServerAge+10*time.Second:
		t.Fatalf("Age = %v, %v with ServerAge %v on a server a day ahead; want about %v", age, ok, q.ServerAge, p.ServerAge)
	}

	// A prepare time after the server's now (its clock stepped back) is an
	// age of one nanosecond, young: never zero or less, which would hand
	// the age over to the caller's clock.
	mustExec(t, db, "CREATE SCHEMA stepped",
		"CREATE VIEW stepped.pg_prepared_xacts AS SELECT transaction, gid, prepared + interval '1 hour' AS prepared, owner, database FROM pg_catalog.pg_prepared_xacts")
	ps, err = openRM(t, db.DSN()+"&search_path=stepped,pg_catalog").Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ps {
		if age, ok := r.Age(time.Now().Add(-48 * time.Hour)); r.XID.Equal(x) && (r.ServerAge != time.Nanosecond || !ok || age != time.Nanosecond) {
			t.Fatalf("prepared an hour in the server's future: ServerAge %v, Age %v, %v; want 1ns", r.ServerAge, age, ok)
		}
	}

	// A branch just prepared is young, never of age zero (which would hand
	// the age over to the caller's clock).
	x2 := newXID(t)
	b2, s2 := start(t, rm, ctx, x2)
	exec(t, s2, "INSERT INTO kv VALUES (2, 2)")
	prepare(t, b2, xa.VotePrepared)
	defer b2.Rollback(ctx) //nolint:errcheck
	ps, err = rm.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range ps {
		if q.XID.Equal(x2) && (q.ServerAge <= 0 || q.ServerAge > time.Second) {
			t.Fatalf("fresh branch: ServerAge = %v", q.ServerAge)
		}
	}
}
