package postgres

import (
	"context"
	"errors"

	"github.com/xadb/xa/xa"
)

// Commit commits the prepared branch xid (COMMIT PREPARED) on any pooled
// session; from is not needed by PostgreSQL, whose prepared transactions
// belong to no session.
//
// ErrUnknownXID (42704) is ambiguous: the branch was committed already (by
// an earlier attempt whose reply was lost, or by recovery), or it was never
// prepared or was rolled back. Only the decision log and a fresh Recover
// can tell. ErrRetryable: the branch is busy (another session is finishing
// it) or the command was never sent. ErrOutcomeUnknown: the reply was lost.
func (rm *RM) Commit(ctx context.Context, xid xa.XID, _ xa.Origin) error {
	return rm.finish(ctx, opCommit, xid)
}

// Rollback rolls back the prepared branch xid (ROLLBACK PREPARED) on any
// pooled session. A branch the server does not know (42704) is gone, which
// is success: nil.
func (rm *RM) Rollback(ctx context.Context, xid xa.XID, _ xa.Origin) error {
	return rm.finish(ctx, opRollback, xid)
}

// finish runs COMMIT PREPARED or ROLLBACK PREPARED outside any transaction
// block.
func (rm *RM) finish(ctx context.Context, op string, xid xa.XID) error {
	lit, err := gidLiteral(xid)
	if err != nil {
		return rm.kindErr(op, xid, xa.ErrInvalidXID, err)
	}
	return rm.finishLit(ctx, op, xid, lit)
}

// finishLit is finish with the gid's literal (gidLiteral(xid)) at hand.
func (rm *RM) finishLit(ctx context.Context, op string, xid xa.XID, lit string) error {
	sql := "COMMIT PREPARED " + lit
	if op == opRollback {
		sql = "ROLLBACK PREPARED " + lit
	}
	conn, err := rm.pool.Acquire(ctx)
	if err != nil {
		// Nothing was sent.
		return rm.kindErr(op, xid, xa.ErrRetryable, err)
	}
	pc := conn.Conn().PgConn()
	if pc.IsClosed() {
		conn.Release()
		return rm.kindErr(op, xid, xa.ErrRetryable, errors.New("pooled connection closed; nothing sent"))
	}
	err = pc.Exec(ctx, sql).Close()
	conn.Release() // the pool closes it if the reply was lost
	if err == nil {
		return nil
	}
	e := rm.xaErr(op, xid, err)
	if op == opRollback && errors.Is(e, xa.ErrUnknownXID) {
		return nil
	}
	if xa.OutcomeUnknown(e) {
		rm.log.Warn("phase 2 outcome unknown", "op", op, "xid", xid.String(), "err", err)
	}
	return e
}
