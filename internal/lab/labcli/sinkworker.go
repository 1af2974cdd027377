package labcli

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/lab/stream"
)

// newSinkWorker is the demo's sink process: one instance of the
// exactly-once sink reading the demo's Kafka topic into both databases,
// reporting each checkpoint on stdout (see stream.RunWorker), until
// SIGTERM or its crash point. Hidden: not for operators.
func newSinkWorker(g *globals) *cobra.Command {
	var cfg stream.WorkerConfig
	var brokers string
	cmd := &cobra.Command{
		Use:    "sink-worker",
		Short:  "Run the demo's exactly-once sink as a process (used by the demo)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Brokers = strings.Split(brokers, ",")
			cfg.Logger = g.logger()
			return stream.RunWorker(cmd.Context(), cfg, g.stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.MySQLDSN, "mysql-dsn", "", "MySQL/MariaDB DSN")
	f.StringVar(&cfg.PGDSN, "postgres-dsn", "", "PostgreSQL DSN (a postgres:// URL with --crash)")
	f.StringVar(&brokers, "brokers", "", "Kafka brokers, comma-separated")
	f.StringVar(&cfg.Crash, "crash", "", "crash point, e.g. pgcommit:4 (SIGKILL itself right before the 4th COMMIT PREPARED reaches PostgreSQL)")
	f.IntVar(&cfg.CheckpointRecords, "checkpoint-records", 1000, "records per checkpoint at most")
	f.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", 500*time.Millisecond, "time per checkpoint at most")
	for _, n := range []string{"mysql-dsn", "postgres-dsn", "brokers"} {
		cmd.MarkFlagRequired(n) //nolint:errcheck
	}
	return cmd
}
