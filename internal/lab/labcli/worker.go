package labcli

import (
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
	f.StringVar(&cfg.LogDir, "decision-log", "", "decision log directory")
	f.StringVar(&cfg.Node, "worker-node", "demo", "node id")
	f.IntVar(&cfg.Accounts, "accounts", 20, "accounts per database")
	f.IntVar(&cfg.Workers, "workers", 8, "concurrent transfers")
	f.IntVar(&cfg.Transfers, "transfers", 0, "transfers per worker (0: until killed)")
	f.StringVar(&cfg.Crash, "crash", "", "crash point, e.g. log:100 (SIGKILL itself there)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	f.DurationVar(&cfg.Timeout, "tx-timeout", 3*time.Second, "global transaction timeout")
	f.IntVar(&cfg.Phase2Attempts, "phase2-attempts", 0, "phase-2 attempts per branch (0: xa's default); the log's grace must cover them")
	f.DurationVar(&cfg.Phase2Timeout, "phase2-timeout", 0, "time limit of one phase-2 attempt (0: xa's default)")
	for _, n := range []string{"mysql-dsn", "postgres-dsn", "decision-log"} {
		cmd.MarkFlagRequired(n) //nolint:errcheck
	}
	return cmd
}
