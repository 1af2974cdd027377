package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xadb/xa/xa"
)

// state is where a branch is, as far as this package knows.
type state int

const (
	stIdle         state = 1 + iota // no statement sent: XA START is still deferred
	stActive                        // XA START done, work going on
	stRollbackOnly                  // the server made the branch rollback-only (deadlock)
	stLost                          // the session broke before prepare: the server rolls the branch back
	stPrepared                      // XA PREPARE done, the session still pinned
	stDone                          // ended; the session is released
)

func (s state) String() string {
	switch s {
	case stIdle:
		return "idle"
	case stActive:
		return "active"
	case stRollbackOnly:
		return "rollback-only"
	case stLost:
		return "lost"
	case stPrepared:
		return "prepared"
	case stDone:
		return "done"
	}
	return "state(invalid)"
}

var (
	errRollingBack = errors.New("mysql: the branch is being rolled back")
	errClosing     = errors.New("mysql: the branch is being closed")
	errEnded       = errors.New("mysql: the branch has ended")
)

// branch implements xa.Branch on one pinned session.
type branch struct {
	rm  *RM
	xid xa.XID
	lit string // the XID literal, built once

	// work is Start's context, also cancelled by Rollback and Close: it
	// bounds every statement of the branch.
	work     context.Context
	stopWork context.CancelCauseFunc

	conn *Conn

	mu      sync.Mutex // serialises statements and TM calls
	s       *session   // nil once released
	state   state
	reason  error     // why the branch is rollback-only or lost
	tainted bool      // a statement may have changed autocommit: discard the session at the end
	pending *guard    // left armed by a query whose rows may still be read
	rows    *sql.Rows // the last query's rows (Conn.QueryContext), nil once seen closed
	origin  xa.Origin
	stmts   []*sql.Stmt // prepared on the session (Conn.PrepareContext), closed at the end
	db      *sql.DB     // Conn.DB, closed when work ends
}

var (
	_ xa.Branch            = (*branch)(nil)
	_ xa.OnePhaseCommitter = (*branch)(nil)
	_ xa.Idler             = (*branch)(nil)
	_ xa.OriginReporter    = (*branch)(nil)
)

// Session returns the branch's *Conn.
func (b *branch) Session() any { return b.conn }

// Idle reports whether no statement has reached the database yet.
func (b *branch) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == stIdle
}

// Origin returns the session that prepared the branch and when: after
// VotePrepared, and also after a Prepare whose outcome is unknown (its
// reply was lost, or the branch could not be rolled back after an error),
// since the branch may then be prepared. Session is the session's
// CONNECTION_ID(); it is 0 when the server detached the branch at prepare
// (MySQL 8.0.29+ with xa_detach_on_prepare=ON): nobody needs to wait for
// that session.
//
// Prepared is a time on the server's clock, not this host's, no earlier
// than the prepare completed: the server's @@timestamp read in the prepare's
// round trip, right after XA PREPARE. After a lost reply it is the server's
// time when the loss was seen, estimated from the server's @@timestamp read
// when the connection was made plus the time elapsed since on this host's
// monotonic clock (too late by at most that first round trip and the two
// clocks' drift). It is never earlier than the end of the second in which
// the server started. RM.Commit and RM.Rollback, on whatever host, compare
// it with the server's start time, which the server computes itself, to
// tell whether the server restarted since (see restartedSince).
func (b *branch) Origin() xa.Origin {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.origin
}

func (b *branch) err(op string, kind, err error) error { return b.rm.rmError(op, b.xid, kind, err) }

// originNow returns the branch's session and the server's time now: read
// is the server's @@timestamp read right after the prepare, zero when the
// reply was lost; then an upper bound estimated from the connection's
// clock (see Origin) stands in. The time is no earlier than the end of the
// second in which the server started (see restartedSince). The session must
// still be pinned.
func (b *branch) originNow(read time.Time) xa.Origin {
	clock := b.s.dc.clock
	now := b.rm.now()
	t := read
	if t.IsZero() {
		t = clock.high(now)
	} else if low := clock.low(now); t.Before(low) {
		// @@timestamp is the session's: an application can set it.
		t = low
	}
	if floor := time.Unix(b.s.dc.started+1, 0); t.Before(floor) {
		t = floor
	}
	return xa.Origin{Session: b.s.id, Prepared: t}
}

