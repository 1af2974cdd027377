// Package xa is the transaction manager's core: XIDs, votes, decisions and
// error kinds, the ResourceManager and DecisionLog interfaces the
// coordinator consumes, and the two-phase commit coordinator itself.
//
// It imports no database driver: drivers/mysql and drivers/postgres
// implement ResourceManager, recovery/ implements DecisionLog and the
// recovery scanner. The protocol is a pure state machine (machine.go,
// replayed from golden scripts in testdata/machine); Tx runs it, doing the
// I/O concurrently. A branch can only be told to commit with a proof that
// its decision is durable in hand (the decision type in tx.go).
//
// # Usage
//
// The caller's duties:
//
//  1. Open a decision log (recovery/filelog) and one resource manager per
//     database, each with a name that stays the same across restarts.
//  2. Create one Manager per process with a node id no other running
//     process uses: recovery resolves every branch of its node.
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
