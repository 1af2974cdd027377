// Package sqlsink is the exactly-once sink over SQL databases: it
// implements the contracts of package sink (Committer, Owner, Restorer)
// over targets of MySQL/MariaDB and PostgreSQL, so that every record of a
// replayable Source lands exactly once in every target, across crashes,
// restarts and zombies. docs/sink.md is the specification; this is a map.
//
// # The SQL sink
//
// Sink (Open, Config) runs instances (Run, External) whose
// sink.Committer[Handle], sink.Owner and sink.Restorer work over targets
// opened through the driver registry: records become rows (Config.Map, or
// by Config.Format JSONMapping of the tables' Column.From, where a
// tombstone deletes by key, or DebeziumMapping of change events; a
// Row.Delete deletes an upsert table's row by key), written in one XA branch per
// target and checkpoint by the target's dialect (one per database, chosen
// from its driver: mysql*.go, postgres*.go): multi-row INSERT/UPSERT on
// MySQL, COPY/batched UPSERT on PostgreSQL. The progress target holds
// xa_sink_progress (positions and epochs), xa_sink_decisions (commit
// decisions and abort markers), xa_sink_instances and xa_sink_generations
// (Setup creates them); Bind binds every target to the progress store
// (xa_sink_bindings, in each target and copied in the progress store), and
// every instance start and restore checks those identities (Verify), so
// that decisions are trusted only from the store that made them.
// A checkpoint's decision moves its partitions' positions under their
// epochs and inserts the decision row in one local transaction, one round
// trip; a takeover raises the epochs, so a zombie's decision fails
// (sink.ErrFenced once it owns nothing); restore commits decided orphans
// and fences the others behind abort markers (Classify is its decision
// table).
//
// Branch XIDs are format 0x78730001, xs1.<sink>.<incarnation>.<checkpoint>
// with the target as bqual; ParseXID reads them back (for xactl).
//
// # Operating it
//
//	err := sqlsink.Setup(ctx, progressTarget) // once (xactl sink setup)
//	s, err := sqlsink.Open(ctx, sqlsink.Config{Name: "orders", Targets: ..., Tables: ...})
//	_, err = s.Bind(ctx)                      // once, and after adding a target
//	err = s.Run(ctx, source, sink.RunOptions{Observer: metrics})
//	st, err := s.Status(ctx) // progress per partition, instances, orphaned branches
//
// Status and ReadStatus report the progress table; Sweep resolves orphans
// on demand. The generator and file sources (sink/gensource,
// sink/filesource) serve tests and demos.
package sqlsink
