package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
)

// errRow returns a *sql.Row whose Scan and Err return err. database/sql
// offers no constructor for a Row carrying an error, so this goes through
// a database/sql handle on a tiny in-process driver whose only query fails
// with the error it finds in the context. No database is involved.
func errRow(err error) *sql.Row {
	errDBOnce.Do(func() { errDB = sql.OpenDB(errConnector{}) })
	return errDB.QueryRowContext(context.WithValue(context.Background(), rowErrKey{}, err), "")
}

var (
	errDBOnce sync.Once
	errDB     *sql.DB
)

type rowErrKey struct{}

type errConnector struct{}

func (errConnector) Connect(context.Context) (driver.Conn, error) { return errConn{}, nil }
func (errConnector) Driver() driver.Driver                        { return errDriver{} }

type errDriver struct{}

func (errDriver) Open(string) (driver.Conn, error) { return errConn{}, nil }

type errConn struct{}

var errNoStatements = errors.New("mysql: internal error-row connection runs no statements")

func (errConn) Prepare(string) (driver.Stmt, error) { return nil, errNoStatements }
func (errConn) Close() error                        { return nil }
func (errConn) Begin() (driver.Tx, error)           { return nil, errNoStatements }

func (errConn) QueryContext(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
	if err, ok := ctx.Value(rowErrKey{}).(error); ok {
		return nil, err
	}
	return nil, errNoStatements
}
