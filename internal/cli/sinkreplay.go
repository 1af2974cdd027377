package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/sink/sqlsink"
)

// sinkReplayView is the result of xactl sink replay.
type sinkReplayView struct {
	Sink   string `json:"sink"`
	DryRun bool   `json:"dry_run"`
	sqlsink.ReplayReport
	Replayed int `json:"replayed"`
	Kept     int `json:"kept"`
	// Decided are replayed dead letters whose commit on a target is
	// left to restore (sqlsink.Decided).
	Decided int `json:"decided"`
}

// exit returns the error (and so the exit code) of a replay that reported
// v, and stopped with rerr if not nil: 1 for a replay that stopped, a
// dead letter not found or one kept; 3 (in doubt) for dead letters decided
// whose commit on a target is left to restore; nil when all were replayed.
func (v sinkReplayView) exit(rerr error) error {
	switch {
	case rerr != nil:
		return fmt.Errorf("sink %s: replay stopped: %w", v.Sink, rerr)
	case len(v.Missing) > 0:
		return &exitError{code: ExitError, err: fmt.Errorf("sink %s: no dead letter %s (xactl sink dead-letters %s lists them)", v.Sink, v.Missing[0], v.Sink)}
	case v.Kept > 0:
		return &exitError{code: ExitError, err: fmt.Errorf("sink %s: %s kept (still bad: see the reasons above)", v.Sink, plural(v.Kept, "dead letter"))}
	case v.Decided > 0:
		return &exitError{code: ExitInDoubt, err: fmt.Errorf("sink %s: %s decided, their commit left to restore: their rows land when a restore runs (xactl sink status %s shows the branches)",
			v.Sink, plural(v.Decided, "dead letter"), v.Sink)}
	}
	return nil
}

func newSinkReplay(g *globals) *cobra.Command {
	var (
		all, dryRun, force bool
		inc, checkpoint    uint64
		seq                int64
	)
	cmd := &cobra.Command{
		Use:   "replay NAME (--checkpoint N --seq M [--incarnation I] | --all) [--dry-run] [--force]",
		Short: "Write dead letters again, once their cause is fixed, exactly once",
		Long: `Map the chosen dead letters (xactl sink dead-letters NAME lists them, with
their ID incarnation/checkpoint/seq) again with the sink's configuration as
it is now - fix the mapping or the table first - and write each one's rows
and delete its dead-letter row in one global transaction of the sink's own
protocol: decided by a row in the progress target, restored like any
checkpoint after a crash. A replay interrupted at any point and run again
writes no record twice and loses none; two replays of one dead letter at
once write it once (the other says "gone").

A record that still fails to map, or whose row a database refuses, stays a
dead letter and is listed with the reason (exit 1). A dead letter whose
transaction is decided but whose commit on a target is left to restore
(the target did not answer) is "decided" (exit 3): its rows there land
when a restore runs. --dry-run maps the dead
letters and says what would happen, writing nothing.

A dead letter mapping to an upsert table is refused without --force: the
replayed row overwrites (or deletes) its key's row, which a newer record may
have written since the dead letter was set aside. Replaying into insert
tables appends its rows after the rows written since, out of the stream's
order. The record's own time was not kept: a column mapped from time gets
the time it was set aside.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			picked := cmd.Flags().Changed("checkpoint") || cmd.Flags().Changed("seq")
			if all == picked || (picked && !(cmd.Flags().Changed("checkpoint") && cmd.Flags().Changed("seq"))) {
				return usageErr("sink replay: choose --checkpoint N --seq M (one dead letter), or --all")
			}
			if all && cmd.Flags().Changed("incarnation") {
				return usageErr("sink replay: --incarnation goes with --checkpoint and --seq, not --all")
			}
			c, sc, err := g.loadSink(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			cfg := c.SinkConfig(sc)
			cfg.Logger = g.sinkLogger()
			s, err := sqlsink.Open(ctx, cfg)
			if err != nil {
				return sinkIdentityExit(fmt.Errorf("sink %s: %w", sc.Name, err))
			}
			defer s.Close()
			opts := sqlsink.ReplayOptions{All: all, DryRun: dryRun, Force: force}
			if picked {
				opts.Select = []sqlsink.DeadLetterID{{Incarnation: inc, Checkpoint: checkpoint, Seq: seq}}
			}
			rep, rerr := s.Replay(ctx, opts)
			if errors.Is(rerr, sqlsink.ErrReplayUpsert) {
				return usageErr("sink %s: %v (--force)", sc.Name, rerr)
			}
			if rerr != nil && len(rep.Results) == 0 {
				return sinkIdentityExit(fmt.Errorf("sink %s: replay: %w%s", sc.Name, rerr, setupHint(rerr, sc.Name)))
			}
			v := sinkReplayView{Sink: sc.Name, DryRun: dryRun, ReplayReport: rep,
				Replayed: rep.Count(sqlsink.Replayed), Kept: rep.Count(sqlsink.Kept), Decided: rep.Count(sqlsink.Decided)}
			if err := g.out.result(v, v.print); err != nil {
				return err
			}
			return v.exit(rerr)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead letter of the sink")
	cmd.Flags().Uint64Var(&checkpoint, "checkpoint", 0, "the dead letter's checkpoint (its ID's second part)")
	cmd.Flags().Int64Var(&seq, "seq", 0, "the dead letter's number in its checkpoint (its ID's third part)")
	cmd.Flags().Uint64Var(&inc, "incarnation", 0, "the dead letter's incarnation (its ID's first part), when the checkpoint and seq name several")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would happen; write nothing")
	cmd.Flags().BoolVar(&force, "force", false, "replay into upsert tables too (a replayed row may overwrite a newer row of its key)")
	return cmd
}

func (v sinkReplayView) print(w io.Writer) {
	if len(v.Results) == 0 && len(v.Missing) == 0 {
		fmt.Fprintf(w, "No dead letters of sink %s to replay.\n", v.Sink)
		return
	}
	if len(v.Results) > 0 {
		tw := table(w)
		fmt.Fprintln(tw, "ID\tPARTITION\tPOSITION\tOUTCOME\tROWS\tREASON")
		for _, r := range v.Results {
			d := r.DeadLetter
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.ID(), d.Partition, d.Position, r.Outcome, strconv.Itoa(r.Rows), shorten(r.Reason, 200))
		}
		tw.Flush()
	}
	for _, id := range v.Missing {
		fmt.Fprintf(w, "No dead letter %s: replayed already, or never there.\n", id)
	}
	switch {
	case v.DryRun:
		fmt.Fprintf(w, "Dry run: %s would be replayed, %s kept; nothing was written.\n",
			plural(v.Count(sqlsink.WouldReplay), "dead letter"), plural(v.Kept, "dead letter"))
	default:
		fmt.Fprintf(w, "%s replayed (rows written and dead letters deleted, in one transaction each batch), %s kept.\n",
			plural(v.Replayed, "dead letter"), plural(v.Kept, "dead letter"))
		if v.Decided > 0 {
			fmt.Fprintf(w, "%s decided, their commit on a target left to restore: their rows land when a restore runs (a running instance, or the next replay).\n",
				plural(v.Decided, "dead letter"))
		}
		if v.Incarnation != 0 {
			fmt.Fprintf(w, "The replay ran as incarnation %d of the sink (xa_sink_instances: when, host and pid).\n", v.Incarnation)
		}
	}
}
