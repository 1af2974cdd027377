package datalayer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// bun on both sessions: a transfer commits atomically, a refused one rolls
// back atomically; bun's RunInTx is refused with ErrTransactionControl.
func TestBun(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		bmy := bun.NewDB(my.DB(), mysqldialect.New())
		bpg := bun.NewDB(pg.DB(), pgdialect.New())
		err := bpg.RunInTx(ctx, nil, func(context.Context, bun.Tx) error { return nil })
		if !errors.Is(err, xa.ErrTransactionControl) {
			t.Errorf("bun RunInTx inside a branch: %v, want ErrTransactionControl", err)
		}
		a := &Account{ID: 1}
		if err := bpg.NewSelect().Model(a).WherePK().Scan(ctx); err != nil {
			return err
		}
		a.Balance += amount
		if _, err := bpg.NewUpdate().Model(a).WherePK().Exec(ctx); err != nil {
			return err
		}
		res, err := bmy.NewUpdate().Model((*Account)(nil)).
			Set("balance = balance - ?", amount).Where("id = ?", 1).Exec(ctx)
		if err != nil {
			return err
		}
		return affected(res.RowsAffected())
	})
}
