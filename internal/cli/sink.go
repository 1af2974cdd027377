package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/metrics"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/sqlsink"
	"github.com/xadb/xa/xa"
)

func newSink(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Set up, run and inspect the exactly-once sinks of the configuration",
		Long: `The exactly-once sinks (sinks: in the configuration) write a stream - Kafka,
files, or a generator for tests - into tables of the participants, every
record exactly once: each checkpoint is one global transaction over the
targets, decided by one row in the sink's progress target together with the
positions it reached (docs/sink.md).

  xactl sink setup NAME    create the sink's bookkeeping tables
  xactl sink run NAME      run an instance until interrupted
  xactl sink status NAME   positions, lag, instances, prepared branches
  xactl sink dead-letters NAME   the bad records set aside (on_error: dead_letter)
  xactl sink replay NAME   write dead letters again once fixed, exactly once

A sink's prepared branches (XIDs of format 0x78730001, xs1.<sink>.…) are
resolved by its own restore, which every instance runs when it takes
partitions and every 10 s: never by xactl recover. xactl list shows them as
the sink's; xactl commit and rollback refuse them without --force.`,
	}
	cmd.AddCommand(newSinkSetup(g), newSinkRun(g), newSinkStatus(g), newSinkDeadLetters(g), newSinkReplay(g))
	return cmd
}

// loadSink reads the configuration and returns it with the sink named
// name.
func (g *globals) loadSink(name string) (*config.Config, config.Sink, error) {
	c, err := g.loadConfig(config.Need{Participants: true})
	if err != nil {
		return nil, config.Sink{}, err
	}
	sc, ok := c.Sink(name)
	if !ok {
		known := "none is"
		if names := c.SinkNames(); len(names) > 0 {
			known = strings.Join(names, ", ") + " are"
		}
		return nil, config.Sink{}, usageErr("no sink %q in the configuration (%s configured under sinks:)", name, known)
	}
	return c, sc, nil
}

// sinkLogger is the logger of a sink opened to be looked at (status, list,
// commit): its targets' start-up warnings only with --verbose (doctor
// reports them; sink run logs them).
func (g *globals) sinkLogger() *slog.Logger {
	if g.verbose {
		return g.logger()
	}
	return nil
}

// sinkSetupView is the result of xactl sink setup.
type sinkSetupView struct {
	Sink     string   `json:"sink"`
	Progress string   `json:"progress"`
	Tables   []string `json:"tables"`
	// Bound are the targets bound to the progress store now, Kept those
	// bound already (docs/sink.md, "Identity").
	Bound []string `json:"bound"`
	Kept  []string `json:"kept"`
	// Removed are targets set up for the sink that the configuration no
	// longer has ("name (database)"); Forgotten the one --forget-target
	// forgot.
	Removed   []string `json:"removed"`
	Forgotten string   `json:"forgotten,omitempty"`
	// Missing are the tables the sink writes that do not exist yet
	// ("target: table").
	Missing []string `json:"missing"`
	// Unfit are the tables that exist but do not fit the sink: a mapped
	// column they lack, an upsert key that is no unique key of theirs
	// ("target: table: what is wrong"); sink run refuses them.
	Unfit []string `json:"unfit"`
	// Unchecked are the tables whose target's catalogue could not be read
	// ("target: table: the error").
	Unchecked []string `json:"unchecked"`
}

