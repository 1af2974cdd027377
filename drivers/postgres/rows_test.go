package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// A statement started while a Rows is open fails at once with
// xa.ErrSessionBusy (nothing sent); a branch asked to prepare with Rows
// open is rolled back with that reason, promptly.
func TestSessionBusyTyped(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 10), (2, 20)")
	b, c := start(t, rm, ctx, newXID(t))
	if _, err := c.Exec(ctx, "UPDATE kv SET v = 11 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, "SELECT k FROM kv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("statement while Rows are open: %v, want ErrSessionBusy", err)
	}
	began := time.Now()
	vote, err := b.Prepare(ctx)
	if vote != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) || !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("Prepare with Rows open: %v, %v; want VoteAbort, ErrRolledBack and ErrSessionBusy", vote, err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("Prepare with Rows open took %v", d)
	}
	rows.Close()
	wantValue(t, db, 1, 10)
}

// A statement still running on another goroutine when the transaction is
// committed does not hold the commit past the global timeout.
func TestStatementRunningDuringCommit(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 1)")
	m, err := xa.NewManager(xa.Config{Node: "pgtest", Log: memrm.NewLog("pgtest"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	tx, err := m.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rm.Enlist(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE kv SET v = 2 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	running := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), "SELECT pg_sleep(60)")
		running <- err
	}()
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err = tx.Commit(ctx)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Commit while a statement runs: hang")
	}
	if !errors.Is(err, xa.ErrAborted) {
		t.Fatalf("Commit while a statement runs: %v, want aborted", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("Commit took %v with a 2s timeout", d)
	}
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the running statement was not interrupted")
	}
	wantValue(t, db, 1, 1)
}
