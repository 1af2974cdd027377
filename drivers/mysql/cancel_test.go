package mysql

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// holdRow locks row k on a session of raw until t ends (or release is
// called: it commits v+100 into the row, to show the holder was not
// disturbed).
func holdRow(t *testing.T, raw *sql.DB, k int) (release func()) {
	t.Helper()
	s := privateConn(t, raw)
	mustExec(t, s, "BEGIN")
	var v int
	if err := s.QueryRowContext(context.Background(), "SELECT v FROM kv WHERE k = ? FOR UPDATE", k).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return func() {
		mustExec(t, s, "UPDATE kv SET v = v + 100 WHERE k = ?", k)
		mustExec(t, s, "COMMIT")
	}
}

// Requirement 8: a statement blocked on a row lock returns within about a
// second of its context's cancellation (not after innodb_lock_wait_timeout,
// 50 s here), because the RM interrupts it on the server with KILL QUERY.
// The session survives, the branch rolls back cleanly on it, the lock
// holder is undisturbed and the pool is not poisoned.
func TestCancelBlockedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 1 })
	for _, first := range []bool{false, true} {
		name := "later statement"
		if first {
			name = "first statement (with XA START)"
		}
		t.Run(name, func(t *testing.T) {
			release := holdRow(t, raw, 1)
			b, err := rm.Start(ctx, newXID(t))
			if err != nil {
				t.Fatal(err)
			}
			c := conn(b)
			var id uint64
			if !first {
				mustExec(t, c, "UPDATE kv SET v = v + 1 WHERE k = 2")
				id = sessionID(t, c)
			}
			sctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			t0 := time.Now()
			_, err = c.ExecContext(sctx, "UPDATE kv SET v = v + 1 WHERE k = 1")
			took := time.Since(t0)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("blocked statement: %v, want context.Canceled", err)
			}
			wantMySQLErr(t, err, erQueryInterrupted)
			if took > 1500*time.Millisecond {
				t.Fatalf("cancelled statement returned after %v", took)
			}
			// The session and the branch survived the cancellation.
			if first {
				if b.(xa.Idler).Idle() {
					t.Fatal("XA START went with the cancelled statement but the branch is idle")
				}
				id = sessionID(t, c)
			} else if got := sessionID(t, c); got != id {
				t.Fatalf("session changed from %d to %d", id, got)
			}
			mustExec(t, c, "UPDATE kv SET v = v + 1 WHERE k = 2")
			if err := b.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			release()
			if v, _ := getV(t, raw, 1); v != 101 {
				t.Fatalf("holder's row is %d, want 101", v)
			}
			if v, _ := getV(t, raw, 2); v != 2 {
				t.Fatalf("rolled-back row is %d, want 2", v)
			}
			mustExec(t, raw, "UPDATE kv SET v = 1 WHERE k = 1")
			// Pool: the same session, clean.
			b, _ = rm.Start(ctx, newXID(t))
			if got := sessionID(t, conn(b)); got != id {
				t.Fatalf("pool gave session %d, want the surviving %d", got, id)
			}
			mustExec(t, conn(b), "UPDATE kv SET v = 2 WHERE k = 2")
			if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A deadline works like a cancellation, and reports DeadlineExceeded.
func TestStatementDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1)")
	holdRow(t, raw, 1)
	rm := openRM(t, db.DSN())
	b, _ := rm.Start(ctx, newXID(t))
	defer b.Rollback(ctx)
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	rows, err := conn(b).QueryContext(sctx, "SELECT v FROM kv WHERE k = 1 FOR UPDATE")
	if err == nil {
		rows.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want DeadlineExceeded", err)
	}
}

