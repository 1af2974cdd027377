package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/xa"
)

// safeErr stands for a pgconn error that certainly happened before
// anything was sent (pgconn.SafeToRetry).
type safeErr struct{}

func (safeErr) Error() string     { return "not sent" }
func (safeErr) SafeToRetry() bool { return true }

// closedErr is pgx's "conn closed": SafeToRetry, yet also what a lost
// reply to PgConn.Exec looks like.
type closedErr struct{}

func (closedErr) Error() string     { return "conn closed" }
func (closedErr) SafeToRetry() bool { return true }
func (closedErr) Unwrap() error     { return pgconn.ErrConnClosed }

func TestClassifyTable(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	lost := fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	cases := []struct {
		op   string
		err  error
		kind error
		fix  bool
	}{
		{opPrepare, pg("42710"), xa.ErrDuplicateXID, false},
		{opPrepare, pg("55000"), xa.ErrMisconfigured, true},
		{opPrepare, pg("53200"), xa.ErrMisconfigured, true},
		{opPrepare, pg("22023"), xa.ErrInvalidXID, false},
		{opPrepare, pg("0A000"), xa.ErrRolledBack, false},
		{opPrepare, pg("23505"), xa.ErrRolledBack, false},
		{opPrepare, pg("23503"), xa.ErrRolledBack, false},
		{opPrepare, pg("40001"), xa.ErrRolledBack, false},
		{opPrepare, pg("40P01"), xa.ErrRolledBack, false},
		{opPrepare, pg("57014"), xa.ErrRolledBack, false},
		{opPrepare, pg("XX000"), xa.ErrRolledBack, false},
		{opPrepare, fatal, xa.ErrOutcomeUnknown, false},
		{opPrepare, lost, xa.ErrOutcomeUnknown, false},
		{opPrepare, safeErr{}, xa.ErrRolledBack, false},
		{opPrepare, closedErr{}, xa.ErrOutcomeUnknown, false},
		{opCommit, closedErr{}, xa.ErrOutcomeUnknown, false},
		{opPrepare, context.Canceled, xa.ErrOutcomeUnknown, false},
		{opCommit1PC, pg("23505"), xa.ErrRolledBack, false},
		{opCommit1PC, pg("40001"), xa.ErrRolledBack, false},
		{opCommit1PC, lost, xa.ErrOutcomeUnknown, false},
		{opCommit1PC, safeErr{}, xa.ErrRolledBack, false},
		{opCommit, pg("42704"), xa.ErrUnknownXID, false},
		{opCommit, pg("55000"), xa.ErrRetryable, false},
		{opCommit, pg("57014"), xa.ErrRetryable, false},
		{opCommit, pg("42501"), xa.ErrMisconfigured, true},
		{opCommit, pg("0A000"), xa.ErrMisconfigured, true},
		{opCommit, pg("XX000"), nil, false},
		{opCommit, fatal, xa.ErrOutcomeUnknown, false},
		{opCommit, lost, xa.ErrOutcomeUnknown, false},
		{opCommit, safeErr{}, xa.ErrRetryable, false},
		{opRollback, pg("42704"), xa.ErrUnknownXID, false},
		{opRollback, pg("55000"), xa.ErrRetryable, false},
		{opRollback, pg("42501"), xa.ErrMisconfigured, true},
		{opRollback, lost, xa.ErrOutcomeUnknown, false},
		{opCommitLast, pg("23505"), xa.ErrRolledBack, false},
		{opCommitLast, pg("40001"), xa.ErrRolledBack, false},
		{opCommitLast, pg("57014"), xa.ErrRolledBack, false},
		{opCommitLast, fatal, xa.ErrOutcomeUnknown, false},
		{opCommitLast, lost, xa.ErrOutcomeUnknown, false},
		{opCommitLast, closedErr{}, xa.ErrOutcomeUnknown, false},
		{opCommitLast, safeErr{}, xa.ErrRolledBack, false},
		{opClaimAbort, pg("57014"), xa.ErrRetryable, false},
		{opClaimAbort, pg("55P03"), xa.ErrRetryable, false},
		{opClaimAbort, pg("40P01"), xa.ErrRetryable, false},
		{opClaimAbort, pg("42501"), xa.ErrMisconfigured, true},
		{opClaimAbort, pg("XX000"), nil, false},
		{opClaimAbort, fatal, xa.ErrOutcomeUnknown, false},
		{opClaimAbort, lost, xa.ErrOutcomeUnknown, false},
		{opClaimAbort, safeErr{}, xa.ErrRetryable, false},
		{opRecover, pg("42501"), xa.ErrMisconfigured, true},
		{opExec, &pgconn.PgError{Severity: "ERROR", Code: "55000", Message: "prepared transactions are disabled"}, xa.ErrMisconfigured, true},
		{opExec, pg("55000"), nil, false},
		{opExec, pg("23505"), nil, false},
	}
	rm := &RM{name: "pg"}
	for _, c := range cases {
		kind, fix := classify(c.op, c.err)
		if kind != c.kind || (fix != "") != c.fix {
			t.Errorf("classify(%s, %v) = %v, fix %q; want %v, fix %v", c.op, c.err, kind, fix, c.kind, c.fix)
		}
		err := rm.xaErr(c.op, xa.XID{FormatID: 1, Gtrid: []byte("g")}, c.err)
		var xe *xa.Error
		if !errors.As(err, &xe) || xe.Op != c.op || xe.RM != "pg" {
			t.Errorf("xaErr(%s, %v) = %#v", c.op, c.err, err)
			continue
		}
		if c.kind != nil && !errors.Is(err, c.kind) {
			t.Errorf("xaErr(%s, %v) does not match %v", c.op, c.err, c.kind)
		}
		var pe *pgconn.PgError
		if errors.As(c.err, &pe) && !errors.As(err, &pe) {
			t.Errorf("xaErr(%s, %v) hides the *pgconn.PgError", c.op, c.err)
		}
		if c.fix && !strings.Contains(err.Error(), "fix: ") {
			t.Errorf("xaErr(%s, %v) = %q: no fix in the message", c.op, c.err, err)
		}
	}
}

// Only a unique violation of CommitLast's decision INSERT, before the
// INSERT completed, is the fence; the same code from the COMMIT (a
// deferred unique constraint) or a FATAL error is not.
func TestFenced(t *testing.T) {
	dup := &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key"}
	begin := &pgconn.Result{CommandTag: pgconn.NewCommandTag("BEGIN")}
	insert := &pgconn.Result{CommandTag: pgconn.NewCommandTag("INSERT 0 1")}
	cases := []struct {
		res  []*pgconn.Result
		err  error
		want bool
	}{
		{nil, dup, true},
		{[]*pgconn.Result{begin}, dup, true},
		{[]*pgconn.Result{begin}, fmt.Errorf("wrapped: %w", dup), true},
		{[]*pgconn.Result{insert}, dup, false},
		{[]*pgconn.Result{begin, insert}, dup, false},
		{nil, &pgconn.PgError{Severity: "ERROR", Code: "23503"}, false},
		{nil, &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "23505"}, false},
		{nil, io.ErrUnexpectedEOF, false},
	}
	for i, c := range cases {
		if got := fenced(c.res, c.err); got != c.want {
			t.Errorf("case %d: fenced = %v, want %v", i, got, c.want)
		}
	}
}
