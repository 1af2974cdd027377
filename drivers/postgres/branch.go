package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/xadb/xa/xa"
)

// state is a branch's place in its life.
type state int

const (
	stActive   state = 1 + iota // statements allowed
	stEnding                    // prepare, rollback or one-phase commit in progress
	stPrepared                  // PREPARE TRANSACTION succeeded; the session is back in the pool
	stDone                      // finished: read-only, aborted, committed, rolled back or closed
)

// cleanupTimeout bounds the ROLLBACK sent to tidy a session after a
// failed prepare or commit whose own context has ended.
const cleanupTimeout = 5 * time.Second

// errBranchEnded is the cause of a branch's context once it has ended.
var errBranchEnded = errors.New("postgres: the branch has ended")

// branch is one transaction branch: a pooled connection pinned from the
// branch's first statement until PREPARE TRANSACTION (or the end of the
// branch).
type branch struct {
	rm   *RM
	xid  xa.XID
	lit  string // the gid as an SQL literal
	sess *Conn

	// life ends when Start's context ends or the branch ends; every
	// statement's context ends with it.
	life    context.Context
	endLife context.CancelCauseFunc
	start   context.Context // Start's context, life's parent; nil if == would panic on it (see enter)

	mu        sync.Mutex
	state     state
	committed bool          // stDone by commit
	votedRO   bool          // stDone by a read-only vote: nothing to commit or roll back
	conn      *pgxpool.Conn // taken at the first statement; nil once released
	running   chan struct{} // non-nil while a statement (or its Rows, BatchResults) is outstanding
	orphaned  bool          // ended while a statement was outstanding: it releases conn
	sent      bool          // a statement has been sent
	begun     bool          // BEGIN has run: a transaction is open on the session
	wrote     bool          // a statement certainly wrote
	failed    error         // the error that aborted the open transaction (TxStatus E)
	broken    *xa.Error     // the session can no longer carry the branch; it votes abort
	db        *sql.DB       // Conn.DB, closed when life ends
}

var (
	_ xa.Branch            = (*branch)(nil)
	_ xa.OnePhaseCommitter = (*branch)(nil)
	_ xa.Idler             = (*branch)(nil)
	_ xa.LastResource      = (*branch)(nil)
)

func newBranch(ctx context.Context, rm *RM, xid xa.XID) *branch {
	b := &branch{rm: rm, xid: xid, lit: quoteLiteral(xid.String()), state: stActive}
	b.life, b.endLife = context.WithCancelCause(ctx)
	if comparableCtx(ctx) {
		b.start = ctx // else every statement gets a context of its own
	}
	b.sess = &Conn{b: b}
	rm.track(b)
	return b
}

// Session returns the branch's *Conn.
func (b *branch) Session() any { return b.sess }

// Idle reports whether no statement has been sent on the branch yet.
func (b *branch) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.sent
}

func (b *branch) err(op string, kind, err error) error { return b.rm.kindErr(op, b.xid, kind, err) }

// begin moves an active branch to stEnding for op. A statement still
// outstanding on the session is cancelled and the branch rolled back:
// ok is false and err says so.
func (b *branch) begin(ctx context.Context, op string) (ok bool, err error) {
	b.mu.Lock()
	switch b.state {
	case stActive:
	case stPrepared:
		b.mu.Unlock()
		return false, b.err(op, xa.ErrInvalidState, errors.New("the branch is prepared"))
	case stEnding:
		b.mu.Unlock()
		return false, b.err(op, xa.ErrInvalidState, errors.New("the branch is being ended by another call"))
	default:
		b.mu.Unlock()
		return false, b.err(op, xa.ErrBranchDone, errors.New("the branch has ended"))
	}
	running := b.running != nil
	b.state = stEnding
	b.mu.Unlock()
	b.endLife(errBranchEnded)
	if running {
		b.rollbackActive(ctx)
		return false, b.err(op, xa.ErrRolledBack, fmt.Errorf("%w: a statement was still running on the session (or its Rows or BatchResults were not closed); the branch was rolled back", xa.ErrSessionBusy))
	}
	return true, nil
}