func newSinkSetup(g *globals) *cobra.Command {
	var forget string
	cmd := &cobra.Command{
		Use:   "setup NAME",
		Short: "Create the sink's bookkeeping tables and bind its targets to its progress target",
		Long: `Create xa_sink_progress, xa_sink_decisions, xa_sink_instances and
xa_sink_generations in the sink's progress target (progress:, default its
first target) where they are missing, and bind each target to the progress
target: a row of xa_sink_bindings in the target (the table is created
there) and its copy in the progress target, each with an identity made
now; and give every target its participant identity where it has none (as
xactl participant init does). Every instance start and restore checks them, so that the sink trusts
decisions only from the progress store that made them and resolves
branches only on the databases it wrote to: a target or progress target
whose DSN now reaches another database is refused (sink run and sink
status exit 3, saying which database was expected). Run setup once before
the sink's first instance, after adding a target, and after upgrading xa.
It is idempotent.

Setup refuses (exit 3), and binds nothing, when a target is bound to
another progress store of the sink (the progress target's DSN reaches
another database than the one set up), or when the progress target
recorded another database under a target's name.

It first opens the sink's targets as sink run does, and refuses (exit 1)
what their start-up checks refuse there: a PostgreSQL target whose
max_prepared_transactions is 0 cannot prepare, and so on.
The tables the sink writes are yours to create; setup says which are
missing, and which lack a mapped column or, for an upsert, a primary key or
unique index on exactly its key columns (sink run refuses those).

A target taken out of the sink's targets stays recorded: its prepared
branches are neither listed nor resolved, so restore keeps every decision
they may need and sink status exits 3. Put it back, or, once it holds no
prepared branch of the sink (xactl list on it), forget it with
--forget-target NAME (refused while the participant of that name is
configured and lists a prepared branch of the sink).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, sc, err := g.loadSink(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			// Open the sink as sink run does, so that its targets' start-up
			// checks refuse here what they would refuse there (a PostgreSQL
			// target without prepared transactions: max_prepared_transactions
			// = 0), with the same message, before anything is created.
			cfg := c.SinkConfig(sc)
			cfg.Logger = g.sinkLogger()
			// Setting the sink up is the explicit act that gives its
			// targets their identities where they have none (as xactl
			// participant init does); sink run never makes one.
			for i := range cfg.Targets {
				cfg.Targets[i].Init = true
			}
			s, err := sqlsink.Open(ctx, cfg)
			if err != nil {
				return fmt.Errorf("sink %s: %w", sc.Name, err)
			}
			defer s.Close()
			v := sinkSetupView{Sink: sc.Name, Progress: sc.Progress, Tables: sqlsink.Tables(), Missing: []string{}, Unfit: []string{}, Unchecked: []string{},
				Removed: []string{}}
			if forget != "" {
				if err := forgetSinkTarget(ctx, c, sc, s, forget, g); err != nil {
					return err
				}
				v.Forgotten = forget
			}
			bound, err := s.Bind(ctx)
			if err != nil {
				return sinkIdentityExit(fmt.Errorf("sink %s: binding its targets to its progress target %s: %w", sc.Name, sc.Progress, err))
			}
			v.Bound, v.Kept = bound.Bound, bound.Kept
			for _, r := range bound.Removed {
				v.Removed = append(v.Removed, r.Name+" ("+r.Where+")")
			}
			tables := sc.SinkTables()
			unfit, errs := checkSinkTables(ctx, c, tables)
			for i, t := range tables {
				switch te := unfit[i]; {
				case errs[i] != nil:
					v.Unchecked = append(v.Unchecked, t.Target+": "+t.Name+": "+errs[i].Error())
				case te == nil:
				case te.Missing:
					v.Missing = append(v.Missing, t.Target+": "+t.Name)
				default:
					v.Unfit = append(v.Unfit, t.Target+": "+t.Name+": "+te.Problem())
				}
			}
			return g.out.result(v, func(w io.Writer) {
				fmt.Fprintf(w, "Sink %s: its tables are in place in %s (%s).\n", v.Sink, v.Progress, strings.Join(v.Tables, ", "))
				if v.Forgotten != "" {
					fmt.Fprintf(w, "Target %s is forgotten: the progress target no longer records it.\n", v.Forgotten)
				}
				if len(v.Bound) > 0 {
					fmt.Fprintf(w, "Bound to the progress target %s now: %s.\n", v.Progress, strings.Join(v.Bound, ", "))
				}
				if len(v.Kept) > 0 {
					fmt.Fprintf(w, "Bound already: %s.\n", strings.Join(v.Kept, ", "))
				}
				for _, r := range v.Removed {
					fmt.Fprintf(w, "Target %s was set up for the sink and is no longer among its targets: its prepared branches are neither listed nor resolved, "+
						"and restore keeps the decisions they may need. Put it back, or forget it once it holds no prepared branch of the sink (--forget-target).\n", r)
				}
				for _, m := range v.Missing {
					fmt.Fprintf(w, "The sink writes table %s, which does not exist yet: create it before xactl sink run.\n", m)
				}
				for _, m := range v.Unfit {
					fmt.Fprintf(w, "The sink writes table %s: fix it before xactl sink run, which refuses it (xactl doctor says how).\n", m)
				}
				for _, m := range v.Unchecked {
					fmt.Fprintf(w, "The sink writes table %s: could not be checked.\n", m)
				}
			})
		},
	}
	cmd.Flags().StringVar(&forget, "forget-target", "", "forget a target taken out of the sink's targets (it must hold no prepared branch of the sink)")
	return cmd
}

// forgetSinkTarget forgets target name of the sink, after checking that
// the participant of that name, if it is configured, lists no prepared
// branch of the sink.
func forgetSinkTarget(ctx context.Context, c *config.Config, sc config.Sink, s *sqlsink.Sink, name string, g *globals) error {
	if slices.Contains(sc.Targets, name) {
		return usageErr("--forget-target %s: %s is among the sink's targets; take it out of them first", name, name)
	}
	if pc, ok := c.Participant(name); ok {
		p, err := openParticipant(ctx, pc, g.sinkLogger())
		if err != nil {
			return fmt.Errorf("--forget-target %s: listing its prepared branches: %w", name, err)
		}
		list, err := p.rm.Recover(ctx)
		p.close()
		if err != nil {
			return fmt.Errorf("--forget-target %s: listing its prepared branches: %w", name, err)
		}
		var mine []string
		for _, b := range list {
			if ref, ok := sqlsink.ParseXID(b.XID); ok && ref.Sink == sc.Name && ref.Target == name {
				mine = append(mine, ref.String())
			}
		}
		if len(mine) > 0 {
			return &exitError{code: ExitInDoubt, err: fmt.Errorf("--forget-target %s: it holds %s of sink %s (%s): put it back among the sink's targets, so that its restore resolves them, then take it out again",
				name, plural(len(mine), "prepared branch"), sc.Name, strings.Join(mine, ", "))}
		}
	}
	if err := s.ForgetTarget(ctx, name); err != nil {
		return fmt.Errorf("--forget-target %s: %w", name, err)
	}
	return nil
}

// sinkIdentityExit gives an identity error (a store answered under a name
// with another identity than the one recorded) the exit code 3, as
// xactl does for what is left in doubt.
func sinkIdentityExit(err error) error {
	if errors.Is(err, xa.ErrIdentity) {
		return &exitError{code: ExitInDoubt, err: err}
	}
	return err
}

func newSinkRun(g *globals) *cobra.Command {
	var metricsAddr string
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "run NAME",
		Short: "Run an instance of the sink until interrupted (or until a bounded source ends)",
		Long: `Run one instance of the sink: read its source, write every record into its
tables, and commit a checkpoint every checkpoint.records records or
checkpoint.interval, whichever comes first. Run as many instances as the
Kafka topics have partitions to spread: the group hands each its share, and
each takes its partitions over (raising their epochs) and resolves what
earlier instances left prepared before reading.

SIGINT or SIGTERM stops it cleanly: the checkpoint being written is aborted,
those already prepared are committed (for up to 30 s; what is left goes to
the next instance's restore), and the Kafka group is left, so its
partitions move to the other instances at once. If it has not stopped
shutdown_timeout (default 45s) after the signal, whatever the group or the
databases do, it exits 1 without waiting (as safe as a kill: the session
timeout and the next instance's restore take over).

No checkpoint committed for stall_after (default 2m) while records wait in
partitions whose positions do not move (a group that never settles) is a
stall: a warning "stalled since", the metric xa_sink_stalled at 1, "STALLED
since" in xactl sink status; past stall_exit (default 10m) it exits 1 for
its supervisor to start it again (docs/sink.md, "Liveness").

A generator or file source
ends by itself: everything read is committed, and it exits 0.

Every --progress-every (default 5s) a line on stderr says the records
committed and their rate, the lag in records (the source's end minus the
positions in the progress table, summed over the partitions: for Kafka the
high watermark; for a file, the non-empty lines past its byte position),
the last checkpoint and its duration, and the checkpoints
prepared and pending. --metrics-addr serves Prometheus metrics (xa_sink_*)
on /metrics.

Exit code 1 when it stops on an error: fenced (every partition was taken
over by another instance), a stall past stall_exit, shutdown_timeout passed
after a signal, a decision whose outcome is unknown (the next
instance's restore settles it), too many aborted checkpoints in a row, or
the source's error. Exit code 3 when it does not start because a target or
the progress target is not the database the sink was set up with (xactl
sink setup binds them): the error says which was expected and how to fix
the configuration.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, sc, err := g.loadSink(args[0])
			if err != nil {
				return err
			}
			return g.boundedSinkRun(cmd.Context(), sc, func(runCtx context.Context, stopRun context.CancelCauseFunc) error {
				return g.runSink(cmd.Context(), runCtx, stopRun, c, sc, metricsAddr, every)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address (e.g. :9465)")
	f.DurationVar(&every, "progress-every", 5*time.Second, "how often a progress line goes to stderr (0: only at the end)")
	return cmd
}

// boundedSinkRun runs run, whose context ends on an interrupt (ctx) or
// when run's stall watch ends it, and returns its error; but once that
// context has ended it waits for run at most the sink's
// shutdown_timeout, and then returns an error of its own (exit 1) without
// waiting longer: SIGTERM ends an instance in a bounded time whatever the
// Kafka group or the databases do. Leaving run behind is safe as a kill
// is: the group gives its partitions to others after its session
// timeout, and the next instance's restore resolves what it left
// prepared (docs/sink.md, "Liveness").
func (g *globals) boundedSinkRun(ctx context.Context, sc config.Sink, run func(context.Context, context.CancelCauseFunc) error) error {
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, stopRun) }()
	select {
	case err := <-done:
		return err
	case <-runCtx.Done():
	}
	bound := time.Duration(sc.ShutdownTimeout)
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	why := "the interrupt"
	if cause := context.Cause(runCtx); errors.Is(cause, errStalled) {
		why = "its stall (" + cause.Error() + ")"
	}
	return &exitError{code: ExitError, err: fmt.Errorf("sink %s did not stop within shutdown_timeout %s of %s: exiting without waiting for it. "+
		"The Kafka group gives its partitions to the other instances after its session timeout; the next instance's restore resolves what it left prepared", sc.Name, bound, why)}
}

// runSink runs an instance of the sink until runCtx ends (ctx: an
// interrupt; stopRun: its stall watch) or the run stops by itself.
func (g *globals) runSink(ctx, runCtx context.Context, stopRun context.CancelCauseFunc, c *config.Config, sc config.Sink, metricsAddr string, every time.Duration) error {
	logger := g.logger()
	cfg := c.SinkConfig(sc)
	cfg.Logger = logger
	// A registry of this run's own (see recover --watch).
	reg := metricsRegistry()
	m := metrics.NewSink(reg, sc.Name)
	tr := &tracker{started: time.Now()}
	cfg.DeadLettersCommitted = func(n int) {
		m.DeadLetters(n)
		tr.deadLetters.Add(int64(n))
	}
	openCtx, cancel := context.WithTimeout(ctx, g.timeout)
	s, err := sqlsink.Open(openCtx, cfg)
	cancel()
	if err != nil {
		return sinkIdentityExit(fmt.Errorf("sink %s: %w", sc.Name, err))
	}
	defer s.Close()
	src, err := openSource(sc, logger)
	if err != nil {
		return fmt.Errorf("sink %s: %w", sc.Name, err)
	}
	ends, err := newEndReader(sc)
	if err != nil {
		src.Close()
		return fmt.Errorf("sink %s: %w", sc.Name, err)
	}
	defer ends.Close()

	stopMetrics, err := g.serveMetrics(metricsAddr, reg)
	if err != nil {
		src.Close()
		return err
	}
	defer stopMetrics()
	opts := sc.RunOptions()
	opts.Observer = observers{m, tr}
	opts.Logger = logger
	fmt.Fprintf(g.stderr, "sink %s: reading %s into %s (progress in %s), a checkpoint every %d records or %s; Ctrl-C to stop\n",
		sc.Name, sourceText(sc.Source), strings.Join(sc.Targets, ", "), sc.Progress, opts.CheckpointRecords, opts.CheckpointInterval)

	rep := &reporter{g: g, c: c, sc: sc, tr: tr, m: m, ends: ends}
	stopReports := make(chan struct{})
	reports := sync.WaitGroup{}
	// The stall watch (docs/sink.md, "Liveness"): it checks four
	// times per stall_after (at most every 5 s), and a stall must
	// be seen for two checkpoint intervals and a check.
	if after := time.Duration(sc.StallAfter); after > 0 {
		period := min(max(after/4, 50*time.Millisecond), 5*time.Second)
		sw := &stallWatcher{r: rep, period: period, logger: logger, stop: stopRun,
			w: stallWatch{after: after, exit: time.Duration(sc.StallExit), confirm: 2*opts.CheckpointInterval + period, started: tr.started}}
		watchCtx, stopWatch := context.WithCancel(runCtx)
		defer stopWatch()
		reports.Go(func() {
			select {
			case <-stopReports:
				stopWatch()
			case <-watchCtx.Done():
			}
		})
		reports.Go(func() { sw.run(watchCtx) })
	}
	if every > 0 {
		reports.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stopReports:
					return
				case <-runCtx.Done():
					return
				case <-t.C:
					rep.report(runCtx)
				}
			}
		})
	}
	runErr := s.Run(runCtx, src, opts)
	close(stopReports)
	reports.Wait()
	closeErr := src.Close()
	interrupted := ctx.Err() != nil
	var stalled error
	if cause := context.Cause(runCtx); !interrupted && errors.Is(cause, errStalled) {
		stalled = cause
	}
	// The last word: what was done, and the lag now.
	lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	rep.report(lctx)
	lcancel()
	switch {
	case stalled != nil:
		fmt.Fprintf(g.stderr, "sink %s: stopped on its stall: %s; the checkpoint being written was aborted, the prepared ones committed (or left to the next instance's restore)\n",
			sc.Name, tr.done())
	case interrupted:
		fmt.Fprintf(g.stderr, "sink %s: stopped: %s; the checkpoint being written was aborted, the prepared ones committed (or left to the next instance's restore)\n",
			sc.Name, tr.done())
	case runErr == nil:
		fmt.Fprintf(g.stderr, "sink %s: the source ended: %s, every record read is committed\n", sc.Name, tr.done())
	}
	if u, ok := src.(unterminated); ok {
		lines := u.Unterminated()
		for _, path := range slices.Sorted(maps.Keys(lines)) {
			fmt.Fprintf(g.stderr, "sink %s: %s ends with a line without its line break (%s at offset %d): not read, as it may be half written; the next run reads it once its line break is there\n",
				sc.Name, path, plural(int(lines[path][1]), "byte"), lines[path][0])
		}
	}
	if closeErr != nil && !errors.Is(closeErr, context.Canceled) {
		fmt.Fprintf(g.stderr, "sink %s: closing the source: %v\n", sc.Name, closeErr)
	}
	// The result: on stdout with -o json (people read stderr).
	v := tr.view(sc.Name)
	switch {
	case stalled != nil:
		v.Ended, v.Error = "stalled", stalled.Error()
	case interrupted:
		v.Ended = "interrupted"
		if errors.Is(runErr, sink.ErrUnresolved) {
			v.Error = runErr.Error()
		}
	case runErr == nil:
		v.Ended = "source ended"
	default:
		v.Ended, v.Error = "error", runErr.Error()
	}
	if err := g.out.result(v, func(io.Writer) {}); err != nil {
		return err
	}
	return sinkRunEnd(sc.Name, interrupted, stalled, runErr)
}

