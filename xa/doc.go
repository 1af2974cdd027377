// Package xa is the transaction manager's core: XIDs, votes, decisions and
// error kinds, the ResourceManager and DecisionLog interfaces the
// coordinator consumes, and the two-phase commit coordinator itself.
//
// It imports no database driver: drivers/mysql and drivers/postgres
// implement ResourceManager, recovery/ implements DecisionLog and the
// recovery scanner. The protocol is a pure state machine (machine.go,
// replayed from golden scripts in testdata/machine); Tx runs it, doing the
// I/O concurrently. A branch can only be told to commit with a proof that
// its decision is durable in hand (the decision type in tx.go). Phase 2's
// rule and retries are one kernel (phase2.go: RetryPolicy,
// JudgeCommitReply, Phase2) that the machine, the recovery scanner and the
// SQL sink share; the optional capabilities of participants (rm.go) are
// declared beside ResourceManager.
//
// Presumed abort is fenced (docs/protocol.md): recovery records an abort
// before it rolls anything back, and a DecisionLog refuses a commit record
// for a transaction with an abort record (ErrAbortRecorded), so a
// coordinator that loses that race reports aborted, never committed. The
// coordinator takes no decision after Begin + Timeout, and reads "unknown
// XID" in phase 2 as committed only once the log shows no abort record.
//
// # Usage
//
// The caller's duties:
//
//  1. Create a decision log once per node (filelog.Create, or xactl log
//     init) and open it at every start (filelog.Open); open one resource
//     manager per database, each with a name that stays the same across
//     restarts.
//  2. Create one Manager per process on its node's log: the log's identity
//     fixes the node, the longest timeout and the grace period, and every
//     branch XID names the log, so recovery with any other log leaves the
//     branches alone.
//  3. Start recovery (recovery.Scanner.Start) for that node at start-up,
//     before or beside new transactions, and keep it running.
//  4. Run each global transaction with Manager.Run, or Begin, Enlist each
//     participant (the drivers' RM.Enlist return their native session) and
//     Commit or Rollback. Do all the work through the enlisted sessions and
//     the transaction's context.
//  5. Read Commit's error by kind: nil is committed (Result.Pending lists
//     branches recovery will finish), ErrAborted is rolled back
//     (*AbortError says which branch refused and why), ErrOutcomeUnknown
//     is for recovery to settle: do not retry the work blindly.
//  6. With Config.AsyncCommit, call Manager.Close before exiting.
package xa
