// Package logbench measures decision-log throughput the way the transaction
// manager uses a log: each decision is one LogCommit of a two-branch commit
// record, followed by a Forget once (here: at once) the branches have
// committed. It drives any Log (the commit path of an xa.DecisionLog);
// DefaultStores has the embedded log (recovery/filelog, the product's) and
// the Pebble baseline (internal/lab/pebblelog), for `xalab bench` and the
// benchmarks.
//
// Measure on the disk the log will live on. A directory on tmpfs measures
// memory, not fsync; Result.Filesystem says which it was.
package logbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xadb/xa/internal/lab/pebblelog"
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// Log is the commit path of a decision log, all that the benchmark drives.
// Every xa.DecisionLog is one; internal/lab/pebblelog, a baseline, is only this.
type Log interface {
	LogCommit(ctx context.Context, rec xa.CommitRecord) error
	Forget(ctx context.Context, id xa.GlobalID) error
}

// Opener makes a new log in dir, which exists and is empty.
type Opener func(dir string) (Log, io.Closer, error)

// Store is a named log implementation.
type Store struct {
	Name string
	Open Opener
	// Writers, if not 0, is the writers it always runs with, whatever
	// the writer count it is compared at (DiskStore: 1).
	Writers int
}

// DefaultStores returns the embedded file log and Pebble, with real syncs.
func DefaultStores() []Store {
	return []Store{
		{Name: "filelog", Open: func(dir string) (Log, io.Closer, error) {
			ident, err := xa.NewLogIdentity(benchNode, 0, 0, time.Now())
			if err != nil {
				return nil, nil, err
			}
			l, err := filelog.Create(dir, ident, filelog.Options{})
			if err != nil {
				return nil, nil, err
			}
			return l, l, nil
		}},
		{Name: "pebble", Open: func(dir string) (Log, io.Closer, error) {
			l, err := pebblelog.Open(dir, pebblelog.Options{})
			if err != nil {
				return nil, nil, err
			}
			return l, l, nil
		}},
	}
}

// SQLStore is the shared decision log (recovery/sqllog) in the database of
// kind (postgres or mysql) at dsn, built as xactl builds it (internal/logdb,
// sqllog's default options): each Open creates a log for a fresh node in
// its tables (made the first time) and opens it as its node's process
// does. The directory is not used.
func SQLStore(name, kind, dsn string) Store { return SQLStoreWith(name, kind, dsn, sqllog.Options{}) }

// SQLStoreWith is SQLStore with other options than xactl's defaults.
func SQLStoreWith(name, kind, dsn string, opts sqllog.Options) Store {
	return Store{Name: name, Open: func(string) (Log, io.Closer, error) {
		db, d, err := logdb.Open(kind, dsn)
		if err != nil {
			return nil, nil, err
		}
		s, err := sqllog.NewStore(db, d, opts)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		ident, err := xa.NewLogIdentity(fmt.Sprintf("bench-%d", sqlSeq.Add(1)), 0, 0, time.Now())
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, err := s.Create(ctx, ident)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return l, closers{l, db}, nil
	}}
}

var sqlSeq atomic.Int64

// closers closes each in turn.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// SyncCounter is implemented by logs that count their syncs (filelog.Log
// and pebblelog.Log do; sqllog.Log counts its batches, one commit each);
// Result.Syncs is filled from it.
type SyncCounter interface {
	SyncCount() int64
}

// Config says how to run.
type Config struct {
	// Dir is where the temporary log directories are made; "" means
	// os.TempDir(). They are removed afterwards.
	Dir string
	// Writers is the number of concurrent transactions (at least 1).
	// Compare takes its writer counts as an argument instead.
	Writers int
	// Duration is how long each store runs (at each writer count).
	Duration time.Duration
	// Slice is how long Compare runs one store before switching to the
	// next (default 250ms). Short slices make a busy machine slow every
	// store alike.
	Slice time.Duration
	// Disk makes Compare measure DiskStore too, at every writer count, in
	// the same slices as the stores: Bound then says what the disk allows.
	Disk bool
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
	// Min and Max are the lowest and highest decisions per second over
	// the slices of Compare (equal to PerSecond for a single run).
	Min, Max float64
	// CPU is this process's CPU time (user and system, every thread)
	// while the store ran, the benchmark's own work included; Compare
	// runs one store at a time, so it is the store's.
	CPU time.Duration
	// CPUPerDecision is CPU divided by Decisions.
	CPUPerDecision time.Duration
}

