package sqlsink

import (
	"context"
	"fmt"
)

var _ deadLetterClaimer = (*pgWriter)(nil)

// claimDeadLetter deletes a dead-letter row on the branch's session: the
// delete's affected-row count is the claim (under READ COMMITTED a row
// another transaction holds is waited for, then found gone if that
// transaction committed). It writes: a later refused write must not roll
// back to a savepoint set before it (pgWriter.guard).
func (w *pgWriter) claimDeadLetter(ctx context.Context, sink string, id DeadLetterID) (bool, error) {
	w.armed = false
	tag, err := w.c.Exec(ctx, "DELETE FROM "+DeadLetterTable+" WHERE sink = $1 AND incarnation = $2 AND checkpoint = $3 AND seq = $4",
		sink, int64(id.Incarnation), int64(id.Checkpoint), id.Seq)
	if err != nil {
		return false, err
	}
	if n := tag.RowsAffected(); n > 1 {
		return false, fmt.Errorf("sink: %d dead-letter rows under one key %s", n, id)
	} else {
		return n == 1, nil
	}
}
