// source: query.sql

package pgxdb

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

var (
	ErrBatchAlreadyClosed = errors.New("batch already closed")
)

const addBalances = `-- name: AddBalances :batchexec
UPDATE accounts SET balance = balance + $1 WHERE id = $2
`

type AddBalancesBatchResults struct {
	br     pgx.BatchResults
	tot    int
	closed bool
}

type AddBalancesParams struct {
	Balance int32
	ID      int32
}

func (q *Queries) AddBalances(ctx context.Context, arg []AddBalancesParams) *AddBalancesBatchResults {
	batch := &pgx.Batch{}
	for _, a := range arg {
		vals := []interface{}{
			a.Balance,
			a.ID,
		}
		batch.Queue(addBalances, vals...)
	}
	br := q.db.SendBatch(ctx, batch)
	return &AddBalancesBatchResults{br, len(arg), false}
}

func (b *AddBalancesBatchResults) Exec(f func(int, error)) {
	defer b.br.Close()
	for t := 0; t < b.tot; t++ {
		if b.closed {
			if f != nil {
				f(t, ErrBatchAlreadyClosed)
			}
			continue
		}
		_, err := b.br.Exec()
		if f != nil {
			f(t, err)
		}
	}
}

func (b *AddBalancesBatchResults) Close() error {
	b.closed = true
	return b.br.Close()
}
