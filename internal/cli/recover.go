package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/metrics"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

func newRecover(g *globals) *cobra.Command {
	var dry, watch, takeover bool
	var interval time.Duration
	var metricsAddr, reason string
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Resolve in-doubt branches from the decision log",
		Long: `Resolve every in-doubt branch of this node (the decision log's node, or
recovery.nodes) on every participant:

  - a commit decision is recorded   -> commit the branch
  - no decision, older than the     -> take the fence (an abort marker in every
    log's grace period                 delegated decision table, then an abort
                                       record in the log, both refused if a
                                       commit got there first), then roll the
                                       branch back (presumed abort)
  - no decision, younger            -> leave it: its coordinator may still decide
  - of another decision log, older  -> leave it: its decision may be elsewhere
    than this log, or blocked by a
    delegated decision table that is
    not configured or not answering

Other applications' branches are never touched, nor are the exactly-once
sinks' (their own restore resolves them: xactl sink status NAME). Records whose branches are
all resolved are forgotten. Running it twice, or next to another recover,
is safe.

The embedded decision log (log.kind file) is taken for writing; while a
transaction manager has it open, use --dry-run (it runs recovery itself).

A decision log in PostgreSQL or MySQL (log.kind postgres or mysql) is read
and written beside the running nodes, without taking its lease: recover
commits what is decided and rolls back what is recorded aborted, and leaves
presumed abort to the process that holds the log (its branches wait, with
who holds it). With --takeover, xactl takes the node's log over if its lease
has expired (its node is dead: xactl nodes shows it) or was released, at a
new epoch, so that the database refuses every decision of the node's
process from then on; recovers it at once, without the grace period, until
nothing of it is in doubt; and releases it. The takeover is recorded with
who made it (--reason adds why). A live node's log is refused.

With --watch, a report is printed after every scan that found or did
something; with -o json, after every scan, each report one compact JSON
document on a line of its own (JSON Lines), so that a reader can take one
line at a time.

Exit code 3 when branches of ours remain in doubt after the run, or a
record is kept because a participant it names was not seen (its branches
there may be in doubt); 1 when a participant could not be listed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !watch && (cmd.Flags().Changed("interval") || metricsAddr != "") {
				return usageErr("--interval and --metrics-addr need --watch")
			}
			if takeover && (watch || dry) {
				return usageErr("--takeover goes with neither --watch nor --dry-run")
			}
			if reason != "" && !takeover {
				return usageErr("--reason needs --takeover")
			}
			c, err := g.loadConfig(config.Need{Log: true, Participants: true})
			if err != nil {
				return err
			}
			if takeover {
				if !c.Log.IsSQL() {
					return usageErr("--takeover needs a decision log in a database (log.kind postgres or mysql): a file log has no lease, and xactl takes it for writing anyway")
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
				defer cancel()
				return recoverTakeover(ctx, g, c, reason)
			}
			if interval <= 0 {
				interval = time.Duration(c.Recovery.Interval)
			}
			logger := g.logger()
			ctx := cmd.Context()
			if !watch {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, g.timeout)
				defer cancel()
			}
			mode := forWriting
			if dry {
				mode = readOnly
			}
			log, err := openDecisionLog(c, mode, logger)
			if err != nil {
				return err
			}
			defer log.Close()
			ps := openParticipants(ctx, c, logger)
			defer ps.Close()
			sc, err := newScanner(c, ps, log, logger)
			if err != nil {
				return err
			}
			if !watch {
				scan := sc.Scan
				if dry {
					scan = sc.Plan
				}
				rep, err := scan(ctx)
				if err != nil {
					return err
				}
				v := viewReport(ctx, c, sc, ps, rep, dry, g.sinkLogger())
				if err := g.out.result(v, v.print); err != nil {
					return err
				}
				g.out.errors(errStrings(explainAll(rep.Errors)))
				if err := identityExit(v.Unlisted, rep); err != nil {
					return err
				}
				switch {
				case len(v.Unlisted) > 0:
					return &exitError{code: ExitError, err: fmt.Errorf("%d of %d participants could not be listed: nothing is known about their prepared branches",
						len(v.Unlisted), len(ps.names))}
				case len(v.Errors) > 0:
					return &exitError{code: ExitError, err: errors.New("some participants could not be recovered")}
				case v.InDoubt > 0:
					return errInDoubt
				}
				return nil
			}
			for _, err := range ps.openErrors() {
				fmt.Fprintln(g.stderr, "error:", err)
			}

			// A registry of this run's own: Main may run more than once
			// in a process (tests), and the default registry refuses a
			// second registration of the same collectors with a panic.
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			m := metrics.New(reg)
			m.SetGrace(sc.Grace())
			if metricsAddr != "" {
				ln, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
				go srv.Serve(ln)                         //nolint:errcheck // ends with Shutdown
				defer srv.Shutdown(context.Background()) //nolint:errcheck
				fmt.Fprintf(g.stderr, "metrics on http://%s/metrics\n", ln.Addr())
			}
			fmt.Fprintf(g.stderr, "recovering every %s; Ctrl-C to stop\n", interval)
			_, stop, _ := sc.Start(ctx, interval, func(rep recovery.Report, err error) {
				m.ObserveScan(rep, err)
				if err != nil {
					fmt.Fprintln(g.stderr, "scan:", err)
					return
				}
				if g.out.json || len(rep.Branches) > 0 || len(rep.Errors) > 0 || len(rep.Forgotten) > 0 || len(rep.Aborted) > 0 {
					if !g.out.json {
						fmt.Fprintf(g.stdout, "--- %s\n", time.Now().Format(time.RFC3339))
					}
					sctx, cancel := context.WithTimeout(ctx, g.timeout)
					v := viewReport(sctx, c, sc, ps, rep, false, g.sinkLogger())
					cancel()
					g.out.line(v, v.print) //nolint:errcheck
					g.out.errors(v.Errors)
				}
			})
			// The first scan's error was reported like the others; the
			// watch goes on until interrupted.
			<-ctx.Done()
			stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dry, "dry-run", false, "show what would be done; change nothing")
	f.BoolVar(&watch, "watch", false, "keep recovering every --interval until interrupted")
	f.DurationVar(&interval, "interval", 0, "time between scans with --watch (default recovery.interval, 10s)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "with --watch, serve Prometheus metrics on this address (e.g. :9464)")
	f.BoolVar(&takeover, "takeover", false, "take the node's log over if its lease expired (shared logs only), recover it at once, release it")
	f.StringVar(&reason, "reason", "", "with --takeover, why (recorded with the takeover, with who made it)")
	return cmd
}

// reportView is recover's result.
type reportView struct {
	DryRun   bool           `json:"dry_run"`
	Log      *identityView  `json:"log"`
	Grace    string         `json:"grace"`
	Listed   []string       `json:"listed"`
	Unlisted []unlistedView `json:"unlisted"`
	Branches []branchView   `json:"branches"`
	// Aborted: transactions whose abort this run recorded (presumed
	// abort), before rolling their branches back.
	Aborted         []string   `json:"aborted"`
	Forgotten       []string   `json:"forgotten"`
	ForgottenAborts []string   `json:"forgotten_aborts"`
	Kept            []keptView `json:"kept"`
	// InDoubt counts the branches of ours left in doubt, and the records
	// kept because a participant they name was not seen (its branches
	// there may be in doubt).
	InDoubt int      `json:"in_doubt"`
	Errors  []string `json:"errors"`
}

type keptView struct {
	GlobalID string `json:"global_id"`
	Reason   string `json:"reason"`
}

func ids(gs []xa.GlobalID) []string {
	out := []string{}
	for _, g := range gs {
		out = append(out, g.String())
	}
	return out
}

func viewReport(ctx context.Context, c *config.Config, sc *recovery.Scanner, ps *participants, rep recovery.Report, dry bool, logger *slog.Logger) reportView {
	v := reportView{DryRun: dry, Log: viewIdentity(sc.Identity()), Grace: sc.Grace().String(),
		Listed: append([]string{}, rep.Participants...), Unlisted: unlisted(ps, rep),
		Branches: viewBranches(rep, sc.Grace(), nil), Aborted: ids(rep.Aborted), Forgotten: ids(rep.Forgotten),
		ForgottenAborts: ids(rep.ForgottenAborts), Kept: []keptView{}, InDoubt: rep.InDoubt(),
		Errors: errStrings(append(ps.openErrors(), explainAll(rep.Errors)...))}
	// Sink branches are the sink's: recover never touches them, and shows
	// what the sink's restore would do with them, as list does.
	annotateSinkBranches(v.Branches, rep.Branches, readSinkRestores(ctx, c, rep.Branches, true, logger))
	for _, k := range rep.Kept {
		v.Kept = append(v.Kept, keptView{GlobalID: k.ID.String(), Reason: k.Reason})
		if k.Unseen {
			v.InDoubt++
		}
	}
	return v
}

func (v reportView) print(w io.Writer) {
	printBranches(w, v.Branches, v.Listed, v.Unlisted, !v.DryRun)
	would := func(did, would string) string {
		if v.DryRun {
			return would
		}
		return did
	}
	if len(v.Aborted) > 0 {
		fmt.Fprintf(w, "recorded the abort of %s (presumed abort) before rolling back its branches\n", plural(len(v.Aborted), "transaction"))
	}
	if len(v.Forgotten) > 0 {
		fmt.Fprintf(w, "%s %s\n", would("forgot", "would forget"), plural(len(v.Forgotten), "resolved decision record"))
	}
	if len(v.ForgottenAborts) > 0 {
		fmt.Fprintf(w, "forgot %s past their retention\n", plural(len(v.ForgottenAborts), "abort record"))
	}
	for _, k := range v.Kept {
		fmt.Fprintf(w, "kept record %s: %s\n", k.GlobalID, k.Reason)
	}
	if v.InDoubt > 0 {
		fmt.Fprintf(w, "%s of ours still in doubt\n", plural(v.InDoubt, "branch"))
	}
}
