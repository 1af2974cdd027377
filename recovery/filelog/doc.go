// Package filelog is the embedded, default decision log: a directory of
// append-only segment files on the local disk, needing no server. It
// implements xa.DecisionLog, plus the reads recovery needs (Lookup,
// Commits), heuristic records for xactl, and read-only inspection (Verify,
// Dump) for `xactl log verify` and `xactl log dump`.
//
// # Durability
//
//   - LogCommit, LogHeuristic and ClearHeuristic return nil only after their
//     record has been written and fdatasync'ed. A single writer goroutine
//     writes every record queued meanwhile with one write and one sync
//     (group commit), so concurrent callers share syncs. A new segment is
//     synced, and so is the directory, before records go into it.
//   - A record is visible to Lookup, Commits and Heuristics only once it is
//     durable, so recovery running in the same process never acts on a
//     decision that a crash could still lose.
//   - Any error after the record was queued, including the caller's ctx
//     ending first, means the outcome is unknown (the error wraps
//     xa.ErrOutcomeUnknown): the record may still become durable.
//   - Forget is not durable when it returns, and never waits for a sync:
//     the forget record is written with the next group, and a group of
//     forget records only is written without a sync; the next sync (of a
//     later group, before a rotation, at Close) covers it. After a crash a
//     forgotten commit record may come back; presumed abort makes that
//     harmless.
//   - If a write or sync fails the log stops (fail-stop): the callers
//     waiting on that group get an outcome-unknown error, and every later
//     call fails with ErrFailed. A failed fsync is never retried, because
//     the state of the page cache is then unknown. Reopen the log to go on.
//
// # Recovery
//
// Open replays every segment in order and rebuilds the live set: commit
// records minus forgotten ones, heuristic records minus cleared ones. What
// it does with a bad record depends on where it is:
//
//   - A torn tail (an incomplete, zeroed or bad-checksum record at the end
//     of the last segment, with no valid record anywhere after it) is what
//     a crash during a write leaves. Nobody was told that record was
//     durable. Open cuts it off, logs a warning and succeeds.
//   - Anything else is corruption: a bad record with a valid record after
//     it, a bad record in any segment but the last, a bad segment header,
//     a record whose checksum holds but whose payload does not decode, or a
//     missing segment number. Open then fails with an error wrapping
//     ErrCorrupt (a *CorruptError naming the file and byte offset) and
//     modifies nothing, so that an operator can inspect the log with Verify
//     and Dump. Open never drops a record silently.
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
// such as a transaction pending for days, have those records copied into
// the active segment, durably, before they are removed, so the number of
// segments stays bounded. Segments are removed oldest first, with a
// directory sync after each removal, so a crash never leaves a gap.
//
// # Locking
//
// One process owns a log: Open takes an exclusive flock(2) on dir/LOCK, and
// a second Open fails with ErrLocked. Verify and Dump never modify files.
// They take a shared lock when they can, and read anyway when a Log has the
// log open, in which case they say so.
//
// The on-disk format is described in format.go.
package filelog
