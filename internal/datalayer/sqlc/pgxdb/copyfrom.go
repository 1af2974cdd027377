// source: query.sql

package pgxdb

import (
	"context"
)

// iteratorForInsertLedger implements pgx.CopyFromSource.
type iteratorForInsertLedger struct {
	rows                 []InsertLedgerParams
	skippedFirstNextCall bool
}

func (r *iteratorForInsertLedger) Next() bool {
	if len(r.rows) == 0 {
		return false
	}
	if !r.skippedFirstNextCall {
		r.skippedFirstNextCall = true
		return true
	}
	r.rows = r.rows[1:]
	return len(r.rows) > 0
}

func (r iteratorForInsertLedger) Values() ([]interface{}, error) {
	return []interface{}{
		r.rows[0].ID,
		r.rows[0].Amount,
	}, nil
}

func (r iteratorForInsertLedger) Err() error {
	return nil
}

func (q *Queries) InsertLedger(ctx context.Context, arg []InsertLedgerParams) (int64, error) {
	return q.db.CopyFrom(ctx, []string{"ledger"}, []string{"id", "amount"}, &iteratorForInsertLedger{rows: arg})
}
