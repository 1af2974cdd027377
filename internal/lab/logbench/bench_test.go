package logbench_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xadb/xa/internal/lab/logbench"
)

// benchDir returns a directory on a real disk: $XA_BENCH_DIR, else
// /var/tmp. Benchmarks on tmpfs are skipped: they would measure memory.
func benchDir(b *testing.B) string {
	dir := os.Getenv("XA_BENCH_DIR")
	if dir == "" {
		dir = "/var/tmp"
	}
	if logbench.InMemory(dir) {
		b.Skipf("%s is on %s; set XA_BENCH_DIR to a directory on disk", dir, logbench.Filesystem(dir))
	}
	return dir
}

// BenchmarkLogCommit: one op is one decision (LogCommit of a two-branch
// record with a real fsync, then Forget), with 1, 16 and 64 concurrent
// writers, on filelog and on Pebble.
func BenchmarkLogCommit(b *testing.B) {
	parent := benchDir(b)
	for _, w := range []int{1, 16, 64} {
		for _, s := range logbench.DefaultStores() {
			b.Run(fmt.Sprintf("%s/writers=%d", s.Name, w), func(b *testing.B) {
				dir, err := os.MkdirTemp(parent, "xa-bench-")
				if err != nil {
					b.Fatal(err)
				}
				defer os.RemoveAll(dir)
				lg, closer, err := s.Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				defer closer.Close()
				sc := lg.(logbench.SyncCounter)
				syncs := sc.SyncCount()
				b.ResetTimer()
				start, cpu0 := time.Now(), logbench.ProcessCPU()
				if _, err := logbench.Run(context.Background(), lg, w, b.N); err != nil {
					b.Fatal(err)
				}
				elapsed, cpu := time.Since(start), logbench.ProcessCPU()-cpu0
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				// The process's CPU time (the benchmark's own work and
				// the log's, every thread) per decision: less noisy than
				// the rate on a busy machine.
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
				if n := sc.SyncCount() - syncs; n > 0 {
					b.ReportMetric(float64(b.N)/float64(n), "records/sync")
				}
			})
		}
	}
}
