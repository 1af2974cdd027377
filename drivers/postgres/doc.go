// Package postgres is the PostgreSQL resource manager: it takes part in
// xa transactions with PostgreSQL's own two-phase commit (BEGIN ...
// PREPARE TRANSACTION 'gid', COMMIT PREPARED, ROLLBACK PREPARED,
// pg_prepared_xacts), on a pgx connection pool.
//
// # What it owns
//
//   - Sessions. A branch pins one pooled connection from its first
//     statement (Start does no I/O) until PREPARE TRANSACTION; the
//     prepared transaction then belongs to no session and the connection
//     goes back to the pool. Phase 2 runs on any pooled connection,
//     outside any transaction block. A connection
//     whose state is unknown (lost reply, statement that would not
//     cancel) is closed, never pooled.
//   - Round trips. BEGIN travels with the branch's first statement; a
//     branch that ran nothing votes read-only without I/O; a branch known
//     to have written (a command tag INSERT/UPDATE/DELETE/MERGE/COPY with
//     rows, or DDL) prepares in one round trip; any other branch first
//     asks txid_current_if_assigned() and, without an xid, commits its
//     local transaction and votes read-only instead of preparing.
//   - Transaction control. The session (Conn) refuses BEGIN, COMMIT,
//     ROLLBACK, PREPARE TRANSACTION and the like before sending them, sends
//     every statement with the extended protocol (one statement per
//     string), and breaks the branch if the server ever reports its
//     transaction closed.
//   - Identifiers. The gid of a branch is xid.String(), validated before
//     any SQL and written as an escaped literal (a gid cannot be a bind
//     parameter). Recover lists the current database's prepared
//     transactions; gids that are not XIDs are listed with a zero XID.
//   - Ages. Recover gives each branch its prepare time and its age by the
//     server's own clock (PreparedBranch.ServerAge, clock_timestamp() -
//     prepared in the same query, at least 1ns), so that recovery never
//     compares the server's prepare time with another machine's clock.
//   - Errors. Every failure of an XA command is an *xa.Error whose kind
//     says what happened (see Error kinds) and which wraps the
//     *pgconn.PgError; misconfigurations also say how to fix them.
//   - Cancellation. A statement whose context (or the context given to
//     Start) ends is cancelled on the server with a cancel request; the
//     session survives unless the server does not answer within two
//     seconds.
//
// # Error kinds
//
// At Prepare (the vote is then VoteAbort) and CommitOnePhase, every server
// ERROR means the transaction was rolled back: ErrRolledBack, for a
// transaction that had failed (PREPARE TRANSACTION answers the tag
// ROLLBACK), deferred constraints (23xxx), serialization failures and
// deadlocks (40xxx), 0A000 (temporary tables, WITH HOLD cursors,
// LISTEN/NOTIFY, exported snapshots), 57014 (cancelled); except 42710
// ErrDuplicateXID, 55000 (prepared transactions disabled) and 53200 (no
// free slot) ErrMisconfigured. A lost reply is ErrOutcomeUnknown (the
// branch may be prepared); a command certainly never sent is
// ErrRolledBack (the open transaction dies with its session).
//
// At CommitLast the same holds as at CommitOnePhase, except that a unique
// violation (23505) of the decision row itself means an abort marker holds
// its key: ErrAbortRecorded, nothing committed. A session the server ends
// during the COMMIT (FATAL, or no reply) is ErrOutcomeUnknown: a backend
// terminated while it waits for a synchronous standby has committed
// locally. Only a lost reply or a session ended by the server is ever
// ErrOutcomeUnknown; every other failure is a definite abort.
//
// At COMMIT PREPARED and ROLLBACK PREPARED (Branch.Commit, Branch.Rollback
// of a prepared branch, RM.Commit, RM.Rollback): 42704 ErrUnknownXID
// (Rollback reports it as nil; on Commit it is ambiguous), 55000 (busy:
// another session is finishing the branch) and 57014 ErrRetryable, 42501
// (another role's branch) and 0A000 (another database's branch)
// ErrMisconfigured, a lost reply ErrOutcomeUnknown, a command never sent
// (no connection) ErrRetryable.
//
// # Last resource, decision table and the fence
//
// With Config.DecisionTable set, the participant is a last resource
// (xa.LastResource) and a decision store (xa.DecisionStore). Its
// table (DecisionTableDDL) is
//
//	gtrid text PRIMARY KEY, node text NOT NULL, record bytea NOT NULL,
//	logged timestamptz NOT NULL DEFAULT now(), aborted boolean NOT NULL DEFAULT false
//
// and holds two kinds of rows under one key, the global id:
//
//   - commit decisions (aborted = false): CommitLast sends "INSERT ...;
//     COMMIT" in one round trip, so the row is durable exactly when the
//     branch's own work is; record is the xa.CommitRecord;
//   - abort markers (aborted = true): ClaimAbort inserts one, in its own
//     transaction, before recovery presumes abort; record is 0x00 and an
//     xa.AbortRecord, which no CommitRecord decoder accepts.
//
// The primary key is the fence. A client whose connection died does not
// prove that its COMMIT ended: the server may still be running it (a
// deferred trigger or constraint waiting on a lock, a synchronous
// standby, a slow WAL flush), with the decision row inserted but not yet
// committed. ClaimAbort's INSERT then waits for that transaction: if it
// commits, ClaimAbort returns an error matching xa.ErrCommitRecorded and
// Decision returns the commit; if it rolls back, the marker is stored and
// ClaimAbort returns nil. The wait is bounded by ClaimAbort's context
// (which ends it with an error that proves nothing). Once a marker is
// stored, a CommitLast of the same transaction fails with
// xa.ErrAbortRecorded and commits nothing; one that meets a marker still
// being written waits for it the same way.
//
// Decisions and Decision return commit rows only, ForgetDecisions deletes
// commit rows only, and ForgetAborts deletes markers older than a
// retention by the server's clock (now() - logged). Open creates the
// table if it is missing and adds the column "aborted" to a table created
// by an earlier version (its rows are commit decisions); a table that is
// up to date costs Open one query and takes no lock.
//
// Every *RM has the DecisionStore methods; HasDecisionTable says whether
// it is one. Without a table Decisions is empty, ForgetAborts deletes
// nothing, and ClaimAbort fails with xa.ErrMisconfigured: recovery must
// treat an RM as a decision store only when HasDecisionTable reports true.
//
// # The caller's duties
//
//  1. Configure the server: max_prepared_transactions > 0 (it defaults to
//     0 and needs a restart; Open's check fails with the fix otherwise),
//     and at least the pool size.
//  2. Connect every transaction manager node, the recovery scanner and
//     xactl with the same role (or a superuser): only the preparing role
//     may COMMIT PREPARED.
//  3. Keep the resource manager's Name stable and point it at one
//     database: prepared transactions can only be finished from the
//     database that prepared them.
//  4. Use the session only inside the branch: one statement at a time,
//     close every Rows and BatchResults, prefer SET LOCAL to SET (session
//     settings outlive the branch on the pooled connection).
//  5. Do not use temporary tables, WITH HOLD cursors, LISTEN/NOTIFY or
//     exported snapshots in a branch that writes: PREPARE TRANSACTION
//     refuses them and the branch votes abort. NOTIFY in a branch that
//     only reads is committed with the read-only vote, whatever the
//     global outcome.
//  6. Treat ErrUnknownXID from Commit as ambiguous (committed earlier, or
//     never prepared): only the decision log can tell.
//  7. For a last resource: leave synchronous_commit on for the role (a
//     decision row or abort marker must be durable when its COMMIT
//     answers), let Open add the column "aborted" (or run the ALTER TABLE
//     its error quotes) before the first scan of a new version, and stop
//     every coordinator and scanner of an earlier version first: an
//     earlier scanner takes no fence, and it fails to read a table that
//     holds markers rather than misread them.
//
// # Usage
//
//	rm, err := postgres.Open(ctx, postgres.Config{Name: "pg-orders", DSN: dsn})
//	...
//	conn, err := rm.Enlist(ctx, tx) // tx.Enlist(ctx, rm) with the session as a *postgres.Conn
//	...
//	_, err = conn.Exec(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", 10, 1)
package postgres