// Prepare ends the branch's work and votes:
//
//   - VoteReadOnly without I/O if no transaction was ever opened;
//   - for a branch not known to have written, one round trip asks whether
//     the transaction was assigned an xid (txid_current_if_assigned); if
//     not, it is committed (a second round trip, which also runs the
//     commit-time serializability checks) and the vote is VoteReadOnly;
//   - otherwise PREPARE TRANSACTION, one round trip: VotePrepared, and the
//     session goes back to the pool (the prepared transaction belongs to
//     no session).
//
// VoteAbort comes with an *xa.Error: ErrRolledBack when the transaction had
// failed (PREPARE TRANSACTION then answers ROLLBACK without error), when
// PREPARE failed (deferred constraints 23xxx, serialization 40001, 0A000
// for temporary tables, WITH HOLD cursors, LISTEN/NOTIFY, exported
// snapshots) or when the session was lost before PREPARE was sent;
// ErrDuplicateXID, ErrMisconfigured (prepared transactions disabled, no
// free slot) with the branch rolled back; ErrOutcomeUnknown when the reply
// to PREPARE was lost: the branch may be prepared, and the transaction
// manager rolls it back by gid.
func (b *branch) Prepare(ctx context.Context) (xa.Vote, error) {
	if ok, err := b.begin(ctx, opPrepare); !ok {
		if xa.OutcomeUnknown(err) || errors.Is(err, xa.ErrRolledBack) {
			return xa.VoteAbort, err
		}
		return 0, err
	}
	switch {
	case b.broken != nil:
		b.release(true)
		b.setDone(false)
		return xa.VoteAbort, b.err(opPrepare, b.broken.Kind, b.broken.Err)
	case b.conn == nil || (!b.begun && b.conn.Conn().PgConn().TxStatus() == 'I'):
		b.release(false)
		b.setReadOnly()
		return xa.VoteReadOnly, nil
	}
	pc := b.conn.Conn().PgConn()
	if !b.wrote && pc.TxStatus() == 'T' {
		readOnly, err := b.readOnly(ctx, pc)
		if err != nil {
			return b.prepareFailed(opPrepare, err)
		}
		if readOnly {
			res, err := pc.Exec(ctx, "COMMIT").ReadAll()
			if err != nil {
				return b.prepareFailed(opPrepare, err)
			}
			if tag := lastTag(res); tag != "COMMIT" {
				b.release(false)
				b.setDone(false)
				return xa.VoteAbort, b.err(opPrepare, xa.ErrRolledBack, b.rolledBackReason("COMMIT of the read-only branch", tag))
			}
			b.release(false)
			b.setReadOnly()
			return xa.VoteReadOnly, nil
		}
	}
	res, err := pc.Exec(ctx, "PREPARE TRANSACTION "+b.lit).ReadAll()
	if err != nil {
		return b.prepareFailed(opPrepare, err)
	}
	switch tag := lastTag(res); tag {
	case "PREPARE TRANSACTION":
		b.release(false)
		b.mu.Lock()
		b.state = stPrepared
		b.mu.Unlock()
		return xa.VotePrepared, nil
	case "ROLLBACK":
		// Fact 13: inside a failed transaction PREPARE TRANSACTION rolls
		// back and says so only in its command tag.
		b.release(false)
		b.setDone(false)
		return xa.VoteAbort, b.err(opPrepare, xa.ErrRolledBack, b.rolledBackReason("PREPARE TRANSACTION", tag))
	default:
		b.release(true)
		b.setDone(false)
		return xa.VoteAbort, b.err(opPrepare, xa.ErrOutcomeUnknown, fmt.Errorf("PREPARE TRANSACTION answered %q", tag))
	}
}

// readOnly asks the server whether the open transaction was assigned an
// xid; without one it changed nothing and has nothing to prepare.
func (b *branch) readOnly(ctx context.Context, pc *pgconn.PgConn) (bool, error) {
	res := pc.ExecParams(ctx, "SELECT txid_current_if_assigned() IS NULL", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return false, res.Err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return false, errors.New("postgres: unexpected answer to txid_current_if_assigned()")
	}
	return string(res.Rows[0][0]) == "t", nil
}

