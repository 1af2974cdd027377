package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/xa"
)

// Operations, as named in xa.Error.Op.
const (
	opOpen         = "open"
	opCheck        = "check"
	opStart        = "start"
	opExec         = "exec"
	opPrepare      = "prepare"
	opCommit       = "commit"           // COMMIT PREPARED
	opRollback     = "rollback"         // ROLLBACK PREPARED, or ROLLBACK of an active branch
	opCommit1PC    = "commit-one-phase" // COMMIT of an active branch
	opCommitLast   = "commit-last"      // INSERT decision; COMMIT of the last resource
	opRecover      = "recover"
	opClaimAbort   = "claim-abort"   // INSERT of an abort marker into the decision table
	opForgetAborts = "forget-aborts" // DELETE of old abort markers
)

// Fixes quoted in misconfiguration errors.
const (
	fixDisabled = "prepared transactions are disabled: set max_prepared_transactions > 0 " +
		"(e.g. equal to max_connections) in postgresql.conf and restart the server"
	fixSlots = "no free prepared-transaction slot: raise max_prepared_transactions in postgresql.conf " +
		"(restart needed) and resolve orphaned prepared transactions (pg_prepared_xacts)"
	fixOwner = "COMMIT/ROLLBACK PREPARED needs the role that prepared the branch or a superuser: " +
		"connect every transaction manager node, the recovery scanner and xactl as the same role"
	fixPrivilege = "the role lacks a privilege two-phase commit needs"
	fixOtherDB   = "the branch was prepared in another database: finish it from a resource manager " +
		"connected to that database"
)

// fixError adds how to fix a misconfiguration to the server's error,
// which stays reachable with errors.As.
type fixError struct {
	err error
	fix string
}

func (e *fixError) Error() string { return e.err.Error() + " (fix: " + e.fix + ")" }
func (e *fixError) Unwrap() error { return e.err }

