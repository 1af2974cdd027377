// Package sessiondb turns a branch session into a *sql.DB: a database/sql
// driver whose every connection is a handle on that one session, so that
// libraries written for database/sql (GORM, sqlx, bun, sqlc's database/sql
// code, ent) run their statements inside the branch, through the session's
// own guarded methods.
//
// What the package owns: the database/sql plumbing (connector, connection
// handles, statements, the refusal of transaction control). What the
// driver package supplies (Session): running one statement, and its rows
// as driver.Rows.
//
// Contracts:
//   - Begin and BeginTx fail with Session.RefuseBegin's error: the branch's
//     transaction belongs to the transaction manager.
//   - Every handle reaches the same session, and the session runs one
//     statement at a time: a statement started while another handle's Rows
//     are open fails at once with the session's busy error (it does not
//     wait for a free connection, as a pool of one would).
//   - Arguments are handed to the session as the application gave them
//     (CheckNamedValue accepts everything): the session's own driver
//     converts them, as it would without this layer.
//   - Close the *sql.DB when the branch ends (the drivers do): database/sql
//     runs a goroutine per *sql.DB until it is closed.
package sessiondb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
)

// Session is one branch session as the adapter uses it. Its methods are
// safe for concurrent use (the session serialises statements itself).
type Session interface {
	// Exec runs a statement that returns no rows.
	Exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error)
	// Query runs a query; the session is busy until the rows are closed.
	Query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error)
	// Usable returns nil while the session takes statements, else the
	// error to report when a connection is asked for (the branch ended).
	Usable() error
	// RefuseBegin returns the error Begin and BeginTx report.
	RefuseBegin() error
}

// Open returns a *sql.DB whose connections are handles on s.
func Open(s Session) *sql.DB {
	db := sql.OpenDB(connector{s: s})
	// Handles are cheap and share the session: let database/sql open one
	// per concurrent caller, so that misuse meets the session's busy
	// error at once instead of waiting for the pool's only connection.
	db.SetMaxIdleConns(2)
	return db
}

type connector struct{ s Session }

func (c connector) Connect(context.Context) (driver.Conn, error) {
	if err := c.s.Usable(); err != nil {
		return nil, err
	}
	return &conn{s: c.s}, nil
}

func (c connector) Driver() driver.Driver { return drv{} }

type drv struct{}

var errOpen = errors.New("sessiondb: a branch session is reached through its DB method, not by name")

func (drv) Open(string) (driver.Conn, error) { return nil, errOpen }

// conn is one database/sql connection: a handle on the session.
type conn struct{ s Session }

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
)

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext sends nothing: the statement runs as a plain statement of
// the session each time it is executed.
func (c *conn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	if err := c.s.Usable(); err != nil {
		return nil, err
	}
	return &stmt{s: c.s, query: query}, nil
}

// Close closes the handle, not the session.
func (c *conn) Close() error { return nil }

func (c *conn) Begin() (driver.Tx, error) { return nil, c.s.RefuseBegin() }

func (c *conn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return nil, c.s.RefuseBegin()
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.s.Exec(ctx, query, args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.s.Query(ctx, query, args)
}

// CheckNamedValue accepts every argument: the session's driver converts
// them.
func (c *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// IsValid reports false once the session takes no statements, so that
// database/sql drops the handle.
func (c *conn) IsValid() bool { return c.s.Usable() == nil }

func (c *conn) ResetSession(context.Context) error {
	if err := c.s.Usable(); err != nil {
		return driver.ErrBadConn
	}
	return nil
}

type stmt struct {
	s     Session
	query string
}

func (s *stmt) Close() error  { return nil }
func (s *stmt) NumInput() int { return -1 }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.s.Exec(context.Background(), s.query, named(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.s.Query(context.Background(), s.query, named(args))
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.s.Exec(ctx, s.query, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.s.Query(ctx, s.query, args)
}

func named(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv
}

// Args returns args as the values to hand a driver's own statement
// methods: positional values, and sql.Named for named ones when keepNames
// (go-sql-driver refuses them with a clear error; pgx takes positions
// only).
func Args(args []driver.NamedValue, keepNames bool) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if keepNames && a.Name != "" {
			out[i] = sql.Named(a.Name, a.Value)
			continue
		}
		out[i] = a.Value
	}
	return out
}

// FromSQLRows adapts the *sql.Rows of a session built on database/sql
// (the MySQL session) to driver.Rows: the values are the ones the
// session's driver produced, so the outer database/sql converts them as
// the inner one would, and the column types are the inner ones.
func FromSQLRows(r *sql.Rows) (driver.Rows, error) {
	cols, err := r.Columns()
	if err != nil {
		r.Close()
		return nil, err
	}
	return &sqlRows{r: r, cols: cols, ptrs: make([]any, len(cols))}, nil
}

type sqlRows struct {
	r     *sql.Rows
	cols  []string
	ptrs  []any
	types []*sql.ColumnType
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*sqlRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*sqlRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*sqlRows)(nil)
	_ driver.RowsColumnTypeLength           = (*sqlRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*sqlRows)(nil)
)

func (s *sqlRows) Columns() []string { return s.cols }
func (s *sqlRows) Close() error      { return s.r.Close() }

func (s *sqlRows) Next(dest []driver.Value) error {
	if !s.r.Next() {
		if err := s.r.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	for i := range dest {
		s.ptrs[i] = &dest[i]
	}
	return s.r.Scan(s.ptrs[:len(dest)]...)
}

func (s *sqlRows) columnType(i int) *sql.ColumnType {
	if s.types == nil {
		s.types, _ = s.r.ColumnTypes()
	}
	if i < len(s.types) {
		return s.types[i]
	}
	return nil
}

func (s *sqlRows) ColumnTypeDatabaseTypeName(i int) string {
	if ct := s.columnType(i); ct != nil {
		return ct.DatabaseTypeName()
	}
	return ""
}

func (s *sqlRows) ColumnTypeScanType(i int) reflect.Type {
	if ct := s.columnType(i); ct != nil && ct.ScanType() != nil {
		return ct.ScanType()
	}
	return reflect.TypeFor[any]()
}

func (s *sqlRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if ct := s.columnType(i); ct != nil {
		return ct.Nullable()
	}
	return false, false
}

func (s *sqlRows) ColumnTypeLength(i int) (int64, bool) {
	if ct := s.columnType(i); ct != nil {
		return ct.Length()
	}
	return 0, false
}

func (s *sqlRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if ct := s.columnType(i); ct != nil {
		return ct.DecimalSize()
	}
	return 0, 0, false
}
