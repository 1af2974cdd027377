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
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/xadb/xa/recovery/sqllog"
)

// Kinds of log databases, as log.kind names them in xactl's configuration.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
)

// Open opens the log database of kind (postgres or mysql, also
// postgresql and mariadb) at dsn: a postgres:// URL or key=value string,
// or a go-sql-driver/mysql DSN (user:password@tcp(host:3306)/db). It does
// not connect: the first use does.
func Open(kind, dsn string) (*sql.DB, sqllog.Dialect, error) {
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
		db, err = sql.Open("pgx", dsn)
	case sqllog.MySQL:
		c, perr := mysql.ParseDSN(dsn)
		if perr != nil {
			return nil, 0, fmt.Errorf("logdb: the MySQL DSN of the log database: %w", perr)
		}
		// One round trip per statement (no server-side prepare and
		// close around each); the driver escapes by the server's
		// NO_BACKSLASH_ESCAPES.
		c.InterpolateParams = true
		// A promoted replica's read-only error closes the connection, so
		// that the pool reconnects to the new primary.
		c.RejectReadOnly = true
		if c.Timeout == 0 {
			c.Timeout = 10 * time.Second
		}
		conn, cerr := mysql.NewConnector(c)
		if cerr != nil {
			return nil, 0, fmt.Errorf("logdb: the MySQL DSN of the log database: %w", cerr)
		}
		db = sql.OpenDB(conn)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("logdb: opening the %s log database: %w", d, err)
	}
	// Group commit keeps several batches in flight besides the reads and
	// the lease's renewals: keep connections instead of opening one per
	// statement (database/sql keeps 2 idle by default).
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, d, nil
}