// sinkRunEnd is sink run's exit: nil for a clean stop (the source ended,
// or a signal with everything prepared settled), else the error to exit
// with: a stall, an error that stopped the run, or a signal with a
// decision left unresolved while draining (a prepared checkpoint whose
// branches hold their locks until the next instance's restore: not a
// clean stop, and a supervisor must start the next instance).
func sinkRunEnd(name string, interrupted bool, stalled, runErr error) error {
	switch {
	case stalled != nil:
		return fmt.Errorf("sink %s stopped: %w\nIt exits for its supervisor to start it again (a new group session); xactl sink status %s shows the partitions waiting", name, stalled, name)
	case runErr != nil && !interrupted:
		return sinkIdentityExit(fmt.Errorf("sink %s stopped: %w%s", name, runErr, runHint(runErr, name)))
	case interrupted && errors.Is(runErr, sink.ErrUnresolved):
		return fmt.Errorf("sink %s stopped on a signal with a decision unresolved: %w%s", name, runErr, runHint(runErr, name))
	}
	return nil
}

// unterminated is implemented by sources that leave a last line without
// its line break unread (filesource).
type unterminated interface {
	Unterminated() map[string][2]int64
}

// runHint says what an error that stopped a run means for the operator.
func runHint(err error, name string) string {
	switch {
	case errors.Is(err, sink.ErrFenced):
		return "\nEvery partition of this instance was taken over by another instance (it was too slow, or cut off): nothing it wrote after the takeover lands. Another instance holds its partitions."
	case errors.Is(err, sink.ErrUnresolved):
		return fmt.Sprintf("\nA checkpoint's decision could not be settled: the next instance's restore settles it through the abort marker (xactl sink status %s shows its branches).", name)
	case errors.Is(err, xa.ErrIdentity):
		return fmt.Sprintf("\nA database answered under a name of the sink's configuration that is not the one the sink was set up with: nothing was written or resolved. Fix the configuration as the error says (xactl sink status %s shows it too).", name)
	case errors.Is(err, sqlsink.ErrTable):
		return fmt.Sprintf("\nA table the sink writes does not fit its configuration: nothing was written. xactl doctor says how to fix it (the sink %s section).", name)
	case errors.Is(err, sink.ErrAborted):
		return "\nCheckpoints kept aborting: see the reason above; the records were not written (the positions did not move)."
	}
	return ""
}

