// Package logbench measures decision-log throughput the way the transaction
// manager uses a log: each decision is one LogCommit of a two-branch commit
// record, followed by a Forget once (here: at once) the branches have
// committed. It drives any xa.DecisionLog; DefaultStores has the two this
// module ships (recovery/filelog and recovery/pebblelog), for `xactl bench`
// and the benchmarks.
//
// Measure on the disk the log will live on. A directory on tmpfs measures
// memory, not fsync; Result.Filesystem says which it was.
package logbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/recovery/pebblelog"
	"github.com/xadb/xa/xa"
)

// Opener opens a log in dir, which exists and is empty.
type Opener func(dir string) (xa.DecisionLog, io.Closer, error)

// Store is a named log implementation.
type Store struct {
	Name string
	Open Opener
}

// DefaultStores returns the embedded file log and Pebble, with real syncs.
func DefaultStores() []Store {
	return []Store{
		{Name: "filelog", Open: func(dir string) (xa.DecisionLog, io.Closer, error) {
			l, err := filelog.Open(dir, filelog.Options{})
			return l, l, err
		}},
		{Name: "pebble", Open: func(dir string) (xa.DecisionLog, io.Closer, error) {
			l, err := pebblelog.Open(dir, pebblelog.Options{})
			return l, l, err
		}},
	}
}

// SyncCounter is implemented by logs that count their syncs (filelog.Log
// and pebblelog.Log do); Result.Syncs is filled from it.
type SyncCounter interface {
	SyncCount() int64
}

// Config says how to run.
type Config struct {
	// Dir is where the temporary log directory is made; "" means
	// os.TempDir(). It is removed afterwards.
	Dir string
	// Writers is the number of concurrent transactions (at least 1).
	Writers int
	// Duration is how long to run.
	Duration time.Duration
}

// Result is one run.
type Result struct {
	Store      string
	Writers    int
	Decisions  int64 // LogCommit calls that returned nil
	Elapsed    time.Duration
	PerSecond  float64       // Decisions per second
	Syncs      int64         // syncs during the run, when the log counts them
	AvgGroup   float64       // decisions per sync, when the log counts syncs
	P50, P99   time.Duration // LogCommit latency
	Filesystem string        // of the log directory: "ext4", "xfs", "tmpfs", ...
}

func (r Result) String() string {
	s := fmt.Sprintf("%-8s writers=%-3d %9.0f decisions/s  p50 %-9v p99 %-9v", r.Store, r.Writers, r.PerSecond,
		r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	if r.Syncs > 0 {
		s += fmt.Sprintf("  %.1f per sync", r.AvgGroup)
	}
	return s
}

// Throughput opens store in a fresh directory under cfg.Dir and runs
// cfg.Writers concurrent writers for cfg.Duration.
func Throughput(ctx context.Context, store Store, cfg Config) (Result, error) {
	res := Result{Store: store.Name, Writers: max(cfg.Writers, 1)}
	dir, err := os.MkdirTemp(cfg.Dir, "xa-logbench-")
	if err != nil {
		return res, fmt.Errorf("logbench: %w", err)
	}
	defer os.RemoveAll(dir)
	res.Filesystem = Filesystem(dir)
	lg, closer, err := store.Open(dir)
	if err != nil {
		return res, fmt.Errorf("logbench: opening %s: %w", store.Name, err)
	}
	sc, _ := lg.(SyncCounter)
	var syncs0 int64
	if sc != nil {
		syncs0 = sc.SyncCount()
	}
	deadline := time.Now().Add(cfg.Duration)
	start := time.Now()
	lat, err := drive(ctx, lg, res.Writers, func(int64) bool { return time.Now().Before(deadline) })
	res.Elapsed = time.Since(start)
	if sc != nil {
		res.Syncs = sc.SyncCount() - syncs0
	}
	if cerr := closer.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("logbench: closing %s: %w", store.Name, cerr)
	}
	res.fill(lat)
	return res, err
}

// Compare runs Throughput for every store at every writer count.
func Compare(ctx context.Context, stores []Store, writers []int, cfg Config) ([]Result, error) {
	var out []Result
	for _, w := range writers {
		for _, s := range stores {
			c := cfg
			c.Writers = w
			r, err := Throughput(ctx, s, c)
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Run makes exactly n decisions on lg with the given number of writers (for
// testing.B loops) and returns the LogCommit latencies.
func Run(ctx context.Context, lg xa.DecisionLog, writers int, n int) ([]time.Duration, error) {
	return drive(ctx, lg, max(writers, 1), func(i int64) bool { return i < int64(n) })
}

func (r *Result) fill(lat []time.Duration) {
	r.Decisions = int64(len(lat))
	if r.Elapsed > 0 {
		r.PerSecond = float64(r.Decisions) / r.Elapsed.Seconds()
	}
	if r.Syncs > 0 {
		r.AvgGroup = float64(r.Decisions) / float64(r.Syncs)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.P50 = lat[len(lat)/2]
		r.P99 = lat[len(lat)*99/100]
	}
}

// drive runs writers goroutines; each takes ticket i and makes a decision
// while more(i) holds.
func drive(ctx context.Context, lg xa.DecisionLog, writers int, more func(i int64) bool) ([]time.Duration, error) {
	var (
		tickets atomic.Int64
		mu      sync.Mutex
		all     []time.Duration
		errs    []error
		wg      sync.WaitGroup
	)
	for range writers {
		wg.Go(func() {
			var lat []time.Duration
			defer func() {
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
			for more(tickets.Add(1)-1) && ctx.Err() == nil {
				rec, err := Record(time.Now())
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				t0 := time.Now()
				if err := lg.LogCommit(ctx, rec); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
				if err := lg.Forget(ctx, rec.ID); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return all, errors.Join(errs...)
}

// Record returns a realistic commit record: two branches, on a MySQL and a
// PostgreSQL participant, with their sessions and prepare times.
func Record(now time.Time) (xa.CommitRecord, error) {
	id, err := xa.NewGlobalID("bench-node-1", now)
	if err != nil {
		return xa.CommitRecord{}, err
	}
	return xa.CommitRecord{
		ID:     id,
		Logged: now,
		Branches: []xa.BranchRecord{
			{RM: "mysql-orders", XID: id.Branch(0), Origin: xa.Origin{Session: 81234, Prepared: now.Add(-3 * time.Millisecond)}},
			{RM: "postgres-billing", XID: id.Branch(1), Origin: xa.Origin{Session: 5121, Prepared: now.Add(-2 * time.Millisecond)}},
		},
	}, nil
}

// Filesystem names the file system that holds dir ("ext4/ext3/ext2" when
// the kernel cannot tell those apart), or "unknown".
func Filesystem(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch uint64(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.RAMFS_MAGIC:
		return "ramfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4/ext3/ext2"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("0x%x", uint64(st.Type))
}

// InMemory reports whether dir is on a file system that lives in memory,
// where fsync costs nothing and a benchmark means little.
func InMemory(dir string) bool {
	fs := Filesystem(dir)
	return fs == "tmpfs" || fs == "ramfs"
}
