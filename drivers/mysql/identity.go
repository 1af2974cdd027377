package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/xadb/xa/xa"
)

// The participant's identity (xa.Identified) lives in a one-row table of
// the database the DSN names, made by an explicit act (Config.Init, xactl
// participant init), never by opening the participant for recovery:
//
//	xa_participant (one TINYINT PRIMARY KEY CHECK (one = 1), id CHAR(32), created DATETIME(6))
//
// id is random (xa.NewStoreID). The row is data: a restart keeps it, and so
// does a replica promoted after a failover (MySQL and MariaDB replicate XA
// PREPARE and this row alike; a replica's server_uuid differs, so it is no
// identity). Another database, another server or a staging copy built
// without the row has none, or another. A logical copy of the database
// loaded elsewhere (mysqldump, mariabackup restored on another host)
// carries the row: MySQL keeps no anchor that a promoted replica shares and
// a copy does not, so such a copy must get an identity of its own (delete
// the row, then init) before it is used as a participant of its own.
//
// A server that is read-only (@@read_only: a replica, or a primary being
// switched over) is refused: its XA RECOVER may lag the primary's, and a
// super user's XA COMMIT there would diverge it.
//
// The first session of the pool reads the row (Open pings, unless
// Config.SkipCheck); every later one reads it again in the same round trip
// as its other start-up questions and is refused when another database, or
// a read-only server, answers.

// identityTable is the identity table's name, in the DSN's database.
const identityTable = "xa_participant"

// IdentityTableDDL is the statement that creates the identity table.
const IdentityTableDDL = "CREATE TABLE IF NOT EXISTS " + identityTable +
	" (one TINYINT NOT NULL PRIMARY KEY CHECK (one = 1), id CHAR(32) CHARACTER SET ascii NOT NULL, created DATETIME(6) NOT NULL) ENGINE=InnoDB"

// initIdentity creates the identity table and its row when missing
// (Config.Init), on the side pool.
func (rm *RM) initIdentity(ctx context.Context) error {
	// A user who may only read the table finds the row there.
	var n int
	if err := rm.side.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+identityTable).Scan(&n); err == nil && n > 0 {
		return nil
	}
	if _, err := rm.side.ExecContext(ctx, IdentityTableDDL); err != nil {
		return rm.rmError(opOpen, xa.XID{}, xa.ErrMisconfigured,
			fmt.Errorf("creating the identity table: %w (create it as a user who may: %s)", err, IdentityTableDDL))
	}
	id, err := xa.NewStoreID()
	if err != nil {
		return err
	}
	if _, err := rm.side.ExecContext(ctx, "INSERT IGNORE INTO "+identityTable+" (one, id, created) VALUES (1, ?, UTC_TIMESTAMP(6))", id); err != nil {
		return rm.rmError(opOpen, xa.XID{}, xa.ErrMisconfigured, fmt.Errorf("writing the participant's identity: %w", err))
	}
	return nil
}

// identityColumns are the columns a new session adds to its first query:
// with the identity known, the row again.
func (rm *RM) identityColumns() string {
	if rm.ident.Load() == nil {
		return ", @@read_only, DATABASE(), @@hostname, @@port"
	}
	return ", @@read_only, DATABASE(), @@hostname, @@port, (SELECT id FROM " + identityTable + " WHERE one = 1)"
}

// checkSessionIdentity checks what a new session's first query said (the
// columns of identityColumns, from index i on) and, for the pool's first
// session, reads the identity row.
func (rm *RM) checkSessionIdentity(ctx context.Context, mc driver.QueryerContext, row []driver.Value, i int) error {
	store := fmt.Sprintf("participant %q", rm.name)
	readOnly, _ := asUint(row[i])
	db, host, port := asString(row[i+1]), asString(row[i+2]), asString(row[i+3])
	where := fmt.Sprintf("database %s on %s:%s", db, host, port)
	if row[i+1] == nil {
		where = fmt.Sprintf("no database, on %s:%s", host, port)
	}
	if readOnly == 1 {
		return &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: "the server is read-only (@@read_only = ON: a replica?): its XA RECOVER may lag the primary's, and commits there would diverge it",
			Fix: "point the participant's DSN at the primary"}
	}
	// The row has the identity column only if the identity was known
	// when the session's first query was built; another session may have
	// read it since (SkipCheck: the application's first statements open
	// sessions together). Without the column, the row is read below.
	if want := rm.ident.Load(); want != nil && len(row) > i+4 {
		got := asString(row[i+4])
		if got != want.ID {
			return &xa.IdentityError{Store: store, Expected: *want, Found: xa.StoreIdentity{ID: got, Where: where},
				Why: "a new session reached another database than the participant was opened on",
				Fix: "check the DSN (host, port, database) and restart"}
		}
		return nil
	}
	if row[i+1] == nil {
		return &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: "the DSN names no database: the participant's identity lives in a table of its database",
			Fix: "name the database in the DSN (user:pw@tcp(host:3306)/bank)"}
	}
	id, err := rm.readIdentityRow(ctx, mc, where)
	if err != nil {
		return err
	}
	if !rm.ident.CompareAndSwap(nil, &id) {
		if other := rm.ident.Load(); !other.Same(id) {
			return &xa.IdentityError{Store: store, Expected: *other, Found: id,
				Why: "sessions opened at the same time reached different databases", Fix: "check the DSN (host, port, database)"}
		}
	}
	return nil
}

// readIdentityRow reads the identity row on a new session.
func (rm *RM) readIdentityRow(ctx context.Context, mc driver.QueryerContext, where string) (xa.StoreIdentity, error) {
	store := fmt.Sprintf("participant %q", rm.name)
	row, err := queryRow(ctx, mc, "SELECT id FROM "+identityTable+" WHERE one = 1")
	var none *noRowError
	switch {
	case errNumber(err) == erNoSuchTable || errors.As(err, &none):
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: "the database has no identity (no row in table " + identityTable + ")",
			Fix: "point the DSN at the database the participant was set up in, or, for a new participant, set it up once: xactl participant init"}
	case err != nil:
		return xa.StoreIdentity{}, err
	}
	id := xa.StoreIdentity{ID: asString(row[0]), Where: "MariaDB/MySQL " + where}
	if err := xa.ValidateStoreID(id.ID); err != nil {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: "the identity row is damaged: " + err.Error(), Fix: "restore the row from a backup of this database"}
	}
	return id, nil
}

// Identity implements xa.Identified: the identity the pool's first session
// read (Open reads it, unless Config.SkipCheck; then the first statement
// does).
func (rm *RM) Identity() (xa.StoreIdentity, error) {
	if id := rm.ident.Load(); id != nil {
		return *id, nil
	}
	return xa.StoreIdentity{}, &xa.IdentityError{Store: fmt.Sprintf("participant %q", rm.name),
		Why: "the participant's identity is not known yet: no session has reached its database"}
}
