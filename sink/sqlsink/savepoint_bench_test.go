package sqlsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// BenchmarkPgSavepointPerBatch measures what the savepoint that the sink
// sets before each PostgreSQL write (pgWriter.guard, so that a refused
// batch can be undone) costs the happy path: one op is a checkpoint's
// worth of rows on one table with the defaults (two COPYs of 5000 rows,
// 10,000 records per checkpoint) in one transaction, with and without a
// SAVEPOINT before each COPY, alternating in one loop; it reports both
// and their ratio.
//
//	go test -run '^$' -bench PgSavepointPerBatch -benchtime 100x ./sink/sqlsink
func BenchmarkPgSavepointPerBatch(b *testing.B) {
	ctx := context.Background()
	pg := dbtest.PostgresDB(b)
	if err := pg.Server.Exec(ctx, pg.Name, "CREATE TABLE IF NOT EXISTS events (id bigserial PRIMARY KEY, k bigint NOT NULL, p text NOT NULL, pos text NOT NULL, v text, t timestamptz)"); err != nil {
		b.Fatal(err)
	}
	c, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	const batch = 5000
	rows := make([][]any, batch)
	now := time.Now()
	for i := range rows {
		rows[i] = []any{int64(i), "events/3", fmt.Sprint(i + 1), strings.Repeat("x", 64), now}
	}
	cols := []string{"k", "p", "pos", "v", "t"}
	checkpoint := func(sp bool) time.Duration {
		start := time.Now()
		tx, err := c.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for range 2 {
			if sp {
				if _, err := tx.Exec(ctx, "SAVEPOINT xa_sink_rows"); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, cols, pgx.CopyFromRows(rows)); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var plain, saved time.Duration
	n := 0
	for b.Loop() {
		// Alternate which goes first, so that neither always follows
		// the other's commit.
		if n%2 == 0 {
			plain += checkpoint(false)
			saved += checkpoint(true)
		} else {
			saved += checkpoint(true)
			plain += checkpoint(false)
		}
		n++
	}
	b.ReportMetric(float64(plain.Nanoseconds())/float64(n*2*batch), "ns/row-plain")
	b.ReportMetric(float64(saved.Nanoseconds())/float64(n*2*batch), "ns/row-savepoint")
	b.ReportMetric(float64(saved)/float64(plain), "savepoint/plain")
}
