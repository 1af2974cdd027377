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
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/xa"
)

func myErr(n uint16, msg string) error { return &gomysql.MySQLError{Number: n, Message: msg} }

func TestClassify(t *testing.T) {
	rmfail := func(state string) error {
		return myErr(1399, "XAER_RMFAIL: The command cannot be executed when global transaction is in the  "+state+" state")
	}
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	all := []string{opStart, opExec, opPrepare, opCommit, opCommit1P, opRollback, opRecover}
	type row struct {
		err  error
		ops  []string // nil: all
		want error
	}
	rows := []row{
		{nil, nil, nil},
		{myErr(1397, "XAER_NOTA: Unknown XID"), nil, xa.ErrUnknownXID},
		{myErr(1398, "XAER_INVAL"), nil, xa.ErrInvalidXID},
		{rmfail("ACTIVE"), nil, xa.ErrInvalidState},
		{rmfail("IDLE"), nil, xa.ErrInvalidState},
		{rmfail("PREPARED"), nil, xa.ErrInvalidState},
		{rmfail("ROLLBACK ONLY"), nil, xa.ErrRolledBack},
		{myErr(1400, "XAER_OUTSIDE"), nil, xa.ErrInvalidState},
		{myErr(1401, "XAER_RMERR"), nil, xa.ErrMisconfigured},
		{myErr(1402, "XA_RBROLLBACK"), nil, xa.ErrRolledBack},
		{myErr(1613, "XA_RBTIMEOUT"), nil, xa.ErrRolledBack},
		{myErr(1614, "XA_RBDEADLOCK"), nil, xa.ErrRolledBack},
		{myErr(1213, "Deadlock found"), nil, xa.ErrRolledBack},
		{myErr(1440, "XAER_DUPID"), nil, xa.ErrDuplicateXID},
		{myErr(1227, "Access denied; you need PROCESS"), nil, xa.ErrMisconfigured},
		{myErr(1142, "SELECT command denied"), nil, xa.ErrMisconfigured},
		{myErr(1044, "Access denied for user to database"), nil, xa.ErrConnect},
		{myErr(1045, "Access denied for user"), nil, xa.ErrConnect},
		{myErr(1049, "Unknown database"), nil, xa.ErrConnect},
		{myErr(1205, "Lock wait timeout"), []string{opCommit, opRollback}, xa.ErrRetryable},
		{myErr(1205, "Lock wait timeout"), []string{opPrepare, opCommit1P}, xa.ErrRolledBack},
		{myErr(1205, "Lock wait timeout"), []string{opStart, opExec, opRecover}, nil},
		{myErr(1062, "Duplicate entry"), nil, nil},
		{myErr(1317, "Query execution was interrupted"), nil, nil},
	}
	lost := []error{
		driver.ErrBadConn, io.EOF, io.ErrUnexpectedEOF, gomysql.ErrInvalidConn, netErr,
		fmt.Errorf("wrapped: %w", gomysql.ErrInvalidConn), myErr(2013, "Lost connection"), myErr(2006, "MySQL server has gone away"),
		sql.ErrConnDone, net.ErrClosed,
		myErr(1927, "Connection was killed"), myErr(1053, "Server shutdown in progress"),
		&droppedError{ctxErr: context.DeadlineExceeded, err: context.Canceled},
	}
	for _, e := range lost {
		rows = append(rows,
			row{e, []string{opPrepare, opCommit, opRollback, opCommit1P}, xa.ErrOutcomeUnknown},
			row{e, []string{opStart, opExec, opRecover}, nil})
	}
	for _, r := range rows {
		ops := r.ops
		if ops == nil {
			ops = all
		}
		for _, op := range ops {
			if got := classify(op, r.err); got != r.want {
				t.Errorf("classify(%q, %v) = %v, want %v", op, r.err, got, r.want)
			}
		}
	}
	for _, e := range []error{context.Canceled, errors.New("other"), myErr(1064, "syntax")} {
		if connectionLost(e) {
			t.Errorf("connectionLost(%v) = true", e)
		}
	}
}

// The *xa.Error of the RM carries the kind, the RM, the XID and the
// server's error, and a misconfiguration says how to fix it.
func TestRMError(t *testing.T) {
	rm := &RM{name: "db1", user: "'app'@'%'"}
	x := xa.XID{FormatID: 1, Gtrid: []byte("g")}
	err := rm.wrap(opRecover, x, myErr(1401, "XAER_RMERR: Fatal error occurred in the transaction branch - check your data for consistency"))
	var xe *xa.Error
	if !errors.As(err, &xe) || xe.Op != opRecover || xe.RM != "db1" || !xe.XID.Equal(x) || xe.Kind != xa.ErrMisconfigured {
		t.Fatalf("got %#v", err)
	}
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1401 {
		t.Fatalf("server error lost: %v", err)
	}
	if want := "GRANT XA_RECOVER_ADMIN ON *.* TO 'app'@'%'"; !strings.Contains(err.Error(), want) {
		t.Fatalf("%v: want the fix %q", err, want)
	}
	ce := &cancelledError{ctxErr: context.DeadlineExceeded, serverErr: myErr(1317, "interrupted")}
	if !errors.Is(ce, context.DeadlineExceeded) || !errors.As(ce, &me) || me.Number != 1317 {
		t.Fatalf("cancelledError does not match both: %v", ce)
	}
}
