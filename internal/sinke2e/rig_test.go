// Package sinke2e holds end-to-end tests of the exactly-once sink
// (package sink) reading Kafka (sink/kafkasource, against kfake, an
// in-process Kafka hosted by the test process) into real MariaDB and
// PostgreSQL servers, with sink processes that are children of the test
// binary, killed with SIGKILL, stopped with SIGSTOP and restarted, and
// database servers killed under them. The rows are checked with direct
// SQL on the tables, against Kafka's end offsets; the progress rows and
// the prepared branches are read with sink.ReadStatus and Sink.Status
// (reads only: the test process never sweeps, commits or rolls back).
//
// The workers reach the databases through a proxy of their own that can
// hold the protocol at a given statement (worker_test.go): that is how
// kills, stops and database crashes land at precise steps.
//
// Knobs: XA_SINK_KILLS=n, the kills of TestKillSinkProcesses (default
// 20; 1000 for a long run); XA_SINK_CHECK_SECONDS, how long
// TestTwoDatabasesOneCheckpoint runs (12); XA_SINK_RESCALE_SECONDS, each
// stage of TestRescale (4); XA_SINKE2E_DEBUG=1 logs the end of every
// worker's output, XA_SINKE2E_LOGS=dir writes all of it to files in dir.
package sinke2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(runWorker(spec))
	}
	dbtest.Main(m)
}

const (
	tgMy      = "maria"
	tgPg      = "pg"
	rowsTable = "e2e_rows"
	// The statements that write rows (the sink's multi-row INSERT on
	// MariaDB, pgx's COPY on PostgreSQL): hooks match these, not the bare
	// table name, which the table check's catalogue queries at start-up
	// carry too.
	myRowsWrite = "INSERT INTO `" + rowsTable + "`"
	pgRowsWrite = `copy "` + rowsTable + `"`
	topic       = "events"
	nParts      = 8
)

// partitions are the topic's partitions as the sink names them.
var partitions = func() []string {
	var ps []string
	for i := range nParts {
		ps = append(ps, fmt.Sprintf("%s/%d", topic, i))
	}
	sort.Strings(ps)
	return ps
}()

var sinkSeq atomic.Int64

// rig is one sink under test: a MariaDB database and a PostgreSQL
// database with the rows table, the sink's bookkeeping in one of them,
// kfake with the topic, the group, and the worker processes.
type rig struct {
	t        *testing.T
	name     string
	my, pg   *dbtest.DB
	targets  []sink.TargetConfig
	progress string
	kc       *kfake.Cluster
	brokers  []string
	group    string
	// spec is the workers' base specification.
	spec workerSpec
	// s is the test's own handle on the sink: for Status only.
	s *sink.Sink

	mu    sync.Mutex
	procs []*proc
	seq   int
	// events receives every worker's HOOK and exit lines.
	events chan procEvent

	next atomic.Int64 // the next record id to produce
	prod *kgo.Client
	// committed counts the checkpoints the workers committed.
	committed atomic.Int64
}

type procEvent struct {
	p    *proc
	kind string // "hook" or "exit"
	text string
}

type rigOpts struct {
	progress string
	my, pg   *dbtest.DB // default: fresh databases on the shared servers
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	if o.progress == "" {
		o.progress = tgMy
	}
	if o.my == nil {
		o.my = dbtest.MySQLDB(t)
	}
	if o.pg == nil {
		o.pg = dbtest.PostgresDB(t)
	}
	r := &rig{t: t, my: o.my, pg: o.pg, progress: o.progress, events: make(chan procEvent, 4096),
		name:  fmt.Sprintf("e%d-%d", os.Getpid()%100000, sinkSeq.Add(1)),
		group: fmt.Sprintf("g%d", sinkSeq.Load())}
	r.targets = []sink.TargetConfig{
		{Name: tgMy, Driver: sink.DriverMySQL, DSN: r.my.DSN(), MaxConns: 8, Init: true},
		{Name: tgPg, Driver: sink.DriverPostgres, DSN: r.pg.DSN(), MaxConns: 8, Init: true},
	}
	ctx := ctxFor(t, time.Minute)
	if err := r.my.Server.Exec(ctx, r.my.Name,
		"CREATE TABLE "+rowsTable+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, k BIGINT NOT NULL, p VARCHAR(32) NOT NULL, koff BIGINT NOT NULL, v VARCHAR(64), KEY (p, koff))"); err != nil {
		t.Fatal(err)
	}
	if err := r.pg.Server.Exec(ctx, r.pg.Name,
		"CREATE TABLE "+rowsTable+" (id bigserial PRIMARY KEY, k bigint NOT NULL, p text NOT NULL, koff bigint NOT NULL, v text)",
		"CREATE INDEX ON "+rowsTable+" (p, koff)"); err != nil {
		t.Fatal(err)
	}
	if err := sink.Setup(ctx, r.progressTarget()); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nParts, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r.kc, r.brokers = kc, kc.ListenAddrs()
	r.prod, err = kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	r.spec = workerSpec{
		Sink: r.name, Targets: r.targets, Progress: r.progress, Brokers: r.brokers, Group: r.group, Topic: topic,
		CheckpointRecords: 500, CheckpointInterval: 150 * time.Millisecond, MaxPending: 2,
		SweepInterval: time.Second, RestoreWait: 2 * time.Second, MaxPollRecords: 500,
		SessionTimeout: time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
	}
	r.s, err = sink.Open(ctx, sinkConfig(r.name, r.targets, r.progress))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.Bind(ctx); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the workers go first, then the
	// test's handles, then kfake.
	t.Cleanup(kc.Close)
	t.Cleanup(r.prod.Close)
	t.Cleanup(func() { r.s.Close() })
	t.Cleanup(r.killAll)
	return r
}

