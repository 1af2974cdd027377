package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/xadb/xa/drivers/internal/sessiondb"
	"github.com/xadb/xa/xa"
)

// DB returns a *sql.DB bound to the branch: a database/sql handle whose
// every connection is this session, for libraries that want a *sql.DB
// (GORM, sqlx, bun, sqlc's database/sql code, ent). Its statements go
// through Conn's own methods, with the same guards: they run inside the
// branch, one at a time (a statement started while Rows of another are open
// fails at once with xa.ErrSessionBusy), transaction control is refused,
// and each is bounded by its context and the branch's. Arguments go to pgx
// as given (as with pgx's own database/sql driver); values come back as pgx
// decodes them for database/sql.
//
// Begin and BeginTx fail with an error matching xa.ErrTransactionControl:
// the branch's transaction belongs to the transaction manager. Tell
// libraries that wrap writes in a transaction of their own not to (GORM:
// SkipDefaultTransaction). Prepared statements of the *sql.DB send nothing
// when prepared; each execution runs as Conn.Exec or Conn.Query would.
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
		context.AfterFunc(b.life, func() { db.Close() })
	}
	return b.db
}

// opBegin is a Begin refused on the branch's *sql.DB.
const opBegin = "begin"

// dbSession is the session as sessiondb drives it.
type dbSession struct{ c *Conn }

func (s dbSession) Exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	tag, err := s.c.Exec(ctx, query, sessiondb.Args(args, false)...)
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (s dbSession) Query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.c.Query(ctx, query, sessiondb.Args(args, false)...)
	if err != nil {
		return nil, err
	}
	b := s.c.b
	b.mu.Lock()
	tm := (*pgtype.Map)(nil)
	if b.conn != nil {
		tm = b.conn.Conn().TypeMap()
	}
	b.mu.Unlock()
	if tm == nil {
		tm = pgtype.NewMap()
	}
	return &pgRows{rows: rows, tm: tm}, nil
}

func (s dbSession) Usable() error {
	b := s.c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state != stActive:
		return b.err(opExec, xa.ErrBranchDone, errors.New("the branch has been prepared or ended"))
	case b.broken != nil:
		return b.broken
	}
	return nil
}

func (s dbSession) RefuseBegin() error {
	return s.c.b.err(opBegin, xa.ErrTransactionControl, errRefuseBegin)
}

// errRefuseBegin says why Begin fails on a branch's *sql.DB.
var errRefuseBegin = errors.New("refused, not sent: the branch's transaction belongs to the transaction manager; " +
	"run the statements on the *sql.DB itself (libraries that open a transaction of their own for each write must be told not to, GORM with SkipDefaultTransaction)")

// pgRows adapts the session's pgx.Rows to driver.Rows: each value is
// decoded for database/sql by its type's codec (pgtype), as pgx's own
// database/sql driver does.
type pgRows struct {
	rows pgx.Rows
	tm   *pgtype.Map
	cols []string
}

var _ driver.RowsColumnTypeDatabaseTypeName = (*pgRows)(nil)

func (r *pgRows) Columns() []string {
	if r.cols == nil {
		fds := r.rows.FieldDescriptions()
		r.cols = make([]string, len(fds))
		for i, fd := range fds {
			r.cols[i] = fd.Name
		}
	}
	return r.cols
}

func (r *pgRows) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

func (r *pgRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	fds := r.rows.FieldDescriptions()
	raw := r.rows.RawValues()
	for i := range dest {
		if i >= len(raw) || raw[i] == nil {
			dest[i] = nil
			continue
		}
		fd := fds[i]
		if t, ok := r.tm.TypeForOID(fd.DataTypeOID); ok {
			v, err := t.Codec.DecodeDatabaseSQLValue(r.tm, fd.DataTypeOID, fd.Format, raw[i])
			if err != nil {
				return err
			}
			dest[i] = v
			continue
		}
		if fd.Format == pgtype.TextFormatCode {
			dest[i] = string(raw[i])
		} else {
			dest[i] = bytes.Clone(raw[i])
		}
	}
	return nil
}

func (r *pgRows) ColumnTypeDatabaseTypeName(i int) string {
	fds := r.rows.FieldDescriptions()
	if i < len(fds) {
		if t, ok := r.tm.TypeForOID(fds[i].DataTypeOID); ok {
			return strings.ToUpper(t.Name)
		}
	}
	return ""
}
