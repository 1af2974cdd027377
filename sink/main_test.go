package sink_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// testCtx ends with the test, or after a minute.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var sinkSeq atomic.Int64

// env is a MariaDB database and a PostgreSQL database, each with the
// table events (no unique key on the record's id, so that a duplicate
// shows as a second row), the sink's bookkeeping tables in MariaDB, and a
// sink name of its own (the MariaDB server is shared: XA RECOVER lists
// every test's branches).
type env struct {
	t      *testing.T
	my, pg *dbtest.DB
	name   string
	cfg    sink.Config
}

const (
	tgMy = "maria"
	tgPg = "pg"
)

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, tgMy)
}

// progressTargets are the targets the tests keep the bookkeeping in.
var progressTargets = []string{tgMy, tgPg}

// newEnvOn is newEnv with the bookkeeping tables in target progress.
func newEnvOn(t *testing.T, progress string) *env {
	t.Helper()
	return newEnvWith(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), progress)
}

// newEnvWith is newEnvOn with the given databases.
func newEnvWith(t *testing.T, my, pg *dbtest.DB, progress string) *env {
	t.Helper()
	e := &env{t: t, my: my, pg: pg,
		name: fmt.Sprintf("t%d-%d", os.Getpid()%100000, sinkSeq.Add(1))}
	ctx := testCtx(t)
	if err := e.my.Server.Exec(ctx, e.my.Name,
		"CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, k BIGINT NOT NULL, p VARCHAR(64) NOT NULL, pos VARCHAR(32) NOT NULL, v TEXT, t DATETIME(6))",
		"CREATE TABLE latest (p VARCHAR(64) PRIMARY KEY, k BIGINT NOT NULL, seq BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name,
		"CREATE TABLE events (id bigserial PRIMARY KEY, k bigint NOT NULL, p text NOT NULL, pos text NOT NULL, v text, t timestamptz)",
		"CREATE TABLE latest (p text PRIMARY KEY, k bigint NOT NULL, seq bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cols := []sink.Column{{Name: "k", From: "$.id"}, {Name: "p", From: "partition"}, {Name: "pos", From: "position"},
		{Name: "v", From: "$.v"}, {Name: "t", From: "time"}}
	e.cfg = sink.Config{
		Name: e.name,
		Targets: []sink.TargetConfig{
			{Name: tgMy, Driver: sink.DriverMySQL, DSN: e.my.DSN(), MaxConns: 8, Init: true},
			{Name: tgPg, Driver: sink.DriverPostgres, DSN: e.pg.DSN(), MaxConns: 8, Init: true},
		},
		Progress: progress,
		Tables: []sink.Table{
			{ID: "my.events", Target: tgMy, Name: "events", Columns: cols},
			{ID: "pg.events", Target: tgPg, Name: "events", Columns: cols},
		},
		Logger:         slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Phase2Attempts: 3,
		Phase2Timeout:  2 * time.Second,
	}
	if err := sink.Setup(ctx, e.progress()); err != nil {
		t.Fatal(err)
	}
	e.bind()
	return e
}

// bind binds the sink's targets to its progress store (xactl sink setup
// does it after Setup).
func (e *env) bind() {
	e.t.Helper()
	s, err := sink.Open(testCtx(e.t), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Bind(testCtx(e.t)); err != nil {
		e.t.Fatal(err)
	}
}

// progress returns the progress target's configuration.
func (e *env) progress() sink.TargetConfig {
	for _, tc := range e.cfg.Targets {
		if tc.Name == e.cfg.Progress {
			return tc
		}
	}
	e.t.Fatalf("no progress target %q", e.cfg.Progress)
	return sink.TargetConfig{}
}

// open opens the sink, closed when the test ends.
func (e *env) open() *sink.Sink {
	e.t.Helper()
	s, err := sink.Open(testCtx(e.t), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// runOpts are small checkpoints, so that a test sees several.
func runOpts() sink.RunOptions {
	return sink.RunOptions{CheckpointRecords: 150, CheckpointInterval: time.Second, SweepInterval: 200 * time.Millisecond,
		DrainTimeout: 10 * time.Second}
}

// counts is what a target's events table holds.
type counts struct{ rows, distinct, min, max int64 }

func (c counts) String() string {
	return fmt.Sprintf("%d rows, %d distinct ids, ids %d..%d", c.rows, c.distinct, c.min, c.max)
}

const countQuery = "SELECT count(*), count(DISTINCT k), COALESCE(min(k), -1), COALESCE(max(k), -1) FROM events"

func (e *env) counts() (my, pg counts) {
	e.t.Helper()
	ctx := testCtx(e.t)
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, countQuery).Scan(&my.rows, &my.distinct, &my.min, &my.max); err != nil {
		e.t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, e.pg.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.QueryRow(ctx, countQuery).Scan(&pg.rows, &pg.distinct, &pg.min, &pg.max); err != nil {
		e.t.Fatal(err)
	}
	return my, pg
}

// exactlyOnce checks that both targets hold ids 0..m-1, each once.
func (e *env) exactlyOnce(m int) {
	e.t.Helper()
	my, pg := e.counts()
	want := counts{int64(m), int64(m), 0, int64(m - 1)}
	if my != want || pg != want {
		e.t.Fatalf("not exactly once: %s holds %v, %s holds %v; want %v in each", tgMy, my, tgPg, pg, want)
	}
}

// settle sweeps until the sink has no prepared branch left.
func (e *env) settle(s *sink.Sink) {
	e.t.Helper()
	ctx := testCtx(e.t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.Sweep(ctx)
		st, serr := s.Status(ctx)
		if serr != nil {
			e.t.Fatal(serr)
		}
		if len(st.Branches) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("branches left after 20 s of sweeps: %+v (last sweep: %v)", st.Branches, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gen returns a generator of m records over k partitions.
func gen(m, k int) gensource.Config {
	return gensource.Config{Records: m, Partitions: k, Batch: 100, Payload: 8}
}

// run runs a fresh instance of e's sink over src to its end.
func (e *env) run(s *sink.Sink, src sink.Source) error {
	return s.Run(testCtx(e.t), src, runOpts())
}

var errCrash = errors.New("simulated crash")

func itoa(n int) string { return fmt.Sprint(n) }

// tally counts checkpoints for the tests.
type tally struct {
	sink.NopObserver
	committed, aborted atomic.Int64
	records            atomic.Int64
	maxPending         atomic.Int64
	lastErr            atomic.Value
}

func (o *tally) RecordsWritten(n int) { o.records.Add(int64(n)) }
func (o *tally) CheckpointDone(c sink.CheckpointStats) {
	if c.Committed {
		o.committed.Add(1)
	} else {
		o.aborted.Add(1)
		o.lastErr.Store(fmt.Sprint(c.Err))
	}
}
func (o *tally) PendingChanged(n int) {
	for {
		m := o.maxPending.Load()
		if int64(n) <= m || o.maxPending.CompareAndSwap(m, int64(n)) {
			return
		}
	}
}

func pgxConnect(ctx context.Context, dsn string) (*pgx.Conn, error) { return pgx.Connect(ctx, dsn) }

// tlog sends a logger's lines to the test's log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
