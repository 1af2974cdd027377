package bench

import (
	"context"
	"os"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
)

// BenchmarkTransfer measures one transfer per op in each mode, 16 workers
// on disjoint rows, against the same two servers in one run. Compare the
// modes' ns/op (lower is better); tps is the throughput, cpu-µs/op this
// process's CPU time per transfer (the client's cost). The servers are
// private ones with the databases' durable defaults (every commit
// flushed), or those of XA_MYSQL_DSN / XA_POSTGRES_DSN.
//
//	go test -run '^$' -bench Transfer ./internal/lab/bench
func BenchmarkTransfer(b *testing.B) {
	ctx := context.Background()
	const workers = 16
	my, pg := durableDBs(b)
	dir, err := os.MkdirTemp("/var/tmp", "xa-bench-") // a real disk, not tmpfs
	if err != nil {
		dir = b.TempDir()
	}
	defer os.RemoveAll(dir)
	l, err := CreateLog(dir+"/log", filelog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	s, err := Open(ctx, my.DSN(), pg.DSN(), workers, 100, l)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, m := range Modes {
		b.Run(string(m), func(b *testing.B) {
			next := make(chan int, workers)
			done := make(chan error, workers)
			b.ReportAllocs()
			start, cpu, spawned, scheduled := time.Now(), processCPU(), goroutinesCreated(), schedulings()
			for w := 0; w < workers; w++ {
				go func(w int) {
					var err error
					for i := range next {
						if e := s.Transfer(ctx, m, w, i); e != nil && err == nil {
							err = e
						}
					}
					done <- err
				}(w)
			}
			for i := 0; i < b.N; i++ {
				next <- i
			}
			close(next)
			for w := 0; w < workers; w++ {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tps")
			// tm-async's phase 2s are part of its cost.
			if err := s.AsyncMgr.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(goroutinesCreated()-spawned)/float64(b.N), "goroutines/op")
			b.ReportMetric(float64(schedulings()-scheduled)/float64(b.N), "schedulings/op")
		})
	}
}

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return m[0].Value.Uint64()
}

// schedulings returns how many times a goroutine was made to run (the
// count of the scheduling latencies the runtime records).
func schedulings() uint64 {
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range m[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}

// durableDBs returns a database on each of two servers that flush every
// commit: private ones started with dbtest.Durable, or the servers given
// in the environment.
func durableDBs(b *testing.B) (my, pg *dbtest.DB) {
	if os.Getenv("XA_MYSQL_DSN") != "" {
		my = dbtest.MySQLDB(b)
	} else {
		my = dbtest.NewMySQLServer(b, dbtest.Durable()).CreateDB(b)
	}
	if os.Getenv("XA_POSTGRES_DSN") != "" {
		pg = dbtest.PostgresDB(b)
	} else {
		pg = dbtest.NewPostgresServer(b, dbtest.Durable()).CreateDB(b)
	}
	return my, pg
}
