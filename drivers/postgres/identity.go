package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/xa"
)

// The participant's identity (xa.Identified) lives in a one-row table of
// its database, made by an explicit act (Config.Init, xactl participant
// init), never by opening the participant for recovery:
//
//	xa_participant (one boolean PRIMARY KEY, id text, system_identifier text, database_oid oid, created timestamptz)
//
// id is random (xa.NewStoreID). system_identifier and database_oid anchor
// the row to the database it was made in: a physical standby, a promoted
// one and a restart keep both (they are the cluster's and the catalog's),
// while a dump restored into another cluster or database carries the row
// but not its anchors. Open reads the row and compares its anchors with the
// database that answers; a row without its anchors is a copy, and a
// database without the row, or a standby (pg_is_in_recovery()), has no
// identity: Open fails with an *xa.IdentityError. Every session the pool
// opens afterwards reads the row and compares its anchors again in its
// first round trip, so a DSN that starts to reach another database (a DNS
// change, a failover to a stranger, a restored copy) is refused there.
//
// A decision table carries an identity of its own in a reserved row
// (gtrid identityKey, aborted false): a table found under the configured
// name that lacks it, or has another, is not the one the decision log
// delegated to.

// DefaultIdentityTable is the identity table's name when
// Config.IdentityTable is empty. Like every unqualified name it is found
// through the role's search_path: give it schema-qualified when roles
// differ in theirs.
const DefaultIdentityTable = "xa_participant"

// identityKey is the gtrid of a decision table's identity row; no
// xa.GlobalID text starts with "xa:".
const identityKey = "xa:table-identity"

// IdentityTableDDL returns the statement that creates an identity table.
func IdentityTableDDL(table string) (string, error) {
	id, err := tableIdent(table)
	if err != nil {
		return "", err
	}
	return "CREATE TABLE IF NOT EXISTS " + id + " (one boolean PRIMARY KEY DEFAULT true CHECK (one), id text NOT NULL, " +
		"system_identifier text NOT NULL, database_oid oid NOT NULL, created timestamptz NOT NULL DEFAULT now())", nil
}

// qualified returns a table's schema-qualified name, quoted and as text,
// if it exists: the name as the role's search_path resolves it now, fixed
// for every later statement.
func (rm *RM) qualified(ctx context.Context, table string) (quoted, text string, ok bool, err error) {
	id, err := tableIdent(table)
	if err != nil {
		return "", "", false, err
	}
	var schema, name string
	err = rm.pool.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, id).Scan(&schema, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	return pgx.Identifier{schema, name}.Sanitize(), schema + "." + name, true, nil
}

// initIdentity creates the identity table and its row when missing
// (Config.Init).
func (rm *RM) initIdentity(ctx context.Context, table string) error {
	ddl, err := IdentityTableDDL(table)
	if err != nil {
		return err
	}
	quoted, _, ok, err := rm.qualified(ctx, table)
	if err != nil {
		return err
	}
	if !ok {
		if err := rm.createTable(ctx, ddl); err != nil {
			return fmt.Errorf("creating the identity table: %w (create it as a user who may: %s)", err, ddl)
		}
		if quoted, _, ok, err = rm.qualified(ctx, table); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("creating the identity table: %s is not on the role's search_path after %s", table, ddl)
		}
	}
	// A role that may only read the table finds the row there.
	var has bool
	if err := rm.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+quoted+")").Scan(&has); err != nil {
		return fmt.Errorf("reading the identity table %s: %w", quoted, err)
	}
	if has {
		return nil
	}
	id, err := xa.NewStoreID()
	if err != nil {
		return err
	}
	_, err = rm.pool.Exec(ctx, "INSERT INTO "+quoted+" (id, system_identifier, database_oid) "+
		"SELECT $1, (SELECT system_identifier::text FROM pg_control_system()), (SELECT oid FROM pg_database WHERE datname = current_database()) "+
		"ON CONFLICT (one) DO NOTHING", id)
	if err != nil {
		return fmt.Errorf("writing the participant's identity into %s: %w", quoted, err)
	}
	return nil
}

// createTable runs a CREATE TABLE IF NOT EXISTS. Two sessions running it
// at once (processes set up together, each with Init) may both find the
// name free: the loser fails on the catalogue's unique index (23505 on
// pg_type), with 42710 (the table's row type already exists) or with
// 42P07 once the winner has committed. Each means the table now exists,
// which is what the caller asked for; it checks so.
func (rm *RM) createTable(ctx context.Context, ddl string) error {
	_, err := rm.pool.Exec(ctx, ddl)
	if s := sqlState(err); s == "23505" || s == "42710" || s == "42P07" {
		return nil
	}
	return err
}

