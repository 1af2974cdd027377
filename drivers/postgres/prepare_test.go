package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// wantAbortCode checks an abort vote of kind with the server's code
// reachable through errors.As.
func wantAbortCode(t testing.TB, v xa.Vote, err error, kind error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if v != xa.VoteAbort || !errors.Is(err, kind) || !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("Prepare = %v, %v; want abort, %v with SQLSTATE %s", v, err, kind, code)
	}
}

// Fact 13: PREPARE TRANSACTION in a failed transaction answers the tag
// ROLLBACK and no error; the branch votes abort with the earlier error as
// the reason.
func TestPrepareInFailedTransaction(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)

	// The fact itself, on a plain session.
	c := raw(t, db)
	res, err := c.PgConn().Exec(ctx, "BEGIN").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PgConn().Exec(ctx, "SELECT 1/0").ReadAll(); err == nil {
		t.Fatal("1/0 succeeded")
	}
	res, err = c.PgConn().Exec(ctx, "PREPARE TRANSACTION 'fact13'").ReadAll()
	if err != nil || lastTag(res) != "ROLLBACK" {
		t.Fatalf("PREPARE TRANSACTION in a failed transaction = %q, %v; want tag ROLLBACK, no error", lastTag(res), err)
	}

	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	if _, err := s.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 succeeded")
	}
	v, err := b.Prepare(ctx)
	wantAbortCode(t, v, err, xa.ErrRolledBack, "22012") // the earlier error is the reason
	if !strings.Contains(err.Error(), "ROLLBACK") {
		t.Errorf("error %q does not say PREPARE answered ROLLBACK", err)
	}
	if listed(t, db, x.String()) {
		t.Fatal("failed branch prepared")
	}
	wantAbsent(t, db, 1)
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
}

// What PREPARE TRANSACTION refuses (0A000), what it checks (deferred
// constraints 23xxx): each is an abort vote with ErrRolledBack and the
// server's reason, nothing stays prepared, the session is reused.
func TestPrepareRefused(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db,
		"CREATE TABLE d (k INT UNIQUE DEFERRABLE INITIALLY DEFERRED)",
		"CREATE TABLE parent (k INT PRIMARY KEY)",
		"CREATE TABLE child (k INT REFERENCES parent DEFERRABLE INITIALLY DEFERRED)")
	for _, tc := range []struct {
		name  string
		stmts []string
		code  string
	}{
		{"temporary table", []string{"CREATE TEMP TABLE tt (x INT)"}, "0A000"},
		{"WITH HOLD cursor", []string{"DECLARE c CURSOR WITH HOLD FOR SELECT 1"}, "0A000"},
		{"LISTEN", []string{"LISTEN ch"}, "0A000"},
		{"NOTIFY", []string{"NOTIFY ch"}, "0A000"},
		{"exported snapshot", []string{"SELECT pg_export_snapshot()"}, "0A000"},
		{"deferred unique", []string{"INSERT INTO d VALUES (1)", "INSERT INTO d VALUES (1)"}, "23505"},
		{"deferred foreign key", []string{"INSERT INTO child VALUES (1)"}, "23503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newXID(t)
			b, s := start(t, rm, ctx, x)
			exec(t, s, "INSERT INTO kv VALUES (1, 1)")
			for _, q := range tc.stmts {
				exec(t, s, q)
			}
			pid := b.conn.Conn().PgConn().PID()
			v, err := b.Prepare(ctx)
			wantAbortCode(t, v, err, xa.ErrRolledBack, tc.code)
			if listed(t, db, x.String()) {
				t.Fatal("refused branch prepared")
			}
			wantAbsent(t, db, 1)
			// The session went back to the pool, idle.
			b2, s2 := start(t, rm, ctx, newXID(t))
			exec(t, s2, "SELECT 1")
			if b2.conn.Conn().PgConn().PID() != pid {
				t.Logf("session %d not reused (pool gave %d)", pid, b2.conn.Conn().PgConn().PID())
			}
			prepare(t, b2, xa.VoteReadOnly)
		})
	}
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
}

// Fact 13: a serialization failure found at PREPARE is an abort vote.
func TestPrepareSerializationFailure(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 0), (2, 0)")
	// Write skew: each reads both rows and writes the one the other read.
	var bs [2]*branch
	for i := range bs {
		b, s := start(t, rm, ctx, newXID(t))
		exec(t, s, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
		var sum int
		if err := s.QueryRow(ctx, "SELECT sum(v) FROM kv").Scan(&sum); err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	for i, b := range bs {
		exec(t, b.sess, "UPDATE kv SET v = 1 WHERE k = $1", i+1)
	}
	prepare(t, bs[0], xa.VotePrepared)
	v, err := bs[1].Prepare(ctx)
	wantAbortCode(t, v, err, xa.ErrRolledBack, "40001")
	if err := bs[0].Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 1)
	wantValue(t, db, 2, 0)
}

