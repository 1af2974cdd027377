package datalayer_test

import (
	"context"
	"testing"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/datalayer/sqlc/mydb"
	"github.com/xadb/xa/internal/datalayer/sqlc/pgdb"
	"github.com/xadb/xa/internal/datalayer/sqlc/pgxdb"
)

// sqlc's database/sql code on both sessions' *sql.DB, with prepared
// queries on MariaDB and plain ones on PostgreSQL: a transfer commits
// atomically, a refused one rolls back atomically.
func TestSQLCDatabaseSQL(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		qmy, err := mydb.Prepare(ctx, my.DB())
		if err != nil {
			return err
		}
		defer qmy.Close()
		qpg := pgdb.New(pg.DB())
		if _, err := qpg.ListAccounts(ctx); err != nil {
			return err
		}
		if err := affected(qpg.AddBalance(ctx, pgdb.AddBalanceParams{ID: 1, Balance: int32(amount)})); err != nil {
			return err
		}
		if _, err := qmy.GetAccount(ctx, 1); err != nil {
			return err
		}
		return affected(qmy.AddBalance(ctx, mydb.AddBalanceParams{ID: 1, Balance: int32(-amount)}))
	})
}

// sqlc's pgx/v5 code on the PostgreSQL session itself (*postgres.Conn is
// its DBTX), with :copyfrom and :batchexec, beside the database/sql code
// on MariaDB: a transfer commits atomically, a refused one rolls back
// atomically.
func TestSQLCPgx(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	var _ pgxdb.DBTX = (*postgres.Conn)(nil)
	next := int32(0)
	bk.run(func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error {
		qpg := pgxdb.New(pg)
		next++
		if _, err := qpg.InsertLedger(ctx, []pgxdb.InsertLedgerParams{{ID: next, Amount: int32(amount)}}); err != nil {
			return err
		}
		var berr error
		qpg.AddBalances(ctx, []pgxdb.AddBalancesParams{{ID: 1, Balance: int32(amount)}}).Exec(func(_ int, err error) {
			if err != nil && berr == nil {
				berr = err
			}
		})
		if berr != nil {
			return berr
		}
		if _, err := qpg.GetAccount(ctx, 1); err != nil {
			return err
		}
		return affected(mydb.New(my.DB()).AddBalance(ctx, mydb.AddBalanceParams{ID: 1, Balance: int32(-amount)}))
	})
	var n int
	if err := bk.pgRaw.QueryRow(context.Background(), "SELECT count(*) FROM ledger").Scan(&n); err != nil || n != 1 {
		t.Fatalf("ledger rows: %d, %v; want 1 (the refused transfer's row rolled back)", n, err)
	}
}
