package datalayer_test

import (
	"context"
	"errors"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/datalayer/entdb"
	"github.com/xadb/xa/xa"
)

// ent's generated client on both sessions' *sql.DB: a transfer commits
// atomically, a refused one rolls back atomically; the client's own Tx is
// refused with ErrTransactionControl.
func TestEnt(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		// ent's client straight on the *sql.DB: its Tx is refused, and so
		// is every update of one row, which ent wraps in a transaction.
		plain := entdb.NewClient(entdb.Driver(entsql.OpenDB(dialect.Postgres, pg.DB())))
		if _, err := plain.Tx(ctx); !errors.Is(err, xa.ErrTransactionControl) {
			t.Errorf("ent Tx inside a branch: %v, want ErrTransactionControl", err)
		}
		if err := plain.Account.UpdateOneID(1).AddBalance(1).Exec(ctx); !errors.Is(err, xa.ErrTransactionControl) {
			t.Errorf("ent UpdateOne inside a branch: %v, want ErrTransactionControl", err)
		}
		// On a driver whose transactions are the branch's, it runs.
		cmy := entdb.NewClient(entdb.Driver(branchDriver{entsql.OpenDB(dialect.MySQL, my.DB())}))
		cpg := entdb.NewClient(entdb.Driver(branchDriver{entsql.OpenDB(dialect.Postgres, pg.DB())}))
		a, err := cpg.Account.Get(ctx, 1)
		if err != nil {
			return err
		}
		if err := a.Update().AddBalance(amount).Exec(ctx); err != nil {
			return err
		}
		return cmy.Account.UpdateOneID(1).AddBalance(-amount).Exec(ctx)
	})
}

// branchDriver is an ent driver on a branch's *sql.DB whose transactions
// are the branch: what ent runs "in a transaction" runs in the branch,
// committed by the global commit. Commit does nothing; Rollback cannot
// undo part of a branch and says so (ent then reports the error that made
// it roll back, with this one).
type branchDriver struct{ *entsql.Driver }

func (d branchDriver) Tx(context.Context) (dialect.Tx, error) { return branchTx{d.Driver}, nil }

func (d branchDriver) BeginTx(context.Context, *entsql.TxOptions) (dialect.Tx, error) {
	return branchTx{d.Driver}, nil
}

type branchTx struct{ dialect.Driver }

func (branchTx) Commit() error { return nil }

func (branchTx) Rollback() error {
	return errors.New("the work is part of a global transaction: return an error from the transaction's function to roll it all back")
}
