package labcli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/lab/bench"
	"github.com/xadb/xa/internal/testrig/localdb"
	"github.com/xadb/xa/recovery/filelog"
)

func newBenchScale(g *globals) *cobra.Command {
	var mysqlDSN, pgDSN, dir, workerList, partList string
	var d time.Duration
	var rounds, partWorkers int
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "How cost grows: raw, tm and tm-last by workers and by participants per transaction",
		Long: `The transfers of xalab bench made three ways (raw, the careful hand-written
two-phase commit; tm, the transaction manager with its decision log; tm-last,
with PostgreSQL as the last resource), measured at each of --workers
concurrent workers with two participants (MySQL and PostgreSQL), and at
--participant-workers workers with each of --participants participants per
transaction (3: a second MySQL database, named as the first with "_p3"; 4:
and a second PostgreSQL database, "_p4", on the same servers). Each point
interleaves the three modes over --rounds rounds and prints the best round's
TPS, p99 and the client's CPU per transaction (this process's CPU time over
the window divided by the transactions), and the median round-by-round
ratios to raw.

Without --mysql-dsn/--postgres-dsn (or XA_MYSQL_DSN/XA_POSTGRES_DSN), it
starts throw-away MariaDB and PostgreSQL servers on loopback (PostgreSQL
with max_connections=600 for the pools of 64 workers). With them, it creates
tables named accounts in those databases and in the extra ones (drop them
first).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			workers, err := intList(workerList, 1, 1024)
			if err != nil {
				return usageErr("--workers: %v", err)
			}
			parts, err := intList(partList, 2, bench.MaxParticipants)
			if err != nil {
				return usageErr("--participants: %v", err)
			}
			if d <= 0 || rounds < 1 || partWorkers < 1 {
				return usageErr("--duration, --rounds and --participant-workers must be positive")
			}
			if mysqlDSN, pgDSN, err = g.dsns(mysqlDSN, pgDSN); err != nil {
				return err
			}
			if mysqlDSN == "" {
				fmt.Fprintln(g.stdout, "starting throw-away MariaDB and PostgreSQL servers ...")
				defer localdb.Cleanup()
				my, pg, err := startServersWith(ctx, "bench", nil, map[string]string{"max_connections": "600"})
				if err != nil {
					return err
				}
				mysqlDSN, pgDSN = my.DSN("bench"), pg.DSN("bench")
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
			most := max(partWorkers, 1)
			for _, w := range workers {
				most = max(most, w)
			}
			mostParts := 2
			for _, p := range parts {
				mostParts = max(mostParts, p)
			}
			s, err := bench.OpenConfig(ctx, bench.Config{MySQLDSN: mysqlDSN, PostgresDSN: pgDSN, Workers: most, Rows: 100,
				Log: decisions, Participants: mostParts, RawLogDir: logDir})
			if err != nil {
				return err
			}
			defer s.Close()
			modes := []bench.Mode{bench.Raw, bench.TM, bench.Last}
			type point struct{ workers, parts int }
			var points []point
			for _, w := range workers {
				points = append(points, point{w, 2})
			}
			for _, p := range parts {
				if p != 2 || !containsInt(workers, partWorkers) {
					points = append(points, point{partWorkers, p})
				}
			}
			fmt.Fprintf(g.stdout, "\n%s per mode and round, %d round(s), best round shown; ratios: median of the rounds' (load average at the start %s)\n",
				d, rounds, bench.LoadAverage())
			tw := table(g.stdout)
			fmt.Fprintln(tw, "WORKERS\tPARTICIPANTS\tRAW TPS\tP99\tCPU/TX\tTM TPS\tP99\tCPU/TX\tTM/RAW\tCPU TM/RAW\tLAST TPS\tP99\tCPU/TX\tLAST/RAW\tCPU LAST/RAW\tLOAD")
			for _, pt := range points {
				s.Participants = pt.parts
				c, err := bench.CompareModes(ctx, s, modes, pt.workers, d, rounds)
				if err != nil {
					return err
				}
				if err := c.CheckBalances(ctx, s); err != nil {
					return err
				}
				r, t, l := c.Best[0], c.Best[1], c.Best[2]
				for _, st := range c.Best {
					if st.Errors > 0 {
						fmt.Fprintf(g.stderr, "%s at %d workers, %d participants: %d transfers failed\n", st.Mode, pt.workers, pt.parts, st.Errors)
					}
				}
				us := func(x time.Duration) string { return strconv.FormatInt(x.Microseconds(), 10) + "µs" }
				ms := func(x time.Duration) string { return x.Round(100 * time.Microsecond).String() }
				fmt.Fprintf(tw, "%d\t%d\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%.2f\t%.2f\t%.0f\t%s\t%s\t%.2f\t%.2f\t%s\n", pt.workers, pt.parts,
					r.TPS, ms(r.P99), us(r.CPU),
					t.TPS, ms(t.P99), us(t.CPU), bench.Median(c.RoundRatios(bench.TM, bench.Raw)), bench.Median(c.RoundCPURatios(bench.TM, bench.Raw)),
					l.TPS, ms(l.P99), us(l.CPU), bench.Median(c.RoundRatios(bench.Last, bench.Raw)), bench.Median(c.RoundCPURatios(bench.Last, bench.Raw)),
					strings.Fields(bench.LoadAverage() + " -")[0])
				fmt.Fprintf(g.stderr, "measured %d workers, %d participants\n", pt.workers, pt.parts)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB database to use")
	f.StringVar(&pgDSN, "postgres-dsn", "", "PostgreSQL database to use")
	f.StringVar(&workerList, "workers", "1,4,16,64", "worker counts, with two participants")
	f.StringVar(&partList, "participants", "2,3,4", "participants per transaction (2 to 4), at --participant-workers workers")
	f.IntVar(&partWorkers, "participant-workers", 16, "workers of the participants points")
	f.DurationVar(&d, "duration", 3*time.Second, "measuring time per mode, point and round")
	f.IntVar(&rounds, "rounds", 2, "rounds of the three modes per point (interleaved)")
	f.StringVar(&dir, "dir", "/var/tmp", "where the decision log lives during the run (a real disk, not tmpfs)")
	return cmd
}

// intList parses a comma-separated list of integers from lo to hi.
func intList(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q is not a number from %d to %d", f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
