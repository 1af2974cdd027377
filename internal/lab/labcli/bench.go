package labcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
	var modeList []string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure what atomicity costs: local commits vs hand-written 2PC vs the transaction manager",
		Long: `In one run against the same two servers, with concurrent workers on disjoint rows,
transfers (one row down in MySQL, one up in PostgreSQL) made these ways:

  local  two local commits, not atomic (the floor)
  raw    the hand-written two-phase commit a careful programmer writes with
         the drivers and settings the transaction manager uses
         (interpolateParams=true, pgx): one statement per call, parallel
         prepare, parallel commit, no decision log (not recoverable)
  raw-log  the same with the decision written the simple way: a line
         appended to a file and fdatasync'ed by each transaction
  tm     the transaction manager with its durable (fsync'ed) decision log
  tm-async  the same with AsyncCommit: the caller is answered once the
         decision is durable; phase 2 goes on in the background
  tm-last   the transaction manager with PostgreSQL as the last resource
         (postgres.Config.DecisionTable): MySQL prepares, PostgreSQL
         commits in one phase with the decision row, MySQL commits; no
         decision-log write

  tm-sqllog-pg     tm with the shared decision log (recovery/sqllog) in PostgreSQL
  tm-sqllog-maria  the same in MariaDB (MySQL)

with TPS, latency and the client's CPU per transaction (this process's CPU
time over the measuring window divided by the transactions), the ratios to
raw, and of the shared log's modes to tm. Then the decision log alone:
decisions per second at 1, 16 and 64 concurrent writers, for the embedded
log, Pebble, and the shared log in PostgreSQL and in MariaDB, and next to
them what the disk allows (writers divided by the time of one synchronous
write, measured in the same run). The shared logs are built as xactl builds
them, with its defaults (group commit, one batch in flight, the next built
meanwhile).

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
			s, err := bench.OpenConfig(ctx, bench.Config{MySQLDSN: mysqlDSN, PostgresDSN: pgDSN, Workers: workers, Rows: 100, Log: decisions, RawLogDir: logDir})
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
			modes, err := benchModes(modeList, s.Modes())
			if err != nil {
				return err
			}
			res, err := bench.CompareModes(ctx, s, modes, workers, d, rounds)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "\ntransfers MySQL -> PostgreSQL, %d workers on disjoint rows, %s per mode and round, %d round(s), best round shown (load average %s):\n",
				workers, d, rounds, bench.LoadAverage())
			tw := table(g.stdout)
			fmt.Fprintln(tw, "MODE\tTPS\tP50\tP99\tCPU/TX\tMYSQL CPU/TX\tPG CPU/TX\tOPS\tERRORS")
			for _, st := range res.Best {
				fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", st.Mode, st.TPS, st.P50.Round(10*time.Microsecond), st.P99.Round(10*time.Microsecond),
					st.CPU.Round(time.Microsecond), cpuText(st.MySQLCPU), cpuText(st.PostgresCPU), st.Ops, st.Errors)
			}
			tw.Flush()
			var compared, onSQL []bench.Mode
			for _, m := range modes {
				if m != bench.Local && m != bench.Raw {
					compared = append(compared, m)
				}
				if s.SQL[m] != nil && slices.Contains(modes, bench.TM) {
					onSQL = append(onSQL, m)
				}
			}
			fmt.Fprint(g.stdout, "ratio to raw (TPS):")
			for _, m := range compared {
				fmt.Fprintf(g.stdout, "   %s %.2f", m, res.Ratio(m, bench.Raw))
			}
			fmt.Fprintln(g.stdout)
			for _, m := range onSQL {
				fmt.Fprintf(g.stdout, "ratio to tm (the embedded log): %s %.2f\n", m, res.Ratio(m, bench.TM))
			}
			if rounds > 1 {
				fmt.Fprintln(g.stdout, "the same ratios round by round (their spread is the machine's noise), and their median:")
				for _, m := range compared {
					rs := res.RoundRatios(m, bench.Raw)
					fmt.Fprintf(g.stdout, "  %-22s", m+" / raw")
					for _, r := range rs {
						fmt.Fprintf(g.stdout, " %.2f", r)
					}
					fmt.Fprintf(g.stdout, "   median %.2f\n", bench.Median(rs))
				}
				for _, m := range onSQL {
					rs := res.RoundRatios(m, bench.TM)
					fmt.Fprintf(g.stdout, "  %-22s", m+" / tm")
					for _, r := range rs {
						fmt.Fprintf(g.stdout, " %.2f", r)
					}
					fmt.Fprintf(g.stdout, "   median %.2f\n", bench.Median(rs))
				}
			}
			fmt.Fprintln(g.stdout, "client CPU per transaction over raw's, round by round, and the median:")
			for _, m := range compared {
				rs := res.RoundCPURatios(m, bench.Raw)
				fmt.Fprintf(g.stdout, "  %-22s", m)
				for _, r := range rs {
					fmt.Fprintf(g.stdout, " %.2f", r)
				}
				fmt.Fprintf(g.stdout, "   median %.2f\n", bench.Median(rs))
			}
			if err := res.CheckBalances(ctx, s); err != nil {
				return err
			}
			if skipLog {
				return nil
			}
			fmt.Fprintf(g.stdout, "\ndecision log alone (two-branch commit record + forget, real fsync, in %s):\n", logDir)
			writerCounts := []int{1, 16, 64}
			lr, err := logbench.Compare(ctx, append(logbench.DefaultStores(), stores...), writerCounts, logbench.Config{Dir: dir, Duration: d, Disk: true})
			if err != nil {
				return err
			}
			tw = table(g.stdout)
			fmt.Fprintln(tw, "STORE\tWRITERS\tDECISIONS/S\tAVG GROUP\tP50\tP99\tWHERE")
			for _, r := range lr {
				if r.Store == logbench.DiskName {
					continue
				}
				where := r.Filesystem
				if strings.HasPrefix(r.Store, "sqllog") {
					where = "its database (group = records per commit)"
				}
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\n", r.Store, r.Writers, r.PerSecond, r.AvgGroup, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), where)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "\nwhat the disk allows: writers / the time of one synchronous write (a record-sized write and fdatasync, one at a time), measured in the same slices (load average %s):\n", bench.LoadAverage())
			tw = table(g.stdout)
			fmt.Fprintln(tw, "WRITERS\tSYNC WRITE\tDISK ALLOWS/S\tFILELOG/S\tFILELOG / DISK\tPEBBLE/S\tPEBBLE / DISK")
			for _, w := range writerCounts {
				bound := logbench.Bound(lr, w)
				var sync time.Duration
				rates := map[string]float64{}
				for _, r := range lr {
					if r.Writers != w {
						continue
					}
					if st := r.SyncTime(); st > 0 {
						sync = st
					}
					rates[r.Store] = r.PerSecond
				}
				share := func(v float64) float64 {
					if bound == 0 {
						return 0
					}
					return v / bound
				}
				fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%.2f\t%.0f\t%.2f\n", w, sync.Round(time.Microsecond), bound,
					rates["filelog"], share(rates["filelog"]), rates["pebble"], share(rates["pebble"]))
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
	f.StringSliceVar(&modeList, "modes", nil, "modes to measure (default all; raw is always measured, as the baseline)")
	cmd.AddCommand(newBenchSink(g))
	cmd.AddCommand(newBenchScale(g))
	return cmd
}

// cpuText prints a CPU time per transaction, "-" when unknown (a server
// on another machine).
func cpuText(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Microsecond).String()
}

// benchModes returns the modes of all named in list, in all's order, raw
// always among them; all of them for an empty list.
func benchModes(list []string, all []bench.Mode) ([]bench.Mode, error) {
	if len(list) == 0 {
		return all, nil
	}
	want := map[bench.Mode]bool{bench.Raw: true}
	for _, name := range list {
		m := bench.Mode(strings.TrimSpace(name))
		if !slices.Contains(all, m) {
			return nil, usageErr("--modes: %q is not a mode (%v)", name, all)
		}
		want[m] = true
	}
	var out []bench.Mode
	for _, m := range all {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
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
