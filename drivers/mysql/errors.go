package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/xa"
)

// Server error numbers this package reacts to.
const (
	erDBAccessDenied     = 1044 // ER_DBACCESS_DENIED_ERROR
	erAccessDenied       = 1045 // ER_ACCESS_DENIED_ERROR
	erTableAccessDenied  = 1142 // ER_TABLEACCESS_DENIED_ERROR
	erLockWaitTimeout    = 1205 // ER_LOCK_WAIT_TIMEOUT
	erLockDeadlock       = 1213 // ER_LOCK_DEADLOCK
	erSpecificAccess     = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
	erQueryInterrupted   = 1317 // ER_QUERY_INTERRUPTED
	erSortAborted        = 1028 // ER_FILSORT_ABORT (a killed sort)
	erXAERNota           = 1397 // XAER_NOTA: unknown XID
	erXAERInval          = 1398 // XAER_INVAL: invalid arguments
	erXAERRMFail         = 1399 // XAER_RMFAIL: not allowed in the branch's state
	erXAEROutside        = 1400 // XAER_OUTSIDE: work done outside the global transaction
	erXAERRMErr          = 1401 // XAER_RMERR: resource manager error (MySQL 8: XA RECOVER privilege)
	erXARBRollback       = 1402 // XA_RBROLLBACK
	erXAERDupID          = 1440 // XAER_DUPID
	erXARBTimeout        = 1613 // XA_RBTIMEOUT
	erXARBDeadlock       = 1614 // XA_RBDEADLOCK
	erClientServerGone   = 2006 // CR_SERVER_GONE_ERROR (client-side code, relayed by proxies)
	erClientServerLost   = 2013 // CR_SERVER_LOST
	erConnectionKilled   = 1927 // ER_CONNECTION_KILLED (MariaDB: KILL CONNECTION of a session running a statement)
	erServerShutdown     = 1053 // ER_SERVER_SHUTDOWN (the statement was cut short by a shutdown)
	erUnknownThreadID    = 1094 // ER_NO_SUCH_THREAD (KILL of a thread that is gone)
	erUnknownSystemVar   = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
	erNoSuchTable        = 1146 // ER_NO_SUCH_TABLE
	erUnknownTableEngine = 1286 // ER_UNKNOWN_STORAGE_ENGINE
)

// Ops named in *xa.Error.Op.
const (
	opOpen      = "open"
	opStart     = "start"
	opExec      = "exec"
	opPrepare   = "prepare"
	opCommit    = "commit"
	opCommit1P  = "commit one phase"
	opRollback  = "rollback"
	opRecover   = "recover"
	opCheck     = "check"
	opUnlisted  = "unlisted"
	opServerKey = "server key"
)

// classify maps the error of XA command op to one of the xa error kinds,
// or nil when none applies. It is the single place where server error
// numbers and lost connections become protocol meaning.
//
// A lost connection is ErrOutcomeUnknown only for the commands whose effect
// matters when the reply is lost (prepare, commit, rollback, commit one
// phase); for the others the caller decides.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erXAERNota:
			return xa.ErrUnknownXID
		case erXAERInval:
			return xa.ErrInvalidXID
		case erXAERRMFail:
			if rollbackOnlyMessage(me) {
				return xa.ErrRolledBack
			}
			return xa.ErrInvalidState
		case erXAEROutside:
			return xa.ErrInvalidState
		case erXAERDupID:
			return xa.ErrDuplicateXID
		case erXARBRollback, erXARBTimeout, erXARBDeadlock, erLockDeadlock:
			return xa.ErrRolledBack
		case erXAERRMErr, erSpecificAccess, erTableAccessDenied:
			return xa.ErrMisconfigured
		case erAccessDenied, erDBAccessDenied, erBadDB:
			// The login, or the right to use the DSN's database, was
			// refused: a connection problem, not the server's XA set-up.
			return xa.ErrConnect
		case erLockWaitTimeout:
			switch op {
			case opCommit, opRollback:
				// Fact 5: XA COMMIT/ROLLBACK leave the branch prepared.
				return xa.ErrRetryable
			case opPrepare, opCommit1P:
				// Fact 5: a lock wait timeout during XA PREPARE rolls the
				// branch back.
				return xa.ErrRolledBack
			}
			return nil
		case erClientServerGone, erClientServerLost, erConnectionKilled, erServerShutdown:
			return lostKind(op)
		}
		return nil
	}
	if connectionLost(err) {
		return lostKind(op)
	}
	return nil
}

func lostKind(op string) error {
	switch op {
	case opPrepare, opCommit, opRollback, opCommit1P:
		return xa.ErrOutcomeUnknown
	}
	return nil
}

// connectionLost reports whether err says the connection broke: the reply
// to a command that was sent may be lost. That includes a connection that
// the RM closed itself because KILL QUERY could not be delivered
// (*droppedError, which matches driver.ErrBadConn).
func connectionLost(err error) bool {
	var ne net.Error
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		return false
	case errors.As(err, &me):
		// The server's own "connection killed" and "shutdown" end the
		// session too: the statement may or may not have taken effect.
		switch me.Number {
		case erClientServerGone, erClientServerLost, erConnectionKilled, erServerShutdown:
			return true
		}
		return false
	case errors.Is(err, driver.ErrBadConn),
		errors.Is(err, sql.ErrConnDone),
		errors.Is(err, gomysql.ErrInvalidConn),
		errors.Is(err, gomysql.ErrMalformPkt),
		errors.Is(err, gomysql.ErrPktSync),
		errors.Is(err, gomysql.ErrPktSyncMul),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed),
		errors.As(err, &ne):
		return true
	}
	return false
}

