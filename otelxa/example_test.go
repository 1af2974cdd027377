package otelxa_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/otelxa"
	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// ExampleNew traces a transfer across MariaDB and PostgreSQL: the
// application's TracerProvider (here the SDK with an in-memory exporter;
// in a service, the one with its OTLP exporter) goes to xa.Config.Tracer
// through otelxa.New. A pgx tracer would go to postgres.Config.Tracer, a
// database/sql instrumentation's connector wrapper to
// mysql.Config.Connector; their spans nest under the transaction's.
func ExampleNew() {
	ctx := context.Background()
	mariaDSN, pgDSN := exampleDatabases()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(ctx)

	maria, err := xamysql.Open(ctx, xamysql.Config{Name: "maria", DSN: mariaDSN, Init: true})
	if err != nil {
		log.Fatal(err)
	}
	defer maria.Close()
	pg, err := xapg.Open(ctx, xapg.Config{Name: "pg", DSN: pgDSN, Init: true})
	if err != nil {
		log.Fatal(err)
	}
	defer pg.Close()
	mgr, err := xa.NewManager(xa.Config{Node: "example", Log: memrm.NewLog("example"), Tracer: otelxa.New(tp)})
	if err != nil {
		log.Fatal(err)
	}
	_, err = mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		m, err := maria.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := m.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
			return err
		}
		p, err := pg.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		_, err = p.Exec(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = 1")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	var spans []string
	for _, s := range exp.GetSpans() {
		name := s.Name
		for _, kv := range s.Attributes {
			if kv.Key == xa.AttrParticipant {
				name += " " + kv.Value.AsString()
			}
			if kv.Key == xa.AttrProtocol || kv.Key == xa.AttrOutcome {
				name += " " + kv.Value.AsString()
			}
		}
		spans = append(spans, name)
	}
	slices.Sort(spans)
	fmt.Println(strings.Join(spans, "\n"))
	// Output:
	// xa.commit maria
	// xa.commit pg
	// xa.decision_log
	// xa.prepare maria
	// xa.prepare pg
	// xa.transaction two_phase committed
}

// exampleDatabases gives the example a fresh database on each server,
// with an accounts table holding one account of 100.
func exampleDatabases() (mysqlDSN, pgDSN string) {
	t := &fatalT{}
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	ctx := context.Background()
	if err := my.Server.Exec(ctx, my.Name, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT) ENGINE=InnoDB", "INSERT INTO accounts VALUES (1, 100)"); err != nil {
		panic(err)
	}
	if err := pg.Server.Exec(ctx, pg.Name, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT)", "INSERT INTO accounts VALUES (1, 100)"); err != nil {
		panic(err)
	}
	return my.DSN(), pg.DSN()
}

// fatalT is a minimal testing.TB for examples: failures panic (the
// example then fails); a skip means no database.
type fatalT struct{ testing.TB }

func (*fatalT) Helper()                   {}
func (*fatalT) Name() string              { return "Example" }
func (*fatalT) Cleanup(func())            {}
func (*fatalT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (*fatalT) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (*fatalT) Skipf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "example needs databases: "+f+"\n", a...)
	panic("no databases")
}