// Start's context bounds the branch: when it ends, the running statement
// is interrupted, later statements fail without being sent, and the
// branch can still be rolled back.
func TestStartContextBoundsBranch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	release := holdRow(t, raw, 1)
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()))
	bctx, cancel := context.WithCancelCause(ctx)
	b, err := rm.Start(bctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	c := conn(b)
	mustExec(t, c, "UPDATE kv SET v = 20 WHERE k = 2")
	stop := errors.New("global timeout")
	time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
	t0 := time.Now()
	_, err = c.ExecContext(ctx, "UPDATE kv SET v = 10 WHERE k = 1")
	if !errors.Is(err, stop) || time.Since(t0) > 1500*time.Millisecond {
		t.Fatalf("after %v: %v, want the branch context's cause", time.Since(t0), err)
	}
	before := w.commands.Load()
	if _, err := c.ExecContext(ctx, "SELECT 1"); !errors.Is(err, stop) {
		t.Fatalf("statement after the branch context ended: %v", err)
	}
	if w.commands.Load() != before {
		t.Fatal("statement after the branch context ended was sent")
	}
	if err := b.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	if v, _ := getV(t, raw, 2); v != 2 {
		t.Fatalf("k=2 is %d", v)
	}
}

// Rollback while a statement is blocked (the TM's timeout abort): the
// statement is interrupted and the rollback completes at once.
func TestRollbackInterruptsStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	release := holdRow(t, raw, 1)
	rm := openRM(t, db.DSN())
	x := newXID(t)
	b, _ := rm.Start(ctx, x)
	c := conn(b)
	mustExec(t, c, "UPDATE kv SET v = 20 WHERE k = 2")
	id := sessionID(t, c)
	errc := make(chan error, 1)
	go func() {
		_, err := c.ExecContext(ctx, "UPDATE kv SET v = 10 WHERE k = 1")
		errc <- err
	}()
	waitLockWait(t, raw, id)
	t0 := time.Now()
	if err := b.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 1500*time.Millisecond {
		t.Fatalf("Rollback took %v", took)
	}
	if err := <-errc; !errors.Is(err, errRollingBack) {
		t.Fatalf("interrupted statement: %v", err)
	}
	release()
	if v, _ := getV(t, raw, 2); v != 2 {
		t.Fatalf("k=2 is %d", v)
	}
	if v, _ := getV(t, raw, 1); v != 101 {
		t.Fatalf("k=1 is %d", v)
	}
}

