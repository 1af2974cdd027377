package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/xadb/xa/xa"
)

// The decision table holds two kinds of rows under one primary key, the
// transaction's gtrid (xa.GlobalID.String()):
//
//   - commit decisions (aborted = false), inserted by CommitLast in the
//     same local transaction as the last resource's own work; record is an
//     xa.CommitRecord;
//   - abort markers (aborted = true), inserted by ClaimAbort before
//     recovery presumes abort; record is markerPrefix followed by an
//     xa.AbortRecord, which an xa.CommitRecord decoder refuses (so that a
//     reader that does not know the column fails instead of taking a
//     marker for a commit).
//
// The key is the fence: of a commit row and an abort marker for one
// transaction, the server lets exactly one commit. An insert that meets an
// uncommitted row with its key waits until that row's transaction ends.

// markerPrefix starts the record of an abort marker: version 0 is no
// xa.CommitRecord version.
const markerPrefix = 0x00

// maxMarkerReason bounds the reason stored with an abort marker.
const maxMarkerReason = 1 << 10

// DecisionTableDDL returns the statement that creates a decision table.
func DecisionTableDDL(table string) (string, error) {
	id, err := tableIdent(table)
	if err != nil {
		return "", err
	}
	return "CREATE TABLE IF NOT EXISTS " + id + " (gtrid text PRIMARY KEY, node text NOT NULL, record bytea NOT NULL, " +
		"logged timestamptz NOT NULL DEFAULT now(), aborted boolean NOT NULL DEFAULT false)", nil
}

// addAbortedDDL returns the statement that adds the column "aborted" to a
// decision table created by an earlier version (whose rows are all commit
// decisions).
func addAbortedDDL(id string) string {
	return "ALTER TABLE " + id + " ADD COLUMN IF NOT EXISTS aborted boolean NOT NULL DEFAULT false"
}

