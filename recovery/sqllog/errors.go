package sqllog

import (
	"errors"
	"fmt"

	"github.com/xadb/xa/xa"
)

// Errors. Test with errors.Is.
var (
	// ErrNoLog: the database holds no decision log for the node (or no
	// log schema at all). Opening never creates one: Create does, by an
	// explicit act (xactl log init).
	ErrNoLog = errors.New("sqllog: no decision log")

	// ErrExist: Create was asked for a node that has a log already.
	ErrExist = errors.New("sqllog: a decision log exists already")

	// ErrSchema: the tables were made by another version of this package
	// (or by something else): nothing is read or written.
	ErrSchema = errors.New("sqllog: the log's tables have another schema version")

	// ErrLeaseHeld: another live process holds the log's lease (its
	// expiry, by the database's clock, has not passed).
	ErrLeaseHeld = errors.New("sqllog: the log's lease is held by another live process")

	// ErrNothingToTakeOver: a live node's TakeOver found the log released
	// with nothing in doubt (another process recovered it meanwhile).
	ErrNothingToTakeOver = errors.New("sqllog: nothing to take over")

	// ErrNotHolder: a write that only the lease's holder may make
	// (LogCommit, LogDelegation, LogParticipant) on a log opened without
	// the lease (Observe). Nothing was written.
	ErrNotHolder = errors.New("sqllog: this process does not hold the log's lease")

	// ErrRetained: ForgetAbort was refused because the abort record's
	// retention has not passed by the database's clock. The record stays.
	ErrRetained = errors.New("sqllog: abort record still within its retention")

	// ErrClosed: the Log has been closed.
	ErrClosed = errors.New("sqllog: log closed")
)

// unknown wraps err, which may have left a write done or not, as
// xa.ErrOutcomeUnknown.
func unknown(op string, err error) error {
	return &xa.Error{Op: op, Kind: xa.ErrOutcomeUnknown, Err: err}
}

// sqlState is implemented by PostgreSQL's server errors (pgconn.PgError):
// a statement that failed with one did not commit.
type sqlState interface{ SQLState() string }

// serverRefused reports whether err is PostgreSQL's answer to a statement
// (so its implicit transaction rolled back), not a lost connection.
func serverRefused(err error) bool {
	var s sqlState
	return errors.As(err, &s)
}

func fenced(op string, mine, now int64) error {
	if now == 0 {
		return fmt.Errorf("sqllog: %s: %w (this process held epoch %d; another process took the log over)", op, xa.ErrFenced, mine)
	}
	return fmt.Errorf("sqllog: %s: %w (this process held epoch %d; the log is at epoch %d)", op, xa.ErrFenced, mine, now)
}
