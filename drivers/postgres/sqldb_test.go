package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// Conn.DB: statements run inside the branch, with values decoded as
// database/sql expects; Begin and transaction control are refused; a
// statement while Rows are open fails at once; the *sql.DB is closed with
// the branch.
func TestConnDB(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	b, c := start(t, rm, ctx, newXID(t))
	sdb := c.DB()
	if c.DB() != sdb {
		t.Fatal("DB returned another *sql.DB the second time")
	}
	if _, err := sdb.ExecContext(ctx, "INSERT INTO kv VALUES ($1, $2)", 1, 10); err != nil {
		t.Fatal(err)
	}
	var (
		v   int
		at  time.Time
		txt string
	)
	if err := sdb.QueryRowContext(ctx, "SELECT v, now(), 'x'::text FROM kv WHERE k = $1", 1).Scan(&v, &at, &txt); err != nil || v != 10 || at.IsZero() || txt != "x" {
		t.Fatalf("read through DB: %d %v %q, %v", v, at, txt, err)
	}
	if _, err := sdb.BeginTx(ctx, nil); !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("BeginTx: %v, want ErrTransactionControl", err)
	}
	if _, err := sdb.ExecContext(ctx, "COMMIT"); !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("COMMIT through DB: %v, want ErrTransactionControl", err)
	}
	rows, err := sdb.QueryContext(ctx, "SELECT k FROM kv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.ExecContext(ctx, "UPDATE kv SET v = 11"); !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("DB statement with Rows open: %v, want ErrSessionBusy", err)
	}
	rows.Close()
	if _, err := sdb.ExecContext(ctx, "UPDATE kv SET v = v + $1 WHERE k = $2", 5, 1); err != nil {
		t.Fatal(err)
	}
	prepare(t, b, xa.VotePrepared)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 15)
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Until the DB is closed (it is, once the branch has ended), a
		// statement is refused with ErrBranchDone: never sent.
		_, err = sdb.ExecContext(ctx, "SELECT 1")
		if err != nil && !errors.Is(err, xa.ErrBranchDone) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err == nil || err.Error() != "sql: database is closed" {
		t.Fatalf("DB after the branch ended: %v, want it closed", err)
	}
}
