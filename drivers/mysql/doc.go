// Package mysql is the transaction manager's resource manager for MySQL 8
// and MariaDB 10.5+: it drives XA branches with XA START/END/PREPARE/
// COMMIT/ROLLBACK over github.com/go-sql-driver/mysql and implements
// xa.ResourceManager.
//
// # What the package owns
//
//   - A pool of sessions (database/sql over go-sql-driver, with
//     multiStatements and interpolateParams set on its own copy of the
//     DSN). A branch pins one session from Start until it ends; a session
//     that may still hold a branch is closed, never pooled (the pool would
//     hand a prepared branch, its locks and a 1399/1400 to the next user).
//   - The XID literal: XIDs are validated and written as hex literals
//     X'gtrid',X'bqual',formatID by this package only; they are never bind
//     parameters, and no byte of an XID can leave its literal.
//   - Round trips: XA START rides with the branch's first ExecContext;
//     XA END, XA PREPARE and SELECT @@timestamp (the server's clock, for
//     Origin) go together, as do XA END and XA COMMIT ONE PHASE. A branch
//     that never ran a statement costs no round trip and votes read-only.
//     CONNECTION_ID(), the version, the server's clock and the second the
//     server started are read once per physical connection, in one query.
//   - Cancellation: when a statement's context or the branch's (Start's)
//     context ends, the statement is interrupted on the server with KILL
//     QUERY from a small side pool; the session and its branch survive and
//     can be rolled back. go-sql-driver never sees those contexts (it would
//     close the connection). Only when KILL QUERY cannot be delivered is
//     the connection closed under the statement; its reply is then lost,
//     which for XA commands means ErrOutcomeUnknown.
//   - Error mapping: every XA error becomes an *xa.Error with one of the
//     xa error kinds and the *mysql.MySQLError inside (see classify).
//   - Phase 2 from elsewhere (RM.Commit/RM.Rollback: a check, then XA
//     COMMIT/ROLLBACK), recovery listing (Recover), the start-up check
//     (Check), the count of prepared transactions that XA RECOVER does
//     not show (UnlistedPrepared, xa.GhostCounter) and the server's
//     identity (ServerKey, xa.SharedServer).
//
// # Usage
//
// The caller (normally xa's coordinator) must:
//
//  1. Open one RM per participant database, with a Name that is stable
//     across restarts, and Close it at the end.
//  2. Start a branch per global transaction and run the application's
//     statements through Branch.Session().(*Conn), or its DB (a *sql.DB on
//     the same session, for database/sql libraries). Use one goroutine at
//     a time per Conn, and close Rows before the next statement: one
//     started while they are open fails at once with xa.ErrSessionBusy.
//  3. Prepare every branch; then Commit or Rollback each prepared branch
//     on the Branch (same session), or CommitOnePhase a single branch.
//  4. Record Branch.Origin() (an xa.OriginReporter) with the commit
//     decision, after VotePrepared and also after a Prepare that failed
//     with ErrOutcomeUnknown (its reply was lost: the branch may be
//     prepared): when phase 2 has to be done elsewhere, RM.Commit and
//     RM.Rollback use it to wait until the preparing session is gone.
//     Without it (Origin{}) they cannot wait for that session: recovery
//     must then leave branches alone for a grace period after their
//     sessions may have closed. Branch.Close gives phase 2 up: the session
//     is closed, never pooled, and the branch stays prepared.
//  5. Treat ErrRetryable as "try again later", ErrOutcomeUnknown as "ask
//     the decision log", and ErrUnknownXID after a commit as ambiguous
//     (fact 7 of docs/xa-facts.md): never as success by itself.
//  6. Not set autocommit, change the default database or leave other
//     session state behind on a branch session: the session goes back to
//     the pool after the branch. (SET autocommit is refused; other session
//     state is the caller's business, as with database/sql.)
//
// multiStatements=true is needed for the combined round trips; it also
// lets a query hold several statements, so build SQL with arguments, never
// by pasting untrusted text.
//
// # MariaDB and MySQL 8
//
// MariaDB (every version), MySQL before 8.0.29 and MySQL with
// xa_detach_on_prepare=OFF keep a prepared branch attached to the session
// that prepared it until that session disconnects. Another session gets
// 1397 (unknown XID) meanwhile, and committing from another session while
// the preparing one is still closing can even answer success without
// committing (measured, fact 7). So phase 2 runs on the preparing session,
// Branch.Origin reports that session's CONNECTION_ID(), and RM.Commit and
// RM.Rollback refuse (ErrRetryable) while that connection id is still in
// the process list, unless the server restarted since the prepare (see
// below). Leaving
// the process list is not enough on MariaDB 10.11: the server drops a
// closing session from it before InnoDB has detached the session's
// prepared transaction, and an XA COMMIT in that window can still answer
// success without committing (measured: 3 of 16,000). So RM.Commit and
// RM.Rollback also wait until information_schema.INNODB_TRX shows no
// transaction of that session; with that wait no commit was lost in
// 16,000. This needs the PROCESS privilege (see below).
//
// MariaDB 10.11 also matches a detached prepared branch by gtrid and bqual
// alone: XA COMMIT with the wrong formatID commits it (fact 1 holds only
// for attached branches). RM.Commit and RM.Rollback therefore look at XA
// RECOVER first and send nothing when only a branch differing in formatID
// is listed.
//
// MySQL 8.0.29+ with xa_detach_on_prepare=ON (its default) detaches the
// branch at XA PREPARE; Origin then reports Session 0 and nobody waits.
// These code paths (marked "MySQL 8" in the source) follow the MySQL
// documentation; the tests here run against MariaDB.
//
// # Origin.Prepared is the server's clock
//
// Origin.Session is the preparing session's CONNECTION_ID(). After a
// restart the server hands the same ids out again, so RM.Commit and
// RM.Rollback must tell whether the server restarted since the prepare.
// They do it on one clock, the server's: Origin.Prepared is the server's
// @@timestamp read in the prepare's round trip (after a lost reply, the
// server's time when the loss was seen, estimated from the connection's
// first reading of @@timestamp and the local monotonic clock), never
// earlier than the prepare completed and never within the second in which
// the server started; the server computes its own start second
// (UNIX_TIMESTAMP() minus Uptime in one statement: exact and the same for
// every reader). The clocks of the coordinator's host and of the host
// running recovery take no part. A prepare in the first second of the
// server's life cannot be told from one just before a restart within that
// second; with the PROCESS privilege the RM then looks at INNODB_TRX, as
// for a preparing session that has just left the process list.
//
// # Without the PROCESS privilege
//
// Other users' sessions and INNODB_TRX are hidden. Phase 2 by XID then
// cannot see when InnoDB has detached a closed session's branch, and an XA
// COMMIT in that window can answer success without committing (fact 7).
// So RM.Commit and RM.Rollback with an Origin keep such a branch pending
// (ErrRetryable, saying to GRANT PROCESS) until the server has restarted
// since the prepare. Phase 2 on the preparing session (Branch.Commit) is
// not affected. Check reports the missing privilege and what it costs.
//
// # Ghosts and shared servers
//
// UnlistedPrepared counts the prepared InnoDB transactions that XA RECOVER
// does not list (fact 7's ghosts): SHOW ENGINE INNODB STATUS shows which
// InnoDB transactions are prepared and whether a session holds them, and
// branches XA RECOVER lists while attached to a live session (in-flight
// transactions, other applications') are set against those, so they
// cannot hide a ghost. A listed branch that holds no prepared InnoDB
// transaction (detached after writing nothing, or attached without having
// touched InnoDB) can hide one; see UnlistedPrepared. XA RECOVER and
// UnlistedPrepared are per server, whatever database the DSN names:
// ServerKey identifies the server, so that recovery acts on each branch
// once when two participants are databases of one server.
//
// # One-phase commit
//
// CommitOnePhase reports ErrRolledBack only when the server says the
// branch is not committed (it answered XA_RB*, a deadlock or rollback-only,
// or the XA ROLLBACK sent after the failure found the branch and rolled it
// back). A failure after which XA ROLLBACK answers 1397 is
// ErrOutcomeUnknown: the server committed the branch or rolled it back and
// does not say which (a KILL QUERY sent when the context ended may land
// before or after the commit point).
//
// Other differences the package handles: MySQL 8 needs XA_RECOVER_ADMIN for
// XA RECOVER (1401, reported by Check with the GRANT to run), MariaDB needs
// no privilege for it and lists every user's branches. After a deadlock
// MariaDB 10.11 answers statements, XA END and XA PREPARE of the branch with
// 1399 "... in the ROLLBACK ONLY state" (MySQL 8: 1614); both mean
// rollback-only, and XA ROLLBACK works directly from that state. MariaDB
// answers 1402 to XA COMMIT or XA ROLLBACK of a detached prepared branch
// that wrote nothing. MariaDB accepts SET autocommit inside a branch (fact 4
// says 1399): Conn refuses it instead.
package mysql
