package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xadb/xa/xa"
)

// Fact 4: illegal steps of the XA state machine, sent as raw SQL on a
// plain session. Each gives the server's error, which classify maps to the
// kind the RM reports, and leaves the state unchanged: the legal path
// carries on afterwards and commits exactly the work done before.
func TestIllegalTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mariadb := isMariaDB(db)
	const (
		active   = "XA START %[1]s; INSERT INTO kv VALUES (%[2]d, 1)"
		idle     = active + "; XA END %[1]s"
		prepared = idle + "; XA PREPARE %[1]s"
		fromAct  = "XA END %[1]s; XA PREPARE %[1]s; XA COMMIT %[1]s"
		fromIdle = "XA PREPARE %[1]s; XA COMMIT %[1]s"
		fromPrep = "XA COMMIT %[1]s"
	)
	type tc struct {
		name       string
		setup      string
		bad        string
		wantErrno  uint16 // 0: the server accepts it
		wantKind   error
		continueOK string
	}
	autocommitErrno := uint16(1399) // fact 4
	if mariadb {
		autocommitErrno = 0 // MariaDB 10.11 accepts it inside a branch
	}
	cases := []tc{
		{"XA COMMIT in ACTIVE", active, "XA COMMIT %[1]s", 1399, xa.ErrInvalidState, fromAct},
		{"XA PREPARE in ACTIVE", active, "XA PREPARE %[1]s", 1399, xa.ErrInvalidState, fromAct},
		{"XA ROLLBACK in ACTIVE", active, "XA ROLLBACK %[1]s", 1399, xa.ErrInvalidState, fromAct},
		{"XA START twice", active, "XA START %[1]s", 1399, xa.ErrInvalidState, fromAct},
		{"XA COMMIT ONE PHASE in ACTIVE", active, "XA COMMIT %[1]s ONE PHASE", 1399, xa.ErrInvalidState, fromAct},
		{"COMMIT in ACTIVE", active, "COMMIT", 1399, xa.ErrInvalidState, fromAct},
		{"ROLLBACK in ACTIVE", active, "ROLLBACK", 1399, xa.ErrInvalidState, fromAct},
		{"BEGIN in ACTIVE", active, "BEGIN", 1399, xa.ErrInvalidState, fromAct},
		{"START TRANSACTION in ACTIVE", active, "START TRANSACTION", 1399, xa.ErrInvalidState, fromAct},
		{"DDL in ACTIVE", active, "CREATE TABLE other (i INT)", 1399, xa.ErrInvalidState, fromAct},
		{"LOCK TABLES in ACTIVE", active, "LOCK TABLES kv WRITE", 1399, xa.ErrInvalidState, fromAct},
		{"SET autocommit=1 in ACTIVE", active, "SET autocommit=1", autocommitErrno, xa.ErrInvalidState, fromAct},
		{"XA END twice", idle, "XA END %[1]s", 1399, xa.ErrInvalidState, fromIdle},
		{"XA START in IDLE", idle, "XA START %[1]s", 1399, xa.ErrInvalidState, fromIdle},
		{"statement in IDLE", idle, "INSERT INTO kv VALUES (999, 1)", 1399, xa.ErrInvalidState, fromIdle},
		{"COMMIT in IDLE", idle, "COMMIT", 1399, xa.ErrInvalidState, fromIdle},
		{"statement in PREPARED", prepared, "INSERT INTO kv VALUES (999, 1)", 1399, xa.ErrInvalidState, fromPrep},
		{"XA START in PREPARED", prepared, "XA START %[1]s", 1399, xa.ErrInvalidState, fromPrep},
		{"XA END in PREPARED", prepared, "XA END %[1]s", 1399, xa.ErrInvalidState, fromPrep},
		{"XA PREPARE twice", prepared, "XA PREPARE %[1]s", 1399, xa.ErrInvalidState, fromPrep},
		{"XA START inside a local transaction", "BEGIN; INSERT INTO kv VALUES (%[2]d, 1)", "XA START %[1]s", 1400, xa.ErrInvalidState, "COMMIT"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := 1000 + i
			lit := xidLiteral(newXID(t))
			s := privateConn(t, raw)
			mustExec(t, s, sqlf(c.setup, lit, k))
			_, err := s.ExecContext(ctx, sqlf(c.bad, lit, k))
			if c.wantErrno == 0 {
				if err != nil {
					t.Fatalf("%s: %v, want it accepted", c.bad, err)
				}
			} else {
				wantMySQLErr(t, err, c.wantErrno)
				if got := classify(opExec, err); got != c.wantKind {
					t.Fatalf("classify = %v, want %v", got, c.wantKind)
				}
			}
			if _, ok := getV(t, raw, k); ok {
				t.Fatal("work visible before the commit")
			}
			mustExec(t, s, sqlf(c.continueOK, lit, k))
			if v, ok := getV(t, raw, k); !ok || v != 1 {
				t.Fatalf("work before the illegal step not committed by the legal path")
			}
			if _, ok := getV(t, raw, 999); ok {
				t.Fatal("refused statement took effect")
			}
		})
	}
}

