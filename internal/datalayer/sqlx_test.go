package datalayer_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
)

// sqlx on both sessions (Get, Select, NamedExec, Rebind): a transfer
// commits atomically, a refused one rolls back atomically.
func TestSQLX(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		xmy := sqlx.NewDb(my.DB(), "mysql")
		xpg := sqlx.NewDb(pg.DB(), "pgx")
		var all []Account
		if err := xpg.SelectContext(ctx, &all, "SELECT id, balance FROM accounts ORDER BY id"); err != nil {
			return err
		}
		arg := map[string]any{"id": 1, "amount": amount}
		if _, err := xpg.NamedExecContext(ctx, "UPDATE accounts SET balance = balance + :amount WHERE id = :id", arg); err != nil {
			return err
		}
		var before int
		if err := xmy.GetContext(ctx, &before, xmy.Rebind("SELECT balance FROM accounts WHERE id = ?"), 1); err != nil {
			return err
		}
		res, err := xmy.NamedExecContext(ctx, "UPDATE accounts SET balance = balance - :amount WHERE id = :id", arg)
		if err != nil {
			return err
		}
		return affected(res.RowsAffected())
	})
}