// adoptIdentity re-anchors the identity row to the database that answers,
// keeping its id (Config.Adopt).
func (rm *RM) adoptIdentity(ctx context.Context, table string) error {
	quoted, _, ok, err := rm.qualified(ctx, table)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("adopting the identity: no table %s on the role's search_path", table)
	}
	_, err = rm.pool.Exec(ctx, "UPDATE "+quoted+" SET system_identifier = (SELECT system_identifier::text FROM pg_control_system()), "+
		"database_oid = (SELECT oid FROM pg_database WHERE datname = current_database())")
	return err
}

// readIdentity reads the participant's identity at Open; see the comment
// at the top of this file.
func (rm *RM) readIdentity(ctx context.Context, table string) (xa.StoreIdentity, error) {
	store := fmt.Sprintf("participant %q", rm.name)
	var (
		db, user, sysid          string
		dboid                    uint32
		standby                  bool
		rowID, rowSys            *string
		rowOID                   *uint32
		quoted, text, found, err = "", "", false, error(nil)
	)
	if quoted, text, found, err = rm.qualified(ctx, table); err != nil {
		return xa.StoreIdentity{}, err
	}
	err = rm.pool.QueryRow(ctx, `SELECT current_database()::text, current_user::text, (SELECT system_identifier::text FROM pg_control_system()),
		(SELECT oid FROM pg_database WHERE datname = current_database()), pg_is_in_recovery()`).Scan(&db, &user, &sysid, &dboid, &standby)
	if err != nil {
		return xa.StoreIdentity{}, err
	}
	where := fmt.Sprintf("PostgreSQL database %s (oid %d) of system %s, as role %s", db, dboid, sysid, user)
	if standby {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: "the server is a standby (pg_is_in_recovery): its prepared transactions may lag the primary's, and it can commit none",
			Fix: "point the participant's DSN at the primary"}
	}
	if !found {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: fmt.Sprintf("the database has no identity: no table %s on the role's search_path", table),
			Fix: "connect as the role (or to the database) the participant was set up with, give identity_table schema-qualified, " +
				"or, for a new participant, set it up once: xactl participant init"}
	}
	err = rm.pool.QueryRow(ctx, "SELECT id, system_identifier, database_oid FROM "+quoted).Scan(&rowID, &rowSys, &rowOID)
	if sqlState(err) == "42501" {
		return xa.StoreIdentity{}, fmt.Errorf("the role may not read the identity table %s (GRANT SELECT ON %s TO %s): %w", text, quoted, user, err)
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return xa.StoreIdentity{}, err
	}
	where += ", table " + text
	if rowID == nil {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where},
			Why: fmt.Sprintf("the identity table %s holds no row", text),
			Fix: "set the participant up once: xactl participant init"}
	}
	id := xa.StoreIdentity{ID: *rowID, Where: where}
	if err := xa.ValidateStoreID(id.ID); err != nil {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: where}, Why: "the identity row is damaged: " + err.Error(),
			Fix: "restore the row from a backup of this database"}
	}
	if rowSys == nil || rowOID == nil || *rowSys != sysid || *rowOID != dboid {
		made := "unknown"
		if rowSys != nil && rowOID != nil {
			made = fmt.Sprintf("database oid %d of system %s", *rowOID, *rowSys)
		}
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: id,
			Why: fmt.Sprintf("a copy: its identity row was made in %s, not in this database: a dump restored elsewhere carries the row, "+
				"but not the prepared transactions and decisions of the original", made),
			Fix: "point the participant at the original database; if this database is the same data moved by pg_upgrade, " +
				"adopt it (xactl participant init --adopt); if it is to be a participant of its own, delete the row and run xactl participant init"}
	}
	rm.identTable = quoted
	return id, nil
}

