package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xadb/xa/sink"
)

// A replay writes dead letters again, once the operator has fixed what
// made them bad (the mapping, a column, the table), with the sink's
// current configuration (docs/sink.md, "Replaying dead letters").
//
// It is a checkpoint of the sink's own protocol, run by an instance of
// its own (a new incarnation that never takes a partition): one global
// transaction over the targets whose progress-target branch deletes the
// dead-letter rows it replays, and whose other statements write their
// records' rows. It is decided, committed and, after a crash, restored
// like any checkpoint (the decision row in xa_sink_decisions, the fence
// of the abort marker), so a dead letter's rows land exactly when its
// dead-letter row goes: a replay killed at any point and run again writes
// nothing twice and loses nothing. Two replays of one dead letter: the
// first delete takes the row's lock, the second waits for it and, once
// the first commits, deletes nothing and writes nothing (the affected-row
// count of the delete, inside the transaction, is the claim).

// DeadLetterID names one dead letter: the instance and checkpoint that set
// it aside and its number within that checkpoint (the dead-letter table's
// key).
type DeadLetterID struct {
	// Incarnation 0 in a selection (ReplayOptions.Select): any, if the
	// checkpoint and seq name a single dead letter.
	Incarnation uint64 `json:"incarnation"`
	Checkpoint  uint64 `json:"checkpoint"`
	Seq         int64  `json:"seq"`
}

// String is "incarnation/checkpoint/seq", the numbers as the table
// keeps them (xactl sink replay takes them as they are).
func (id DeadLetterID) String() string {
	return fmt.Sprintf("%d/%d/%d", id.Incarnation, id.Checkpoint, id.Seq)
}

// incarnationText is an incarnation as Ref.String writes it.
func incarnationText(inc uint64) string {
	r := Ref{Incarnation: inc}
	if r.External() {
		return fmt.Sprintf("m%d.g%d", r.Member(), r.Generation())
	}
	return strconv.FormatUint(inc, 10)
}

// ID returns d's key in the dead-letter table.
func (d DeadLetter) ID() DeadLetterID {
	return DeadLetterID{Incarnation: d.Incarnation, Checkpoint: d.Checkpoint, Seq: d.Seq}
}

// ReplayOptions say which dead letters Replay writes again, and how.
type ReplayOptions struct {
	// All replays every dead letter of the sink; else Select names them.
	All    bool
	Select []DeadLetterID
	// DryRun maps the dead letters and says what would happen; nothing
	// is written and no instance is registered.
	DryRun bool
	// Force allows replaying into upsert tables: a replayed record
	// overwrites (or deletes) its key's row, which a newer record may
	// have written since (docs/sink.md). Without it such a replay is
	// refused with ErrReplayUpsert before anything is written.
	Force bool
	// Batch bounds the dead letters of one transaction (default 100).
	Batch int
}

// ReplayOutcome is what a replay did with one dead letter.
type ReplayOutcome string

const (
	// Replayed: its rows landed and its dead-letter row is gone, in one
	// committed transaction.
	Replayed ReplayOutcome = "replayed"
	// WouldReplay (dry run): it maps to rows now.
	WouldReplay ReplayOutcome = "would replay"
	// Kept: it is still bad (Reason says why) and stays a dead letter.
	Kept ReplayOutcome = "kept"
	// Decided: its transaction is decided commit (it lands exactly
	// once), but its commit on a target was left to restore (the target
	// did not answer in phase two): its rows there are not visible until
	// a restore commits them (a running instance's sweep, the next
	// replay). xactl exits 3 (in-doubt branches remain).
	Decided ReplayOutcome = "decided"
	// Gone: another replay took it first (its row was gone when this one
	// came to delete it); nothing was written for it here.
	Gone ReplayOutcome = "gone"
	// Unknown: its transaction's outcome is left to restore (the replay
	// stopped with an error): the next replay, or any instance's restore,
	// settles it, and it lands once or stays a dead letter.
	Unknown ReplayOutcome = "unknown"
	// NotTried: the replay stopped with an error before its turn; it is
	// still a dead letter.
	NotTried ReplayOutcome = "not tried"
)

// ReplayResult is the outcome of one dead letter.
type ReplayResult struct {
	DeadLetter DeadLetter    `json:"dead_letter"`
	Outcome    ReplayOutcome `json:"outcome"`
	// Rows is the number of rows (and deletes by key) the record maps to.
	Rows int `json:"rows"`
	// Reason says why a dead letter was kept: the mapping's error, or
	// the database's.
	Reason string `json:"reason,omitempty"`
}

