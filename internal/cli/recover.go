package cli

import (
	"context"
	"errors"
	"fmt"
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
	var dry, watch bool
	var interval time.Duration
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Resolve in-doubt branches from the decision log",
		Long: `Resolve every in-doubt branch of this node (recovery.nodes) on every participant:

  - a commit was logged           -> commit the branch
  - no commit logged, older than  -> roll it back (presumed abort)
    the grace period
  - no commit logged, younger     -> leave it: its coordinator may still decide

Other applications' branches are never touched. Records whose branches are
all resolved are forgotten. Running it twice, or next to another recover,
is safe.

The decision log is taken for writing; while a transaction manager has it
open, use --dry-run (it runs recovery itself).

Exit code 3 when in-doubt branches remain after the run, or a record is
kept because a participant it names is not configured (its branches there
may be in doubt).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			if !watch && (cmd.Flags().Changed("interval") || metricsAddr != "") {
				return usageErr("--interval and --metrics-addr need --watch")
			}
			c, err := g.loadConfig(true)
			if err != nil {
				return err
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
			var log recovery.Log
			if dry {
				snap, err := readSnapshot(c.Log.Dir)
				if err != nil {
					return fmt.Errorf("reading the decision log: %w", err)
				}
				log = snap
			} else {
				l, err := openLog(c.Log.Dir, logger)
				if err != nil {
					return err
				}
				defer l.Close()
				log = l
			}
			ps, errs := openParticipants(ctx, c, logger)
			defer closeAll(ps)
			if len(errs) > 0 && !watch {
				printErrors(g.stderr, errs)
			}
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
				doubt := report(g, asJSON, c, rep, dry)
				switch {
				case len(errs)+len(rep.Errors) > 0:
					return &exitError{code: ExitError, err: errors.New("some participants could not be recovered")}
				case doubt > 0:
					return errInDoubt
				}
				return nil
			}

			// A registry of this run's own: Main may run more than once
			// in a process (tests), and the default registry refuses a
			// second registration of the same collectors with a panic.
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			m := metrics.New(reg)
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
			sc.Run(ctx, interval, func(rep recovery.Report, err error) {
				m.ObserveScan(rep, err)
				if err != nil {
					fmt.Fprintln(g.stderr, "scan:", err)
					return
				}
				if asJSON || len(rep.Branches) > 0 || len(rep.Errors) > 0 || len(rep.Forgotten) > 0 {
					fmt.Fprintf(g.stdout, "--- %s\n", time.Now().Format(time.RFC3339))
					report(g, asJSON, c, rep, false)
				}
			})
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dry, "dry-run", false, "show what would be done; change nothing")
	f.BoolVar(&watch, "watch", false, "keep recovering every --interval until interrupted")
	f.DurationVar(&interval, "interval", 0, "time between scans with --watch (default recovery.interval, 10s)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "with --watch, serve Prometheus metrics on this address (e.g. :9464)")
	return cmd
}

// report prints a scan report and returns how many branches of ours remain
// in doubt, counting a record kept because a participant it names was not
// seen as one: its branches there may be.
func report(g *globals, asJSON bool, c *config.Config, rep recovery.Report, dry bool) int {
	views := []branchView{}
	doubt := 0
	for _, b := range rep.Branches {
		views = append(views, viewBranch(b, time.Duration(c.Recovery.Grace), map[string]xa.HeuristicRecord{}))
		if inDoubt(b) {
			doubt++
		}
	}
	for _, k := range rep.Kept {
		if k.Unseen {
			doubt++
		}
	}
	forgotten := []string{}
	for _, id := range rep.Forgotten {
		forgotten = append(forgotten, id.String())
	}
	kept := []map[string]string{}
	for _, k := range rep.Kept {
		kept = append(kept, map[string]string{"global_id": k.ID.String(), "reason": k.Reason})
	}
	if asJSON {
		writeJSON(g.stdout, map[string]any{ //nolint:errcheck
			"dry_run": dry, "branches": views, "forgotten": forgotten, "kept": kept, "in_doubt": doubt, "errors": errStrings(rep.Errors),
		})
		return doubt
	}
	printBranches(g.stdout, views, !dry)
	verb := "forgot"
	if dry {
		verb = "would forget"
	}
	if len(forgotten) > 0 {
		fmt.Fprintf(g.stdout, "%s %d resolved decision record(s)\n", verb, len(forgotten))
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(g.stdout, "kept record %s: %s\n", k.ID, k.Reason)
	}
	printErrors(g.stderr, rep.Errors)
	if doubt > 0 {
		fmt.Fprintf(g.stdout, "%d branch(es) of ours still in doubt\n", doubt)
	}
	return doubt
}
