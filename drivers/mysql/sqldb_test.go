package mysql

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// Conn.DB: statements run inside the branch, Begin is refused, a statement
// while Rows are open fails at once, and the *sql.DB is closed with the
// branch.
func TestConnDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	sdb := conn(b).DB()
	if conn(b).DB() != sdb {
		t.Fatal("DB returned another *sql.DB the second time")
	}
	if _, err := sdb.ExecContext(ctx, "INSERT INTO kv VALUES (?, ?)", 1, 10); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := sdb.QueryRowContext(ctx, "SELECT v FROM kv WHERE k = ?", 1).Scan(&v); err != nil || v != 10 {
		t.Fatalf("read own write through DB: %d, %v", v, err)
	}
	if _, ok := getV(t, raw, 1); ok {
		t.Fatal("the DB's write is visible outside the branch")
	}
	if _, err := sdb.BeginTx(ctx, nil); !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("BeginTx: %v, want ErrTransactionControl", err)
	}
	if _, err := sdb.ExecContext(ctx, "XA END 'x'"); !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("XA statement through DB: %v, want ErrTransactionControl", err)
	}
	rows, err := sdb.QueryContext(ctx, "SELECT k FROM kv")
	if err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "DB statement with Rows open", func() {
		_, err = sdb.ExecContext(ctx, "UPDATE kv SET v = 11")
	})
	if !errors.Is(err, xa.ErrSessionBusy) {
		t.Fatalf("DB statement with Rows open: %v, want ErrSessionBusy", err)
	}
	rows.Close()
	st, err := sdb.PrepareContext(ctx, "UPDATE kv SET v = v + ? WHERE k = ?")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecContext(ctx, 5, 1); err != nil {
		t.Fatal(err)
	}
	if vote, err := b.Prepare(ctx); vote != xa.VotePrepared || err != nil {
		t.Fatalf("Prepare: %v, %v", vote, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := getV(t, raw, 1); v != 15 {
		t.Fatalf("after commit: %d, want 15", v)
	}
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