// ReplayReport is what Replay did.
type ReplayReport struct {
	// Incarnation is the replay's instance (0: a dry run, or nothing to
	// replay).
	Incarnation uint64         `json:"incarnation"`
	Results     []ReplayResult `json:"results"`
	// Missing are the selected dead letters that the table does not hold
	// (replayed already, or never there).
	Missing []DeadLetterID `json:"missing"`
}

// Count returns how many results have outcome o.
func (r ReplayReport) Count(o ReplayOutcome) int {
	n := 0
	for _, x := range r.Results {
		if x.Outcome == o {
			n++
		}
	}
	return n
}

// ErrReplayUpsert: a dead letter maps to a row of an upsert table, and the
// replay was not forced: the replayed row would overwrite whatever the
// sink wrote for its key since the record was set aside.
var ErrReplayUpsert = errors.New("sink: replaying into an upsert table may overwrite a newer row of the same key")

// deadLetterClaimer is implemented by the row writers: the claim of a dead
// letter in a replay's progress-target branch.
type deadLetterClaimer interface {
	// claimDeadLetter deletes the dead-letter row id of sink on the
	// branch's session and reports whether it deleted it (false: it is
	// not there, or no longer: another replay committed it). The delete
	// waits for another transaction holding the row.
	claimDeadLetter(ctx context.Context, sink string, id DeadLetterID) (bool, error)
}

// replayRow is one row (or delete by key) of a replayed record, fitted.
type replayRow struct {
	id   string
	tb   *table
	vals []any
	del  bool
}

// replayJob is a dead letter with the rows it maps to now.
type replayJob struct {
	d    DeadLetter
	rows []replayRow
	res  int // its index in the report's results
}