// observers passes a sink's observations to several observers.
type observers []sink.Observer

func (os observers) RecordsWritten(n int) {
	for _, o := range os {
		o.RecordsWritten(n)
	}
}

func (os observers) CheckpointDone(c sink.CheckpointStats) {
	for _, o := range os {
		o.CheckpointDone(c)
	}
}

func (os observers) PendingChanged(n int) {
	for _, o := range os {
		o.PendingChanged(n)
	}
}

// tracker keeps what the progress line says.
type tracker struct {
	started   time.Time
	committed atomic.Int64 // records
	written   atomic.Int64
	// deadLetters counts the bad records committed to the dead-letter
	// table (on_error: dead_letter).
	deadLetters atomic.Int64
	pending     atomic.Int64

	mu                  sync.Mutex
	checkpoints, aborts int
	largest             int                  // records of the largest committed checkpoint
	last                sink.CheckpointStats // the last committed
	lastAt              time.Time
	lastAbort           error
}

func (t *tracker) RecordsWritten(n int) { t.written.Add(int64(n)) }
func (t *tracker) PendingChanged(n int) { t.pending.Store(int64(n)) }

func (t *tracker) CheckpointDone(c sink.CheckpointStats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !c.Committed {
		t.aborts++
		t.lastAbort = c.Err
		return
	}
	t.committed.Add(int64(c.Records))
	t.checkpoints++
	t.largest = max(t.largest, c.Records)
	t.last, t.lastAt = c, time.Now()
}

