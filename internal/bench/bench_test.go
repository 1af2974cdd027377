package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/xadb/xa/internal/dbtest"
	"github.com/xadb/xa/recovery/filelog"
)

// BenchmarkTransfer measures one transfer per op in each mode, 16 workers
// on disjoint rows, against the same two servers in one run. Compare the
// modes' ns/op (lower is better); tps is the throughput.
//
//	go test -run '^$' -bench Transfer ./internal/bench
func BenchmarkTransfer(b *testing.B) {
	ctx := context.Background()
	const workers = 16
	my, pg := dbtest.MySQLDB(b), dbtest.PostgresDB(b)
	dir, err := os.MkdirTemp("/var/tmp", "xa-bench-") // a real disk, not tmpfs
	if err != nil {
		dir = b.TempDir()
	}
	defer os.RemoveAll(dir)
	l, err := filelog.Open(dir, filelog.Options{})
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
			start := time.Now()
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
		})
	}
}
