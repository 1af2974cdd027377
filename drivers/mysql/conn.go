package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/xadb/xa/xa"
)

// Conn is the application's handle on a branch's session (what
// Branch.Session returns): statements run on the one database session the
// branch owns. It has no Begin, Commit or Rollback: the transaction
// manager ends the branch. The server refuses COMMIT, BEGIN, DDL and the
// like inside a branch (an *xa.Error with ErrInvalidState, and
// ErrTransactionControl for COMMIT/ROLLBACK/BEGIN/START); Conn itself
// refuses XA statements and SET autocommit without sending them.
//
// The context of each call bounds that statement; the context given to
// Start bounds them all. When either ends while a statement runs, the
// statement is cancelled on the server (KILL QUERY) and the call returns an
// error matching the context's error; the branch stays usable and can be
// rolled back. A Conn is for one goroutine at a time, like a transaction.
//
// A branch's first statement carries XA START with it in one round trip
// when it is ExecContext (and go-sql-driver can interpolate its
// arguments); a first QueryContext or QueryRowContext sends XA START on
// its own first.
type Conn struct {
	b *branch
}

// ExecContext runs a statement that returns no rows. The result's
// RowsAffected and LastInsertId are those of query (of its last statement
// if it holds several).
func (c *Conn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(ctx, query); err != nil {
		return nil, err
	}
	if b.state == stIdle {
		res, err, done := b.execFirst(ctx, query, args)
		if done {
			return res, err
		}
		// Not interpolable: XA START on its own, then the statement as
		// database/sql would run it (a server-side prepared statement).
		if err := b.start(ctx); err != nil {
			return nil, err
		}
	}
	drv, g := b.s.watch(ctx, b.work)
	res, err := b.s.conn.ExecContext(drv, query, args...)
	err, cause := g.finish(err)
	return res, b.statementDone(query, err, cause)
}

// PrepareContext prepares query on the branch's session as a server-side
// prepared statement: the server parses it once, however often it is
// executed (what a program writing many batches of one shape wants). It
// sends XA START first if the branch has not started. The statement is
// the branch's: it is closed when the branch ends, and runs only on its
// session, bounded by the same contexts as ExecContext.
func (c *Conn) PrepareContext(ctx context.Context, query string) (*Stmt, error) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(ctx, query); err != nil {
		return nil, err
	}
	if b.state == stIdle {
		if err := b.start(ctx); err != nil {
			return nil, err
		}
	}
	drv, g := b.s.watch(ctx, b.work)
	st, err := b.s.conn.PrepareContext(drv, query)
	err, cause := g.finish(err)
	if err := b.statementDone(query, err, cause); err != nil {
		return nil, err
	}
	b.stmts = append(b.stmts, st)
	return &Stmt{b: b, st: st, query: query}, nil
}

// Stmt is a statement prepared on a branch's session (Conn.PrepareContext).
type Stmt struct {
	b     *branch
	st    *sql.Stmt
	query string
}

// ExecContext executes the statement with args, as Conn.ExecContext runs a
// query.
func (s *Stmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(ctx, s.query); err != nil {
		return nil, err
	}
	drv, g := b.s.watch(ctx, b.work)
	res, err := s.st.ExecContext(drv, args...)
	err, cause := g.finish(err)
	return res, b.statementDone(s.query, err, cause)
}