func (r Result) String() string {
	s := fmt.Sprintf("%-8s writers=%-3d %9.0f decisions/s  p50 %-9v p99 %-9v", r.Store, r.Writers, r.PerSecond,
		r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	if r.Syncs > 0 {
		s += fmt.Sprintf("  %5.1f per sync", r.AvgGroup)
	}
	if r.CPUPerDecision > 0 {
		s += fmt.Sprintf("  cpu %v/decision", r.CPUPerDecision.Round(100*time.Nanosecond))
	}
	if r.Max > r.Min {
		s += fmt.Sprintf("  (range %.0f-%.0f)", r.Min, r.Max)
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
	start, cpu0 := time.Now(), ProcessCPU()
	lat, err := drive(ctx, lg, res.Writers, func(int64) bool { return time.Now().Before(deadline) })
	res.Elapsed, res.CPU = time.Since(start), ProcessCPU()-cpu0
	if sc != nil {
		res.Syncs = sc.SyncCount() - syncs0
	}
	if cerr := closer.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("logbench: closing %s: %w", store.Name, cerr)
	}
	res.fill(lat)
	res.Min, res.Max = res.PerSecond, res.PerSecond
	return res, err
}

// Compare measures every store at every writer count. For each writer
// count it opens all stores, each in a fresh directory, and runs them in
// turn, cfg.Slice at a time, until each has run for cfg.Duration: the
// stores share whatever else the machine is doing, and each log ages as it
// would in service (segments rotate, WALs are recycled). Results are
// ordered by writer count, then store.
func Compare(ctx context.Context, stores []Store, writers []int, cfg Config) ([]Result, error) {
	slice := cfg.Slice
	if slice <= 0 {
		slice = 250 * time.Millisecond
	}
	if cfg.Disk {
		stores = append(stores[:len(stores):len(stores)], DiskStore())
	}
	var out []Result
	for _, w := range writers {
		rs, err := compareAt(ctx, stores, max(w, 1), cfg.Dir, cfg.Duration, slice)
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

type opened struct {
	dir     string
	lg      Log
	closer  io.Closer
	writers int // Store.Writers
	res     Result
	lat     []time.Duration
}

func compareAt(ctx context.Context, stores []Store, writers int, parent string, d, slice time.Duration) (_ []Result, err error) {
	logs := make([]*opened, 0, len(stores))
	defer func() {
		for _, o := range logs {
			if cerr := o.closer.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("logbench: closing %s: %w", o.res.Store, cerr)
			}
			os.RemoveAll(o.dir)
		}
	}()
	for _, s := range stores {
		dir, err := os.MkdirTemp(parent, "xa-logbench-")
		if err != nil {
			return nil, fmt.Errorf("logbench: %w", err)
		}
		lg, closer, err := s.Open(dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("logbench: opening %s: %w", s.Name, err)
		}
		o := &opened{dir: dir, lg: lg, closer: closer, writers: s.Writers,
			res: Result{Store: s.Name, Writers: writers, Filesystem: Filesystem(dir), Min: math.Inf(1)}}
		logs = append(logs, o)
	}
	for round := 0; ; round++ {
		done := true
		for k := range logs {
			o := logs[(k+round)%len(logs)] // rotate who goes first
			if o.res.Elapsed >= d {
				continue
			}
			done = false
			sc, _ := o.lg.(SyncCounter)
			var syncs0 int64
			if sc != nil {
				syncs0 = sc.SyncCount()
			}
			deadline := time.Now().Add(min(slice, d-o.res.Elapsed))
			start, cpu0 := time.Now(), ProcessCPU()
			n := writers
			if o.writers > 0 {
				n = o.writers
			}
			lat, err := drive(ctx, o.lg, n, func(int64) bool { return time.Now().Before(deadline) })
			el, cpu := time.Since(start), ProcessCPU()-cpu0
			if err != nil {
				return nil, fmt.Errorf("logbench: %s: %w", o.res.Store, err)
			}
			if sc != nil {
				o.res.Syncs += sc.SyncCount() - syncs0
			}
			o.res.Elapsed += el
			o.res.CPU += cpu
			o.lat = append(o.lat, lat...)
			rate := float64(len(lat)) / el.Seconds()
			o.res.Min, o.res.Max = min(o.res.Min, rate), max(o.res.Max, rate)
		}
		if done {
			break
		}
	}
	out := make([]Result, 0, len(logs))
	for _, o := range logs {
		o.res.fill(o.lat)
		out = append(out, o.res)
	}
	return out, nil
}

// Run makes exactly n decisions on lg with the given number of writers (for
// testing.B loops) and returns the LogCommit latencies.
func Run(ctx context.Context, lg Log, writers int, n int) ([]time.Duration, error) {
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
	if r.Decisions > 0 {
		r.CPUPerDecision = r.CPU / time.Duration(r.Decisions)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.P50 = lat[len(lat)/2]
		r.P99 = lat[len(lat)*99/100]
	}
}

// drive runs writers goroutines; each takes ticket i and makes a decision
// while more(i) holds.
func drive(ctx context.Context, lg Log, writers int, more func(i int64) bool) ([]time.Duration, error) {
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

// ProcessCPU returns this process's CPU time so far: user and system, of
// every thread; 0 if the system does not say.
func ProcessCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchNode is the node of the benchmark's transactions and logs.
const benchNode = "bench-node-1"

// Record returns a realistic commit record: two branches, on a MySQL and a
// PostgreSQL participant, with their sessions and prepare times.
func Record(now time.Time) (xa.CommitRecord, error) {
	id, err := xa.NewGlobalID(benchNode, now)
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