// The guard keeps its callback on a context from one statement to the
// next (see guard): a context that bounds several statements still
// interrupts a later one; once it has ended between statements, the next
// statement with it is refused without being sent; and a context that
// ended after the statements it bounded does not interrupt a later
// statement bounded by another context.
func TestCallerContextAcrossStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2), (3, 3)")
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()))

	t.Run("same context, later statement interrupted", func(t *testing.T) {
		release := holdRow(t, raw, 1)
		defer release()
		b, err := rm.Start(ctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback(ctx)
		c := conn(b)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for range 3 {
			if _, err := c.ExecContext(sctx, "UPDATE kv SET v = v + 1 WHERE k = 2"); err != nil {
				t.Fatal(err)
			}
		}
		time.AfterFunc(300*time.Millisecond, cancel)
		t0 := time.Now()
		_, err = c.ExecContext(sctx, "UPDATE kv SET v = 10 WHERE k = 1")
		if !errors.Is(err, context.Canceled) || time.Since(t0) > 1500*time.Millisecond {
			t.Fatalf("after %v: %v, want context.Canceled within about a second", time.Since(t0), err)
		}
		wantMySQLErr(t, err, erQueryInterrupted)
		before := w.commands.Load()
		if _, err := c.ExecContext(sctx, "SELECT 1"); !errors.Is(err, context.Canceled) {
			t.Fatalf("statement with the ended context: %v", err)
		}
		if w.commands.Load() != before {
			t.Fatal("statement with the ended context was sent")
		}
		// The session survived: the branch goes on with another context.
		mustExec(t, c, "UPDATE kv SET v = v + 1 WHERE k = 2")
	})

	t.Run("ended context spares a later statement", func(t *testing.T) {
		release := holdRow(t, raw, 3)
		b, err := rm.Start(ctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		c := conn(b)
		sctx, cancel := context.WithCancel(ctx)
		if _, err := c.ExecContext(sctx, "UPDATE kv SET v = v + 1 WHERE k = 2"); err != nil {
			t.Fatal(err)
		}
		id := sessionID(t, c)
		errc := make(chan error, 1)
		go func() {
			_, err := c.ExecContext(ctx, "UPDATE kv SET v = 30 WHERE k = 3")
			errc <- err
		}()
		waitLockWait(t, raw, id)
		cancel() // while the later statement waits for the lock
		time.Sleep(300 * time.Millisecond)
		release()
		if err := <-errc; err != nil {
			t.Fatalf("statement bounded by another context: %v", err)
		}
		if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := getV(t, raw, 3); v != 30 {
			t.Fatalf("k=3 is %d, want 30", v)
		}
	})
}

// Statements bounded by Start's own context (as xa.Tx's callers run
// them), which the guard watches through the branch's work context: when
// that context ends, the running statement is interrupted with its cause
// and the next one is refused without being sent; a Rollback interrupts
// such a statement too.
func TestStartContextAsStatementContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()))

	t.Run("context ends", func(t *testing.T) {
		release := holdRow(t, raw, 1)
		defer release()
		bctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		b, err := rm.Start(bctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback(ctx)
		c := conn(b)
		if _, err := c.ExecContext(bctx, "UPDATE kv SET v = 20 WHERE k = 2"); err != nil {
			t.Fatal(err)
		}
		stop := errors.New("global timeout")
		time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
		t0 := time.Now()
		_, err = c.ExecContext(bctx, "UPDATE kv SET v = 10 WHERE k = 1")
		if !errors.Is(err, stop) || time.Since(t0) > 1500*time.Millisecond {
			t.Fatalf("after %v: %v, want the context's cause within about a second", time.Since(t0), err)
		}
		wantMySQLErr(t, err, erQueryInterrupted)
		before := w.commands.Load()
		if _, err := c.ExecContext(bctx, "SELECT 1"); !errors.Is(err, stop) {
			t.Fatalf("statement after the context ended: %v", err)
		}
		if w.commands.Load() != before {
			t.Fatal("statement after the context ended was sent")
		}
	})

	// The branch's own commands (XA PREPARE, XA COMMIT, XA ROLLBACK) run
	// under the TM's context alone, not the work context, which Rollback
	// and Close end; under Start's context, that context ending still
	// interrupts them.
	t.Run("branch command", func(t *testing.T) {
		release := holdRow(t, raw, 1)
		defer release()
		bctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		b, err := rm.Start(bctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Rollback(ctx)
		if _, err := conn(b).ExecContext(bctx, "UPDATE kv SET v = 20 WHERE k = 2"); err != nil {
			t.Fatal(err)
		}
		stop := errors.New("global timeout")
		time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
		t0 := time.Now()
		err = b.(*branch).s.exec(bctx, "SELECT v FROM kv WHERE k = 1 FOR UPDATE")
		var ce *cancelledError
		if !errors.As(err, &ce) || !errors.Is(err, stop) || time.Since(t0) > 1500*time.Millisecond {
			t.Fatalf("after %v: %v, want a *cancelledError with the context's cause within about a second", time.Since(t0), err)
		}
	})

	t.Run("Rollback", func(t *testing.T) {
		release := holdRow(t, raw, 1)
		defer release()
		bctx, cancel := context.WithCancel(ctx)
		defer cancel()
		b, err := rm.Start(bctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		c := conn(b)
		if _, err := c.ExecContext(bctx, "UPDATE kv SET v = 20 WHERE k = 2"); err != nil {
			t.Fatal(err)
		}
		id := sessionID(t, c)
		errc := make(chan error, 1)
		go func() {
			_, err := c.ExecContext(bctx, "UPDATE kv SET v = 10 WHERE k = 1")
			errc <- err
		}()
		waitLockWait(t, raw, id)
		if err := b.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, errRollingBack) {
			t.Fatalf("interrupted statement: %v", err)
		}
		if v, _ := getV(t, raw, 2); v != 2 {
			t.Fatalf("k=2 is %d", v)
		}
	})
}
