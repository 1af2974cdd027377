package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// The driver under the transaction manager: a transfer across two
// databases commits atomically through Enlist; a failing function rolls
// both back; the global timeout cancels a blocked statement on the server.
func TestWithManager(t *testing.T) {
	t.Parallel()
	db1, rm1 := setup(t)
	db2, rm2 := setup(t)
	rm2.name = "pg2"
	mustExec(t, db1, "INSERT INTO kv VALUES (1, 100)")
	mustExec(t, db2, "INSERT INTO kv VALUES (1, 0)")
	m, err := xa.NewManager(xa.Config{Node: "pgtest", Log: memrm.NewLog("pgtest"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	transfer := func(amount int, fail error) error {
		_, err := m.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
			c1, err := rm1.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			c2, err := rm2.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			if again, err := rm1.Enlist(ctx, tx); err != nil || again != c1 {
				t.Errorf("second Enlist = %p, %v; want the same session %p", again, err, c1)
			}
			if _, err := c1.Exec(ctx, "UPDATE kv SET v = v - $1 WHERE k = 1", amount); err != nil {
				return err
			}
			if _, err := c2.Exec(ctx, "UPDATE kv SET v = v + $1 WHERE k = 1", amount); err != nil {
				return err
			}
			return fail
		})
		return err
	}
	if err := transfer(10, nil); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db1, 1, 90)
	wantValue(t, db2, 1, 10)

	boom := errors.New("boom")
	if err := transfer(10, boom); !errors.Is(err, boom) {
		t.Fatalf("failing transfer = %v", err)
	}
	wantValue(t, db1, 1, 90)
	wantValue(t, db2, 1, 10)

	// A row lock held outside: the global timeout (2s) cancels the
	// statement on the server and the transaction aborts.
	holder := raw(t, db2)
	if _, err := holder.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "UPDATE kv SET v = v WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = transfer(10, nil)
	var pe *pgconn.PgError
	if !errors.Is(err, xa.ErrAborted) && !(errors.As(err, &pe) && pe.Code == "57014") {
		t.Fatalf("blocked transfer = %v, want it aborted or cancelled", err)
	}
	if d := time.Since(began); d > 4*time.Second {
		t.Fatalf("blocked transfer took %v with a 2s timeout", d)
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db1, 1, 90)
	wantValue(t, db2, 1, 10)
	if n := idleInTransaction(t, db1) + idleInTransaction(t, db2); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
	for _, rm := range []*RM{rm1, rm2} {
		if ps, err := rm.Recover(ctx); err != nil || len(ps) != 0 {
			t.Fatalf("left prepared: %+v, %v", ps, err)
		}
	}
}