// execFirst tries to send "XA START x; query" in one round trip, with the
// arguments interpolated by go-sql-driver. done is false when nothing was
// sent because the arguments cannot be interpolated (the driver would fall
// back to a server-side prepared statement, which cannot carry two
// statements).
func (b *branch) execFirst(ctx context.Context, query string, args []any) (res sql.Result, err error, done bool) {
	var nv []driver.NamedValue
	b.s.dc.xa.Store(true)
	drv, g := b.s.watch(ctx, b.work)
	var sendErr error
	rawErr := b.s.conn.Raw(func(dc any) error {
		w := dc.(*drvConn)
		var ok bool
		if nv, ok = namedValues(w, args); !ok {
			return errNotSent
		}
		r, err := w.ExecContext(drv, "XA START "+b.lit+"; "+query, nv)
		if errors.Is(err, driver.ErrSkip) {
			return errNotSent
		}
		if r != nil {
			res = r
		}
		sendErr = err
		if errors.Is(err, driver.ErrBadConn) {
			return err // let database/sql close the connection
		}
		return nil
	})
	if errors.Is(rawErr, errNotSent) {
		g.stop()
		b.s.dc.xa.Store(false)
		return nil, nil, false
	}
	if rawErr != nil && sendErr == nil {
		sendErr = rawErr
	}
	sendErr, cause := g.finish(sendErr)
	if sendErr == nil {
		b.state = stActive
		return res, nil, true
	}
	if connectionLost(sendErr) {
		b.markLost(sendErr)
		return nil, b.err(opExec, xa.ErrRolledBack, sendErr), true
	}
	switch errNumber(sendErr) {
	case erXAERInval, erXAEROutside, erXAERDupID:
		// Only XA START answers these: it was refused, the statement did
		// not run.
		return nil, b.started(sendErr, nil), true
	case erXAERRMFail, erQueryInterrupted:
		// Refused by XA START, or by the statement after it, or
		// interrupted by a kill at either: ask the server.
		if err := b.probeStarted(); err != nil {
			return nil, err, true
		}
	default:
		if cause != nil && errNumber(sendErr) == 0 {
			if err := b.probeStarted(); err != nil {
				return nil, err, true
			}
		} else {
			// XA START ran; the statement after it failed.
			b.state = stActive
		}
	}
	return nil, b.statementDone(query, sendErr, cause), true
}

// errNotSent says that execFirst sent nothing.
var errNotSent = errors.New("mysql: not sent")

// probeStarted finds out whether XA START took effect after an ambiguous
// error by sending it again: 1399 means it had (the branch is active or
// rollback-only); success means it had not, and has now.
func (b *branch) probeStarted() error {
	err := b.s.exec(context.Background(), "XA START "+b.lit)
	switch {
	case err == nil:
		b.state = stActive
		return nil
	case errNumber(err) == erXAERRMFail:
		b.state = stActive
		if rmfailState(err) == "ROLLBACK ONLY" {
			b.state = stRollbackOnly
			b.reason = err
		}
		return nil
	}
	return b.started(err, nil)
}

// namedValues converts args as database/sql would for go-sql-driver
// (driverArgsConnLocked with the connection's NamedValueChecker). ok is
// false for anything the fast path does not handle: named or output
// arguments, or a conversion error (database/sql reports it then).
func namedValues(c driver.NamedValueChecker, args []any) ([]driver.NamedValue, bool) {
	if len(args) == 0 {
		return nil, true
	}
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		switch a.(type) {
		case sql.NamedArg, sql.Out:
			return nil, false
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		if err := c.CheckNamedValue(&nv[i]); err != nil {
			return nil, false
		}
	}
	return nv, true
}

// statementDone turns the error of an application statement into what the
// caller sees, and updates the branch state: a broken session loses the
// branch, a deadlock makes it rollback-only, a cancelled statement reports
// the context's error.
func (b *branch) statementDone(query string, err error, cause error) error {
	if err == nil {
		return nil
	}
	if connectionLost(err) {
		b.markLost(err)
		return b.err(opExec, xa.ErrRolledBack, err)
	}
	if rolledBackByServer(err) {
		b.state = stRollbackOnly
		b.reason = err
		return b.err(opExec, xa.ErrRolledBack, err)
	}
	if cause != nil && interrupted(err) {
		return &cancelledError{ctxErr: cause, serverErr: err}
	}
	switch errNumber(err) {
	case erXAERRMFail, erXAEROutside:
		if transactionControl(firstKeyword(query)) {
			// COMMIT, BEGIN ... refused by the server inside the branch.
			err = fmt.Errorf("%w: %w", xa.ErrTransactionControl, err)
		}
		return b.err(opExec, xa.ErrInvalidState, err)
	}
	return err
}