// rowsOpen reports whether the last query's Rows are still open: the
// session then runs nothing else. (database/sql waits for open Rows before
// it closes or discards a connection, so a statement sent meanwhile, which
// go-sql-driver refuses as a bad connection, would wait for them forever.)
func (b *branch) rowsOpen() bool {
	if b.rows == nil {
		return false
	}
	if _, err := b.rows.Columns(); err != nil {
		b.rows = nil // closed: Columns answers "sql: Rows are closed"
		return false
	}
	return true
}

// closeRows closes the last query's Rows if they are still open (their
// guard still armed, so that a context ending meanwhile interrupts the
// rest of the result) and reports whether they were. database/sql's
// Rows.Close is safe while the application reads them on another
// goroutine: its next read reports the Rows closed.
func (b *branch) closeRows() bool {
	if !b.rowsOpen() {
		return false
	}
	b.rows.Close() //nolint:errcheck // the branch is ending; the statement's error is the application's
	b.rows = nil
	return true
}

// errRowsOpen is the reason a branch with open Rows is rolled back when it
// is asked to end its work.
var errRowsOpen = fmt.Errorf("%w: the Rows of a query were not closed when the branch was asked to end its work, so the branch was rolled back", xa.ErrSessionBusy)

// end releases the session: to the pool when clean, else closed.
func (b *branch) end(clean bool) {
	b.closeRows()
	b.disarm()
	for _, st := range b.stmts {
		st.Close() //nolint:errcheck // a session that is discarded drops them anyway
	}
	b.stmts = nil
	if b.s != nil {
		b.s.release(clean && !b.tainted)
		b.s = nil
	}
	b.state = stDone
	b.stopWork(errEnded)
}

// disarm stops the guard a query left armed, waiting for a kill it may be
// delivering.
func (b *branch) disarm() {
	if b.pending != nil {
		b.pending.stop()
		b.pending = nil
	}
}

// markLost records that the session broke while the branch was not
// prepared: the server rolls it back.
func (b *branch) markLost(err error) {
	b.reason = err
	b.closeRows()
	b.disarm()
	if b.s != nil {
		b.s.discard()
		b.s = nil
	}
	b.state = stLost
	b.stopWork(errEnded)
}

// Prepare ends the branch's work with XA END and XA PREPARE in one round
// trip.
//
//   - A branch that never ran a statement votes VoteReadOnly, without I/O.
//   - A branch the server rolled back or made rollback-only (deadlock)
//     votes VoteAbort with an ErrRolledBack error carrying the server's
//     reason; Prepare sends XA ROLLBACK itself and releases the session.
//   - A lost reply votes VoteAbort with ErrOutcomeUnknown: the branch may
//     be prepared; the session is closed and the TM rolls back by XID,
//     waiting for the session that Origin names. A reply is lost when the
//     connection breaks, and also when ctx ended and KILL QUERY could not
//     be delivered, so that the connection was closed under the command.
//   - Any other refusal: the branch is rolled back on its session and the
//     vote is VoteAbort with ErrRolledBack; if that rollback fails the
//     session is closed and, unless the server said it rolled the branch
//     back, the vote is VoteAbort with ErrOutcomeUnknown (the error may
//     have come after XA PREPARE took effect).
func (b *branch) Prepare(ctx context.Context) (xa.Vote, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closeRows() && b.state == stActive {
		b.disarm()
		b.rollbackAndEnd(ctx, true)
		return xa.VoteAbort, b.err(opPrepare, xa.ErrRolledBack, errRowsOpen)
	}
	b.disarm()
	switch b.state {
	case stIdle:
		b.end(true)
		return xa.VoteReadOnly, nil
	case stLost:
		b.state = stDone
		return xa.VoteAbort, b.err(opPrepare, xa.ErrRolledBack, b.reason)
	case stRollbackOnly:
		reason := b.reason
		b.rollbackAndEnd(ctx, false)
		return xa.VoteAbort, b.err(opPrepare, xa.ErrRolledBack, reason)
	case stActive:
	default:
		return xa.VoteAbort, b.err(opPrepare, xa.ErrInvalidState, fmt.Errorf("branch is %s", b.state))
	}
	at, err := b.s.execTimed(ctx, "XA END "+b.lit+"; XA PREPARE "+b.lit)
	if err == nil {
		b.state = stPrepared
		b.origin = b.originNow(at)
		if b.s.server.detachOnPrepare {
			b.origin.Session = 0
		}
		return xa.VotePrepared, nil
	}
	// The branch may be prepared if the reply is lost: the TM and
	// recovery roll it back by XID once this session is gone, and need to
	// know which one it was.
	origin := b.originNow(time.Time{})
	if connectionLost(err) {
		b.origin = origin
		b.end(false)
		return xa.VoteAbort, b.err(opPrepare, xa.ErrOutcomeUnknown, err)
	}
	// The server answered with an error. Whatever state XA END / XA
	// PREPARE left the branch in, roll it back.
	detaches := b.s.server.detachOnPrepare
	res, rerr := b.rollbackAndEnd(ctx, errNumber(err) != erXAERRMFail || rmfailState(err) == "ACTIVE")
	switch {
	case rolledBackByServer(err):
	case rerr != nil:
		// The session is closed: a prepared branch stays prepared.
		b.origin = origin
		return xa.VoteAbort, b.err(opPrepare, xa.ErrOutcomeUnknown,
			fmt.Errorf("%w; then XA ROLLBACK failed, so the branch may be prepared: %w", err, rerr))
	case res == rbGone && detaches:
		// MySQL 8: a branch prepared before the error left the session
		// at XA PREPARE; "no branch here" does not say it is not
		// prepared.
		b.origin = xa.Origin{Prepared: origin.Prepared}
		return xa.VoteAbort, b.err(opPrepare, xa.ErrOutcomeUnknown,
			fmt.Errorf("%w; then the session held no branch, and the server detaches a prepared one: it may be prepared", err))
	}
	return xa.VoteAbort, b.err(opPrepare, xa.ErrRolledBack, err)
}