// rolledBackReason explains a ROLLBACK tag where cmd expected its own.
func (b *branch) rolledBackReason(cmd, tag string) error {
	b.mu.Lock()
	failed := b.failed
	b.mu.Unlock()
	if failed != nil {
		return fmt.Errorf("%s answered %s: the transaction had failed earlier: %w", cmd, tag, failed)
	}
	return fmt.Errorf("%s answered %s: the transaction had failed earlier", cmd, tag)
}

// prepareFailed handles an error of PREPARE TRANSACTION, of the read-only
// check or commit, or of a one-phase COMMIT: the session is tidied (rolled
// back if a transaction is still open, closed if its state is unknown) and
// released, and the branch ends.
func (b *branch) prepareFailed(op string, err error) (xa.Vote, error) {
	xerr := b.rm.xaErr(op, b.xid, err)
	b.rollbackSession()
	b.setDone(false)
	if xa.OutcomeUnknown(xerr) {
		b.rm.log.Warn("outcome unknown", "op", op, "xid", b.xid.String(), "err", err)
	}
	return xa.VoteAbort, xerr
}

// CommitOnePhase commits an active branch with COMMIT, when it is the only
// branch that did work. A COMMIT answered with the tag ROLLBACK (failed
// transaction) or failing (deferred constraint, serialization failure) is
// ErrRolledBack; a lost reply is ErrOutcomeUnknown. The session is released
// whatever happens.
func (b *branch) CommitOnePhase(ctx context.Context) error {
	if ok, err := b.begin(ctx, opCommit1PC); !ok {
		return err
	}
	switch {
	case b.broken != nil:
		b.release(true)
		b.setDone(false)
		return b.err(opCommit1PC, b.broken.Kind, b.broken.Err)
	case b.conn == nil || (!b.begun && b.conn.Conn().PgConn().TxStatus() == 'I'):
		b.release(false)
		b.setDone(true)
		return nil
	}
	pc := b.conn.Conn().PgConn()
	res, err := pc.Exec(ctx, "COMMIT").ReadAll()
	if err != nil {
		_, xerr := b.prepareFailed(opCommit1PC, err)
		return xerr
	}
	if tag := lastTag(res); tag != "COMMIT" {
		b.release(false)
		b.setDone(false)
		return b.err(opCommit1PC, xa.ErrRolledBack, b.rolledBackReason("COMMIT", tag))
	}
	b.release(false)
	b.setDone(true)
	return nil
}

// CanCommitLast implements xa.LastResource: the participant has a
// decision table.
func (b *branch) CanCommitLast() bool { return b.rm.decisions != "" }

