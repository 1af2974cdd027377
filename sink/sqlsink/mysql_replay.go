package sqlsink

import (
	"context"
	"fmt"
)

var _ deadLetterClaimer = (*myWriter)(nil)

// claimDeadLetter deletes a dead-letter row on the branch's session: the
// delete's affected-row count is the claim (a row another transaction
// holds is waited for; InnoDB's current read then finds it gone if that
// transaction committed).
func (w *myWriter) claimDeadLetter(ctx context.Context, sink string, id DeadLetterID) (bool, error) {
	res, err := w.c.ExecContext(ctx, "DELETE FROM "+DeadLetterTable+" WHERE sink = ? AND incarnation = ? AND checkpoint = ? AND seq = ?",
		sink, int64(id.Incarnation), int64(id.Checkpoint), id.Seq)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n > 1 {
		return false, fmt.Errorf("sink: %d dead-letter rows under one key %s", n, id)
	}
	return n == 1, nil
}