// rollbackOnlyMessage reports whether a 1399 error says that the branch is
// rollback-only. MariaDB 10.11 answers statements, XA END and XA PREPARE of
// a branch that hit a deadlock with "XAER_RMFAIL: The command cannot be
// executed when global transaction is in the ROLLBACK ONLY state" (where
// MySQL 8 answers 1614).
func rollbackOnlyMessage(me *gomysql.MySQLError) bool {
	return me.Number == erXAERRMFail && strings.Contains(strings.ToUpper(me.Message), "ROLLBACK ONLY")
}

// rmfailState returns the branch state a 1399 message names: "ACTIVE",
// "IDLE", "PREPARED", "ROLLBACK ONLY" or "NON-EXISTING"; "" if none.
func rmfailState(err error) string {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != erXAERRMFail {
		return ""
	}
	m := strings.ToUpper(me.Message)
	for _, s := range []string{"ROLLBACK ONLY", "NON-EXISTING", "PREPARED", "ACTIVE", "IDLE"} {
		if strings.Contains(m, s) {
			return s
		}
	}
	return ""
}

// errNumber returns the server error number of err, 0 if it is not a
// server error.
func errNumber(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// rolledBackByServer reports whether err says that the server rolled the
// branch back or made it rollback-only (XA_RB*, deadlock, 1399 ROLLBACK
// ONLY).
func rolledBackByServer(err error) bool {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case erXARBRollback, erXARBTimeout, erXARBDeadlock, erLockDeadlock:
		return true
	}
	return rollbackOnlyMessage(me)
}

// fixFor returns how to fix a misconfiguration error, "" if there is no
// specific advice.
func fixFor(err error, user string) string {
	switch errNumber(err) {
	case erXAERRMErr:
		return fmt.Sprintf("MySQL 8 needs the XA_RECOVER_ADMIN privilege for XA RECOVER: GRANT XA_RECOVER_ADMIN ON *.* TO %s", user)
	case erSpecificAccess:
		return fmt.Sprintf("grant the privilege the message names to %s (GRANT <privilege> ON *.* TO %s)", user, user)
	case erTableAccessDenied:
		return fmt.Sprintf("grant %s the privileges the message names on the database", user)
	}
	return ""
}

// connectProblem says what kind of connection failure err is and how to
// fix it; what is "" when err is none.
func connectProblem(err error) (what, fix string) {
	switch errNumber(err) {
	case erAccessDenied:
		return "authentication failed", "check the user and password in the DSN, and that the user may connect from this host"
	case erDBAccessDenied:
		return "access to the database denied", "grant the user access to the database named in the DSN"
	case erBadDB:
		return "no such database", "check the database named in the DSN"
	}
	var ne net.Error
	if errors.As(err, &ne) || connectionLost(err) {
		return "cannot reach the server", "check the address in the DSN and that the server runs"
	}
	return "", ""
}

// rmError builds the *xa.Error of op.
func (rm *RM) rmError(op string, xid xa.XID, kind error, err error) error {
	var ce *xa.ConnectError
	if kind == xa.ErrConnect && !errors.As(err, &ce) {
		if what, fix := connectProblem(err); what != "" {
			// As user U, not 'U'@'%': the server's own message names
			// the host it saw.
			err = &xa.ConnectError{What: fmt.Sprintf("%s as user %s at %s", what, rm.userName, rm.addr), Fix: fix, Err: err}
		}
	}
	if kind == xa.ErrMisconfigured && !strings.Contains(err.Error(), "(fix: ") {
		if fix := fixFor(err, rm.user); fix != "" {
			err = fmt.Errorf("%w (fix: %s)", err, fix)
		}
	}
	return &xa.Error{Op: op, RM: rm.name, XID: xid, Kind: kind, Err: err}
}

// wrap builds the *xa.Error of op with the kind classify gives.
func (rm *RM) wrap(op string, xid xa.XID, err error) error {
	return rm.rmError(op, xid, classify(op, err), err)
}

// cancelledError is what a statement returns when its context (or the
// branch's) ended while it ran and it was cancelled on the server: it
// matches the context's error with errors.Is and keeps the server's error
// for errors.As.
type cancelledError struct {
	ctxErr    error
	serverErr error
}

func (e *cancelledError) Error() string {
	if e.serverErr == nil {
		return e.ctxErr.Error()
	}
	return fmt.Sprintf("%v (cancelled on the server: %v)", e.ctxErr, e.serverErr)
}

func (e *cancelledError) Unwrap() []error {
	if e.serverErr == nil {
		return []error{e.ctxErr}
	}
	return []error{e.ctxErr, e.serverErr}
}

// ctxError returns the error to report for a context that is done: its
// cause if it has one.
func ctxError(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return ctx.Err()
}
