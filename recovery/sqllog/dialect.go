package sqllog

import (
	"fmt"
	"strconv"
	"strings"
)

// Dialect is the SQL dialect of the log's database.
type Dialect int

const (
	// Postgres: PostgreSQL 12 or later.
	Postgres Dialect = 1 + iota
	// MySQL: MySQL 8.0 or later, or MariaDB 10.6 or later (JSON_TABLE).
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return "Dialect(invalid)"
}

// ParseDialect returns the dialect named s: "postgres" (also
// "postgresql") or "mysql" (also "mariadb").
func ParseDialect(s string) (Dialect, error) {
	switch strings.ToLower(s) {
	case "postgres", "postgresql":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	}
	return 0, fmt.Errorf("sqllog: %q is not a log database kind; want postgres or mysql", s)
}

// q writes a statement for dialect d: the statement is written with ?
// placeholders, which PostgreSQL's become $1, $2, ... (no statement of this
// package has a ? anywhere else).
func (d Dialect) q(s string) string {
	if d != Postgres {
		return s
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// now is the expression of the database's clock in microseconds since the
// Unix epoch, or of the parameter p when it is not NULL (Options.DBNow, for
// tests). PostgreSQL: clock_timestamp(), the time of the call (not of the
// transaction's start). MySQL: UTC_TIMESTAMP(6), the statement's start,
// whatever the session's time zone.
func (d Dialect) now(p string) string {
	if d == Postgres {
		return "COALESCE(" + p + "::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)"
	}
	return "COALESCE(" + p + ", TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))"
}

// shareLock is the clause of a read that takes a shared row lock.
func (d Dialect) shareLock() string {
	if d == Postgres {
		return "FOR SHARE"
	}
	return "LOCK IN SHARE MODE" // MariaDB has no FOR SHARE; MySQL 8 has both
}

// syncOn is PostgreSQL's statement that makes the transaction's commit
// wait for its WAL to be flushed (and, with synchronous standbys, for them)
// whatever the session or role says: it never lowers remote_apply.
const syncOn = "SELECT set_config('synchronous_commit', CASE current_setting('synchronous_commit') " +
	"WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END, true)"

// syncOnExpr is syncOn as an expression, for single-statement writes.
const syncOnExpr = "set_config('synchronous_commit', CASE current_setting('synchronous_commit') " +
	"WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END, true)"

// schema returns the statements that create the tables, in order; the
// version row is written after them (see createSchema).
func (d Dialect) schema() []string {
	if d == Postgres {
		return []string{
			`CREATE TABLE IF NOT EXISTS xa_log_schema (
				version integer NOT NULL,
				created_us bigint NOT NULL,
				created_by text NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS xa_log_logs (
				log_id char(16) PRIMARY KEY,
				node varchar(31) NOT NULL UNIQUE,
				identity bytea NOT NULL,
				created_us bigint NOT NULL,
				epoch bigint NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS xa_log_leases (
				log_id char(16) PRIMARY KEY,
				holder text NOT NULL,
				epoch bigint NOT NULL,
				kind varchar(16) NOT NULL,
				ttl_us bigint NOT NULL,
				expires_us bigint NOT NULL,
				acquired_us bigint NOT NULL,
				renewed_us bigint NOT NULL,
				clean boolean NOT NULL,
				node_offset_us bigint NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS xa_log_decisions (
				log_id char(16) NOT NULL,
				gid varchar(64) NOT NULL,
				kind char(1) NOT NULL,
				epoch bigint NOT NULL,
				logged_us bigint NOT NULL,
				begun_us bigint NOT NULL,
				keep_us bigint NOT NULL,
				reason text NOT NULL,
				rec bytea,
				PRIMARY KEY (log_id, gid))`,
			`CREATE TABLE IF NOT EXISTS xa_log_delegations (
				log_id char(16) NOT NULL,
				participant text NOT NULL,
				tbl text NOT NULL,
				table_id varchar(32) NOT NULL,
				logged_us bigint NOT NULL,
				PRIMARY KEY (log_id, participant))`,
			`CREATE TABLE IF NOT EXISTS xa_log_participants (
				log_id char(16) NOT NULL,
				name text NOT NULL,
				store_id varchar(32) NOT NULL,
				store_where text NOT NULL,
				logged_us bigint NOT NULL,
				PRIMARY KEY (log_id, name))`,
			`CREATE TABLE IF NOT EXISTS xa_log_heuristics (
				seq bigserial PRIMARY KEY,
				log_id char(16) NOT NULL,
				rm text NOT NULL,
				xid text NOT NULL,
				time_us bigint NOT NULL,
				rec bytea NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS xa_log_heuristics_xid ON xa_log_heuristics (log_id, rm, xid)`,
			`CREATE TABLE IF NOT EXISTS xa_log_events (
				seq bigserial PRIMARY KEY,
				log_id char(16) NOT NULL,
				at_us bigint NOT NULL,
				action varchar(16) NOT NULL,
				epoch bigint NOT NULL,
				holder text NOT NULL,
				prev_holder text NOT NULL,
				prev_epoch bigint NOT NULL,
				reason text NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS xa_log_events_log ON xa_log_events (log_id, seq)`,
		}
	}
	// InnoDB, row format DYNAMIC (the default): keys up to 3072 bytes, so
	// participant names (up to 1 KiB) are VARBINARY.
	return []string{
		`CREATE TABLE IF NOT EXISTS xa_log_schema (
			version INT NOT NULL,
			created_us BIGINT NOT NULL,
			created_by VARCHAR(255) NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_logs (
			log_id CHAR(16) CHARACTER SET ascii NOT NULL PRIMARY KEY,
			node VARCHAR(31) CHARACTER SET ascii COLLATE ascii_bin NOT NULL UNIQUE,
			identity VARBINARY(1024) NOT NULL,
			created_us BIGINT NOT NULL,
			epoch BIGINT NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_leases (
			log_id CHAR(16) CHARACTER SET ascii NOT NULL PRIMARY KEY,
			holder VARCHAR(512) NOT NULL,
			epoch BIGINT NOT NULL,
			kind VARCHAR(16) NOT NULL,
			ttl_us BIGINT NOT NULL,
			expires_us BIGINT NOT NULL,
			acquired_us BIGINT NOT NULL,
			renewed_us BIGINT NOT NULL,
			clean BOOLEAN NOT NULL,
			node_offset_us BIGINT NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_decisions (
			log_id CHAR(16) CHARACTER SET ascii NOT NULL,
			gid VARBINARY(64) NOT NULL,
			kind CHAR(1) CHARACTER SET ascii NOT NULL,
			epoch BIGINT NOT NULL,
			logged_us BIGINT NOT NULL,
			begun_us BIGINT NOT NULL,
			keep_us BIGINT NOT NULL,
			reason MEDIUMTEXT NOT NULL,
			rec MEDIUMBLOB,
			PRIMARY KEY (log_id, gid)) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_delegations (
			log_id CHAR(16) CHARACTER SET ascii NOT NULL,
			participant VARBINARY(1024) NOT NULL,
			tbl VARBINARY(1024) NOT NULL,
			table_id VARCHAR(32) CHARACTER SET ascii NOT NULL,
			logged_us BIGINT NOT NULL,
			PRIMARY KEY (log_id, participant)) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_participants (
			log_id CHAR(16) CHARACTER SET ascii NOT NULL,
			name VARBINARY(1024) NOT NULL,
			store_id VARCHAR(32) CHARACTER SET ascii NOT NULL,
			store_where VARBINARY(1024) NOT NULL,
			logged_us BIGINT NOT NULL,
			PRIMARY KEY (log_id, name)) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_heuristics (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			log_id CHAR(16) CHARACTER SET ascii NOT NULL,
			rm VARBINARY(1024) NOT NULL,
			xid VARBINARY(512) NOT NULL,
			time_us BIGINT NOT NULL,
			rec MEDIUMBLOB NOT NULL,
			KEY xa_log_heuristics_xid (log_id, rm(255), xid(255))) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS xa_log_events (
			seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			log_id CHAR(16) CHARACTER SET ascii NOT NULL,
			at_us BIGINT NOT NULL,
			action VARCHAR(16) NOT NULL,
			epoch BIGINT NOT NULL,
			holder VARCHAR(512) NOT NULL,
			prev_holder VARCHAR(512) NOT NULL,
			prev_epoch BIGINT NOT NULL,
			reason TEXT NOT NULL,
			KEY xa_log_events_log (log_id, seq)) ENGINE=InnoDB`,
	}
}

// tables are the log's tables, for checks and doctor.
var tables = []string{"xa_log_schema", "xa_log_logs", "xa_log_leases", "xa_log_decisions", "xa_log_delegations",
	"xa_log_participants", "xa_log_heuristics", "xa_log_events"}