// checkSession is the pool's AfterConnect: every new session reads the
// identity row and its anchors again, in its first round trip, and is
// refused when another database, a copy (or a standby) answers.
func (rm *RM) checkSession(ctx context.Context, c *pgx.Conn) error {
	want := rm.ident.Load()
	if want == nil {
		return nil
	}
	var id string
	var standby, anchored bool
	// The anchors too, as Open checks them: a copy (a dump restored into
	// another database or cluster) carries the id.
	err := c.QueryRow(ctx, "SELECT i.id, i.system_identifier = (SELECT system_identifier::text FROM pg_control_system()) "+
		"AND i.database_oid = (SELECT oid FROM pg_database WHERE datname = current_database()), pg_is_in_recovery() "+
		"FROM (SELECT 1) one LEFT JOIN "+rm.identTable+" i ON true", pgx.QueryExecModeExec).Scan(&id, &anchored, &standby)
	switch {
	case err != nil:
		return &xa.IdentityError{Store: fmt.Sprintf("participant %q", rm.name), Expected: *want,
			Why: "a new session could not read the participant's identity: " + err.Error(),
			Fix: "check that the DSN still reaches the database the participant was opened on"}
	case standby:
		return &xa.IdentityError{Store: fmt.Sprintf("participant %q", rm.name), Expected: *want,
			Why: "a new session reached a standby", Fix: "point the participant's DSN at the primary"}
	case id != want.ID:
		return &xa.IdentityError{Store: fmt.Sprintf("participant %q", rm.name), Expected: *want, Found: xa.StoreIdentity{ID: id},
			Why: "a new session reached another database than the participant was opened on",
			Fix: "check the DSN (host, port, database) and restart"}
	case !anchored:
		return &xa.IdentityError{Store: fmt.Sprintf("participant %q", rm.name), Expected: *want, Found: xa.StoreIdentity{ID: id},
			Why: "a new session reached a copy of the participant's database (its identity row was made in another database or cluster)",
			Fix: "check the DSN (host, port, database) and restart"}
	}
	return nil
}

// Identity implements xa.Identified: the identity read when the
// participant was opened.
func (rm *RM) Identity() (xa.StoreIdentity, error) {
	if id := rm.ident.Load(); id != nil {
		return *id, nil
	}
	return xa.StoreIdentity{}, &xa.IdentityError{Store: fmt.Sprintf("participant %q", rm.name), Why: "the participant was opened without its identity"}
}

// initTableIdentity writes a decision table's identity row when it has
// none (Config.Init).
func (rm *RM) initTableIdentity(ctx context.Context, quoted string) error {
	var has bool
	if err := rm.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+quoted+" WHERE gtrid = $1)", identityKey).Scan(&has); err != nil || has {
		return err
	}
	id, err := xa.NewStoreID()
	if err != nil {
		return err
	}
	_, err = rm.pool.Exec(ctx, "INSERT INTO "+quoted+" (gtrid, node, record) VALUES ($1, '', $2) ON CONFLICT (gtrid) DO NOTHING",
		identityKey, []byte(id))
	return err
}

// readTableIdentity reads a decision table's identity row.
func (rm *RM) readTableIdentity(ctx context.Context, quoted, text string) (xa.StoreIdentity, error) {
	var b []byte
	err := rm.pool.QueryRow(ctx, "SELECT record FROM "+quoted+" WHERE gtrid = $1", identityKey).Scan(&b)
	store := fmt.Sprintf("decision table of participant %q", rm.name)
	if errors.Is(err, pgx.ErrNoRows) {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: text},
			Why: fmt.Sprintf("the decision table %s has no identity row: it was not made by xactl participant init (or Config.Init) "+
				"of this version", text),
			Fix: "if this is the table the transaction manager has used, give it its identity once with xactl participant init; " +
				"otherwise point decision_table at that table (schema-qualified)"}
	}
	if err != nil {
		return xa.StoreIdentity{}, err
	}
	id := xa.StoreIdentity{ID: string(b), Where: "table " + text}
	if err := xa.ValidateStoreID(id.ID); err != nil {
		return xa.StoreIdentity{}, &xa.IdentityError{Store: store, Found: xa.StoreIdentity{Where: text}, Why: "the identity row is damaged: " + err.Error()}
	}
	return id, nil
}

// DecisionTableIdentity implements xa.DecisionTable: the decision table's
// qualified name and identity, read at Open.
func (rm *RM) DecisionTableIdentity() (string, xa.StoreIdentity, error) {
	if rm.decisions == "" {
		return "", xa.StoreIdentity{}, errors.New("postgres: no decision table is configured")
	}
	return rm.decisionsText, rm.tableIdent, nil
}

// sqlState returns the SQLSTATE of a server error, "" for any other.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
