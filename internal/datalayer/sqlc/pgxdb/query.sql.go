// source: query.sql

package pgxdb

import (
	"context"
)

const addBalance = `-- name: AddBalance :execrows
UPDATE accounts SET balance = balance + $1 WHERE id = $2
`

type AddBalanceParams struct {
	Balance int32
	ID      int32
}

func (q *Queries) AddBalance(ctx context.Context, arg AddBalanceParams) (int64, error) {
	result, err := q.db.Exec(ctx, addBalance, arg.Balance, arg.ID)
	if err != nil {
		return 0, err
	}
	return result.RowsAffected(), nil
}

const getAccount = `-- name: GetAccount :one
SELECT id, balance FROM accounts WHERE id = $1
`

func (q *Queries) GetAccount(ctx context.Context, id int32) (Account, error) {
	row := q.db.QueryRow(ctx, getAccount, id)
	var i Account
	err := row.Scan(&i.ID, &i.Balance)
	return i, err
}

type InsertLedgerParams struct {
	ID     int32
	Amount int32
}