// sinkRunView is the result of xactl sink run (printed with -o json).
type sinkRunView struct {
	Sink string `json:"sink"`
	// Ended: interrupted, source ended, or error.
	Ended            string `json:"ended"`
	Error            string `json:"error,omitempty"`
	RecordsCommitted int64  `json:"records_committed"`
	Checkpoints      int    `json:"checkpoints"`
	// LargestCheckpoint is the records of the largest checkpoint
	// committed: at most checkpoint.records.
	LargestCheckpoint int `json:"largest_checkpoint"`
	Aborted           int `json:"aborted"`
	// DeadLetters: bad records set aside in the dead-letter table.
	DeadLetters int64   `json:"dead_letters"`
	Seconds     float64 `json:"seconds"`
}

func (t *tracker) view(name string) sinkRunView {
	t.mu.Lock()
	defer t.mu.Unlock()
	return sinkRunView{Sink: name, RecordsCommitted: t.committed.Load(), Checkpoints: t.checkpoints, LargestCheckpoint: t.largest, Aborted: t.aborts, DeadLetters: t.deadLetters.Load(),
		Seconds: time.Since(t.started).Seconds()}
}

// done says what the run did.
func (t *tracker) done() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := fmt.Sprintf("%s committed in %s (%s aborted) in %s", plural(int(t.committed.Load()), "record"), plural(t.checkpoints, "checkpoint"),
		fmt.Sprint(t.aborts), time.Since(t.started).Round(time.Millisecond))
	if t.checkpoints > 0 {
		s += fmt.Sprintf(", the largest checkpoint %s", plural(t.largest, "record"))
	}
	if n := t.deadLetters.Load(); n > 0 {
		s += fmt.Sprintf("; %s set aside in the dead-letter table", plural(int(n), "bad record"))
	}
	return s
}

