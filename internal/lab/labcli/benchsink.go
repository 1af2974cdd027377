package labcli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/lab/sinkbench"
	"github.com/xadb/xa/internal/testrig/localdb"
)

func newBenchSink(g *globals) *cobra.Command {
	var mysqlDSN, pgDSN, targetList string
	var cfg sinkbench.Config
	var d time.Duration
	var rounds, records int
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Measure what exactly-once costs: plain batched INSERTs vs the sink vs bulk loads",
		Long: `In one run against the same two servers, the same generated records (a
writer per partition) loaded into PostgreSQL, into MariaDB and into both,
four ways:

  batch    the at-least-once baseline, as Redpanda Connect's sql_insert
           writes: batches of --batch records, each committed on its own
           (COPY into PostgreSQL; one prepared multi-row INSERT into MariaDB;
           both databases in parallel), a writer per partition
  sink     the exactly-once sink: an instance per partition, --batch rows
           per statement, a checkpoint (a global transaction and its
           decision) every --interval
  sink-dl  the same with on_error: dead_letter (no record is bad: what
           being ready to set bad records aside costs)
  ceiling  bulk loads of --ceiling-batch records (COPY; LOAD DATA LOCAL
           INFILE), a writer per partition: what the servers take at most

It prints records/s per target and mode (best of the rounds), the ratios
sink/batch and sink-dl/batch (the target is 0.9 or more) and ceiling/batch, and the ratios
round by round. Each measurement loads into an emptied table and is
checked: every record in every target exactly once. The modes are
interleaved, their order turning from round to round.

Without --mysql-dsn/--postgres-dsn (or XA_MYSQL_DSN/XA_POSTGRES_DSN), it
starts throw-away MariaDB and PostgreSQL servers on loopback, with the
durable defaults (every commit flushed). With them, it creates a table
named events and the sink's tables in those databases (drop events
first); for figures that mean something, the servers must flush every
commit (innodb_flush_log_at_trx_commit=1, fsync=on) and MariaDB must allow
LOAD DATA LOCAL (local_infile=ON).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var targets []sinkbench.Target
			for _, t := range strings.Split(targetList, ",") {
				tg := sinkbench.Target(strings.TrimSpace(t))
				if tg != sinkbench.Postgres && tg != sinkbench.MySQL && tg != sinkbench.Both {
					return usageErr("--targets: %q is none of postgres, mariadb, both", t)
				}
				targets = append(targets, tg)
			}
			if cfg.Partitions < 1 || cfg.Batch < 1 || cfg.CeilingBatch < 1 || cfg.Interval <= 0 || rounds < 1 || d <= 0 || records < 0 {
				return usageErr("--partitions, --batch, --ceiling-batch, --interval, --duration and --rounds must be positive")
			}
			var err error
			if mysqlDSN, pgDSN, err = g.dsns(mysqlDSN, pgDSN); err != nil {
				return err
			}
			if mysqlDSN == "" {
				fmt.Fprintln(g.stdout, "starting throw-away MariaDB and PostgreSQL servers (durable defaults: every commit flushed) ...")
				defer localdb.Cleanup()
				my, pg, err := startServersWith(ctx, "sinkbench", sinkbench.MySQLSettings, sinkbench.PostgresSettings)
				if err != nil {
					return err
				}
				mysqlDSN, pgDSN = my.DSN("sinkbench"), pg.DSN("sinkbench")
			}
			cfg.MySQLDSN, cfg.PostgresDSN = mysqlDSN, pgDSN
			if g.verbose {
				// The sink's warnings: with several instances, one's
				// orphan sweep at its end may try a branch another is
				// committing (harmless; MariaDB refuses while the
				// preparing session is connected).
				cfg.Logger = g.logger()
			}
			s, err := sinkbench.Open(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			cfg = s.Config()
			n := map[sinkbench.Target]int{}
			if records > 0 {
				for _, t := range targets {
					n[t] = records
				}
			} else {
				fmt.Fprintf(g.stdout, "calibrating: how many records the baseline loads in %s ...\n", d)
				if n, err = sinkbench.Calibrate(ctx, s, targets, d); err != nil {
					return err
				}
			}
			adjust := d
			if records > 0 {
				adjust = 0
			}
			c, err := sinkbench.Compare(ctx, s, targets, n, rounds, adjust)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "\nrecords (%d-byte payload) into the table events, %d partitions with a writer (sink instance) each, batches of %d rows,\n"+
				"bulk loads of %d, a checkpoint every %s; %d round(s), best round shown:\n",
				cfg.Payload, cfg.Partitions, cfg.Batch, cfg.CeilingBatch, cfg.Interval, rounds)
			tw := table(g.stdout)
			fmt.Fprintln(tw, "TARGET\tMODE\tRECORDS\tSECONDS\tRECORDS/S\tCOMMITS")
			for _, st := range c.Best {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%d\n", st.Target, st.Mode, st.Records, st.Elapsed.Seconds(), st.PerSecond, st.Commits)
			}
			tw.Flush()
			fmt.Fprintln(g.stdout, "\nratios of records/s: of the best rounds, the median of the rounds, and round by round (their spread is the machine's noise):")
			tw = table(g.stdout)
			fmt.Fprintln(tw, "TARGET\tSINK/BATCH\tMEDIAN\tROUNDS\tSINK-DL/BATCH\tMEDIAN\tROUNDS\tCEILING/BATCH\tMEDIAN\tROUNDS")
			met := true
			for _, t := range targets {
				r := c.Ratio(t, sinkbench.Sink, sinkbench.Batch)
				rdl := c.Ratio(t, sinkbench.SinkDeadLetter, sinkbench.Batch)
				met = met && r >= 0.9 && rdl >= 0.9
				fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%s\n", t,
					r, c.MedianRatio(t, sinkbench.Sink, sinkbench.Batch), ratios(c.RoundRatios(t, sinkbench.Sink, sinkbench.Batch)),
					rdl, c.MedianRatio(t, sinkbench.SinkDeadLetter, sinkbench.Batch), ratios(c.RoundRatios(t, sinkbench.SinkDeadLetter, sinkbench.Batch)),
					c.Ratio(t, sinkbench.Ceiling, sinkbench.Batch), c.MedianRatio(t, sinkbench.Ceiling, sinkbench.Batch), ratios(c.RoundRatios(t, sinkbench.Ceiling, sinkbench.Batch)))
			}
			tw.Flush()
			if met {
				fmt.Fprintln(g.stdout, "sink/batch and sink-dl/batch (best rounds) are 0.9 or more into every target.")
			} else {
				fmt.Fprintln(g.stdout, "sink/batch or sink-dl/batch (best rounds) is below 0.9 into some target.")
			}
			fmt.Fprintln(g.stdout, "\nwhat 1000 records cost, the mean of the rounds (CPU in ms: this process, which generates, maps and writes; each server;\n"+
				"MariaDB's statements; log written in KiB; -: unknown, a server not on this machine):")
			tw = table(g.stdout)
			fmt.Fprintln(tw, "TARGET\tMODE\tCPU HERE\tCPU MARIADB\tCPU POSTGRES\tSTATEMENTS\tREDO KIB\tWAL KIB")
			for _, t := range targets {
				for _, m := range sinkbench.Modes {
					p := c.Cost(t, m)
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t, m, num(p.ClientCPU, 2), num(p.MySQLCPU, 2), num(p.PostgresCPU, 2),
						num(p.MySQLStatements, 2), num(p.MySQLRedoKB, 0), num(p.PostgresWALKB, 0))
				}
			}
			tw.Flush()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB database to use")
	f.StringVar(&pgDSN, "postgres-dsn", "", "PostgreSQL database to use")
	f.StringVar(&targetList, "targets", "postgres,mariadb,both", "targets measured, comma-separated")
	f.IntVar(&cfg.Partitions, "partitions", 4, "partitions, with a writer or sink instance each")
	f.IntVar(&cfg.Batch, "batch", 5000, "rows per baseline transaction and per sink statement")
	f.IntVar(&cfg.CeilingBatch, "ceiling-batch", 50000, "rows per bulk load")
	f.DurationVar(&cfg.Interval, "interval", time.Second, "the sink's checkpoint interval")
	f.IntVar(&cfg.Payload, "payload", 64, "payload bytes per record")
	f.DurationVar(&d, "duration", 5*time.Second, "about how long one load lasts (records = the baseline's rate in a warm-up, then in the last round, times this)")
	f.IntVar(&records, "records", 0, "records per measurement (0: from --duration)")
	f.IntVar(&rounds, "rounds", 3, "rounds of all modes (interleaved, to even out drift)")
	return cmd
}

// num formats v with prec decimals, "-" when it is unknown (negative).
func num(v float64, prec int) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func ratios(rs []float64) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, " ")
}