// CommitLast implements xa.LastResource: it commits the branch's open
// transaction in one phase together with a commit row of the decision
// table holding rec, in one round trip ("INSERT ...; COMMIT"). The row's
// key (rec.ID) is the fence against presumed abort (see RM.ClaimAbort):
//
//   - nil: the work and the decision are durable;
//   - ErrOutcomeUnknown: the reply was lost, or the server ended the
//     session during the COMMIT (FATAL): both or neither are durable, the
//     stored decision (RM.Decision) tells, and an abort marker claimed
//     after it (RM.ClaimAbort) settles it for good;
//   - ErrAbortRecorded: the decision row was refused because an abort
//     marker holds its key (recovery presumed abort first; an insert that
//     met a marker still being written waited for it): nothing committed;
//   - ErrRolledBack (or another kind, never ErrOutcomeUnknown), for any
//     other server error (a failed transaction, a deferred constraint or
//     trigger at COMMIT, a serialization failure, a cancelled statement)
//     or a command certainly never sent: nothing committed.
//
// The session is released whatever happens: rolled back and pooled after
// a server error, closed after a lost reply.
func (b *branch) CommitLast(ctx context.Context, rec xa.CommitRecord) error {
	if b.rm.decisions == "" {
		return b.err(opCommitLast, xa.ErrInvalidState, errors.New("no decision table is configured (Config.DecisionTable)"))
	}
	payload, merr := rec.MarshalBinary()
	if ok, err := b.begin(ctx, opCommitLast); !ok {
		return err
	}
	switch {
	case b.broken != nil:
		b.release(true)
		b.setDone(false)
		return b.err(opCommitLast, b.broken.Kind, b.broken.Err)
	case merr != nil:
		b.rollbackSession()
		b.setDone(false)
		return b.err(opCommitLast, xa.ErrRolledBack, fmt.Errorf("the decision does not encode: %w", merr))
	case b.conn == nil:
		b.release(false)
		b.setDone(false)
		return b.err(opCommitLast, xa.ErrRolledBack, errors.New("the branch has no session: it ran no statement"))
	}
	pc := b.conn.Conn().PgConn()
	// The COMMIT is the decision of the whole transaction: durable
	// whatever synchronous_commit the session was left with (a SET LOCAL
	// in the branch, the role's or the database's setting).
	q := fmt.Sprintf("INSERT INTO %s (gtrid, node, record) VALUES (%s, %s, decode('%x', 'hex')); SELECT %s; COMMIT",
		b.rm.decisions, quoteLiteral(rec.ID.String()), quoteLiteral(rec.ID.Node), payload, durableCommit)
	if !b.begun && pc.TxStatus() == 'I' {
		q = "BEGIN; " + q
	}
	res, err := pc.Exec(ctx, q).ReadAll()
	if err != nil {
		if fenced(res, err) {
			b.rollbackSession()
			b.setDone(false)
			return b.err(opCommitLast, xa.ErrAbortRecorded, fmt.Errorf(
				"the decision row was refused: an abort marker for %s is in %s (recovery presumed abort); nothing committed: %w",
				rec.ID, b.rm.decisions, err))
		}
		_, xerr := b.prepareFailed(opCommitLast, err)
		return xerr
	}
	if tag := lastTag(res); tag != "COMMIT" {
		b.release(false)
		b.setDone(false)
		return b.err(opCommitLast, xa.ErrRolledBack, b.rolledBackReason("COMMIT", tag))
	}
	b.release(false)
	b.setDone(true)
	return nil
}

// fenced reports whether CommitLast's "[BEGIN;] INSERT ...; COMMIT" failed
// because its decision INSERT met a row with the same key (an abort
// marker): a unique violation (23505) before the INSERT completed. The
// same code from the COMMIT (a deferred unique constraint of the branch's
// own tables) comes after the INSERT's result and is a plain rollback.
func fenced(res []*pgconn.Result, err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" || fatal(pe) {
		return false
	}
	for _, r := range res {
		if r.CommandTag.Insert() {
			return false
		}
	}
	return true
}

// Commit commits the prepared branch with COMMIT PREPARED on any pooled
// session (see RM.Commit for the errors). Committing a branch already
// committed through this Branch, or one that voted read-only, returns nil.
func (b *branch) Commit(ctx context.Context) error {
	b.mu.Lock()
	st, committed, votedRO := b.state, b.committed, b.votedRO
	b.mu.Unlock()
	switch {
	case st == stDone && (committed || votedRO):
		return nil
	case st == stDone:
		return b.err(opCommit, xa.ErrRolledBack, errors.New("the branch was rolled back"))
	case st != stPrepared:
		return b.err(opCommit, xa.ErrInvalidState, errors.New("the branch is not prepared"))
	}
	if err := b.rm.finishLit(ctx, opCommit, b.xid, b.lit); err != nil {
		return err
	}
	b.setDone(true)
	return nil
}

// Rollback rolls the branch back in any state: an active branch with
// ROLLBACK on its session (a statement still running is first cancelled on
// the server; if it does not end in time the session is closed, which
// rolls the transaction back), a prepared one with ROLLBACK PREPARED (a
// gid the server does not know is success). Rolling back a finished branch
// (rolled back, aborted, read-only) is a no-op, unless it committed:
// ErrInvalidState.
func (b *branch) Rollback(ctx context.Context) error {
	b.mu.Lock()
	st, committed := b.state, b.committed
	if st == stActive {
		b.state = stEnding
	}
	b.mu.Unlock()
	switch {
	case st == stActive:
		b.endLife(errBranchEnded)
		b.rollbackActive(ctx)
		return nil
	case st == stPrepared:
		if err := b.rm.finish(ctx, opRollback, b.xid); err != nil {
			return err
		}
		b.setDone(false)
		return nil
	case st == stDone && committed:
		return b.err(opRollback, xa.ErrInvalidState, errors.New("the branch committed"))
	case st == stDone:
		return nil
	}
	return b.err(opRollback, xa.ErrInvalidState, errors.New("the branch is being ended by another call"))
}