// rollbackAndEnd rolls the branch back on its session after a refused
// command and releases the session; if that fails the session is closed,
// which rolls back a branch that is not prepared. It returns what the
// rollback found.
func (b *branch) rollbackAndEnd(ctx context.Context, active bool) (rollbackResult, error) {
	// The caller's context may be what ended the branch: roll back
	// regardless, within a bound of our own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortRollbackTimeout)
	defer cancel()
	res, err := b.rollbackOnSession(ctx, active)
	if err != nil {
		b.rm.log.Debug("mysql: XA ROLLBACK of a refused branch failed; closing its session", "xid", b.xid, "err", err)
	}
	b.end(err == nil)
	return res, err
}

// abortRollbackTimeout bounds the XA ROLLBACK a refused branch sends
// itself; past it the session is closed, which rolls the branch back too.
const abortRollbackTimeout = 30 * time.Second

// rollbackResult says what a rollback on the branch's session found.
type rollbackResult int

const (
	rbFailed     rollbackResult = iota // the rollback failed (its error says why)
	rbRolledBack                       // XA ROLLBACK rolled the branch back, or the server says it had (XA_RB*)
	rbGone                             // the session holds no such branch (1397, or NON-EXISTING): committed or rolled back before
)

// rollbackOnSession sends XA ROLLBACK for the branch on its session,
// preceded by XA END when the branch is active, and follows the server's
// word when it names another state (1399). The error is nil when the
// session carries no branch any more; the result says whether the branch
// was there to be rolled back.
func (b *branch) rollbackOnSession(ctx context.Context, active bool) (rollbackResult, error) {
	rollback := "XA ROLLBACK " + b.lit
	q := rollback
	if active {
		q = "XA END " + b.lit + "; " + rollback
	}
	var err error
	for range 3 {
		err = b.s.exec(ctx, q)
		switch errNumber(err) {
		case 0:
			if err == nil {
				return rbRolledBack, nil
			}
			return rbFailed, err
		case erXAERNota:
			// Unknown to the server: gone.
			return rbGone, nil
		case erXARBRollback, erXARBTimeout, erXARBDeadlock:
			// Rolled back by the server.
			return rbRolledBack, nil
		case erXAERRMFail:
			switch rmfailState(err) {
			case "ACTIVE":
				q = "XA END " + b.lit + "; " + rollback
				continue
			case "IDLE", "PREPARED", "ROLLBACK ONLY":
				// MariaDB: a rollback-only branch refuses XA END but
				// takes XA ROLLBACK.
				q = rollback
				continue
			case "NON-EXISTING":
				// XA END: the session has no XA transaction.
				return rbGone, nil
			}
		}
		return rbFailed, err
	}
	return rbFailed, err
}