// 42710: a gid already prepared; the first branch is untouched.
func TestPrepareDuplicateXID(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	x := newXID(t)
	b1, s1 := start(t, rm, ctx, x)
	exec(t, s1, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b1, xa.VotePrepared)
	b2, s2 := start(t, rm, ctx, x)
	exec(t, s2, "INSERT INTO kv VALUES (2, 2)")
	v, err := b2.Prepare(ctx)
	wantAbortCode(t, v, err, xa.ErrDuplicateXID, "42710")
	if !listed(t, db, x.String()) {
		t.Fatal("first branch gone")
	}
	if err := b1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 1)
	wantAbsent(t, db, 2)
}

// Lost replies, injected at the wire. A lost reply to PREPARE is an abort
// vote with ErrOutcomeUnknown, and the branch may indeed be prepared: the
// transaction manager rolls it back by gid. A lost reply to COMMIT
// PREPARED is ErrOutcomeUnknown, and the commit may indeed have happened.
// A command that was certainly never sent is not outcome-unknown.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	p, dsn := newProxy(t, db.DSN())
	rm := openRMWith(t, Config{DSN: dsn})
	ctx := testCtx(t)

	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	lost := p.loseReplyTo("PREPARE TRANSACTION")
	v, err := b.Prepare(ctx)
	<-lost
	if v != xa.VoteAbort || !xa.OutcomeUnknown(err) {
		t.Fatalf("Prepare with a lost reply = %v, %v; want abort, ErrOutcomeUnknown", v, err)
	}
	if !listed(t, db, x.String()) {
		t.Fatal("the lost PREPARE did not take effect; the test proves nothing")
	}
	if err := rm.Rollback(ctx, x, xa.Origin{}); err != nil {
		t.Fatalf("Rollback by gid: %v", err)
	}
	if listed(t, db, x.String()) {
		t.Fatal("still prepared after Rollback")
	}

	x = newXID(t)
	b, s = start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (2, 2)")
	prepare(t, b, xa.VotePrepared)
	lost = p.loseReplyTo("COMMIT PREPARED")
	err = b.Commit(ctx)
	<-lost
	if !xa.OutcomeUnknown(err) {
		t.Fatalf("Commit with a lost reply = %v, want ErrOutcomeUnknown", err)
	}
	wantValue(t, db, 2, 2) // it did commit
	if err := rm.Commit(ctx, x, xa.Origin{}); !errors.Is(err, xa.ErrUnknownXID) {
		t.Fatalf("Commit again = %v, want ErrUnknownXID (ambiguous: committed)", err)
	}

	// Never sent: Prepare with a context already done rolls back.
	x = newXID(t)
	b, s = start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (3, 3)")
	done, cancel := context.WithCancel(ctx)
	cancel()
	v, err = b.Prepare(done)
	if v != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) || xa.OutcomeUnknown(err) {
		t.Fatalf("Prepare with a done context = %v, %v; want abort, ErrRolledBack", v, err)
	}
	if listed(t, db, x.String()) {
		t.Fatal("prepared although PREPARE was never sent")
	}
	wantAbsent(t, db, 3)
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}

	// Never sent: phase 2 when the server cannot be reached.
	x = newXID(t)
	b, s = start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (4, 4)")
	prepare(t, b, xa.VotePrepared)
	p.close()
	rm.pool.Reset()
	for _, f := range []func() error{
		func() error { return b.Commit(ctx) },
		func() error { return rm.Rollback(ctx, x, xa.Origin{}) },
	} {
		err := f()
		if !xa.Retryable(err) || xa.OutcomeUnknown(err) {
			t.Fatalf("phase 2 with the server unreachable = %v, want ErrRetryable", err)
		}
	}
	rm2 := openRM(t, db.DSN())
	if err := rm2.Commit(ctx, x, xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 4, 4)
}

// A one-phase commit reports what COMMIT did: ROLLBACK in a failed
// transaction, a deferred constraint violation, or success.
func TestCommitOnePhase(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "CREATE TABLE d (k INT UNIQUE DEFERRABLE INITIALLY DEFERRED)")
	for i, tc := range []struct {
		stmts []string
		code  string // "" for success
	}{
		{[]string{"INSERT INTO kv VALUES (1, 1)"}, ""},
		{[]string{"INSERT INTO kv VALUES (2, 2)", "SELECT 1/0"}, "22012"},
		{[]string{"INSERT INTO kv VALUES (3, 3)", "INSERT INTO d VALUES (1)", "INSERT INTO d VALUES (1)"}, "23505"},
		{nil, ""}, // idle
	} {
		x := newXID(t)
		b, s := start(t, rm, ctx, x)
		for _, q := range tc.stmts {
			s.Exec(ctx, q) //nolint:errcheck // the failing ones are the point
		}
		err := b.CommitOnePhase(ctx)
		if tc.code == "" {
			if err != nil {
				t.Fatalf("case %d: CommitOnePhase: %v", i, err)
			}
			continue
		}
		var pe *pgconn.PgError
		if !errors.Is(err, xa.ErrRolledBack) || !errors.As(err, &pe) || pe.Code != tc.code {
			t.Fatalf("case %d: CommitOnePhase = %v; want ErrRolledBack with %s", i, err, tc.code)
		}
		if listed(t, db, x.String()) {
			t.Fatal("one-phase branch prepared")
		}
	}
	wantValue(t, db, 1, 1)
	for k := 2; k <= 3; k++ {
		wantAbsent(t, db, k)
	}
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
}