// reporter writes the progress lines of sink run.
type reporter struct {
	g    *globals
	c    *config.Config
	sc   config.Sink
	tr   *tracker
	m    *metrics.Sink
	ends *endReader

	prevAt        time.Time
	prevCommitted int64
}

// report writes one progress line, and sets the lag metrics.
func (r *reporter) report(ctx context.Context) {
	now := time.Now()
	committed := r.tr.committed.Load()
	since := r.prevAt
	if since.IsZero() {
		since = r.tr.started
	}
	rate := float64(committed-r.prevCommitted) / now.Sub(since).Seconds()
	r.prevAt, r.prevCommitted = now, committed

	var b strings.Builder
	fmt.Fprintf(&b, "sink %s: %d records committed, %.0f/s", r.sc.Name, committed, rate)
	lag, parts, err := r.lag(ctx)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "; lag ? (%v)", err)
	default:
		fmt.Fprintf(&b, "; lag %d over %s", lag, plural(parts, "partition"))
	}
	r.tr.mu.Lock()
	if r.tr.checkpoints > 0 {
		l := r.tr.last
		fmt.Fprintf(&b, "; checkpoint %d committed %s ago in %s (%d records; write %s, prepare %s, commit %s)", l.Checkpoint,
			age(time.Since(r.tr.lastAt), true), dur(l.Prepare+l.Commit), l.Records, dur(l.Write), dur(l.Prepare), dur(l.Commit))
	} else {
		b.WriteString("; no checkpoint committed yet")
	}
	fmt.Fprintf(&b, "; %d pending", r.tr.pending.Load())
	if r.tr.aborts > 0 {
		fmt.Fprintf(&b, "; %d aborted (last: %v)", r.tr.aborts, r.tr.lastAbort)
	}
	r.tr.mu.Unlock()
	fmt.Fprintln(r.g.stderr, b.String())
}

// lag reads the positions in the progress table and the source's ends,
// sets the lag metrics, and returns the total lag and how many partitions
// it covers.
func (r *reporter) lag(ctx context.Context) (int64, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := sqlsink.ReadStatus(ctx, r.c.ProgressTarget(r.sc), r.sc.Name)
	if err != nil {
		return 0, 0, fmt.Errorf("progress table: %w", err)
	}
	ends, err := r.ends.ends(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("source: %w", err)
	}
	pos := map[string]string{}
	for _, p := range st.Partitions {
		pos[p.Partition] = p.Position
	}
	lags := map[string]int64{}
	var total int64
	for _, e := range ends {
		if n, ok := e.lag(pos[e.Partition]); ok {
			lags[e.Partition] = n
			total += n
		}
	}
	r.m.SetLag(lags)
	return total, len(lags), nil
}

// dur formats a duration for the progress line.
func dur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
