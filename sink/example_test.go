package sink_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/metrics"
	"github.com/xadb/xa/otelxa"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
)

// ExampleSink_Run writes a generated stream of 1000 records into a table
// of MariaDB and one of PostgreSQL, exactly once, with the sink's metrics
// and a span per checkpoint (otelxa.SinkObserver: the global
// TracerProvider here, which records nothing until the application sets
// one).
func ExampleSink_Run() {
	ctx := context.Background()
	mariaDSN, pgDSN := exampleSinkDatabases()
	cols := []sink.Column{{Name: "k", From: "$.id"}, {Name: "p", From: "partition"}, {Name: "pos", From: "position"}}
	cfg := sink.Config{
		Name: fmt.Sprintf("example%d", os.Getpid()%100000),
		Targets: []sink.TargetConfig{
			// Init gives each target its identity the first time (xactl
			// sink setup does it for a configured sink).
			{Name: "maria", Driver: sink.DriverMySQL, DSN: mariaDSN, Init: true},
			{Name: "pg", Driver: sink.DriverPostgres, DSN: pgDSN, Init: true},
		},
		Tables: []sink.Table{
			{ID: "maria.events", Target: "maria", Name: "events", Columns: cols},
			{ID: "pg.events", Target: "pg", Name: "events", Columns: cols},
		},
	}
	// The bookkeeping tables, once (xactl sink setup does the same).
	if err := sink.Setup(ctx, cfg.Targets[0]); err != nil {
		log.Fatal(err)
	}
	s, err := sink.Open(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	// Its targets bound to its progress target, once (xactl sink setup
	// does the same): every start checks them.
	if _, err := s.Bind(ctx); err != nil {
		log.Fatal(err)
	}
	m := metrics.NewSink(prometheus.NewRegistry(), cfg.Name)
	src := gensource.New(gensource.Config{Records: 1000, Partitions: 2})
	if err := s.Run(ctx, src, sink.RunOptions{CheckpointRecords: 250, Observer: otelxa.SinkObserver(nil, cfg.Name, m)}); err != nil {
		log.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT (p, k)) FROM events").Scan(&n, &distinct); err != nil {
		log.Fatal(err)
	}
	fmt.Println("PostgreSQL rows:", n, "distinct records:", distinct)
	// Output: PostgreSQL rows: 1000 distinct records: 1000
}

// exampleSinkDatabases gives the example a fresh database on each server
// with a table events.
func exampleSinkDatabases() (mysqlDSN, pgDSN string) {
	t := &exampleT{}
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	ctx := context.Background()
	if err := my.Server.Exec(ctx, my.Name, "CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, k BIGINT NOT NULL, p VARCHAR(64) NOT NULL, pos VARCHAR(32) NOT NULL)"); err != nil {
		panic(err)
	}
	if err := pg.Server.Exec(ctx, pg.Name, "CREATE TABLE events (id bigserial PRIMARY KEY, k bigint NOT NULL, p text NOT NULL, pos text NOT NULL)"); err != nil {
		panic(err)
	}
	return my.DSN(), pg.DSN()
}

// exampleT is a minimal testing.TB for examples: failures panic (the
// example then fails); a skip means no database.
type exampleT struct{ testing.TB }

func (*exampleT) Helper()                   {}
func (*exampleT) Name() string              { return "Example" }
func (*exampleT) Cleanup(func())            {}
func (*exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (*exampleT) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (*exampleT) Skipf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "example needs databases: "+f+"\n", a...)
	panic("no databases")
}