// Replay writes dead letters of the sink again with its current
// configuration: each chosen one that maps to rows now is written and its
// dead-letter row deleted in one transaction of the sink's protocol
// (exactly once, across crashes and concurrent replays); one that still
// fails to map is Kept with the reason; one whose rows a database refuses
// is Kept with the database's error (its transaction, replayed alone
// after its batch failed, aborted: nothing of it landed). Before writing
// it resolves the sink's orphaned branches as a restore does (an earlier
// replay killed mid-way). It refuses, writing nothing, a replay into an
// upsert table without Force (ErrReplayUpsert), and a selection whose
// checkpoint and seq name several dead letters without an incarnation
// (ErrConfig), and a configuration whose stores are not the ones the sink
// was set up with (xa.ErrIdentity), before reading a dead letter. A dead
// letter whose transaction is decided but whose commit on a target was
// left to restore is Decided. An error after some transactions committed comes with the
// report of what was done; a transaction whose outcome is unknown (its
// decision could not be stored, nor fenced) is resolved by the next
// restore or replay.
func (s *Sink) Replay(ctx context.Context, opts ReplayOptions) (ReplayReport, error) {
	rep := ReplayReport{Results: []ReplayResult{}, Missing: []DeadLetterID{}}
	if err := s.check(); err != nil {
		return rep, err
	}
	if opts.All == (len(opts.Select) > 0) {
		return rep, fmt.Errorf("%w: replay: choose the dead letters (a selection) or all of them, not both", sink.ErrConfig)
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	// The progress target and the targets are the stores the sink was
	// set up with (identity.go), before the dead letters are read: another
	// database's table would answer that there is nothing to replay.
	if _, err := s.verify(ctx); err != nil {
		return rep, err
	}
	all, err := s.stores[s.progress].deadLetters(ctx, s.cfg.Name, 0)
	if err != nil {
		return rep, fmt.Errorf("sink: reading %s in %s: %w", DeadLetterTable, s.progress, err)
	}
	chosen, missing, err := chooseDeadLetters(all, opts)
	if err != nil {
		return rep, err
	}
	rep.Missing = append(rep.Missing, missing...)
	// The tables as they are now (a column's type decides what fits it),
	// and refused if they no longer fit the sink, as Run refuses them.
	if err := s.checkTables(ctx); err != nil {
		return rep, err
	}
	var jobs []replayJob
	for _, d := range chosen {
		rows, err := s.replayRows(d)
		if err != nil {
			// The partition and position are the dead letter's own.
			rep.Results = append(rep.Results, ReplayResult{DeadLetter: d, Outcome: Kept, Reason: err.Err.Error()})
			continue
		}
		if !opts.Force {
			for _, r := range rows {
				if r.tb.Upsert {
					return ReplayReport{Results: []ReplayResult{}, Missing: []DeadLetterID{}},
						fmt.Errorf("%w: dead letter %s maps to table %s on %s (an upsert table); replay it knowingly with force",
							ErrReplayUpsert, d.ID(), r.tb.Name, r.tb.Target)
				}
			}
		}
		outcome := NotTried
		if opts.DryRun {
			outcome = WouldReplay
		}
		rep.Results = append(rep.Results, ReplayResult{DeadLetter: d, Outcome: outcome, Rows: len(rows)})
		jobs = append(jobs, replayJob{d: d, rows: rows, res: len(rep.Results) - 1})
	}
	if opts.DryRun || len(jobs) == 0 {
		return rep, nil
	}
	in, err := s.newInstance(ctx, false, 0, 0)
	if err != nil {
		return rep, err
	}
	defer s.release(in)
	rep.Incarnation = in.inc
	in.sweepBeforeReplay(ctx)
	var n uint64
	for batch := range slices.Chunk(jobs, opts.Batch) {
		done, err := in.replayBatch(ctx, &n, batch, &rep)
		// A restore (a running instance's, taking partitions or
		// sweeping) may fence a replay between prepare and decision:
		// its dead letters are where they were; try again.
		for attempt := 0; err != nil && done && errors.Is(err, sink.ErrAbortMarked) && attempt < 3; attempt++ {
			in.log.Warn("sink: a replay transaction was fenced by a restore; trying again", "err", err)
			done, err = in.replayBatch(ctx, &n, batch, &rep)
		}
		if err == nil {
			continue
		}
		if !done || ctx.Err() != nil {
			// Unknown, or out of time: the dead letters not done stay.
			return rep, err
		}
		// Nothing of the batch landed: replay its dead letters one by
		// one, so that the ones a database refuses stay dead letters
		// with its reason and the others land.
		if len(batch) == 1 {
			rep.Results[batch[0].res].Outcome, rep.Results[batch[0].res].Reason = Kept, err.Error()
			continue
		}
		in.log.Warn("sink: a replay batch failed; replaying its dead letters one by one", "dead_letters", len(batch), "err", err)
		for i := range batch {
			one := batch[i : i+1]
			done, err := in.replayBatch(ctx, &n, one, &rep)
			if err == nil {
				continue
			}
			if !done || ctx.Err() != nil {
				return rep, err
			}
			rep.Results[one[0].res].Outcome, rep.Results[one[0].res].Reason = Kept, err.Error()
		}
	}
	return rep, nil
}

// chooseDeadLetters returns the dead letters opts selects, and the
// selected ones not found.
func chooseDeadLetters(all []DeadLetter, opts ReplayOptions) ([]DeadLetter, []DeadLetterID, error) {
	if opts.All {
		return all, nil, nil
	}
	var out []DeadLetter
	var missing []DeadLetterID
	seen := map[DeadLetterID]bool{}
	for _, id := range opts.Select {
		var found []DeadLetter
		for _, d := range all {
			if d.Checkpoint == id.Checkpoint && d.Seq == id.Seq && (id.Incarnation == 0 || d.Incarnation == id.Incarnation) {
				found = append(found, d)
			}
		}
		switch {
		case len(found) == 0:
			missing = append(missing, id)
		case len(found) > 1:
			return nil, nil, fmt.Errorf("%w: replay: checkpoint %d, seq %d names %d dead letters (of incarnations %s and %s): give the incarnation too",
				sink.ErrConfig, id.Checkpoint, id.Seq, len(found), Ref{Incarnation: found[0].Incarnation}, Ref{Incarnation: found[1].Incarnation})
		case !seen[found[0].ID()]:
			seen[found[0].ID()] = true
			out = append(out, found[0])
		}
	}
	return out, missing, nil
}

// replayRows maps dead letter d with the sink's current mapping and fits
// its rows to their tables, as Write does a record's.
func (s *Sink) replayRows(d DeadLetter) ([]replayRow, *MappingError) {
	// The record's own time was not kept: `from: time` reads when it was
	// set aside.
	r := sink.Record{Partition: d.Partition, Next: d.Position, Key: d.Key, Value: d.Value, Time: d.Created}
	rows, err := s.mapFn(r)
	if err != nil {
		return nil, &MappingError{Partition: r.Partition, Position: r.Next, Err: err}
	}
	out := make([]replayRow, 0, len(rows))
	for _, row := range rows {
		tb := s.tables[row.Table]
		if tb == nil || row.Table == deadTableID {
			return nil, &MappingError{Partition: r.Partition, Position: r.Next, Err: fmt.Errorf("no table %q", row.Table)}
		}
		if len(row.Values) != len(tb.Columns) {
			return nil, &MappingError{Partition: r.Partition, Position: r.Next,
				Err: fmt.Errorf("table %s: %d values for %d columns", row.Table, len(row.Values), len(tb.Columns))}
		}
		if row.Delete && !tb.Upsert {
			return nil, &MappingError{Partition: r.Partition, Position: r.Next,
				Err: fmt.Errorf("table %s: a delete by key, but the table is not an upsert table (it has no key to delete by)", row.Table)}
		}
		vals, err := tb.fit(row.Values)
		if err != nil {
			return nil, &MappingError{Partition: r.Partition, Position: r.Next, Err: err}
		}
		out = append(out, replayRow{id: row.Table, tb: tb, vals: vals, del: row.Delete})
	}
	return out, nil
}

// sweepBeforeReplay resolves the sink's orphaned branches (an earlier
// replay killed after preparing holds the dead-letter rows' locks),
// retrying for up to RestoreWait what it cannot finish yet, as taking
// partitions does. What is left is logged: a delete that meets such a
// row waits for it.
func (in *instance) sweepBeforeReplay(ctx context.Context) {
	deadline := time.Now().Add(in.s.cfg.RestoreWait)
	for attempt := 0; ; attempt++ {
		err := in.Sweep(ctx)
		if err == nil {
			return
		}
		if errors.Is(err, sink.ErrClosed) || time.Now().After(deadline) || !sleep(ctx, backoff(attempt)) {
			in.log.Warn("sink: replay: restore left orphans; replaying on", "err", err)
			return
		}
	}
}

// replayBatch replays jobs in one transaction, numbered ++*n, and fills
// their results in rep. On an error, done says that the transaction
// certainly changed nothing (it was rolled back, or aborted: its jobs
// can be tried again); otherwise its outcome is left to restore.
func (in *instance) replayBatch(ctx context.Context, n *uint64, jobs []replayJob, rep *ReplayReport) (done bool, err error) {
	*n++
	h, err := in.Begin(ctx, *n)
	if err != nil {
		return true, err
	}
	c, err := in.get(h)
	if err != nil {
		return true, err
	}
	abort := func(cause error) (bool, error) {
		if aerr := in.Abort(ctx, h); aerr != nil {
			for _, j := range jobs {
				if rep.Results[j.res].Outcome == NotTried {
					rep.Results[j.res].Outcome = Unknown
				}
			}
			return false, fmt.Errorf("sink: replay: %w; and aborting its transaction: %w", cause, aerr)
		}
		return true, cause
	}
	lb, err := in.branch(c, in.s.targets[in.s.progress])
	if err != nil {
		return abort(err)
	}
	cl, ok := lb.w.(deadLetterClaimer)
	if !ok {
		return abort(fmt.Errorf("sink: replay: the writer of target %s cannot claim dead letters", in.s.progress))
	}
	var claimed []replayJob
	for _, j := range jobs {
		// The delete waits for a dead-letter row another replay holds,
		// which may be paused for any time: it is bounded by ctx (the
		// caller's deadline; xactl's --op-timeout), not by the branch's
		// own context.
		ok, err := cl.claimDeadLetter(ctx, in.s.cfg.Name, j.d.ID())
		if err != nil {
			return abort(fmt.Errorf("sink: replay: deleting dead letter %s: %w", j.d.ID(), err))
		}
		if !ok {
			rep.Results[j.res].Outcome = Gone
			continue
		}
		claimed = append(claimed, j)
		for _, r := range j.rows {
			buf := c.bufs[r.id]
			if buf == nil {
				buf = &buffer{}
				c.bufs[r.id] = buf
			}
			// No origin: a refused row aborts the batch (settleRefused),
			// which is then replayed one dead letter at a time, rather
			// than setting the record aside again.
			buf.add(r.tb, r.vals, r.del, nil)
		}
		if err := in.flushFull(ctx, c); err != nil {
			return abort(err)
		}
	}
	if len(claimed) == 0 {
		return abort(nil)
	}
	ph, err := in.PreCommit(ctx, h, *n)
	if err != nil {
		return abort(err)
	}
	if err := in.Commit(ctx, ph); err != nil {
		var ae *sink.AbortError
		if errors.As(err, &ae) {
			// Decided abort (fenced): nothing of it landed, and its
			// dead letters are where they were.
			return true, err
		}
		for _, j := range claimed {
			rep.Results[j.res].Outcome = Unknown
		}
		return false, fmt.Errorf("sink: replay: transaction %d of incarnation %s: %w (its outcome is left to restore: run the replay again)",
			*n, incarnationText(in.inc), err)
	}
	if len(c.left) > 0 {
		for _, j := range claimed {
			rep.Results[j.res].Outcome = Decided
			rep.Results[j.res].Reason = fmt.Sprintf("decided; its commit on %s is left to restore (the target did not answer)", strings.Join(c.left, ", "))
		}
		in.log.Warn("sink: replay: a decided transaction's commit is left to restore", "txn", *n, "targets", c.left)
		return true, nil
	}
	for _, j := range claimed {
		rep.Results[j.res].Outcome = Replayed
		in.log.Info("sink: dead letter replayed", "dead_letter", j.d.ID().String(), "partition", j.d.Partition, "position", j.d.Position)
	}
	return true, nil
}
