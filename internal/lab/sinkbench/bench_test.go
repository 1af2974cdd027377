package sinkbench

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// BenchmarkSink loads b.N records per target and mode (one op is one
// record; records/s is the throughput), 4 partitions with a writer or
// sink instance each, against the same two servers in one run: private
// ones with the databases' durable defaults (every commit flushed), or
// those of XA_MYSQL_DSN / XA_POSTGRES_DSN. One load per mode: for ratios
// on a noisy machine, xalab bench sink interleaves several rounds.
//
//	go test -run '^$' -bench Sink -benchtime 500000x ./internal/lab/sinkbench
func BenchmarkSink(b *testing.B) {
	ctx := context.Background()
	my, pg := durableDBs(b)
	s, err := Open(ctx, Config{MySQLDSN: my.DSN(), PostgresDSN: pg.DSN()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, t := range Targets {
		for _, m := range Modes {
			b.Run(fmt.Sprintf("%s/%s", t, m), func(b *testing.B) {
				st, err := s.Measure(ctx, t, m, max(b.N, s.Config().Partitions))
				if err != nil {
					b.Fatal(err)
				}
				// The time of the load alone, not of emptying the table
				// before it.
				b.ReportMetric(float64(st.Elapsed.Nanoseconds())/float64(st.Records), "ns/op")
				b.ReportMetric(st.PerSecond, "records/s")
			})
		}
	}
}

// durableDBs returns a database on each of two servers that flush every
// commit: private ones started with dbtest.Durable and the servers' own
// default buffer and log sizes (ServerSettings), or the servers given in
// the environment.
func durableDBs(b *testing.B) (my, pg *dbtest.DB) {
	if os.Getenv("XA_MYSQL_DSN") != "" {
		my = dbtest.MySQLDB(b)
	} else {
		opts := []dbtest.Option{dbtest.Durable()}
		for k, v := range MySQLSettings {
			opts = append(opts, dbtest.Setting(k, v))
		}
		my = dbtest.NewMySQLServer(b, opts...).CreateDB(b)
	}
	if os.Getenv("XA_POSTGRES_DSN") != "" {
		pg = dbtest.PostgresDB(b)
	} else {
		opts := []dbtest.Option{dbtest.Durable()}
		for k, v := range PostgresSettings {
			opts = append(opts, dbtest.Setting(k, v))
		}
		pg = dbtest.NewPostgresServer(b, opts...).CreateDB(b)
	}
	return my, pg
}