// rollbackActive rolls back a branch in stEnding whose life has ended:
// it waits for an outstanding statement to end (its context is done, so
// it has been cancelled on the server), then rolls the session back. A
// statement that does not end in time has its connection closed under it:
// the server rolls back the transaction of a closed session, and the
// statement releases the connection when it returns.
func (b *branch) rollbackActive(ctx context.Context) {
	b.mu.Lock()
	running := b.running
	b.mu.Unlock()
	if running != nil {
		t := time.NewTimer(cancelDeadline + time.Second)
		defer t.Stop()
		select {
		case <-running:
		case <-t.C:
		case <-ctx.Done():
		}
		b.mu.Lock()
		if b.running != nil {
			b.orphaned = true
			b.state = stDone
			if b.conn != nil {
				_ = b.conn.Conn().PgConn().Conn().Close() // net.Conn.Close is safe while another goroutine reads
			}
			b.mu.Unlock()
			b.rm.log.Warn("statement did not end after cancel: session closed", "xid", b.xid.String())
			return
		}
		b.mu.Unlock()
	}
	b.rollbackSession()
	b.setDone(false)
}

// rollbackSession ends whatever transaction is open on the branch's
// session and releases it; a session that cannot be brought back to idle
// is closed.
func (b *branch) rollbackSession() {
	if b.conn == nil {
		return
	}
	pc := b.conn.Conn().PgConn()
	if !pc.IsClosed() && pc.TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		_, err := pc.Exec(ctx, "ROLLBACK").ReadAll()
		cancel()
		if err != nil {
			b.release(true)
			return
		}
	}
	b.release(false)
}

// Close releases the session without ending the branch: an active branch
// loses its session, which rolls it back on the server; a prepared one
// stays prepared (its session went back to the pool at PREPARE already).
func (b *branch) Close() error {
	b.mu.Lock()
	if b.state != stActive {
		b.mu.Unlock()
		return nil
	}
	b.state = stDone
	if b.running != nil {
		b.orphaned = true
		if b.conn != nil {
			_ = b.conn.Conn().PgConn().Conn().Close()
		}
		b.mu.Unlock()
		b.endLife(errBranchEnded)
		return nil
	}
	b.mu.Unlock()
	b.endLife(errBranchEnded)
	b.release(false) // closed if a transaction is open: the server rolls it back
	return nil
}

// release gives the session back to the pool, or closes it when destroy
// is set or its state is not idle (pgxpool also refuses a session inside
// a transaction).
func (b *branch) release(destroy bool) {
	b.mu.Lock()
	conn := b.conn
	b.conn = nil
	orphaned := b.orphaned
	b.mu.Unlock()
	if conn != nil {
		releaseConn(conn, destroy)
	}
	if !orphaned {
		b.rm.untrack(b)
	}
}

func releaseConn(conn *pgxpool.Conn, destroy bool) {
	pc := conn.Conn().PgConn()
	if destroy || (!pc.IsClosed() && pc.TxStatus() != 'I') {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = pc.Close(ctx)
		cancel()
	}
	conn.Release()
}

func (b *branch) setReadOnly() {
	b.mu.Lock()
	b.votedRO = true
	b.mu.Unlock()
	b.setDone(false)
}

func (b *branch) setDone(committed bool) {
	b.mu.Lock()
	b.state = stDone
	b.committed = committed
	b.mu.Unlock()
	b.endLife(errBranchEnded)
}

// lastTag returns the command tag of the last result.
func lastTag(res []*pgconn.Result) string {
	if len(res) == 0 {
		return ""
	}
	return res[len(res)-1].CommandTag.String()
}

// comparableCtx reports whether ctx can be compared with ==: a context
// type of the application's may be a struct holding a slice or a map, for
// which == panics. If ctx == ctx does not panic, neither does ctx == x for
// any x.
func comparableCtx(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return ctx == ctx
}
