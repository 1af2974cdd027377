package postgres

import (
	"errors"
	"testing"
	"time"

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