func (r *rig) progressTarget() sink.TargetConfig {
	for _, tc := range r.targets {
		if tc.Name == r.progress {
			return tc
		}
	}
	r.t.Fatalf("no progress target %q", r.progress)
	return sink.TargetConfig{}
}

// ctxFor returns a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// ---- Kafka ----

// produce writes n records with the next ids: partition id % 8, key and
// value carrying the id. It returns the number of records produced so far.
func (r *rig) produce(ctx context.Context, n int) (int64, error) {
	recs := make([]*kgo.Record, 0, n)
	first := r.next.Load()
	for i := range int64(n) {
		id := first + i
		recs = append(recs, &kgo.Record{
			Partition: int32(id % nParts),
			Key:       strconv.AppendInt(nil, id, 10),
			Value:     fmt.Appendf(nil, `{"id":%d,"v":"v%d"}`, id, id),
		})
	}
	if err := r.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return first, err
	}
	r.next.Store(first + int64(n))
	return first + int64(n), nil
}

// producer produces batch records every interval until stopped.
type producer struct {
	stop chan struct{}
	done chan struct{}
	err  error
}

func (r *rig) startProducer(batch int, every time.Duration) *producer {
	p := &producer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := r.produce(ctx, batch)
			cancel()
			if err != nil {
				p.err = err
				return
			}
		}
	}()
	return p
}

// halt stops the producer and returns how many records exist in all.
func (r *rig) halt(p *producer) int64 {
	r.t.Helper()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	if p.err != nil {
		r.t.Fatalf("producer: %v", p.err)
	}
	return r.next.Load()
}

// endOffsets returns each partition's end offset.
func (r *rig) endOffsets(ctx context.Context) map[string]int64 {
	r.t.Helper()
	ends, err := kadm.NewClient(r.prod).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		r.t.Fatalf("end offsets: %v", err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset })
	return out
}

// ---- workers ----

// proc is one worker process.
type proc struct {
	r     *rig
	name  string
	spec  workerSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	begun time.Time

	mu      sync.Mutex
	lines   []string // without their times
	stamped []string
	stderr  bytes.Buffer
	done    chan struct{}
	err     error
	// signalled: the test killed it (an exit is expected).
	signalled atomic.Bool
	// firstAssigned: when it was first given partitions (unix ns; 0: not
	// yet).
	firstAssigned atomic.Int64
}

// assigned returns when p was first given partitions (unix ns), 0 if not
// yet.
func (p *proc) assigned() int64 { return p.firstAssigned.Load() }