// tableIdent quotes a plain or schema-qualified table name.
func tableIdent(table string) (string, error) {
	parts := strings.Split(table, ".")
	if table == "" || len(parts) > 2 {
		return "", fmt.Errorf("decision table %q: want table or schema.table", table)
	}
	for _, p := range parts {
		if p == "" {
			return "", fmt.Errorf("decision table %q: empty name part", table)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

// openDecisionTable finds the decision table (creating it and its
// identity row first when init is set), resolves its name to the schema
// it is in, adds the column "aborted" to one created by an earlier
// version, and reads its identity. A table that is up to date costs two
// queries and no lock: ALTER TABLE would take an exclusive lock even when
// it has nothing to do, and queue every last-resource commit behind any
// commit in flight.
func (rm *RM) openDecisionTable(ctx context.Context, table string, init bool) error {
	ddl, err := DecisionTableDDL(table)
	if err != nil {
		return err
	}
	quoted, text, exists, err := rm.qualified(ctx, table)
	if err != nil {
		return fmt.Errorf("decision table %s: %w", table, err)
	}
	if !exists {
		if !init {
			return missingTableError{&xa.IdentityError{Store: fmt.Sprintf("decision table of participant %q", rm.name),
				Why: fmt.Sprintf("no table %s on the role's search_path: recovery never creates one (a new, empty table would say "+
					"\"no decision\" for transactions decided in the real one)", table),
				Fix: "connect as the role the participant was set up with, or give decision_table schema-qualified; " +
					"to set a new participant up: xactl participant init"}}
		}
		if err := rm.createTable(ctx, ddl); err != nil {
			return fmt.Errorf("%w (create it as a user who may: %s)", err, ddl)
		}
		if quoted, text, exists, err = rm.qualified(ctx, table); err != nil {
			return fmt.Errorf("decision table %s: %w", table, err)
		}
		if !exists {
			return fmt.Errorf("decision table %s: not on the role's search_path after %s", table, ddl)
		}
	}
	var migrated bool
	err = rm.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'aborted' AND NOT attisdropped)`,
		quoted).Scan(&migrated)
	if err != nil {
		return fmt.Errorf("decision table %s: %w", text, err)
	}
	if !migrated {
		// A table created by an earlier version, or concurrently by one.
		alter := addAbortedDDL(quoted)
		if _, err := rm.pool.Exec(ctx, alter); err != nil {
			return fmt.Errorf("%w (add the column as a user who may: %s)", err, alter)
		}
	}
	if init {
		if err := rm.initTableIdentity(ctx, quoted); err != nil {
			return fmt.Errorf("decision table %s: writing its identity: %w", text, err)
		}
	}
	id, err := rm.readTableIdentity(ctx, quoted, text)
	if err != nil {
		return err
	}
	rm.decisions, rm.decisionsText, rm.tableIdent = quoted, text, id
	return nil
}

// ErrNoDecisionTable is matched by the error of Open (without Init) when
// no decision table is found under Config.DecisionTable as the role's
// search_path resolves it (the error is also an *xa.IdentityError). Set-up
// tools use it to tell a missing table, which Init would create, from one
// that exists without its identity row.
var ErrNoDecisionTable = errors.New("postgres: no decision table under the configured name")

// missingTableError is the *xa.IdentityError of a missing decision table;
// it also matches ErrNoDecisionTable.
type missingTableError struct{ *xa.IdentityError }

func (e missingTableError) Unwrap() error        { return e.IdentityError }
func (e missingTableError) Is(target error) bool { return target == ErrNoDecisionTable }

// HasDecisionTable reports whether the participant has a decision table
// (Config.DecisionTable): only then is it a last resource and a decision
// store. Every *RM has the methods of xa.DecisionStore; recovery
// must treat an RM as a store only when this reports true (ClaimAbort
// fails on one without a table).
func (rm *RM) HasDecisionTable() bool { return rm.decisions != "" }

// Decisions returns the commit decisions stored in the decision table by
// branches that committed last (xa.DecisionStore), oldest first;
// none when the participant is no last resource. Abort markers are never
// returned. A row that does not decode is an error: recovery must not
// presume anything about its transaction.
func (rm *RM) Decisions(ctx context.Context) ([]xa.CommitRecord, error) {
	if rm.decisions == "" {
		return nil, nil
	}
	rows, err := rm.pool.Query(ctx, "SELECT gtrid, record FROM "+rm.decisions+" WHERE NOT aborted AND gtrid <> $1 ORDER BY logged", identityKey)
	if err != nil {
		return nil, rm.xaErr(opRecover, xa.XID{}, err)
	}
	defer rows.Close()
	var out []xa.CommitRecord
	for rows.Next() {
		var gtrid string
		var b []byte
		if err := rows.Scan(&gtrid, &b); err != nil {
			return nil, rm.xaErr(opRecover, xa.XID{}, err)
		}
		var rec xa.CommitRecord
		if err := rec.UnmarshalBinary(b); err != nil || rec.ID.String() != gtrid {
			return nil, &xa.Error{Op: opRecover, RM: rm.name, Err: fmt.Errorf("decision %q in %s does not decode: %v", gtrid, rm.decisions, err)}
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, rm.xaErr(opRecover, xa.XID{}, err)
	}
	return out, nil
}

// Decision returns the stored commit decision of id, if any; an abort
// marker is not one.
func (rm *RM) Decision(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	if rm.decisions == "" {
		return xa.CommitRecord{}, false, nil
	}
	var b []byte
	err := rm.pool.QueryRow(ctx, "SELECT record FROM "+rm.decisions+" WHERE gtrid = $1 AND NOT aborted", id.String()).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return xa.CommitRecord{}, false, nil
	}
	if err != nil {
		return xa.CommitRecord{}, false, rm.xaErr(opRecover, xa.XID{}, err)
	}
	var rec xa.CommitRecord
	if err := rec.UnmarshalBinary(b); err != nil || rec.ID != id {
		return xa.CommitRecord{}, false, &xa.Error{Op: opRecover, RM: rm.name, Err: fmt.Errorf("decision %s in %s does not decode: %v", id, rm.decisions, err)}
	}
	return rec, true, nil
}

// ForgetDecisions deletes the stored commit decisions of ids, in one
// statement. Abort markers stay (see ForgetAborts).
func (rm *RM) ForgetDecisions(ctx context.Context, ids []xa.GlobalID) error {
	if rm.decisions == "" || len(ids) == 0 {
		return nil
	}
	gtrids := make([]string, len(ids))
	for i, id := range ids {
		gtrids[i] = id.String()
	}
	if _, err := rm.pool.Exec(ctx, "DELETE FROM "+rm.decisions+" WHERE gtrid = ANY($1) AND NOT aborted", gtrids); err != nil {
		return rm.xaErr(opRecover, xa.XID{}, err)
	}
	return nil
}

// ClaimAbort fences a last-resource commit of id before recovery presumes
// abort (xa.DecisionStore): it inserts an abort marker under id's
// key in the decision table, in its own transaction.
//
// A CommitLast of id in flight on the server (its connection may be gone:
// a deferred trigger, a lock wait, a synchronous standby or a slow WAL
// flush keeps its COMMIT running) holds an uncommitted row with the same
// key, and the insert waits for it to end, as long as ctx allows:
//
//   - nil: the marker is stored (now, or by an earlier call) and no commit
//     decision of id can be stored any more: CommitLast of id fails with
//     xa.ErrAbortRecorded;
//   - an error matching xa.ErrCommitRecorded: the commit won; its decision
//     is stored (Decision returns it) and nothing may be rolled back;
//   - an error matching xa.ErrMisconfigured: the participant has no
//     decision table (see HasDecisionTable);
//   - any other error (ctx ended during the wait, a lost reply): nothing
//     is known; nothing may be rolled back on its strength. ClaimAbort may
//     be called again.
func (rm *RM) ClaimAbort(ctx context.Context, id xa.GlobalID, reason string) error {
	x := xa.XID{FormatID: xa.FormatID, Gtrid: id.Gtrid()}
	if rm.decisions == "" {
		return rm.kindErr(opClaimAbort, x, xa.ErrMisconfigured, errors.New(
			"no decision table is configured (Config.DecisionTable): this participant stores no decisions, "+
				"so it neither holds nor can fence a commit; recovery must treat it as a decision store only when HasDecisionTable reports true"))
	}
	payload, err := abortMarker(id, reason, time.Now())
	if err != nil {
		return rm.kindErr(opClaimAbort, x, nil, err)
	}
	// A row found and then gone (a concurrent ForgetDecisions or
	// ForgetAborts) sends us round again.
	for range 3 {
		var inserted bool
		// The marker is a fence: durable whatever synchronous_commit the
		// role, database or a pooled session left (durableCommit).
		err := rm.pool.QueryRow(ctx, "WITH ins AS (INSERT INTO "+rm.decisions+" (gtrid, node, record, aborted) VALUES ($1, $2, $3, true) "+
			"ON CONFLICT (gtrid) DO NOTHING RETURNING 1) SELECT (SELECT count(*) FROM ins) > 0, "+durableCommit,
			id.String(), id.Node, payload).Scan(&inserted, nil)
		if err != nil {
			return rm.xaErr(opClaimAbort, x, err)
		}
		if inserted {
			return nil
		}
		// A row with the key was committed, before our insert or while
		// it waited; this new statement sees it.
		var aborted bool
		err = rm.pool.QueryRow(ctx, "SELECT aborted FROM "+rm.decisions+" WHERE gtrid = $1", id.String()).Scan(&aborted)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return rm.xaErr(opClaimAbort, x, err)
		case aborted:
			return nil
		}
		return rm.kindErr(opClaimAbort, x, xa.ErrCommitRecorded,
			fmt.Errorf("the last resource committed the transaction: its commit decision is stored in %s", rm.decisions))
	}
	return rm.kindErr(opClaimAbort, x, xa.ErrRetryable,
		fmt.Errorf("a row of the transaction in %s kept vanishing between the insert and the read", rm.decisions))
}

// durableCommit is an expression that makes the transaction it runs in
// commit durably whatever synchronous_commit the role, the database or the
// session says: off and local (no wait for the WAL flush, or for a
// synchronous standby) become on; on, remote_write and remote_apply stay.
// PostgreSQL reads the setting when the transaction commits, so it may be
// evaluated anywhere in the transaction's last statement, or in the
// implicit transaction of a single statement. Every statement that is a
// decision or a fence carries it: a decision that a crash can lose after
// it answered would let recovery presume abort of a transaction whose
// other branches committed on its strength.
const durableCommit = "set_config('synchronous_commit', CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') " +
	"THEN 'on' ELSE current_setting('synchronous_commit') END, true)"

// abortMarker encodes the record of an abort marker.
func abortMarker(id xa.GlobalID, reason string, now time.Time) ([]byte, error) {
	if len(reason) > maxMarkerReason {
		reason = strings.ToValidUTF8(reason[:maxMarkerReason], "")
	}
	b, err := xa.AbortRecord{ID: id, Logged: now, Reason: reason}.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append([]byte{markerPrefix}, b...), nil
}

// ForgetAborts deletes the abort markers stored more than retention ago by
// the server's clock (now() - logged), and returns how many
// (xa.DecisionStore). Commit decisions stay. None without a decision
// table.
func (rm *RM) ForgetAborts(ctx context.Context, retention time.Duration) (int, error) {
	if rm.decisions == "" {
		return 0, nil
	}
	if retention < 0 {
		return 0, rm.kindErr(opForgetAborts, xa.XID{}, nil, fmt.Errorf("negative retention %v", retention))
	}
	tag, err := rm.pool.Exec(ctx, "DELETE FROM "+rm.decisions+" WHERE aborted AND logged < now() - $1::bigint * interval '1 microsecond'",
		retention.Microseconds())
	if err != nil {
		return 0, rm.xaErr(opForgetAborts, xa.XID{}, err)
	}
	return int(tag.RowsAffected()), nil
}
