// source: query.sql

package mydb

import (
	"context"
)

const addBalance = `-- name: AddBalance :execrows
UPDATE accounts SET balance = balance + ? WHERE id = ?
`

type AddBalanceParams struct {
	Balance int32
	ID      int32
}

func (q *Queries) AddBalance(ctx context.Context, arg AddBalanceParams) (int64, error) {
	result, err := q.exec(ctx, q.addBalanceStmt, addBalance, arg.Balance, arg.ID)
	if err != nil {
		return 0, err
	}
	return result.RowsAffected()
}

const getAccount = `-- name: GetAccount :one
SELECT id, balance FROM accounts WHERE id = ?
`

func (q *Queries) GetAccount(ctx context.Context, id int32) (Account, error) {
	row := q.queryRow(ctx, q.getAccountStmt, getAccount, id)
	var i Account
	err := row.Scan(&i.ID, &i.Balance)
	return i, err
}

const listAccounts = `-- name: ListAccounts :many
SELECT id, balance FROM accounts ORDER BY id
`

func (q *Queries) ListAccounts(ctx context.Context) ([]Account, error) {
	rows, err := q.query(ctx, q.listAccountsStmt, listAccounts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []Account
	for rows.Next() {
		var i Account
		if err := rows.Scan(&i.ID, &i.Balance); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}