// start starts a worker with spec (the rig's base spec with changes).
func (r *rig) start(spec workerSpec) *proc {
	r.t.Helper()
	r.mu.Lock()
	r.seq++
	p := &proc{r: r, name: fmt.Sprintf("w%d", r.seq), spec: spec, done: make(chan struct{}), begun: time.Now()}
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	b, err := json.Marshal(spec)
	if err != nil {
		r.t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		r.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			stamped := sc.Text()
			_, l, _ := strings.Cut(stamped, " ")
			p.mu.Lock()
			p.lines = append(p.lines, l)
			p.stamped = append(p.stamped, stamped)
			p.mu.Unlock()
			if strings.HasPrefix(l, "ckpt ") && strings.Contains(l, " committed=true ") {
				r.committed.Add(1)
			}
			if strings.HasPrefix(l, "kafka ") && strings.Contains(l, ": assigned [") {
				p.firstAssigned.CompareAndSwap(0, time.Now().UnixNano())
			}
			if name, ok := strings.CutPrefix(l, "HOOK "); ok {
				r.send(procEvent{p, "hook", name})
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
		r.send(procEvent{p, "exit", p.exitLine()})
	}()
	return p
}

// send queues an event for the test; tests that do not read them lose
// them once the queue is full.
func (r *rig) send(ev procEvent) {
	select {
	case r.events <- ev:
	default:
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (and SIGCONT, for a stopped process) and waits.
func (p *proc) kill() {
	p.signalled.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may be gone
	p.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck
	<-p.done
}

// stop sends SIGTERM (a clean stop: the sink drains, the source leaves the
// group) and waits; it fails the test if the worker does not exit in time.
func (p *proc) stop() {
	p.r.t.Helper()
	p.signalled.Store(true)
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case <-p.done:
	case <-time.After(45 * time.Second):
		p.kill()
		p.r.t.Fatalf("%s did not stop within 45 s of SIGTERM:\n%s", p.name, p.tail(30))
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.r.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// release lets a held packet go on.
func (p *proc) release() { p.send("go") }

// send writes a command line to the worker's standard input.
func (p *proc) send(cmd string) {
	fmt.Fprintln(p.stdin, cmd) //nolint:errcheck // it may be gone
}

func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	lines := slices.Clone(p.stamped)
	p.mu.Unlock()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	p.mu.Lock()
	errs := p.stderr.String()
	p.mu.Unlock()
	if len(errs) > 4000 {
		errs = "..." + errs[len(errs)-4000:]
	}
	return "  " + strings.Join(lines, "\n  ") + "\n  stderr: " + errs
}

// has reports whether an output line starts with prefix.
func (p *proc) has(prefix string) bool {
	return slices.ContainsFunc(p.output(), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// grep returns the output lines containing s.
func (p *proc) grep(s string) []string {
	var out []string
	for _, l := range p.output() {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// exitLine returns the worker's "exit ..." line ("" if none).
func (p *proc) exitLine() string {
	lines := p.output()
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "exit ") {
			return lines[i]
		}
	}
	return ""
}

// ready waits until the worker has opened the sink and the source.
func (p *proc) ready() {
	p.r.t.Helper()
	waitFor(p.r.t, 60*time.Second, p.name+" ready", func() bool {
		if !p.alive() {
			p.r.t.Fatalf("%s ended before it was ready:\n%s", p.name, p.tail(30))
		}
		return p.has("ready ")
	})
}

// killAll kills every worker still running (cleanup); with
// XA_SINKE2E_DEBUG set, or when the test failed, it logs their output.
func (r *rig) killAll() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for _, p := range procs {
		if p.alive() {
			p.kill()
		}
	}
	if dir := os.Getenv("XA_SINKE2E_LOGS"); dir != "" {
		for _, p := range procs {
			name := filepath.Join(dir, sanitize(r.t.Name())+"-"+p.name+".log")
			p.mu.Lock()
			body := strings.Join(p.stamped, "\n") + "\nstderr:\n" + p.stderr.String()
			p.mu.Unlock()
			if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
				r.t.Log(err)
			}
		}
	}
	if r.t.Failed() || os.Getenv("XA_SINKE2E_DEBUG") != "" {
		for _, p := range procs {
			r.t.Logf("worker %s (pid %d, started %s, rule %v) output:\n%s", p.name, p.pid(), p.begun.Format("15:04:05.000"), p.spec.Rule, p.tail(60))
		}
	}
}

// drainEvents drops the pending events of workers.
func (r *rig) drainEvents() {
	for {
		select {
		case <-r.events:
		default:
			return
		}
	}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- the databases ----

// partCount is what a target's rows table holds of one partition.
type partCount struct{ rows, offsets, min, max int64 }

// end is the offset after the partition's rows if they are a prefix
// (0..max), -1 if there are none.
func (c partCount) n() int64 { return c.max + 1 }

// tableCount is what a target's rows table holds.
type tableCount struct {
	rows, keys, minKey, maxKey int64
	parts                      map[string]partCount
}

func (c tableCount) String() string {
	return fmt.Sprintf("%d rows, %d distinct keys, keys %d..%d", c.rows, c.keys, c.minKey, c.maxKey)
}

const (
	partQuery  = "SELECT p, count(*), count(DISTINCT koff), min(koff), max(koff) FROM " + rowsTable + " GROUP BY p"
	totalQuery = "SELECT count(*), count(DISTINCT k), COALESCE(min(k), -1), COALESCE(max(k), -1) FROM " + rowsTable
)

// countMy counts MariaDB's rows (one statement: one snapshot); with
// parts, per partition too.
func (r *rig) countMy(ctx context.Context, parts bool) (tableCount, error) {
	db, err := sql.Open("mysql", r.my.DSN())
	if err != nil {
		return tableCount{}, err
	}
	defer db.Close()
	var c tableCount
	if parts {
		c.parts = map[string]partCount{}
		rows, err := db.QueryContext(ctx, partQuery)
		if err != nil {
			return c, err
		}
		defer rows.Close()
		for rows.Next() {
			var p string
			var pc partCount
			if err := rows.Scan(&p, &pc.rows, &pc.offsets, &pc.min, &pc.max); err != nil {
				return c, err
			}
			c.parts[p] = pc
		}
		if err := rows.Err(); err != nil {
			return c, err
		}
		return c, nil
	}
	err = db.QueryRowContext(ctx, totalQuery).Scan(&c.rows, &c.keys, &c.minKey, &c.maxKey)
	return c, err
}

func (r *rig) countPg(ctx context.Context, parts bool) (tableCount, error) {
	conn, err := pgx.Connect(ctx, r.pg.DSN())
	if err != nil {
		return tableCount{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var c tableCount
	if parts {
		c.parts = map[string]partCount{}
		rows, err := conn.Query(ctx, partQuery)
		if err != nil {
			return c, err
		}
		defer rows.Close()
		for rows.Next() {
			var p string
			var pc partCount
			if err := rows.Scan(&p, &pc.rows, &pc.offsets, &pc.min, &pc.max); err != nil {
				return c, err
			}
			c.parts[p] = pc
		}
		return c, rows.Err()
	}
	err = conn.QueryRow(ctx, totalQuery).Scan(&c.rows, &c.keys, &c.minKey, &c.maxKey)
	return c, err
}

// positions reads the progress table: partition -> committed offset.
func (r *rig) positions(ctx context.Context) (map[string]int64, sink.Status, error) {
	st, err := sink.ReadStatus(ctx, r.progressTarget(), r.name)
	if err != nil {
		return nil, st, err
	}
	return positionsOf(st), st, nil
}

func positionsOf(st sink.Status) map[string]int64 {
	out := map[string]int64{}
	for _, p := range st.Partitions {
		out[p.Partition] = atoi64(p.Position)
	}
	return out
}

func atoi64(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// caughtUp reports whether the progress table has reached (or passed)
// the offsets ends.
func (r *rig) caughtUp(ctx context.Context, ends map[string]int64) bool {
	pos, _, err := r.positions(ctx)
	if err != nil {
		return false
	}
	for _, p := range partitions {
		if pos[p] < ends[p] {
			return false
		}
	}
	return true
}

// drain waits until the progress table reaches the end offsets and no
// prepared branch of the sink is left (the running workers' restore
// resolves orphans: the test never sweeps before it checks).
func (r *rig) drain(d time.Duration) {
	r.t.Helper()
	ctx := ctxFor(r.t, d+10*time.Second)
	ends := r.endOffsets(ctx)
	start := time.Now()
	waitFor(r.t, d, "the sink to reach the end offsets", func() bool { return r.caughtUp(ctx, ends) })
	var left []sink.BranchStatus
	deadline := time.Now().Add(d)
	for {
		st, err := r.s.Status(ctx)
		left = st.Branches
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("prepared branches of the sink left %v after the sink caught up (restore did not resolve them): %+v (%v)", d, left, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Logf("drained in %v", time.Since(start).Round(time.Millisecond))
}

// checkExactlyOnce checks, with every worker stopped or idle and the
// producer halted at m records: each target holds exactly m rows, each key
// 0..m-1 once; per partition, the offsets 0..end-1 once each; the progress
// rows equal Kafka's end offsets; no prepared branch of the sink is left.
func (r *rig) checkExactlyOnce(m int64) {
	r.t.Helper()
	ctx := ctxFor(r.t, time.Minute)
	ends := r.endOffsets(ctx)
	var sum int64
	for _, p := range partitions {
		sum += ends[p]
	}
	if sum != m {
		r.t.Fatalf("Kafka holds %d records, the producer produced %d", sum, m)
	}
	want := tableCount{rows: m, keys: m, minKey: 0, maxKey: m - 1}
	my, err := r.countMy(ctx, false)
	if err != nil {
		r.t.Fatal(err)
	}
	pg, err := r.countPg(ctx, false)
	if err != nil {
		r.t.Fatal(err)
	}
	myp, err := r.countMy(ctx, true)
	if err != nil {
		r.t.Fatal(err)
	}
	pgp, err := r.countPg(ctx, true)
	if err != nil {
		r.t.Fatal(err)
	}
	pos, _, err := r.positions(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	st, err := r.s.Status(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	bad := false
	if my.rows != want.rows || my.keys != want.keys || my.minKey != 0 || my.maxKey != m-1 {
		r.t.Errorf("not exactly once: %s holds %v; want %d rows, keys 0..%d once each", tgMy, my, m, m-1)
		bad = true
	}
	if pg.rows != want.rows || pg.keys != want.keys || pg.minKey != 0 || pg.maxKey != m-1 {
		r.t.Errorf("not exactly once: %s holds %v; want %d rows, keys 0..%d once each", tgPg, pg, m, m-1)
		bad = true
	}
	for _, p := range partitions {
		wantP := partCount{rows: ends[p], offsets: ends[p], min: 0, max: ends[p] - 1}
		if ends[p] == 0 {
			wantP = partCount{}
		}
		for _, x := range []struct {
			name string
			c    partCount
		}{{tgMy, myp.parts[p]}, {tgPg, pgp.parts[p]}} {
			if x.c != wantP {
				r.t.Errorf("%s, partition %s: %d rows, %d distinct offsets, offsets %d..%d; want offsets 0..%d once each",
					x.name, p, x.c.rows, x.c.offsets, x.c.min, x.c.max, ends[p]-1)
				bad = true
			}
		}
		if pos[p] != ends[p] {
			r.t.Errorf("partition %s: the progress table says %d, Kafka's end offset is %d", p, pos[p], ends[p])
			bad = true
		}
	}
	if len(st.Branches) > 0 {
		r.t.Errorf("prepared branches of the sink left: %+v", st.Branches)
		bad = true
	}
	if bad {
		r.t.FailNow()
	}
	r.t.Logf("exactly once: %d records in Kafka (%d partitions, end offsets %v); %s: %v; %s: %v; per partition, offsets 0..end-1 once each in both; progress = end offsets; no branch left",
		m, nParts, endsList(ends), tgMy, my, tgPg, pg)
}

func endsList(ends map[string]int64) []int64 {
	var out []int64
	for _, p := range partitions {
		out = append(out, ends[p])
	}
	return out
}

// decisions counts the commit decisions and abort markers of incarnation
// inc (direct SQL on the progress target).
func (r *rig) decisions(ctx context.Context, inc uint64) (commits, aborts int64, maxCommitted int64, err error) {
	q := "SELECT COALESCE(SUM(CASE WHEN aborted THEN 0 ELSE 1 END), 0), COALESCE(SUM(CASE WHEN aborted THEN 1 ELSE 0 END), 0), " +
		"COALESCE(MAX(CASE WHEN aborted THEN 0 ELSE checkpoint END), 0) FROM xa_sink_decisions WHERE sink = $1 AND incarnation = $2"
	if r.progress == tgMy {
		db, err := sql.Open("mysql", r.my.DSN())
		if err != nil {
			return 0, 0, 0, err
		}
		defer db.Close()
		err = db.QueryRowContext(ctx, strings.NewReplacer("$1", "?", "$2", "?").Replace(q), r.name, int64(inc)).Scan(&commits, &aborts, &maxCommitted)
		return commits, aborts, maxCommitted, err
	}
	conn, err := pgx.Connect(ctx, r.pg.DSN())
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, q, r.name, int64(inc)).Scan(&commits, &aborts, &maxCommitted)
	return commits, aborts, maxCommitted, err
}

// incarnationOf returns the incarnation worker p runs (its
// xa_sink_instances row, by pid); 0 if it has none yet.
func (r *rig) incarnationOf(ctx context.Context, p *proc) uint64 {
	_, st, err := r.positions(ctx)
	if err != nil {
		return 0
	}
	var inc uint64
	for _, in := range st.Instances {
		if in.PID == p.pid() && in.Started.After(p.begun.Add(-time.Minute)) && in.Incarnation > inc {
			inc = in.Incarnation
		}
	}
	return inc
}

func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			return c
		}
		return '_'
	}, s)
}
