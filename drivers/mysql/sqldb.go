package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/xadb/xa/drivers/internal/sessiondb"
	"github.com/xadb/xa/xa"
)

// DB returns a *sql.DB bound to the branch: a database/sql handle whose
// every connection is this session, for libraries that want a *sql.DB
// (GORM, sqlx, bun, sqlc's database/sql code, ent). Its statements go
// through Conn's own methods, with the same guards: they run inside the
// branch, bounded by their context and the branch's, one at a time (a
// statement started while Rows of another are open fails at once with
// xa.ErrSessionBusy), and XA statements and SET autocommit are refused.
//
// Begin and BeginTx fail with an error matching xa.ErrTransactionControl:
// the branch's transaction belongs to the transaction manager. Tell
// libraries that wrap writes in a transaction of their own not to (GORM:
// SkipDefaultTransaction). Prepared statements of the *sql.DB send nothing
// when prepared; each execution runs as Conn.ExecContext would.
//
// The *sql.DB is the branch's: calling DB again returns the same one, and
// it is closed when the branch ends (its calls then fail with database/sql's
// "sql: database is closed"). Do not close it yourself.
func (c *Conn) DB() *sql.DB {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.db == nil {
		b.db = sessiondb.Open(dbSession{c})
		db := b.db
		context.AfterFunc(b.work, func() { db.Close() })
	}
	return b.db
}

// opBegin is a Begin refused on the branch's *sql.DB.
const opBegin = "begin"

// dbSession is the session as sessiondb drives it.
type dbSession struct{ c *Conn }

func (s dbSession) Exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, query, sessiondb.Args(args, true)...)
}

func (s dbSession) Query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.c.QueryContext(ctx, query, sessiondb.Args(args, true)...)
	if err != nil {
		return nil, err
	}
	return sessiondb.FromSQLRows(rows)
}

func (s dbSession) Usable() error {
	b := s.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stIdle, stActive:
		return nil
	case stRollbackOnly, stLost:
		return b.err(opExec, xa.ErrRolledBack, b.reason)
	}
	return b.err(opExec, xa.ErrBranchDone, errors.New("the branch has ended"))
}

func (s dbSession) RefuseBegin() error {
	return s.c.b.err(opBegin, xa.ErrTransactionControl, errRefuseBegin)
}

// errRefuseBegin says why Begin fails on a branch's *sql.DB.
var errRefuseBegin = errors.New("refused, not sent: the branch's transaction belongs to the transaction manager; " +
	"run the statements on the *sql.DB itself (libraries that open a transaction of their own for each write must be told not to, GORM with SkipDefaultTransaction)")