// Commit commits the prepared branch on the session that prepared it
// (required on MariaDB, where the branch stays attached to it).
//
// Errors: ErrRetryable (lock wait timeout, or ctx ended and the server
// interrupted XA COMMIT): the branch is still prepared and the session
// still pinned; call Commit again. ErrUnknownXID: the session no longer
// holds the branch. ErrRolledBack: the server rolled it back.
// ErrOutcomeUnknown: the reply was lost; the session is closed, so the
// branch (if still prepared) is detached and can be committed by XID
// (RM.Commit) once that session is gone.
func (b *branch) Commit(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.disarm()
	if b.state != stPrepared {
		return b.err(opCommit, xa.ErrInvalidState, fmt.Errorf("branch is %s, not prepared", b.state))
	}
	err := b.s.exec(ctx, "XA COMMIT "+b.lit)
	var ce *cancelledError
	switch {
	case err == nil:
		b.end(true)
		return nil
	case connectionLost(err):
		b.end(false)
		return b.err(opCommit, xa.ErrOutcomeUnknown, err)
	case errors.As(err, &ce):
		// The server answered (or nothing was sent): not committed.
		return b.err(opCommit, xa.ErrRetryable, err)
	}
	kind := classify(opCommit, err)
	switch kind {
	case xa.ErrRetryable:
		return b.err(opCommit, kind, err)
	case xa.ErrUnknownXID, xa.ErrRolledBack:
		b.end(true)
	default:
		// The session may still hold the prepared branch: close it so
		// that the server detaches the branch for recovery.
		b.end(false)
	}
	return b.err(opCommit, kind, err)
}

// Rollback rolls the branch back in any state. A statement still running
// on the session is cancelled on the server first. A branch that never
// started, or whose session broke before prepare, needs no I/O. After
// ErrRetryable (a prepared branch whose XA ROLLBACK hit a lock wait
// timeout) the session is still pinned and Rollback may be called again;
// after any other error the session is closed and a prepared branch is
// left to recovery.
func (b *branch) Rollback(ctx context.Context) error {
	b.stopWork(errRollingBack)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeRows()
	b.disarm()
	switch b.state {
	case stIdle:
		b.end(true)
		return nil
	case stLost, stDone:
		b.state = stDone
		return nil
	}
	prepared := b.state == stPrepared
	_, err := b.rollbackOnSession(ctx, b.state == stActive)
	var ce *cancelledError
	switch {
	case err == nil:
		b.end(true)
		return nil
	case connectionLost(err):
		b.end(false)
		if !prepared {
			// A branch that is not prepared dies with its session.
			return nil
		}
		return b.err(opRollback, xa.ErrOutcomeUnknown, err)
	case prepared && (errors.As(err, &ce) || errNumber(err) == erLockWaitTimeout):
		return b.err(opRollback, xa.ErrRetryable, err)
	}
	b.end(false)
	if !prepared {
		return nil // closing the session rolled it back
	}
	return b.err(opRollback, classify(opRollback, err), err)
}

// CommitOnePhase commits the branch without preparing it (XA END and XA
// COMMIT ONE PHASE in one round trip), when it is the only branch that did
// work. A branch that never ran a statement commits with no I/O. Whatever
// the outcome, the session is released.
//
// The error is ErrRolledBack only when the server says the branch is not
// committed: it answered that it rolled the branch back (XA_RB*, deadlock,
// rollback-only), or the XA ROLLBACK sent after a failure found the branch
// still there and rolled it back. Any other failure is ErrOutcomeUnknown:
// the reply was lost (the connection broke, or was closed because KILL
// QUERY could not be delivered), or the command failed and XA ROLLBACK then
// found no branch (1397): the server does not say whether it committed it
// or rolled it back (a KILL QUERY sent when ctx ended may land before or
// after the commit point), or XA ROLLBACK failed.
func (b *branch) CommitOnePhase(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closeRows() && b.state == stActive {
		b.disarm()
		b.rollbackAndEnd(ctx, true)
		return b.err(opCommit1P, xa.ErrRolledBack, errRowsOpen)
	}
	b.disarm()
	switch b.state {
	case stIdle:
		b.end(true)
		return nil
	case stLost:
		b.state = stDone
		return b.err(opCommit1P, xa.ErrRolledBack, b.reason)
	case stRollbackOnly:
		reason := b.reason
		b.rollbackAndEnd(ctx, false)
		return b.err(opCommit1P, xa.ErrRolledBack, reason)
	case stActive:
	default:
		return b.err(opCommit1P, xa.ErrInvalidState, fmt.Errorf("branch is %s", b.state))
	}
	err := b.s.exec(ctx, "XA END "+b.lit+"; XA COMMIT "+b.lit+" ONE PHASE")
	switch {
	case err == nil:
		b.end(true)
		return nil
	case connectionLost(err):
		b.end(false)
		return b.err(opCommit1P, xa.ErrOutcomeUnknown, err)
	}
	active := errNumber(err) != erXAERRMFail || rmfailState(err) == "ACTIVE"
	if rolledBackByServer(err) {
		b.rollbackAndEnd(ctx, active)
		return b.err(opCommit1P, xa.ErrRolledBack, err)
	}
	// The command failed, before or after the commit point: ask the
	// session.
	res, rerr := b.rollbackAndEnd(ctx, active)
	switch res {
	case rbRolledBack:
		return b.err(opCommit1P, xa.ErrRolledBack, fmt.Errorf("%w; then XA ROLLBACK found the branch uncommitted and rolled it back", err))
	case rbGone:
		return b.err(opCommit1P, xa.ErrOutcomeUnknown,
			fmt.Errorf("%w; then XA ROLLBACK found no branch: the server committed it or rolled it back, and does not say which", err))
	}
	return b.err(opCommit1P, xa.ErrOutcomeUnknown,
		fmt.Errorf("%w; then XA ROLLBACK failed (the session is closed; an uncommitted branch dies with it): %w", err, rerr))
}

