package labcli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/lab/bank"
)

// newWorker is the coordinator process of the demo and of the crash tests:
// it runs bank transfers and reports each outcome on stdout (see
// bank.RunWorker). Hidden: not for operators.
func newWorker(g *globals) *cobra.Command {
	var cfg bank.WorkerConfig
	cmd := &cobra.Command{
		Use:    "bank-worker",
		Short:  "Run bank transfers as a coordinator process (used by the demo and crash tests)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Logger = g.logger()
			return bank.RunWorker(cmd.Context(), cfg, g.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.MySQLDSN, "mysql-dsn", "", "MySQL/MariaDB DSN")
	f.StringVar(&cfg.PGDSN, "postgres-dsn", "", "PostgreSQL DSN")
	f.StringVar(&cfg.LogDir, "decision-log", "", "decision log directory (log kind file)")
	f.StringVar(&cfg.LogKind, "log-kind", "", "file (default), or postgres or mysql: the shared decision log in --log-dsn (made by xactl log init)")
	f.StringVar(&cfg.LogDSN, "log-dsn", "", "the shared decision log's database")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 0, "the shared log's lease TTL (0: 10s)")
	f.DurationVar(&cfg.LeaseWait, "lease-wait", 5*time.Minute, "how long to wait for the node's log while another process holds it")
	f.BoolVar(&cfg.Takeover, "takeover", false, "with a shared log, take the logs of dead nodes over and recover them")
	f.StringVar(&cfg.Node, "worker-node", "demo", "node id")
	f.IntVar(&cfg.Accounts, "accounts", 20, "accounts per database")
	f.IntVar(&cfg.Workers, "workers", 8, "concurrent transfers")
	f.IntVar(&cfg.Transfers, "transfers", 0, "transfers per worker (0: until killed)")
	f.StringVar(&cfg.Crash, "crash", "", "crash point, e.g. log:100 (SIGKILL itself there)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	f.DurationVar(&cfg.Timeout, "tx-timeout", 3*time.Second, "global transaction timeout")
	f.IntVar(&cfg.Phase2Attempts, "phase2-attempts", 0, "phase-2 attempts per branch (0: xa's default); the log's grace must cover them")
	f.DurationVar(&cfg.Phase2Timeout, "phase2-timeout", 0, "time limit of one phase-2 attempt (0: xa's default)")
	for _, n := range []string{"mysql-dsn", "postgres-dsn"} {
		cmd.MarkFlagRequired(n) //nolint:errcheck
	}
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if cfg.LogKind == "" || cfg.LogKind == "file" {
			if cfg.LogDir == "" {
				return usageErr("--decision-log is required with the file log")
			}
		} else if cfg.LogDSN == "" {
			return usageErr("--log-dsn is required with --log-kind %s", cfg.LogKind)
		}
		return nil
	}
	return cmd
}

// newBankSetup creates the bank's tables and accounts (deleting what they
// held): for a topology whose coordinators run the workload (docker/).
// Hidden: not for operators.
func newBankSetup(g *globals) *cobra.Command {
	var mysqlDSN, pgDSN string
	var accounts int
	cmd := &cobra.Command{
		Use:    "bank-setup",
		Short:  "Create the bank workload's tables and accounts in both databases",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bank.Setup(cmd.Context(), mysqlDSN, pgDSN, accounts); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "bank: %d accounts in each database\n", accounts)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB DSN")
	f.StringVar(&pgDSN, "postgres-dsn", "", "PostgreSQL DSN")
	f.IntVar(&accounts, "accounts", 20, "accounts per database")
	for _, n := range []string{"mysql-dsn", "postgres-dsn"} {
		cmd.MarkFlagRequired(n) //nolint:errcheck
	}
	return cmd
}
