// Package sink is the exactly-once sink: it writes the records of a
// replayable Source into tables of MySQL/MariaDB and PostgreSQL so that
// every record lands exactly once in every target, across crashes,
// restarts and zombies. docs/sink.md is the specification; this is a map.
//
// # The contract
//
// Committer[H] is the two-phase commit of one checkpoint, generic over the
// transaction handle H (Flink's TwoPhaseCommitSinkFunction): Begin, Write,
// PreCommit (flush and prepare), Commit (decide and phase two; idempotent,
// also used at restore) and Abort. Two drivers run it:
//
//   - Runner: self-driven. The sink is its own checkpoint coordinator
//     (every RunOptions.CheckpointRecords records or CheckpointInterval),
//     reading a Source; checkpoints are decided in order while the next one
//     is written; an aborted checkpoint aborts the later ones and the
//     records are read again (Owner.Rewind, Source.Seek).
//   - External: externally driven. The caller pre-commits at its
//     checkpoint barrier, keeps the serialisable handle, commits it when
//     its checkpoint completes, and calls Restore after a restart.
//
// # The SQL sink
//
// Sink (Open, Config) runs instances (Run, External) whose
// Committer[Handle], Owner and Restorer work over targets opened through
// the driver registry: records become rows
// (Config.Map, or JSONMapping of the tables' Column.From), written as
// multi-row INSERT/UPSERT (MySQL) or COPY/batched UPSERT (PostgreSQL) in
// one XA branch per target and checkpoint. The progress target holds
// xa_sink_progress (positions and epochs), xa_sink_decisions (commit
// decisions and abort markers), xa_sink_instances and xa_sink_generations
// (Setup creates them); Bind binds every target to the progress store
// (xa_sink_bindings, in each target and copied in the progress store), and
// every instance start and restore checks those identities (Verify), so
// that decisions are trusted only from the store that made them.
// A checkpoint's decision moves its partitions' positions under their
// epochs and inserts the decision row in one local transaction, one round
// trip; a takeover raises the epochs, so a zombie's decision fails
// (ErrFenced once it owns nothing); restore commits decided orphans and
// fences the others behind abort markers (Classify is its decision table).
//
// Branch XIDs are format 0x78730001, xs1.<sink>.<incarnation>.<checkpoint>
// with the target as bqual; ParseXID reads them back (for xactl).
//
// # Operating it
//
//	err := sink.Setup(ctx, progressTarget) // once (xactl sink setup)
//	s, err := sink.Open(ctx, sink.Config{Name: "orders", Targets: ..., Tables: ...})
//	_, err = s.Bind(ctx)                   // once, and after adding a target
//	err = s.Run(ctx, source, sink.RunOptions{Observer: metrics})
//	st, err := s.Status(ctx) // progress per partition, instances, orphaned branches
//
// Status and ReadStatus report the progress table; Observer receives
// records written, checkpoint outcomes and durations, and the number of
// checkpoints pending; Sweep resolves orphans on demand. The generator and
// file sources (sink/gensource, sink/filesource) serve tests and demos.
package sink
