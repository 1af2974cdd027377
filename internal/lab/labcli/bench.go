package labcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/lab/bench"
	"github.com/xadb/xa/internal/lab/logbench"
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/localdb"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

func newBench(g *globals) *cobra.Command {
	var mysqlDSN, pgDSN, dir, logPG, logMy string
	var workers int
	var d time.Duration
	var rounds int
	var skipLog bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure what atomicity costs: local commits vs hand-written 2PC vs the transaction manager",
		Long: `In one run against the same two servers, with concurrent workers on disjoint rows,
transfers (one row down in MySQL, one up in PostgreSQL) made three ways:

  local  two local commits, not atomic (the floor)
  raw    hand-written two-phase commit with no transaction manager: parallel
         prepare, parallel commit, no decision log (not recoverable)
  tm     the transaction manager with its durable (fsync'ed) decision log
  tm-async  the same with AsyncCommit: the caller is answered once the
         decision is durable; phase 2 goes on in the background
  tm-last   the transaction manager with PostgreSQL as the last resource
         (postgres.Config.DecisionTable): MySQL prepares, PostgreSQL
         commits in one phase with the decision row, MySQL commits; no
         decision-log write

  tm-sqllog-pg     tm with the shared decision log (recovery/sqllog) in PostgreSQL
  tm-sqllog-maria  the same in MariaDB (MySQL)

and the ratio tm/raw, and of the shared log's modes to tm. Then the
decision log alone: decisions per second at 1, 16 and 64 concurrent
writers, for the embedded log, Pebble, and the shared log in PostgreSQL
and in MariaDB. The shared logs are built as xactl builds them, with its
defaults (group commit, one batch in flight, the next built meanwhile).

Without --mysql-dsn/--postgres-dsn (or XA_MYSQL_DSN/XA_POSTGRES_DSN), it
starts throw-away MariaDB and PostgreSQL servers on loopback, and puts the
shared logs in a database xalog of each. With them, it creates tables named
accounts in those databases (drop them first), and measures the shared logs
only in the databases of --log-postgres-dsn and --log-mysql-dsn.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var err error
			if mysqlDSN, pgDSN, err = g.dsns(mysqlDSN, pgDSN); err != nil {
				return err
			}
			if mysqlDSN == "" {
				fmt.Fprintln(g.stdout, "starting throw-away MariaDB and PostgreSQL servers ...")
				defer localdb.Cleanup()
				my, pg, err := startServers(ctx, "bench")
				if err != nil {
					return err
				}
				mysqlDSN, pgDSN = my.DSN("bench"), pg.DSN("bench")
				if err := errors.Join(my.Exec(ctx, "", "CREATE DATABASE xalog"), pg.Exec(ctx, "", "CREATE DATABASE xalog")); err != nil {
					return err
				}
				logMy, logPG = my.DSN("xalog"), pg.DSN("xalog")
			}
			logDir, err := os.MkdirTemp(dir, "xa-bench-log-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(logDir)
			decisions, err := bench.CreateLog(logDir+"/log", filelog.Options{})
			if err != nil {
				return err
			}
			defer decisions.Close()
			s, err := bench.Open(ctx, mysqlDSN, pgDSN, workers, 100, decisions)
			if err != nil {
				return err
			}
			defer s.Close()
			var stores []logbench.Store
			for _, sl := range []struct {
				mode      bench.Mode
				store     string
				kind, dsn string
			}{{bench.SQLPostgres, "sqllog-pg", logdb.Postgres, logPG}, {bench.SQLMySQL, "sqllog-maria", logdb.MySQL, logMy}} {
				if sl.dsn == "" {
					continue
				}
				l, closeLog, err := openBenchLog(ctx, sl.kind, sl.dsn, "bench-"+sl.kind)
				if err != nil {
					return fmt.Errorf("the shared decision log in %s: %w", sl.kind, err)
				}
				defer closeLog()
				if err := s.AddSQLLog(sl.mode, l); err != nil {
					return err
				}
				stores = append(stores, logbench.SQLStore(sl.store, sl.kind, sl.dsn))
			}
			res, err := bench.Compare(ctx, s, workers, d, rounds)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "\ntransfers MySQL -> PostgreSQL, %d workers on disjoint rows, %s per mode and round, %d round(s), best round shown:\n", workers, d, rounds)
			tw := table(g.stdout)
			fmt.Fprintln(tw, "MODE\tTPS\tP50\tP99\tOPS\tERRORS")
			for _, st := range res.Best {
				fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%d\n", st.Mode, st.TPS, st.P50.Round(10*time.Microsecond), st.P99.Round(10*time.Microsecond), st.Ops, st.Errors)
			}
			tw.Flush()
			fmt.Fprintf(g.stdout, "ratio to raw (TPS): tm %.2f   tm-async %.2f   tm-last %.2f\n",
				res.Ratio(bench.TM, bench.Raw), res.Ratio(bench.Async, bench.Raw), res.Ratio(bench.Last, bench.Raw))
			for _, m := range []bench.Mode{bench.SQLPostgres, bench.SQLMySQL} {
				if s.SQL[m] != nil {
					fmt.Fprintf(g.stdout, "ratio to tm (the embedded log): %s %.2f\n", m, res.Ratio(m, bench.TM))
				}
			}
			if rounds > 1 {
				fmt.Fprintln(g.stdout, "the same ratios round by round (their spread is the machine's noise):")
				for _, m := range []bench.Mode{bench.TM, bench.Async, bench.Last} {
					fmt.Fprintf(g.stdout, "  %-16s", m+" / raw")
					for _, r := range res.RoundRatios(m, bench.Raw) {
						fmt.Fprintf(g.stdout, " %.2f", r)
					}
					fmt.Fprintln(g.stdout)
				}
				for _, m := range []bench.Mode{bench.SQLPostgres, bench.SQLMySQL} {
					if s.SQL[m] == nil {
						continue
					}
					fmt.Fprintf(g.stdout, "  %-16s", m+" / tm")
					for _, r := range res.RoundRatios(m, bench.TM) {
						fmt.Fprintf(g.stdout, " %.2f", r)
					}
					fmt.Fprintln(g.stdout)
				}
			}
			if err := res.CheckBalances(ctx, s); err != nil {
				return err
			}
			if skipLog {
				return nil
			}
			fmt.Fprintf(g.stdout, "\ndecision log alone (two-branch commit record + forget, real fsync, in %s):\n", logDir)
			lr, err := logbench.Compare(ctx, append(logbench.DefaultStores(), stores...), []int{1, 16, 64}, logbench.Config{Dir: dir, Duration: d})
			if err != nil {
				return err
			}
			tw = table(g.stdout)
			fmt.Fprintln(tw, "STORE\tWRITERS\tDECISIONS/S\tAVG GROUP\tP50\tP99\tWHERE")
			for _, r := range lr {
				where := r.Filesystem
				if strings.HasPrefix(r.Store, "sqllog") {
					where = "its database (group = records per commit)"
				}
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\n", r.Store, r.Writers, r.PerSecond, r.AvgGroup, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), where)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB database to use")
	f.StringVar(&pgDSN, "postgres-dsn", "", "PostgreSQL database to use")
	f.StringVar(&logPG, "log-postgres-dsn", "", "PostgreSQL database for the shared decision log (with --postgres-dsn; default: none)")
	f.StringVar(&logMy, "log-mysql-dsn", "", "MySQL/MariaDB database for the shared decision log (with --mysql-dsn; default: none)")
	f.IntVar(&workers, "workers", 16, "concurrent workers")
	f.DurationVar(&d, "duration", 5*time.Second, "measuring time per mode and round")
	f.IntVar(&rounds, "rounds", 2, "rounds of all three modes (interleaved, to even out drift)")
	f.StringVar(&dir, "dir", "/var/tmp", "where the decision logs live during the run (a real disk, not tmpfs)")
	f.BoolVar(&skipLog, "skip-log", false, "skip the decision-log-only measurement")
	cmd.AddCommand(newBenchSink(g))
	return cmd
}

// openBenchLog opens node's shared decision log in the database of kind at
// dsn as its node's process does, with xactl's defaults, creating it (and
// the tables) the first time.
func openBenchLog(ctx context.Context, kind, dsn, node string) (*sqllog.Log, func(), error) {
	db, d, err := logdb.Open(kind, dsn)
	if err != nil {
		return nil, nil, err
	}
	s, err := sqllog.NewStore(db, d, sqllog.Options{})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	ident, err := xa.NewLogIdentity(node, 0, 0, time.Now())
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	l, err := s.Create(ctx, ident)
	if errors.Is(err, sqllog.ErrExist) {
		l, err = s.Open(ctx, node)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return l, func() { l.Close(); db.Close() }, nil
}
