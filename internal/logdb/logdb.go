// Package logdb opens the database of a SQL decision log
// (recovery/sqllog) with the driver of its kind and the settings the log
// needs: PostgreSQL through pgx's database/sql driver, MySQL and MariaDB
// through go-sql-driver/mysql. recovery/sqllog itself speaks database/sql
// only (recovery imports no driver: internal/layout); xactl, the lab's
// coordinators and the tests open its database here, the same way.
package logdb

import (
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/xadb/xa/recovery/sqllog"
)

// Kinds of log databases, as log.kind names them in xactl's configuration.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
)

// DefaultIdle is Options.Idle's default.
const DefaultIdle = 10 * time.Second

// Options qualify Open.
type Options struct {
	// Idle is how long a session of the log may sit idle inside a
	// transaction (MySQL: idle at all) before the server closes it and
	// rolls its transaction back: it bounds how long a process paused in
	// the middle of a write (SIGSTOP, a VM frozen) holds the log's row, on
	// which a takeover waits. Default DefaultIdle; keep it near the
	// lease's TTL.
	Idle time.Duration
}

// Open opens the log database of kind (postgres or mysql, also
// postgresql and mariadb) at dsn: a postgres:// URL or key=value string,
// or a go-sql-driver/mysql DSN (user:password@tcp(host:3306)/db). It does
// not connect: the first use does.
func Open(kind, dsn string, opts ...Options) (*sql.DB, sqllog.Dialect, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	d, err := sqllog.ParseDialect(kind)
	if err != nil {
		return nil, 0, err
	}
	if dsn == "" {
		return nil, 0, fmt.Errorf("logdb: the %s log database has no DSN (log.dsn)", d)
	}
	var db *sql.DB
	switch d {
	case sqllog.Postgres:
		c, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, 0, fmt.Errorf("logdb: the PostgreSQL DSN of the log database: %w", err)
		}
		if c.RuntimeParams == nil {
			c.RuntimeParams = map[string]string{}
		}
		c.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(o.Idle.Milliseconds(), 10)
		db = stdlib.OpenDB(*c)
	case sqllog.MySQL:
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, 0, fmt.Errorf("logdb: the MySQL DSN of the log database: %w", err)
		}
		// One round trip per statement (no server-side prepare and
		// close around each); the driver escapes by the server's
		// NO_BACKSLASH_ESCAPES.
		c.InterpolateParams = true
		// A group-commit batch is one transaction of several statements,
		// sent in one round trip (recovery/sqllog).
		c.MultiStatements = true
		// A promoted replica's read-only error closes the connection, so
		// that the pool reconnects to the new primary.
		c.RejectReadOnly = true
		if c.Timeout == 0 {
			c.Timeout = 10 * time.Second
		}
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		// MySQL has no timeout for a session idle inside a transaction
		// alone: wait_timeout closes any idle session; the pool closes
		// its idle connections before that.
		c.Params["wait_timeout"] = strconv.FormatInt(max(int64(o.Idle.Seconds()), 1), 10)
		conn, err := mysql.NewConnector(c)
		if err != nil {
			return nil, 0, fmt.Errorf("logdb: the MySQL DSN of the log database: %w", err)
		}
		db = sql.OpenDB(conn)
		db.SetConnMaxIdleTime(o.Idle / 2)
	}
	// Group commit keeps several batches in flight besides the reads and
	// the lease's renewals: keep connections instead of opening one per
	// statement (database/sql keeps 2 idle by default).
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(32)
	if d == sqllog.Postgres {
		db.SetConnMaxIdleTime(5 * time.Minute)
	}
	return db, d, nil
}