// QueryContext runs a query on the branch's session. As the first
// statement of the branch it costs an extra round trip for XA START.
// Until the rows are closed, the contexts keep bounding the query, and the
// session runs no other statement: one started meanwhile fails at once with
// an error matching xa.ErrSessionBusy. Rows still open when the branch ends
// are closed then (Prepare and CommitOnePhase roll the branch back: the
// application may still be reading).
func (c *Conn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.query(ctx, query, args)
}

// query runs a query for QueryContext and QueryRowContext; b.mu is held.
func (b *branch) query(ctx context.Context, query string, args []any) (*sql.Rows, error) {
	if err := b.ready(ctx, query); err != nil {
		return nil, err
	}
	if b.state == stIdle {
		if err := b.start(ctx); err != nil {
			return nil, err
		}
	}
	drv, g := b.s.watch(ctx, b.work)
	rows, err := b.s.conn.QueryContext(drv, query, args...)
	if err != nil {
		err, cause := g.finish(err)
		return nil, b.statementDone(query, err, cause)
	}
	b.pending = g
	b.rows = rows
	return rows, nil
}

// QueryRowContext runs a query expected to return at most one row; errors
// are deferred to Row.Scan, as with database/sql. The first row is read
// and the query's rows are closed before QueryRowContext returns, so a Row
// that is never scanned does not keep the session busy.
func (c *Conn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	rows, err := b.query(ctx, query, args)
	if err != nil {
		return errRow(err)
	}
	r := &replay{}
	cols, err := rows.Columns()
	if err == nil && rows.Next() {
		r.cols = cols
		r.vals = make([]driver.Value, len(cols))
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = &r.vals[i]
		}
		err = rows.Scan(dest...)
		r.has = err == nil
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rows.Err()
	}
	b.rows = nil
	if err != nil {
		ferr, cause := b.pending.finish(err)
		b.pending = nil
		if mapped := b.statementDone(query, ferr, cause); mapped != nil {
			err = mapped
		}
		return errRow(err)
	}
	b.disarm()
	return replayRow(r)
}

// errRow returns a *sql.Row whose Scan and Err return err. database/sql
// offers no constructor for a Row, so this goes through a database/sql
// handle on a tiny in-process driver whose only query answers what it
// finds in the context. No database is involved.
func errRow(err error) *sql.Row { return replayRow(&replay{err: err}) }

// replayRow returns a *sql.Row that scans r: the row QueryRowContext read
// (the driver's own values, converted by Scan as database/sql converts
// them), no row (sql.ErrNoRows) or r.err.
func replayRow(r *replay) *sql.Row {
	errDBOnce.Do(func() { errDB = sql.OpenDB(errConnector{}) })
	return errDB.QueryRowContext(context.WithValue(context.Background(), rowErrKey{}, r), "")
}

var (
	errDBOnce sync.Once
	errDB     *sql.DB
)

type rowErrKey struct{}

// replay is what a replayed Row holds.
type replay struct {
	cols []string
	vals []driver.Value
	has  bool // a row was read
	err  error
}

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
	r, ok := ctx.Value(rowErrKey{}).(*replay)
	if !ok {
		return nil, errNoStatements
	}
	if r.err != nil {
		return nil, r.err
	}
	return &replayRows{r: r}, nil
}

// replayRows yields a replay's row, if any.
type replayRows struct {
	r    *replay
	done bool
}

func (rr *replayRows) Columns() []string { return rr.r.cols }
func (rr *replayRows) Close() error      { return nil }

func (rr *replayRows) Next(dest []driver.Value) error {
	if rr.done || !rr.r.has {
		return io.EOF
	}
	rr.done = true
	copy(dest, rr.r.vals)
	return nil
}