// classify maps an error of operation op to an xa error kind and, for
// misconfigurations, the fix to quote. kind is nil when no kind applies.
//
// The rules, per operation:
//
//   - Server errors (*pgconn.PgError with severity ERROR) leave the session
//     usable. At "prepare" and "commit-one-phase" every ERROR means the
//     transaction was rolled back, so the default kind is ErrRolledBack
//     (deferred constraints 23xxx, serialization failures and deadlocks
//     40xxx, 0A000 for temporary tables, WITH HOLD cursors, LISTEN/NOTIFY
//     and exported snapshots, 57014 query_canceled), except where a more
//     precise kind says why: 42710 ErrDuplicateXID, 55000 (prepared
//     transactions disabled) and 53200 (no free slot) ErrMisconfigured,
//     22023 (gid too long) ErrInvalidXID.
//   - At "commit" and "rollback" (COMMIT/ROLLBACK PREPARED) an ERROR means
//     the command did not take effect: 42704 ErrUnknownXID, 55000 (gid busy:
//     another backend is finishing it) and 57014 (cancelled before it took
//     effect) ErrRetryable, 42501 (another role's branch) and 0A000
//     (prepared in another database) ErrMisconfigured.
//   - 53200 is ErrMisconfigured, not ErrRetryable: PREPARE that fails has
//     rolled the branch back, so the command cannot be retried as is; and
//     slots run out either because max_prepared_transactions is below the
//     concurrency the application runs at or because orphans hold them,
//     both of which need an operator. The application may retry the whole
//     transaction; the error says what to fix.
//   - At "commit-last" the same holds as at "commit-one-phase", and
//     CommitLast itself reports a 23505 of its decision INSERT (an abort
//     marker holds the key) as xa.ErrAbortRecorded: a server ERROR there
//     always means nothing committed.
//   - At "claim-abort" (the INSERT of an abort marker, which autocommits)
//     an ERROR means the marker was not stored: 57014 (cancelled while it
//     waited for a commit in flight), 55P03, 40001 and 40P01 ErrRetryable,
//     42501 ErrMisconfigured.
//   - FATAL and PANIC errors (57P01 admin_shutdown, crash) and lost
//     connections close the session. A command that was certainly never
//     sent (see notSent) did not take effect: ErrRetryable for
//     phase 2 and claim-abort, ErrRolledBack for prepare and one-phase
//     and last-resource commit (the open transaction dies with its
//     session). Otherwise the reply was lost and the command may or may
//     not have taken effect: ErrOutcomeUnknown. A session the server ends
//     during a COMMIT is ambiguous too: a backend terminated while it
//     waits for a synchronous standby has committed locally.
func classify(op string, err error) (kind error, fix string) {
	if err == nil {
		return nil, ""
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && !fatal(pe) {
		return classifyServer(op, pe)
	}
	switch op {
	case opPrepare, opCommit1PC, opCommitLast:
		if notSent(err) {
			return xa.ErrRolledBack, ""
		}
		return xa.ErrOutcomeUnknown, ""
	case opCommit, opRollback, opClaimAbort:
		if notSent(err) {
			return xa.ErrRetryable, ""
		}
		return xa.ErrOutcomeUnknown, ""
	}
	return nil, ""
}

// notSent reports whether err certainly happened before the command was
// sent. pgconn.SafeToRetry says so, except for pgconn.ErrConnClosed: pgx
// v5.12's MultiResultReader (PgConn.Exec) reports a connection lost while
// waiting for the reply as "conn closed", a SafeToRetry error meant for a
// connection found closed before sending. Callers check that the
// connection is open before they send, so ErrConnClosed here means the
// reply was lost.
func notSent(err error) bool {
	return pgconn.SafeToRetry(err) && !errors.Is(err, pgconn.ErrConnClosed)
}

func classifyServer(op string, pe *pgconn.PgError) (kind error, fix string) {
	code := pe.Code
	switch op {
	case opPrepare, opCommit1PC, opCommitLast:
		switch code {
		case "42710":
			return xa.ErrDuplicateXID, ""
		case "55000":
			if op == opPrepare {
				return xa.ErrMisconfigured, fixDisabled
			}
		case "53200":
			return xa.ErrMisconfigured, fixSlots
		case "22023":
			if op == opPrepare {
				return xa.ErrInvalidXID, ""
			}
		}
		return xa.ErrRolledBack, ""
	case opCommit, opRollback:
		switch code {
		case "42704":
			return xa.ErrUnknownXID, ""
		case "55000", "57014":
			return xa.ErrRetryable, ""
		case "42501":
			return xa.ErrMisconfigured, fixOwner
		case "0A000":
			return xa.ErrMisconfigured, fixOtherDB
		case "22023":
			return xa.ErrInvalidXID, ""
		}
		return nil, ""
	case opClaimAbort:
		switch code {
		case "57014", "55P03", "40001", "40P01":
			return xa.ErrRetryable, ""
		}
	}
	switch code {
	case "42501":
		return xa.ErrMisconfigured, fixPrivilege
	case "55000":
		if strings.Contains(pe.Message, "prepared transactions are disabled") {
			return xa.ErrMisconfigured, fixDisabled
		}
	}
	return nil, ""
}

// connectProblem says what kind of connection failure err is and how to
// fix it.
func connectProblem(err error) (what, fix string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01":
			return "authentication failed", "check the user and password in the DSN"
		case strings.HasPrefix(pe.Code, "28"):
			return "the server refused the login", "check the user in the DSN, and the server's pg_hba.conf"
		case pe.Code == "3D000":
			return "no such database", "check the database named in the DSN"
		}
	}
	return "cannot reach the database", "check the address in the DSN and that the server runs"
}

// fatal reports whether the server ended the session with pe.
func fatal(pe *pgconn.PgError) bool {
	s := pe.SeverityUnlocalized
	if s == "" {
		s = pe.Severity
	}
	return s == "FATAL" || s == "PANIC"
}

// xaErr builds the *xa.Error of a failed operation, classifying err.
func (rm *RM) xaErr(op string, xid xa.XID, err error) error {
	kind, fix := classify(op, err)
	if fix != "" {
		err = &fixError{err: err, fix: fix}
	}
	return &xa.Error{Op: op, RM: rm.name, XID: xid, Kind: kind, Err: err}
}

// kindErr builds an *xa.Error of a given kind.
func (rm *RM) kindErr(op string, xid xa.XID, kind, err error) error {
	return &xa.Error{Op: op, RM: rm.name, XID: xid, Kind: kind, Err: err}
}
