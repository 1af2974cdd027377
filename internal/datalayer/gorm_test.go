package datalayer_test

import (
	"context"
	"errors"
	"testing"

	gormmysql "gorm.io/driver/mysql"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// Account is the accounts table as GORM and bun map it.
type Account struct {
	ID      int `gorm:"primaryKey" bun:"id,pk"`
	Balance int `bun:"balance"`
}

// gormConfig is what GORM needs on a branch: no transaction of its own
// around each write. (gorm.Open keeps and changes the *gorm.Config it is
// given: one per Open.)
func gormConfig() *gorm.Config {
	return &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard}
}

// gormOn opens GORM on the sessions' *sql.DB (both dialects).
func gormOn(my *mysql.Conn, pg *postgres.Conn) (gmy, gpg *gorm.DB, err error) {
	gmy, err = gorm.Open(gormmysql.New(gormmysql.Config{Conn: my.DB(), SkipInitializeWithVersion: true}), gormConfig())
	if err != nil {
		return nil, nil, err
	}
	gpg, err = gorm.Open(gormpg.New(gormpg.Config{Conn: pg.DB()}), gormConfig())
	return gmy, gpg, err
}

// GORM on both sessions: a transfer commits atomically, a refused one
// rolls back atomically.
func TestGORM(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		gmy, gpg, err := gormOn(my, pg)
		if err != nil {
			return err
		}
		var a Account
		if err := gpg.WithContext(ctx).First(&a, 1).Error; err != nil {
			return err
		}
		a.Balance += amount
		if err := gpg.WithContext(ctx).Save(&a).Error; err != nil {
			return err
		}
		res := gmy.WithContext(ctx).Model(&Account{ID: 1}).Update("balance", gorm.Expr("balance - ?", amount))
		return affected(res.RowsAffected, res.Error)
	})
}

// GORM's own transactions inside a branch fail clearly, with
// xa.ErrTransactionControl, and leave the branch alive: its work still
// commits with the global transaction. So does a write with GORM's default
// transaction (SkipDefaultTransaction unset).
func TestGORMTransactionRefused(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		gmy, gpg, err := gormOn(my, pg)
		if err != nil {
			return err
		}
		for name, g := range map[string]*gorm.DB{"MariaDB": gmy, "PostgreSQL": gpg} {
			ran := false
			err := g.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				ran = true
				return tx.Model(&Account{ID: 1}).Update("balance", 0).Error
			})
			if !errors.Is(err, xa.ErrTransactionControl) || ran {
				t.Errorf("%s: GORM Transaction inside a branch: %v (ran %v), want ErrTransactionControl before the function runs", name, err, ran)
			}
			if err := g.WithContext(ctx).Begin().Error; !errors.Is(err, xa.ErrTransactionControl) {
				t.Errorf("%s: GORM Begin inside a branch: %v, want ErrTransactionControl", name, err)
			}
		}
		// Without SkipDefaultTransaction, GORM's writes open a
		// transaction: refused, and nothing is written.
		plain, err := gorm.Open(gormpg.New(gormpg.Config{Conn: pg.DB()}), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return err
		}
		if err := plain.WithContext(ctx).Create(&Account{ID: 7, Balance: 7}).Error; !errors.Is(err, xa.ErrTransactionControl) {
			t.Errorf("GORM write with its default transaction: %v, want ErrTransactionControl", err)
		}
		// The branches are alive: the transfer goes on and commits.
		if err := gpg.WithContext(ctx).Model(&Account{ID: 1}).Update("balance", gorm.Expr("balance + ?", amount)).Error; err != nil {
			return err
		}
		res := gmy.WithContext(ctx).Model(&Account{ID: 1}).Update("balance", gorm.Expr("balance - ?", amount))
		return affected(res.RowsAffected, res.Error)
	})
}