// Requirement 9: the session handle cannot end the branch. The server
// refuses COMMIT, BEGIN, ROLLBACK and DDL inside a branch (ErrInvalidState,
// ErrTransactionControl for the transaction statements); the RM refuses XA
// statements and SET autocommit without sending them. After each refusal
// the branch goes on and the TM commits all its work, and nothing was
// committed early.
func TestTransactionControlRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()))
	x := newXID(t)
	b, err := rm.Start(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	c := conn(b)
	mustExec(t, c, "INSERT INTO kv VALUES (1, 1)")
	for _, q := range []struct {
		query      string
		sent       bool
		txnControl bool
		errno      uint16
	}{
		{"COMMIT", true, true, 1399},
		{"commit work", true, true, 1399},
		{"BEGIN", true, true, 1399},
		{"START TRANSACTION", true, true, 1399},
		{"ROLLBACK", true, true, 1399},
		{"CREATE TABLE other (i INT)", true, false, 1399},
		{"TRUNCATE TABLE kv", true, false, 1399},
		{"SET autocommit = 0", false, true, 0},
		{"set @@session.autocommit=1", false, true, 0},
		{"XA END " + xidLiteral(x), false, true, 0},
		{"XA COMMIT " + xidLiteral(x) + " ONE PHASE", false, true, 0},
		{"/*!XA END " + xidLiteral(x) + " */", false, true, 0},
		{"  -- comment\n xa prepare " + xidLiteral(x), false, true, 0},
	} {
		before := w.commands.Load()
		_, err := c.ExecContext(ctx, q.query)
		sent := w.commands.Load() - before
		if (sent > 0) != q.sent {
			t.Errorf("%q: %d commands sent, want sent=%v", q.query, sent, q.sent)
		}
		if q.txnControl != errors.Is(err, xa.ErrTransactionControl) {
			t.Errorf("%q: %v; want ErrTransactionControl: %v", q.query, err, q.txnControl)
		}
		if q.errno != 0 {
			wantKind(t, err, xa.ErrInvalidState)
			wantMySQLErr(t, err, q.errno)
		} else if err == nil {
			t.Errorf("%q accepted", q.query)
		}
		mustExec(t, c, "UPDATE kv SET v = v + 1 WHERE k = 1")
	}
	// Savepoints stay the application's: the server allows them.
	mustExec(t, c, "SAVEPOINT s1")
	mustExec(t, c, "INSERT INTO kv VALUES (2, 2)")
	mustExec(t, c, "ROLLBACK TO SAVEPOINT s1")
	if _, ok := getV(t, raw, 1); ok {
		t.Fatal("committed before the TM's commit")
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := getV(t, raw, 1); !ok || v != 14 {
		t.Fatalf("k=1: %d %v, want 14", v, ok)
	}
	if _, ok := getV(t, raw, 2); ok {
		t.Fatal("rolled-back savepoint work committed")
	}
}

// A statement that slips "autocommit" past the screening (here in a
// multi-statement query) marks the session: it is closed at the end of the
// branch instead of going back to the pool with autocommit=0, which would
// make later XA commands on it fail with 1400.
func TestAutocommitTaintedSessionNotPooled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 1 })
	b, _ := rm.Start(ctx, newXID(t))
	c := conn(b)
	id := sessionID(t, c)
	_, err := c.ExecContext(ctx, "INSERT INTO kv VALUES (1, 1); SET autocommit = 0")
	if isMariaDB(db) && err != nil {
		t.Fatalf("MariaDB accepted this before: %v", err)
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ = rm.Start(ctx, newXID(t))
	if id2 := sessionID(t, conn(b)); id2 == id {
		t.Fatalf("session %d with autocommit=0 pooled again", id)
	}
	var ac int
	if err := conn(b).QueryRowContext(ctx, "SELECT @@autocommit").Scan(&ac); err != nil || ac != 1 {
		t.Fatalf("autocommit = %d, %v", ac, err)
	}
	b.Rollback(ctx)
	// And an RM-level command works on the pool.
	if err := rm.Rollback(ctx, newXID(t), xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	if v, ok := getV(t, raw, 1); !ok || v != 1 {
		t.Fatal("work lost")
	}
}

// Sessions that may hold a branch never go back to the pool: a prepared
// branch given up with Close stays prepared on a closed session (and is
// committed later by XID), an active one is rolled back by the server with
// its locks released; a branch that ended cleanly gives its session back.
func TestSessionsNeverPooledWithABranch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 0), (2, 0)")
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 1 })
	idOf := func(b xa.Branch) uint64 { return sessionID(t, conn(b)) }

	// A clean end returns the session to the pool.
	b, _ := rm.Start(ctx, newXID(t))
	id0 := idOf(b)
	mustExec(t, conn(b), "UPDATE kv SET v = 1 WHERE k = 1")
	b.Prepare(ctx)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ = rm.Start(ctx, newXID(t))
	if id := idOf(b); id != id0 {
		t.Fatalf("clean session not reused: %d then %d", id0, id)
	}
	b.Rollback(ctx)

	// Prepared, then given up: discarded, still prepared, committable.
	x := newXID(t)
	b, _ = rm.Start(ctx, x)
	id1 := idOf(b)
	mustExec(t, conn(b), "UPDATE kv SET v = 2 WHERE k = 1")
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	o := b.(xa.OriginReporter).Origin()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	if id := idOf(b2); id == id1 {
		t.Fatalf("session %d with a prepared branch handed out again", id1)
	}
	// The new session is clean: a branch works on it.
	mustExec(t, conn(b2), "UPDATE kv SET v = 5 WHERE k = 2")
	if err := b2.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, raw, id1)
	if !listedIn(recoverList(t, raw), x) {
		t.Fatal("prepared branch lost when its session closed")
	}
	if err := retry(t, func() error { return rm.Commit(ctx, x, o) }); err != nil {
		t.Fatal(err)
	}
	if v, _ := getV(t, raw, 1); v != 2 {
		t.Fatalf("k=1 is %d, want 2", v)
	}

	// Active, then given up: discarded, rolled back, row lock released.
	b, _ = rm.Start(ctx, newXID(t))
	id3 := idOf(b)
	mustExec(t, conn(b), "UPDATE kv SET v = 3 WHERE k = 1")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	s := privateConn(t, raw)
	mustExec(t, s, "SET SESSION innodb_lock_wait_timeout = 5")
	mustExec(t, s, "UPDATE kv SET v = v + 10 WHERE k = 1")
	if v, _ := getV(t, raw, 1); v != 12 {
		t.Fatalf("k=1 is %d, want 12", v)
	}
	b, _ = rm.Start(ctx, newXID(t))
	if id := idOf(b); id == id3 {
		t.Fatalf("session %d with an active branch handed out again", id3)
	}
	b.Rollback(ctx)
	if st := rm.db.Stats(); st.OpenConnections > 1 {
		t.Fatalf("pool holds %d connections", st.OpenConnections)
	}
}

// The database/sql idiom this package relies on: a Raw callback returning
// driver.ErrBadConn really closes the connection (the server sees it
// go), and the xa flag keeps database/sql from reusing it.
func TestDiscardClosesTheConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 2 })
	s, err := rm.newSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := s.id
	if !inProcessList(t, raw, id) {
		t.Fatal("session not in the process list")
	}
	s.discard()
	waitGone(t, raw, id)
	if n := rm.db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections open after discard", n)
	}

	// Safety net: a connection flagged as carrying a branch that goes
	// back to database/sql by any path is closed, not reused (IsValid).
	s, _ = rm.newSession(ctx)
	id = s.id
	s.dc.xa.Store(true)
	s.conn.Close() // bypasses release: database/sql asks IsValid
	s2, _ := rm.newSession(ctx)
	defer s2.release(true)
	if s2.id == id {
		t.Fatal("connection flagged with a branch was pooled")
	}
	waitGone(t, raw, id)
}

// sqlf formats a statement template of this file (explicit argument
// indexes; a template may use none).
func sqlf(format string, lit string, k int) string {
	if !strings.Contains(format, "%") {
		return format
	}
	return fmt.Sprintf(format, lit, k)
}
