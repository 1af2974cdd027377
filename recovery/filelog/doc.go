// Package filelog is the embedded, default decision log: a directory of
// append-only segment files on the local disk, needing no server. It
// implements xa.RecoveryLog (and so xa.DecisionLog) and passes the
// conformance suite in recovery/logtest; ReadSnapshot, Verify and Dump read
// a log without taking it, for `xactl list`, `xactl log verify` and
// `xactl log dump`.
//
// # Identity
//
// A log is made by an explicit act: Create writes its identity
// (xa.LogIdentity: a random id, the node, the creation time, the global
// transaction timeout and the presumed-abort grace) into the IDENTITY file
// and starts the first segment. Open creates nothing. A directory without
// IDENTITY and segments is not a log (ErrNoLog, with fs.ErrNotExist when it
// is missing): opened there by mistake, an empty log would make every
// in-doubt branch look undecided. A directory with segments but no
// IDENTITY, or with a damaged one, is refused as corrupt (ErrCorrupt), never
// adopted: its records may belong to another identity. Create refuses a
// directory that holds a log (ErrExist). Every branch XID of a Manager's
// transactions carries the log's id, so recovery presumes abort only of
// branches whose decisions are in this log.
//
// # Records
//
//   - commit: a commit decision (xa.CommitRecord), until forgotten.
//   - forget: drops the commit record of a global id.
//   - abort: a presumed-abort decision (xa.AbortRecord), written by
//     recovery before it rolls back any branch; it fences the commit
//     record of the same id. Kept until forgotten, which ForgetAbort allows
//     only xa.AbortRetention (24 h) after both its logging and its
//     transaction's commit deadline, by the log's clock
//     (xa.AbortRecord.KeptUntil).
//   - forget-abort: drops the abort record of a global id.
//   - delegation: a participant whose decision table may hold this log's
//     decisions (last-resource commits). Never dead.
//   - heuristic: a manual or server-side resolution of one branch on one
//     participant (xa.HeuristicRecord), kept until an operator clears it.
//   - clear: drops the heuristic records of one XID on one participant;
//     records of that XID on other participants stay.
//
// # The fence
//
// COMMIT and ABORT records of one global id exclude each other. LogCommit
// refuses (xa.ErrAbortRecorded) when an abort record for the id is durable
// or queued or being written; LogAbort refuses (xa.ErrCommitRecorded) when a
// commit record is. The check and the enqueue are one critical section
// under the log's mutex, and records the writer goroutine has taken from
// the queue but not yet applied to the state are counted (a pending set by
// global id), so of a LogCommit and a LogAbort racing for one id exactly one
// succeeds, and a replay after any crash holds at most that one.
//
// LogCommit also refuses (xa.ErrDecisionTooLate) a record whose transaction
// began more than Identity().Timeout ago by the log's clock (Options.Now):
// the coordinator runs in the process that has the log open, so this is its
// clock, and the check, made next to the enqueue, catches a coordinator
// that paused between its own deadline check and the write.
//
// # Durability
//
//   - LogCommit, LogAbort, LogDelegation, LogHeuristic and ClearHeuristic
//     return nil only after their record has been written and
//     fdatasync'ed. A single writer goroutine writes every record queued
//     meanwhile with one write and one sync (group commit), so concurrent
//     callers share syncs. A new segment is synced, and so is the
//     directory, before records go into it.
//   - A record is visible to the reads (Lookup, Commits, LookupAbort,
//     Aborts, Delegations, Heuristics) only once it is durable, so recovery
//     running in the same process never acts on a decision that a crash
//     could still lose.
//   - Any error after the record was queued, including the caller's ctx
//     ending first, means the outcome is unknown (the error wraps
//     xa.ErrOutcomeUnknown): the record may still become durable.
//   - Forget and ForgetAbort are not durable when they return, and never
//     wait for a sync: the record is written with the next group, and a
//     group of forget records only is written without a sync; the next
//     sync (of a later group, before a rotation, at Close) covers it. After
//     a crash a forgotten record may come back; recovery resolves and
//     forgets it again.
//   - If a write or sync fails the log stops (fail-stop): the callers
//     waiting on that group get an outcome-unknown error, and every later
//     call fails with ErrFailed. A failed fsync is never retried, because
//     the state of the page cache is then unknown. Reopen the log to go on.
//
// # Recovery
//
// Open replays every segment in order and rebuilds the live set: commit
// records minus forgotten ones, abort records minus forgotten ones,
// delegations, heuristic records minus cleared ones. ReadSnapshot, Verify
// and Dump run the same replay, so they agree with Open on what is live.
// What Open does with a bad record depends on where it is:
//
//   - A torn tail (an incomplete, zeroed or bad-checksum record at the end
//     of the last segment, with no valid record anywhere after it) is what
//     a crash during a write leaves. Nobody was told that record was
//     durable. Open cuts it off, logs a warning and succeeds.
//   - Anything else is corruption: a bad record with a valid record after
//     it, a bad record in any segment but the last, a bad segment header,
//     a record whose checksum holds but whose payload does not decode, a
//     missing segment number, a missing or damaged IDENTITY. Open then
//     fails with an error wrapping ErrCorrupt (a *CorruptError naming the
//     file and byte offset) and modifies nothing, so that an operator can
//     inspect the log with Verify and Dump. Open never drops a record
//     silently.
//
// The rule is conservative. If a crash tore a multi-page group write so
// that a later page reached the disk and an earlier one did not, Open
// reports corruption, though none of that group was acknowledged. Telling
// that apart from bit rot in an acknowledged group is impossible, and the
// alternative risks silently losing commit decisions.
//
// # Space
//
// The active segment is filled with zeros ahead of its records, a megabyte
// at a time, so that a group sync overwrites written blocks and records no
// new file size; a closed segment is cut back to its last record. Zeros
// after the last record of the last segment (a process that stopped without
// Close) are unused space and are trimmed by Open.
//
// When the active segment grows beyond Options.SegmentSize a new one is
// started. Old segments whose records are all dead (forgotten, cleared or
// replaced) are removed. Old segments that still hold a few live records,
// such as a transaction pending for days, an abort record within its
// retention, a heuristic record no operator cleared yet, or a delegation
// (never dead), have those records copied into the active segment,
// durably, before they are removed, so the number of segments stays
// bounded. A copy is byte for byte its original; a replay that meets both
// takes the newer as the live one. Segments are removed oldest first, with
// a directory sync after each removal, so a crash never leaves a gap.
//
// # Locking
//
// One process owns a log: Create and Open take an exclusive flock(2) on
// dir/LOCK, and a second Open fails with ErrLocked. ReadSnapshot, Verify
// and Dump never modify files. They take a shared lock when they can, and
// read anyway when a Log has the log open, in which case they say so.
//
// The on-disk format is described in format.go.
package filelog
