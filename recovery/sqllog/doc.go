// Package sqllog is the decision log in a SQL database (PostgreSQL 12+, or
// MySQL 8.0+ / MariaDB 10.6+) that several transaction-manager nodes share,
// so that no coordinator is a single point of failure: when a node dies,
// a live node takes its log over and finishes its transactions. It
// implements xa.RecoveryLog (and so xa.DecisionLog) and recovery.Leased,
// and passes the conformance suite in recovery/logtest, in both
// databases. The protocol is docs/protocol.md's, "Leases, epochs,
// takeover".
//
// It speaks database/sql only: the caller opens the database with a
// driver (internal/logdb does, for xactl and the lab: pgx's, and
// go-sql-driver/mysql with interpolateParams).
//
// # Tables and identities
//
// A Store is the log tables of one database (xa_log_*): the schema
// version, one row per log (its node, its xa.LogIdentity, its epoch), one
// lease per log, and the decision rows, delegations, participant
// records, heuristic records and lease events of every log, each keyed by
// the log's id. Each node keeps its own log, with its own random id, so
// that branch XIDs, grace periods and everything else about identities
// stay as with the embedded log: recovery presumes abort only of branches
// whose XID names the log it reads.
//
// Nothing is created by opening: Create (xactl log init --kind postgres or
// mysql) makes the tables when there are none, writes their version last,
// and makes the node's log; it refuses a node that has one (ErrExist).
// Open, Observe and TakeOver refuse a database without tables or without
// the node's log (ErrNoLog) and tables of another version (ErrSchema).
//
// # The fence between commit and abort
//
// A decision is one row per log and global id, kind C (commit) or A
// (abort): the primary key makes a commit and an abort of one transaction
// exclude each other, in the database, whoever writes them and whatever
// the clocks say. A LogCommit meeting an abort row (committed, or being
// written: the insert waits for it) is refused with xa.ErrAbortRecorded;
// a LogAbort meeting a commit row with xa.ErrCommitRecorded.
//
// LogCommit refuses, with xa.ErrDecisionTooLate, a record whose
// transaction's deadline has passed by the database's clock, in the
// statement that inserts it: the deadline is the begin time stamped by
// the node's clock, translated to the database's by the offset the node
// measured at its lease's last renewal (within half a round trip), plus
// the log's timeout. A node whose clock is minutes off commits in time
// and is refused when late, like any other.
//
// # Leases and epochs
//
// Every log has a lease: its holder, its epoch, and an expiry on the
// database's clock, set and compared in SQL (TTL Options.LeaseTTL,
// renewed every third of it). The log's row holds the epoch that decision
// writes must carry. Taking a lease (the node's own Open, a live node's
// TakeOver of an expired one, an operator's) is one transaction that
// locks the lease row, checks by the database's clock that it is free or
// expired, moves the log's row to a new epoch and records the event.
//
// Every decision write of the lease's holder — the batch of LogCommit, a
// LogAbort of its recovery, LogDelegation, LogParticipant — takes a shared
// lock on the log's row in its own statement (PostgreSQL) or transaction
// (MySQL), and writes nothing unless the row still has the writer's epoch:
// the database refuses it (xa.ErrFenced), not a comparison of clocks in
// the client. A takeover's update of the epoch waits for the writes that
// hold the row, and refuses every one after it: a commit of the previous
// holder is in the log before the takeover's epoch, or refused. Writes
// that decide nothing are not fenced: forgets, heuristic records, and the
// abort records of an operator's rollback (xactl without the lease: the
// decision row fences the coordinator).
//
// A node that finds its lease taken over (a refused write, or a renewal)
// refuses its decisions from then on, and takes its log back, at a new
// epoch, once the process that took it over released it.
//
// # Durability
//
// LogCommit, LogAbort, LogDelegation, LogParticipant, LogHeuristic and
// ClearHeuristic return nil once their transaction committed. On
// PostgreSQL each forces synchronous_commit on for its own transaction, in
// the same round trip (set_config(..., true), read at commit time), whatever
// the session, role or database says, and never lowers remote_apply: with
// synchronous standbys, the commit waits for them. A decision is visible to
// other sessions only once its commit is durable (PostgreSQL marks a
// transaction committed after its flush, and after the standbys' answer;
// a session cancelled while it waits for them is the known exception).
// MySQL and MariaDB have no per-transaction durability: the server's
// innodb_flush_log_at_trx_commit = 1 and, with a binary log, sync_binlog =
// 1, are the operator's (xactl doctor checks them).
//
// An error from a commit, or a lost connection, wraps xa.ErrOutcomeUnknown.
// A batch refused before its commit (a deadlock) was not written and is
// written again.
//
// # Group commit
//
// Concurrent LogCommit calls share one database transaction: one
// dispatcher takes every record queued into a batch as soon as one of
// Options.Pipeline slots is free (one by default): the next batch is built
// while the previous one commits, and sent as soon as it has. A batch is one round trip: on
// PostgreSQL one statement, on MySQL one transaction of several
// statements sent together (the connection must allow several statements
// per query: internal/logdb sets multiStatements; without it a batch takes
// five round trips), so that the server runs it whole whatever the client
// does meanwhile. Forgets ride along with the next batch, or go in a batch
// of their own after 20 ms (not waiting for a flush); until then reads
// leave their records out.
//
// # Requirements
//
// PostgreSQL: tables in the session's current schema; MySQL and MariaDB:
// InnoDB, and JSON_TABLE (MySQL 8.0.4, MariaDB 10.6). The user creates the
// tables once (xactl log init) and reads and writes them after.
package sqllog