// Close releases the session without ending the branch (see xa.Branch): a
// prepared branch stays prepared and its session is closed, never pooled,
// so that the server detaches it; an active branch dies with its session.
// A statement still running is cancelled first.
func (b *branch) Close() error {
	b.stopWork(errClosing)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stDone:
		return nil
	case stLost:
		b.state = stDone
		return nil
	case stIdle:
		b.end(true)
		return nil
	}
	b.end(false)
	return nil
}

// ready checks, before a statement is sent, that the branch takes work,
// and screens the statement.
func (b *branch) ready(ctx context.Context, query string) error {
	if b.rowsOpen() {
		return b.err(opExec, xa.ErrSessionBusy, fmt.Errorf("refused, not sent: close the Rows of the earlier query first: %.60q", query))
	}
	b.disarm()
	switch b.state {
	case stIdle, stActive:
	case stRollbackOnly, stLost:
		return b.err(opExec, xa.ErrRolledBack, b.reason)
	default:
		return b.err(opExec, xa.ErrBranchDone, fmt.Errorf("branch is %s", b.state))
	}
	if b.work.Err() != nil {
		return &cancelledError{ctxErr: ctxError(b.work)}
	}
	if ctx.Err() != nil {
		return &cancelledError{ctxErr: ctxError(ctx)}
	}
	kw := firstKeyword(query)
	if kw == "XA" || (kw == "SET" && containsFold(query, "autocommit")) {
		return b.err(opExec, xa.ErrTransactionControl, fmt.Errorf("refused, not sent: %.60q", query))
	}
	if containsFold(query, "autocommit") {
		// Perhaps a SET autocommit hidden in a multi-statement query:
		// MariaDB accepts it inside a branch, and a pooled session with
		// autocommit=0 would answer 1400 to later XA commands.
		b.tainted = true
	}
	return nil
}

// start sends XA START on its own (when it cannot share a round trip with
// the first statement).
func (b *branch) start(ctx context.Context) error {
	b.s.dc.xa.Store(true)
	drv, g := b.s.watch(ctx, b.work)
	_, err := b.s.conn.ExecContext(drv, "XA START "+b.lit)
	err, cause := g.finish(err)
	return b.started(err, cause)
}

// started sets the state after a round trip that began with XA START and
// returns the error to report for XA START itself, nil if it succeeded.
func (b *branch) started(err error, cause error) error {
	switch {
	case err == nil:
		b.state = stActive
		return nil
	case connectionLost(err):
		b.markLost(err)
		return b.err(opStart, xa.ErrRolledBack, err)
	}
	switch errNumber(err) {
	case erXAERInval, erXAERDupID:
		// XA START itself was refused; nothing after it ran.
		return b.err(opStart, classify(opStart, err), err)
	case erXAEROutside:
		// The pooled session was inside a local transaction: refused,
		// and the session must not be reused.
		b.tainted = true
		return b.err(opStart, classify(opStart, err), err)
	}
	// We cannot tell whether XA START took effect: the session will be
	// closed at the end, which rolls back whatever it holds.
	b.tainted = true
	if cause != nil {
		return b.err(opStart, nil, &cancelledError{ctxErr: cause, serverErr: err})
	}
	return b.err(opStart, classify(opStart, err), err)
}
