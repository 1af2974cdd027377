package xa

import (
	"errors"
	"fmt"
	"strings"
)

// Error kinds. Resource managers map every database error to at most one of
// these (see Error); test with errors.Is.
var (
	// ErrUnknownXID: the database does not know the branch (MySQL
	// XAER_NOTA 1397, PostgreSQL 42704). After ROLLBACK this means the
	// branch is gone, which is success. After COMMIT it is ambiguous: only
	// the decision log (and a fresh recover listing) can say what happened.
	ErrUnknownXID = errors.New("xa: unknown XID")

	// ErrRolledBack: the database rolled the branch back (MySQL XA_RB*,
	// a deadlock or serialization failure inside the branch, PostgreSQL
	// PREPARE TRANSACTION answering ROLLBACK). The branch is gone or must
	// only be rolled back.
	ErrRolledBack = errors.New("xa: branch rolled back")

	// ErrRetryable: the command did not take effect and may be retried
	// as is (lock wait timeout during COMMIT, PostgreSQL gid busy).
	ErrRetryable = errors.New("xa: retryable")

	// ErrOutcomeUnknown: the connection was lost after the command was
	// sent; the database may or may not have performed it. Never treat it
	// as failure-safe-to-retry-elsewhere: the decision log resolves it.
	ErrOutcomeUnknown = errors.New("xa: outcome unknown")

	// ErrMisconfigured: the database is not set up for two-phase commit
	// (max_prepared_transactions=0, missing privileges, XA disabled). The
	// message says how to fix it.
	ErrMisconfigured = errors.New("xa: database misconfigured for two-phase commit")

	// ErrConnect: the database could not be reached or refused the
	// session (wrong address, user, password or database name, a missing
	// right to connect). Nothing was done; the message says which and how
	// to fix it.
	ErrConnect = errors.New("xa: cannot connect to the database")

	// ErrInvalidState: the command is not allowed in the branch's current
	// state (MySQL XAER_RMFAIL/XAER_OUTSIDE). The branch is unchanged.
	ErrInvalidState = errors.New("xa: command not allowed in the branch's state")

	// ErrDuplicateXID: the XID is already in use (MySQL XAER_DUPID,
	// PostgreSQL 42710).
	ErrDuplicateXID = errors.New("xa: XID already in use")

	// ErrInvalidXID: the XID breaks a limit; nothing was sent.
	ErrInvalidXID = errors.New("xa: invalid XID")

	// ErrInvalidNode: a node id breaks the naming rules.
	ErrInvalidNode = errors.New("xa: invalid node id")

	// ErrBranchDone: the branch has been prepared, committed or rolled
	// back; its session accepts no more work.
	ErrBranchDone = errors.New("xa: branch no longer accepts work")

	// ErrTransactionControl: the application tried to end or save the
	// transaction itself (COMMIT, ROLLBACK, BEGIN, PREPARE ...) on a branch
	// session; only the transaction manager ends a branch.
	ErrTransactionControl = errors.New("xa: transaction control statements are reserved to the transaction manager")

	// ErrSessionBusy: a statement was started on a branch session while an
	// earlier statement, or its Rows, is still open (one statement at a
	// time, as on one database connection). Nothing was sent; close the
	// Rows first. A branch asked to prepare or commit in one phase with
	// Rows still open is rolled back with this reason.
	ErrSessionBusy = errors.New("xa: session busy: an earlier statement or its Rows are still open")
)

// Error is the error a resource manager returns for a failed XA command. It
// matches its Kind with errors.Is and keeps the driver's error for
// errors.As (for example *mysql.MySQLError or *pgconn.PgError).
type Error struct {
	Op   string // the command: "start", "prepare", "commit", "rollback", "recover", ...
	RM   string // the resource manager's name
	XID  XID    // the branch, if any
	Kind error  // one of the Err* kinds above, or nil when none applies
	Err  error  // the underlying error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("xa: ")
	if e.RM != "" {
		b.WriteString(e.RM)
		b.WriteString(": ")
	}
	b.WriteString(e.Op)
	if !e.XID.IsZero() {
		b.WriteString(" ")
		b.WriteString(e.XID.String())
	}
	if e.Kind != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.Kind.Error(), "xa: "))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the kind and the underlying error.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// OutcomeUnknown reports whether err says that a command may or may not
// have taken effect.
func OutcomeUnknown(err error) bool { return errors.Is(err, ErrOutcomeUnknown) }

// Retryable reports whether err says that the command did not take effect
// and may be sent again.
func Retryable(err error) bool { return errors.Is(err, ErrRetryable) }

// AbortError is returned by Tx.Commit when the transaction was rolled back
// instead. It names the branch that refused and why. errors.Is(err,
// ErrAborted) holds.
type AbortError struct {
	ID     GlobalID
	RM     string // the branch that refused, or "" when the abort was not a branch's vote
	Reason error
}

// ErrAborted is matched by every AbortError.
var ErrAborted = errors.New("xa: transaction aborted")

// ErrTimeout is the reason of an AbortError when the global transaction
// timeout expired.
var ErrTimeout = errors.New("xa: global transaction timeout")

// ErrDecisionTooLate: a commit decision was not taken (not written, not
// sent) because Begin + Timeout had passed; recovery may be presuming
// abort by then. A decision log returns it (wrapped) from LogCommit when
// its own clock says so; nothing was logged. It matches ErrTimeout.
var ErrDecisionTooLate = fmt.Errorf("%w: it passed before the commit decision was taken", ErrTimeout)

func (e *AbortError) Error() string {
	if e.RM != "" {
		return fmt.Sprintf("xa: transaction %s aborted: branch %s refused: %v", e.ID, e.RM, e.Reason)
	}
	return fmt.Sprintf("xa: transaction %s aborted: %v", e.ID, e.Reason)
}

// Unwrap returns ErrAborted and the reason.
func (e *AbortError) Unwrap() []error { return []error{ErrAborted, e.Reason} }

// ErrHeuristic is matched by every HeuristicError.
var ErrHeuristic = errors.New("xa: heuristic outcome")

// HeuristicError is returned by Tx.Commit when the commit decision was
// durable but a database rolled a branch back instead of committing it (a
// heuristic decision by the server or an operator): the transaction is
// neither committed nor aborted everywhere. The transaction manager has
// recorded it in the decision log; `xactl list` shows it until an operator
// clears it. errors.Is(err, ErrHeuristic) holds.
type HeuristicError struct {
	ID GlobalID
	// RolledBack names the participants whose branch was rolled back; the
	// others committed (or will, for those left to recovery).
	RolledBack []string
}

func (e *HeuristicError) Error() string {
	return fmt.Sprintf("xa: transaction %s: heuristic mixed outcome: committed, but rolled back by %s", e.ID, strings.Join(e.RolledBack, ", "))
}

// Unwrap returns ErrHeuristic.
func (e *HeuristicError) Unwrap() error { return ErrHeuristic }

// ConnectError says what failed when a database could not be reached or
// refused the session (the kind of its *Error is ErrConnect), and how to
// fix it.
type ConnectError struct {
	What string // e.g. "authentication failed as user 'app' at db1:3306"
	Fix  string
	Err  error // the driver's error
}

func (e *ConnectError) Error() string { return fmt.Sprintf("%s (fix: %s): %v", e.What, e.Fix, e.Err) }

// Unwrap returns the driver's error.
func (e *ConnectError) Unwrap() error { return e.Err }
