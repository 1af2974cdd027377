// Package sink holds the exactly-once sink's contracts and the drivers
// that run them, as database/sql holds its API apart from the drivers:
// the SQL sink that implements them is sink/sqlsink, the sources are
// sink/kafkasource, sink/filesource and sink/gensource. docs/sink.md is the
// specification; this is a map.
//
// # The contracts
//
// A Source is a replayable stream of Records, split into partitions, each
// of which can be read again from a position (Seek); it tells a Handler
// which partitions this instance reads (Assigned, Revoked, and Lost for a
// LostHandler).
//
// Committer[H] is the two-phase commit of one checkpoint, generic over the
// transaction handle H (Flink's TwoPhaseCommitSinkFunction): Begin, Write,
// PreCommit (flush and prepare), Commit (decide and phase two; idempotent,
// also used at restore) and Abort. An Owner takes, keeps and loses
// partitions for a self-driven driver (epochs, Rewind, Sweep); a Restorer
// fences what an external caller's restart leaves behind.
//
// # The drivers
//
//   - Runner: self-driven. The sink is its own checkpoint coordinator
//     (every RunOptions.CheckpointRecords records or CheckpointInterval),
//     reading a Source; checkpoints are decided in order while the next one
//     is written; an aborted checkpoint aborts the later ones and the
//     records are read again (Owner.Rewind, Source.Seek). Every decision
//     it makes is its checkpoint machine's (machine.go: pure, step(event)
//     []action, replayed by the scripts in testdata/machine); the Runner
//     performs the actions.
//   - External: externally driven. The caller pre-commits at its
//     checkpoint barrier, keeps the serialisable handle, commits it when
//     its checkpoint completes, and calls Restore after a restart.
//
// Observer receives records written, checkpoint outcomes and durations,
// and the number of checkpoints pending (metrics.SinkCollector and
// otelxa.SinkObserver implement it).
package sink
