package mysql

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// within runs f and fails t if it has not returned after d: the calls
// below used to wait forever (database/sql.(*Conn).close waiting for open
// Rows), past every timeout.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v (hang)", what, d)
	}
}

// A statement run while an earlier Rows is still open fails at once with
// xa.ErrSessionBusy, sends nothing, and leaves the branch usable: once the
// Rows are closed the next statement runs and the branch commits.
func TestStatementWhileRowsOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	rm := openRM(t, db.DSN())
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	c := conn(b)
	rows, err := c.QueryContext(ctx, "SELECT k FROM kv ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal("no row")
	}
	within(t, 5*time.Second, "ExecContext with Rows open", func() {
		_, err = c.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE k = 1")
	})
	if !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("ExecContext with Rows open: %v, want ErrSessionBusy", err)
	}
	var v int
	within(t, 5*time.Second, "QueryRowContext with Rows open", func() {
		err = c.QueryRowContext(ctx, "SELECT 1").Scan(&v)
	})
	if !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("QueryRowContext with Rows open: %v, want ErrSessionBusy", err)
	}
	within(t, 5*time.Second, "PrepareContext with Rows open", func() {
		_, err = c.PrepareContext(ctx, "SELECT 1")
	})
	if !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("PrepareContext with Rows open: %v, want ErrSessionBusy", err)
	}
	// The rows are still readable, and once closed the session is free.
	var k int
	if !rows.Next() || rows.Scan(&k) != nil || k != 2 {
		t.Fatalf("second row: %d, %v", k, rows.Err())
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	if vote, err := b.Prepare(ctx); vote != xa.VotePrepared || err != nil {
		t.Fatalf("Prepare: %v, %v", vote, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := getV(t, raw, 1); v != 2 {
		t.Fatalf("after commit v = %d, want 2", v)
	}
}

// A Row that is never scanned does not keep the session: the next
// statement runs.
func TestUnscannedRowFreesSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	rm := openRM(t, db.DSN())
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	c := conn(b)
	_ = c.QueryRowContext(ctx, "SELECT k FROM kv ORDER BY k")
	within(t, 5*time.Second, "ExecContext after an unscanned Row", func() {
		_, err = c.ExecContext(ctx, "UPDATE kv SET v = 5 WHERE k = 2")
	})
	if err != nil {
		t.Fatal(err)
	}
	// Rows read to the end close themselves.
	rows, err := c.QueryContext(ctx, "SELECT k FROM kv")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if _, err := c.ExecContext(ctx, "UPDATE kv SET v = 6 WHERE k = 1"); err != nil {
		t.Fatalf("after Rows read to the end: %v", err)
	}
	if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := getV(t, raw, 2); v != 5 {
		t.Fatalf("v = %d, want 5", v)
	}
}

// Rows left open when the branch ends do not hang it: Prepare and one-phase
// commit refuse (the branch is rolled back, as on PostgreSQL: the
// application may still be reading), Rollback and Close close them, and a
// global transaction whose timeout expires with Rows open rolls back on
// time.
func TestBranchEndsWithRowsOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1), (2, 2)")
	rm := openRM(t, db.DSN())
	open := func(b xa.Branch) *sql.Rows {
		t.Helper()
		if _, err := conn(b).ExecContext(ctx, "UPDATE kv SET v = v + 10 WHERE k = 1"); err != nil {
			t.Fatal(err)
		}
		rows, err := conn(b).QueryContext(ctx, "SELECT k FROM kv")
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	for _, end := range []string{"prepare", "one-phase", "rollback", "close"} {
		b, err := rm.Start(ctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		rows := open(b)
		within(t, 10*time.Second, end+" with Rows open", func() {
			switch end {
			case "prepare":
				var vote xa.Vote
				vote, err = b.Prepare(ctx)
				if vote != xa.VoteAbort {
					t.Errorf("Prepare with Rows open voted %v", vote)
				}
			case "one-phase":
				err = b.(xa.OnePhaseCommitter).CommitOnePhase(ctx)
			case "rollback":
				err = b.Rollback(ctx)
			case "close":
				err = b.Close()
			}
		})
		switch end {
		case "prepare", "one-phase":
			if !errors.Is(err, xa.ErrRolledBack) || !errors.Is(err, xa.ErrSessionBusy) {
				t.Fatalf("%s with Rows open: %v, want ErrRolledBack and ErrSessionBusy", end, err)
			}
		default:
			if err != nil {
				t.Fatalf("%s with Rows open: %v", end, err)
			}
		}
		if rows.Next() {
			t.Fatalf("%s: the Rows still read after the branch ended", end)
		}
		if v, _ := getV(t, raw, 1); v != 1 {
			t.Fatalf("%s: v = %d, want 1 (rolled back)", end, v)
		}
	}
	// Through the manager: the global timeout rolls back the branch
	// whose Rows are open, and Commit answers.
	mgr := newTestManager(t, 2*time.Second)
	tx, err := mgr.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rm.Enlist(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, "UPDATE kv SET v = v + 10 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.QueryContext(ctx, "SELECT k FROM kv"); err != nil {
		t.Fatal(err)
	}
	within(t, 20*time.Second, "the global timeout with Rows open", func() {
		time.Sleep(3 * time.Second)
		_, err = tx.Commit(ctx)
	})
	if !errors.Is(err, xa.ErrAborted) {
		t.Fatalf("Commit after the timeout: %v, want ErrAborted", err)
	}
	if v, _ := getV(t, raw, 1); v != 1 {
		t.Fatalf("v = %d, want 1 (rolled back)", v)
	}
}

// newTestManager returns a manager on an in-memory decision log with the
// given global timeout.
func newTestManager(t *testing.T, timeout time.Duration) *xa.Manager {
	t.Helper()
	m, err := xa.NewManager(xa.Config{Node: "mysqltest", Log: memrm.NewLog("mysqltest"), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A statement still running on another goroutine when the transaction is
// committed does not hold the commit past the global timeout: with two
// branches, Prepare waits for the statement, the timeout interrupts it on
// the server (KILL QUERY), and the transaction aborts on time. With one
// branch, the one-phase commit decided before the timeout waits for the
// statement the same way and then commits, as database/sql's Tx.Commit
// waits for a statement in flight: no hang either way, and the data says
// what Commit said.
func TestStatementRunningDuringCommit(t *testing.T) {
	t.Parallel()
	for _, branches := range []int{2, 1} {
		ctx := context.Background()
		db, raw := setup(t)
		mustExec(t, raw, "INSERT INTO kv VALUES (1, 1)")
		rm := openRM(t, db.DSN())
		db2, _ := setup(t)
		rm2 := openRM(t, db2.DSN(), func(c *Config) { c.Name = "mysql-test-2" })
		mgr := newTestManager(t, 2*time.Second)
		tx, err := mgr.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := rm.Enlist(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(ctx, "UPDATE kv SET v = 2 WHERE k = 1"); err != nil {
			t.Fatal(err)
		}
		if branches == 2 {
			c2, err := rm2.Enlist(ctx, tx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c2.ExecContext(ctx, "INSERT INTO kv VALUES (1, 1)"); err != nil {
				t.Fatal(err)
			}
		}
		running := make(chan error, 1)
		go func() {
			_, err := c.ExecContext(context.Background(), "SELECT SLEEP(60)")
			running <- err
		}()
		time.Sleep(200 * time.Millisecond)
		began := time.Now()
		var res xa.Result
		within(t, 20*time.Second, "Commit while a statement runs", func() {
			res, err = tx.Commit(ctx)
		})
		if d := time.Since(began); d > 10*time.Second {
			t.Fatalf("%d branches: Commit took %v with a 2s timeout", branches, d)
		}
		select {
		case <-running:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d branches: the running statement was not interrupted", branches)
		}
		v, _ := getV(t, raw, 1)
		switch {
		case branches == 2 && !errors.Is(err, xa.ErrAborted):
			t.Fatalf("2 branches: Commit while a statement runs past the timeout: %v, want aborted", err)
		case err == nil && (!res.Committed || v != 2), errors.Is(err, xa.ErrAborted) && v != 1:
			t.Fatalf("%d branches: Commit said %+v, %v; the row holds %d", branches, res, err, v)
		}
	}
}
