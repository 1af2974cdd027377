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
// and starts the first segment and HEAD. Open creates nothing. A directory without
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
//   - link: the first record of every segment but the first; it names the
//     previous segment and its length in bytes. It decides nothing.
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
//     callers share syncs. The commit is pipelined: while one group syncs,
//     the next is written and its sync started once it holds as many
//     records as the group syncing (two syncs in flight at most, each
//     through a file descriptor of its own, so that each sees a writeback
//     error that touched its data), and groups are acknowledged
//     in the order they were written, each once its own sync and every
//     earlier group's succeeded. When a sync returns with none in
//     flight, the writer waits briefly for the callers it woke to queue
//     their next records, so that they share one sync instead of
//     splitting into two groups that take turns: until every one is back,
//     until none has arrived for 50 µs, or for half the sync's time at
//     most (1 ms at most; not after a group of fewer than 4, and not once
//     Close was called). A new segment is synced, and so is the
//     directory, before records go into it.
//   - A record is visible to the reads (Lookup, Commits, LookupAbort,
//     Aborts, Delegations, Heuristics) only once it is durable, so recovery
//     running in the same process never acts on a decision that a crash
//     could still lose.
//   - Any error after the record was queued, including the caller's ctx
//     ending first, means the outcome is unknown (the error wraps
//     xa.ErrOutcomeUnknown): the record may still become durable.
//   - Forget and ForgetAbort are not durable when they return, and never
//     wait for a sync, nor wake the writer: the record is written with the
//     next group (or at Close), and a group of forget records only is
//     written without a sync; the next sync (of a later group, before a
//     rotation, at Close) covers it. After a crash a forgotten record may
//     come back; recovery resolves and forgets it again.
//   - If a write or sync fails the log stops (fail-stop): the callers
//     waiting on the groups written and not yet acknowledged get an
//     outcome-unknown error, those queued behind them and every later call
//     fail with ErrFailed. A failed fsync is never retried, because the
//     state of the page cache is then unknown. Reopen the log to go on.
//
// # Recovery
//
// Open replays every segment in order and rebuilds the live set: commit
// records minus forgotten ones, abort records minus forgotten ones,
// delegations, heuristic records minus cleared ones. ReadSnapshot, Verify
// and Dump run the same replay, so they agree with Open on what is live.
// What Open does with a bad record depends on where it is:
//
//   - A torn tail (an incomplete, zeroed or bad-checksum record in the last
//     segment, with no valid record after it, or with valid records after
//     it none of which is a sync mark saying the bad bytes were synced) is
//     what a crash during unsynced writes leaves: the kernel writes dirty
//     pages back in any order, so a record written after the lost one may
//     be on disk. Nobody was told any of these records was durable, since
//     a sync that succeeded after the lost record was written would have
//     made it durable. Open cuts the segment at the bad record, logs a
//     warning and succeeds. (A sync mark starts each batch written after
//     a sync, giving the end of what that sync made durable; compaction
//     writes one for the records it copies forward, Close one for the
//     whole log. Segments written before sync marks, of format
//     version 3 or 2, keep the stricter rule that any valid record after a
//     bad one is corruption.)
//   - Anything else is corruption: a bad record that a later sync mark
//     says was synced (the disk lost data it had acknowledged), a bad
//     record with a valid record after it in a segment without sync marks,
//     a bad record in any segment but the last, a bad segment header,
//     a record whose checksum holds but whose payload does not decode, a
//     missing segment number, a missing or damaged IDENTITY or HEAD, and
//     the damage that leaves every remaining record sound: a segment that
//     is not the last cut at a record boundary, or made longer (the link
//     record of the next segment gives its length); the newest segments
//     missing (HEAD names the newest segment); the oldest segments missing
//     while compaction had not retired them (HEAD names the oldest segment
//     that must exist). Open then fails with an error wrapping ErrCorrupt
//     (a *CorruptError naming the file and byte offset) and modifies
//     nothing, so that an operator can inspect the log with Verify and
//     Dump; ReadSnapshot and Verify report the same error.
//
// A crash never leaves any of these. A new segment gets its name only once
// its header and link record are durable, after the segment before it was
// cut back to its last record and synced; HEAD is replaced (temporary
// file, synced, renamed, directory synced) only after that, and segments
// are removed only after HEAD says the log starts past them. A crash
// between starting a segment and writing HEAD leaves HEAD one behind,
// which is sound, and Open brings it up to date. Until HEAD names it, a
// segment holds nothing but its link record and copies of records that
// are still in older segments, so a segment lost then loses nothing.
//
// Some damage cannot be told from a sound log without state kept outside
// the directory, and Open accepts it, losing records silently:
//
//   - the last segment cut exactly at a record boundary: nothing records
//     its length but the file itself, and the cut looks like a log whose
//     last writes never happened (its last records zeroed, or cut inside
//     a record, look like a torn tail, which Open cuts off with a warning
//     and Verify reports);
//   - damage to the records of the last segment that no sync mark after
//     them covers (the last one or two batches of a log that was not
//     closed cleanly): it looks like a crash amid unsynced writes, and Open
//     cuts it off with a warning, with any records after it;
//   - the whole directory, HEAD included, put back from an older backup or
//     snapshot: it is a sound log, only an old one, and the decisions
//     logged since are missing;
//   - HEAD and the segments it names put back from an older copy, with
//     the newer segments gone; segments of another log with the same
//     numbers and lengths put in place of this log's.
//
// Keep backups consistent (a file system snapshot, or a copy of a log that
// is not open), and never restore one over a log that a transaction
// manager has used since: recovery would presume abort of branches whose
// commit was logged after the backup.
//
// A log written before link records and HEAD (segments of format version
// 2, no HEAD) opens as it is, without these checks for its old segments;
// Open writes HEAD for it, and the segments it starts have link records.
//
// The rule is conservative. If a crash tore the writes in flight (a
// multi-page group, or the two groups of a pipelined commit) so that a
// later page reached the disk and an earlier one did not, Open reports
// corruption, though none of those groups was acknowledged. Telling that
// apart from bit rot in an acknowledged group is impossible, and the
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
// takes the newer as the live one. HEAD is written after the copies are
// durable and before any removal; segments are removed oldest first, with
// a directory sync after each removal, so a crash never leaves a gap.
//
// # Files
//
// The log directory holds IDENTITY, HEAD, LOCK and the segment files
// (00000000000000000001.wal and on); files ending in .tmp are leftovers of
// an interrupted creation or replacement, removed by Open.
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
