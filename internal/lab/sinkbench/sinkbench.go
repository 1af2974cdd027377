// Package sinkbench measures what exactly-once costs when a stream is
// written into SQL tables: in one run against the same two servers, the
// same records (sink/gensource's, over Partitions partitions, one writer
// per partition) are loaded into PostgreSQL, into MariaDB/MySQL and into
// both, three ways:
//
//	batch    the at-least-once baseline, as Redpanda Connect's sql_insert
//	         writes: batches of Batch records, each one transaction of its
//	         own, written as strongly as a careful programmer would: COPY
//	         into PostgreSQL, one multi-row INSERT into MySQL (a
//	         server-side prepared statement, reused), autocommit so that a
//	         batch is one round trip, both databases written in parallel,
//	         a writer per partition
//	sink     the exactly-once sink (package sink), a sink instance per
//	         partition, flushing Batch rows per statement, a checkpoint
//	         (a global transaction with its decision) every Interval
//	ceiling  what the servers take at most: the batch writer with bulk
//	         loads of CeilingBatch records (COPY; LOAD DATA LOCAL INFILE)
//
// Every mode maps the records to rows with the same sqlsink.JSONMapping, and
// loads into an emptied table; a measurement is the time from the first
// record read to the last one committed, and it is checked: every record
// is in every target table exactly once. It is used by `xalab bench sink`
// and by the package's Go benchmark.
package sinkbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// Target says which databases a measurement writes to.
type Target string

const (
	Postgres Target = "postgres"
	MySQL    Target = "mariadb"
	Both     Target = "both"
)

// Targets in the order they are reported.
var Targets = []Target{Postgres, MySQL, Both}

// Mode is one way of loading the records.
type Mode string

const (
	Batch Mode = "batch"
	Sink  Mode = "sink"
	// SinkDeadLetter is Sink with on_error: dead_letter (the same records,
	// none of them bad): what setting bad records aside costs when there
	// are none.
	SinkDeadLetter Mode = "sink-dl"
	Ceiling        Mode = "ceiling"
)

// Modes in the order they are reported.
var Modes = []Mode{Batch, Sink, SinkDeadLetter, Ceiling}

// Config configures a Setup.
type Config struct {
	// MySQLDSN and PostgresDSN name the databases (they must exist; the
	// tables events and the sink's bookkeeping tables are created there).
	MySQLDSN, PostgresDSN string
	// Partitions of the records, and writers: one per partition (a sink
	// instance per partition in mode sink). Default 4.
	Partitions int
	// Batch is the rows of one baseline transaction and of one sink
	// statement (the sink's TargetConfig.BatchRows). Default 5000, the
	// sink's default.
	Batch int
	// CeilingBatch is the rows of one bulk load. Default 50000.
	CeilingBatch int
	// Interval is the sink's checkpoint interval. Default 1 s.
	Interval time.Duration
	// Payload is the length of each record's "v" field. Default 64.
	Payload int
	// Poll is the records a baseline writer reads per Source.Poll.
	// Default 500. A sink instance polls as xactl's does: as many as its
	// open checkpoint has room for.
	Poll int
	// NoSettle skips writing back what a measurement left dirty before
	// the next one (see Setup.Measure): for tests on shared servers,
	// whose figures mean nothing anyway.
	NoSettle bool
	// Logger receives the sink's warnings; nil: none.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.Batch <= 0 {
		c.Batch = 5000
	}
	if c.CeilingBatch <= 0 {
		c.CeilingBatch = 50000
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Payload <= 0 {
		c.Payload = 64
	}
	if c.Poll <= 0 {
		c.Poll = 500
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// The sink's names for the two databases (participants, branch
// qualifiers) and the ids of their tables.
const (
	myTarget = "mariadb"
	pgTarget = "postgres"
	myTable  = "my.events"
	pgTable  = "pg.events"
	table    = "events"
)

// columns are the events tables' columns and where the mapping takes them
// from: gensource's value is {"id":..,"p":..,"seq":..,"v":".."}.
var columns = []sqlsink.Column{{Name: "id", From: "$.id"}, {Name: "part", From: "partition"}, {Name: "seq", From: "$.seq"}, {Name: "v", From: "$.v"}}

func columnNames() []string {
	out := make([]string, len(columns))
	for i, c := range columns {
		out[i] = c.Name
	}
	return out
}

// Setup holds the connections of a run.
type Setup struct {
	cfg Config
	my  *sql.DB // the baseline's MySQL pool: server-side prepared statements
	pg  *pgxpool.Pool
	seq atomic.Int64 // names LOAD DATA readers

	pidOnce            sync.Once
	myServer, pgServer int // the servers' process ids, 0 if not on this machine
}

// Open connects to both databases and creates the tables events and the
// sink's bookkeeping tables in both. The events tables must not exist.
func Open(ctx context.Context, cfg Config) (*Setup, error) {
	cfg = cfg.withDefaults()
	mc, err := gomysql.ParseDSN(cfg.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("mysql DSN: %w", err)
	}
	mc.InterpolateParams = false
	my, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return nil, err
	}
	my.SetMaxOpenConns(2 * cfg.Partitions)
	my.SetMaxIdleConns(2 * cfg.Partitions)
	pc, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		my.Close()
		return nil, fmt.Errorf("postgres DSN: %w", err)
	}
	pc.MaxConns = int32(2 * cfg.Partitions)
	pg, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		my.Close()
		return nil, err
	}
	s := &Setup{cfg: cfg, my: my, pg: pg}
	fail := func(err error) (*Setup, error) { s.Close(); return nil, err }
	if _, err := my.ExecContext(ctx, "CREATE TABLE "+table+" (id BIGINT NOT NULL PRIMARY KEY, part VARCHAR(64) NOT NULL, seq BIGINT NOT NULL, v VARCHAR(1024) NOT NULL) ENGINE=InnoDB"); err != nil {
		return fail(fmt.Errorf("mysql: %w", err))
	}
	if _, err := pg.Exec(ctx, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, part text NOT NULL, seq bigint NOT NULL, v text NOT NULL)"); err != nil {
		return fail(fmt.Errorf("postgres: %w", err))
	}
	for _, tc := range s.targets(Both) {
		if err := sqlsink.Setup(ctx, tc); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// Close closes the connections.
func (s *Setup) Close() {
	s.my.Close()
	s.pg.Close()
}

// Config returns the configuration with its defaults.
func (s *Setup) Config() Config { return s.cfg }

// targets returns the sink's targets for t; the first holds the
// bookkeeping (PostgreSQL when both are written: its decision is one
// statement).
func (s *Setup) targets(t Target) []sqlsink.TargetConfig {
	conns := 4 * s.cfg.Partitions // a writing session and the prepared branches of every instance
	my := sqlsink.TargetConfig{Name: myTarget, Driver: sqlsink.DriverMySQL, DSN: s.cfg.MySQLDSN, MaxConns: conns, BatchRows: s.cfg.Batch, Init: true}
	pg := sqlsink.TargetConfig{Name: pgTarget, Driver: sqlsink.DriverPostgres, DSN: s.cfg.PostgresDSN, MaxConns: conns, BatchRows: s.cfg.Batch, Init: true}
	switch t {
	case MySQL:
		return []sqlsink.TargetConfig{my}
	case Postgres:
		return []sqlsink.TargetConfig{pg}
	}
	return []sqlsink.TargetConfig{pg, my}
}

// tables returns the sink's tables for t.
func tables(t Target) []sqlsink.Table {
	my := sqlsink.Table{ID: myTable, Target: myTarget, Name: table, Columns: columns}
	pg := sqlsink.Table{ID: pgTable, Target: pgTarget, Name: table, Columns: columns}
	switch t {
	case MySQL:
		return []sqlsink.Table{my}
	case Postgres:
		return []sqlsink.Table{pg}
	}
	return []sqlsink.Table{pg, my}
}

// records returns the generator of n records.
func (s *Setup) records(n int) gensource.Config {
	return gensource.Config{Records: n, Partitions: s.cfg.Partitions, Payload: s.cfg.Payload}
}

// Stats are one measurement's figures.
type Stats struct {
	Target  Target
	Mode    Mode
	Records int
	Elapsed time.Duration
	// PerSecond is records per second (a record written to both
	// databases counts once).
	PerSecond float64
	// Commits counts the transactions: batches and bulk loads per
	// database, the sink's checkpoints.
	Commits int
	// Cost is what the load cost.
	Cost Cost
}

// Measure empties the events tables (and lets the servers write back what
// the previous measurement left dirty, unless Config.NoSettle), loads n
// records into target t in mode m, and checks that every record landed
// exactly once.
func (s *Setup) Measure(ctx context.Context, t Target, m Mode, n int) (Stats, error) {
	st := Stats{Target: t, Mode: m, Records: n}
	if err := s.reset(ctx); err != nil {
		return st, err
	}
	g := s.records(n)
	var err error
	var commits int
	var elapsed time.Duration
	before := s.read(ctx)
	switch m {
	case Sink, SinkDeadLetter:
		commits, elapsed, err = s.runSink(ctx, t, g, m == SinkDeadLetter)
	case Batch, Ceiling:
		commits, elapsed, err = s.runWriters(ctx, t, m, g)
	default:
		err = fmt.Errorf("sinkbench: unknown mode %q", m)
	}
	if err != nil {
		return st, fmt.Errorf("%s into %s: %w", m, t, err)
	}
	st.Elapsed, st.Commits, st.Cost = elapsed, commits, cost(before, s.read(ctx))
	st.PerSecond = float64(n) / elapsed.Seconds()
	if err := s.check(ctx, t, n); err != nil {
		return st, fmt.Errorf("%s into %s: %w", m, t, err)
	}
	return st, nil
}

// reset empties the events tables and lets the servers write back what
// the previous measurement left dirty, so that it does not slow the next
// one down.
func (s *Setup) reset(ctx context.Context) error {
	if _, err := s.my.ExecContext(ctx, "TRUNCATE TABLE "+table); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	if _, err := s.pg.Exec(ctx, "TRUNCATE TABLE "+table); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if s.cfg.NoSettle {
		return nil
	}
	// Best effort: these need privileges a given database may not grant.
	s.pg.Exec(ctx, "CHECKPOINT") //nolint:errcheck
	s.flushMySQL(ctx)
	return nil
}

// flushMySQL makes InnoDB write its dirty pages back now (it has no
// CHECKPOINT statement), until less than 1% of the buffer pool is dirty,
// for at most 20 s.
func (s *Setup) flushMySQL(ctx context.Context) {
	var pct string
	if err := s.my.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_max_dirty_pages_pct").Scan(&pct); err != nil {
		return
	}
	if _, err := s.my.ExecContext(ctx, "SET GLOBAL innodb_max_dirty_pages_pct = 0"); err != nil {
		return
	}
	defer s.my.ExecContext(context.WithoutCancel(ctx), "SET GLOBAL innodb_max_dirty_pages_pct = "+pct) //nolint:errcheck
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var name string
		var dirty, total int64
		if err := s.my.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").Scan(&name, &dirty); err != nil {
			return
		}
		if err := s.my.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_total'").Scan(&name, &total); err != nil || dirty <= total/100 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check verifies that the events tables of t hold the n records, each
// once (the primary key keeps out duplicates).
func (s *Setup) check(ctx context.Context, t Target, n int) error {
	if t != Postgres {
		var c, lo, hi int64
		if err := s.my.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(MIN(id), -1), COALESCE(MAX(id), -1) FROM "+table).Scan(&c, &lo, &hi); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		if c != int64(n) || lo != 0 || hi != int64(n-1) {
			return fmt.Errorf("mysql holds %d rows, ids %d to %d; want %d rows, ids 0 to %d", c, lo, hi, n, n-1)
		}
	}
	if t != MySQL {
		var c, lo, hi int64
		if err := s.pg.QueryRow(ctx, "SELECT COUNT(*), COALESCE(MIN(id), -1), COALESCE(MAX(id), -1) FROM "+table).Scan(&c, &lo, &hi); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if c != int64(n) || lo != 0 || hi != int64(n-1) {
			return fmt.Errorf("postgres holds %d rows, ids %d to %d; want %d rows, ids 0 to %d", c, lo, hi, n, n-1)
		}
	}
	return nil
}

// checkpoints counts a run's committed checkpoints and their aborts.
type checkpoints struct {
	sink.NopObserver
	committed, aborted atomic.Int64
}

func (c *checkpoints) CheckpointDone(s sink.CheckpointStats) {
	if s.Committed {
		c.committed.Add(1)
	} else {
		c.aborted.Add(1)
	}
}

// runSink loads the records with a sink instance per partition; with
// deadLetters, on_error: dead_letter (xactl's default is stop).
func (s *Setup) runSink(ctx context.Context, t Target, g gensource.Config, deadLetters bool) (int, time.Duration, error) {
	name := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	tcs := s.targets(t)
	cfg := sqlsink.Config{Name: name, Targets: tcs, Tables: tables(t), Logger: s.cfg.Logger}
	if deadLetters {
		cfg.OnError = sqlsink.OnErrorDeadLetter
	}
	sk, err := sqlsink.Open(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer sk.Close()
	defer s.forget(context.WithoutCancel(ctx), t, name)
	if _, err := sk.Bind(ctx); err != nil {
		return 0, 0, err
	}
	obs := &checkpoints{}
	// As xactl builds the sink: its default checkpoint.records, and a
	// source whose Poll returns everything it has unless the sink limits
	// it (xactl's Kafka source returns what the client has buffered, up to
	// checkpoint.records, and the sink lowers that to the room left in its
	// open checkpoint: sink.BoundPolls).
	opts := sink.RunOptions{CheckpointRecords: sink.DefaultCheckpointRecords, CheckpointInterval: s.cfg.Interval, Observer: obs, Logger: s.cfg.Logger,
		SweepInterval: -1}
	start := time.Now()
	err = s.each(func(w int) error {
		return sk.Run(ctx, newSource(g, partitionsOf(g.Partitions, w, s.cfg.Partitions), sink.DefaultCheckpointRecords), opts)
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	if a := obs.aborted.Load(); a > 0 {
		return 0, 0, fmt.Errorf("%d checkpoint(s) aborted", a)
	}
	st, err := sqlsink.ReadStatus(ctx, tcs[0], name)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range st.Partitions {
		var n int
		fmt.Sscan(p.Partition[len("gen/"):], &n) //nolint:errcheck
		if want := strconv.Itoa(g.Len(n)); p.Position != want {
			return 0, 0, fmt.Errorf("partition %s: position %q, want %s", p.Partition, p.Position, want)
		}
	}
	if len(st.Partitions) != g.Partitions {
		return 0, 0, fmt.Errorf("%d progress rows, want %d", len(st.Partitions), g.Partitions)
	}
	return int(obs.committed.Load()), elapsed, nil
}

// forget deletes the bookkeeping rows of sink name.
func (s *Setup) forget(ctx context.Context, t Target, name string) {
	for _, tb := range []string{"xa_sink_progress", "xa_sink_decisions", "xa_sink_instances", "xa_sink_generations", "xa_sink_bindings"} {
		if t == MySQL {
			s.my.ExecContext(ctx, "DELETE FROM "+tb+" WHERE sink = ?", name) //nolint:errcheck
		} else {
			s.pg.Exec(ctx, "DELETE FROM "+tb+" WHERE sink = $1", name) //nolint:errcheck
		}
	}
}

// each runs f for every writer at once and joins the errors.
func (s *Setup) each(f func(w int) error) error {
	errs := make([]error, s.cfg.Partitions)
	var wg sync.WaitGroup
	for w := range s.cfg.Partitions {
		wg.Go(func() { errs[w] = f(w) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Rounds [][]Stats // per round, by target then mode in Targets and Modes order
	Best   []Stats   // per target and mode, the round with the most records/s
}

// Calibrate returns, per target, how many records the baseline loads in
// about d (a warm-up load measures it), at least a batch per writer.
func Calibrate(ctx context.Context, s *Setup, targets []Target, d time.Duration) (map[Target]int, error) {
	out := map[Target]int{}
	for _, t := range targets {
		n := max(4*s.cfg.Batch*s.cfg.Partitions, 20000)
		st, err := s.Measure(ctx, t, Batch, n)
		if err != nil {
			return nil, err
		}
		out[t] = max(s.cfg.Batch*s.cfg.Partitions, int(st.PerSecond*d.Seconds()))
	}
	return out, nil
}

// Compare measures every mode into every target rounds times, the modes
// interleaved (their order turns from round to round), so that drift in
// the machine's speed hits all modes alike. records gives the records per
// measurement for each target in the first round; with d > 0, a target
// whose baseline load took less than half or more than twice d gets
// records for about d in the next round (a machine shared with other work
// changes speed), so that every load spans several checkpoints. Every
// mode of a round loads the same records.
func Compare(ctx context.Context, s *Setup, targets []Target, records map[Target]int, rounds int, d time.Duration) (Comparison, error) {
	var c Comparison
	records = maps.Clone(records)
	rounds = max(rounds, 1)
	for r := range rounds {
		var round []Stats
		for _, t := range targets {
			stats := make([]Stats, len(Modes))
			for i := range Modes {
				k := (i + r) % len(Modes)
				st, err := s.Measure(ctx, t, Modes[k], records[t])
				if err != nil {
					return c, err
				}
				stats[k] = st
			}
			round = append(round, stats...)
			if b := stats[0]; d > 0 && (b.Elapsed < d/2 || b.Elapsed > 2*d) {
				records[t] = max(s.cfg.Batch*s.cfg.Partitions, int(b.PerSecond*d.Seconds()))
			}
		}
		c.Rounds = append(c.Rounds, round)
		if c.Best == nil {
			c.Best = append([]Stats(nil), round...)
			continue
		}
		for i, st := range round {
			if st.PerSecond > c.Best[i].PerSecond {
				c.Best[i] = st
			}
		}
	}
	return c, nil
}

// Ratio returns the best records/s of mode a over that of mode b into t.
func (c Comparison) Ratio(t Target, a, b Mode) float64 { return ratio(c.Best, t, a, b) }

// RoundRatios returns, per round, the records/s of mode a over that of
// mode b into t measured in the same round: their spread shows how much of
// a ratio is the machine's noise.
func (c Comparison) RoundRatios(t Target, a, b Mode) []float64 {
	out := make([]float64, len(c.Rounds))
	for i, round := range c.Rounds {
		out[i] = ratio(round, t, a, b)
	}
	return out
}

// MedianRatio returns the median of RoundRatios: the figure least moved
// by one disturbed round.
func (c Comparison) MedianRatio(t Target, a, b Mode) float64 {
	rs := c.RoundRatios(t, a, b)
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if len(rs)%2 == 1 {
		return rs[len(rs)/2]
	}
	return (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
}

// PerThousand is a Cost per 1000 records, averaged over the rounds: CPU
// in milliseconds, statements, log in kilobytes (-1: unknown).
type PerThousand struct {
	ClientCPU, MySQLCPU, PostgresCPU float64
	MySQLStatements                  float64
	MySQLRedoKB, PostgresWALKB       float64
}

// Cost returns what loading 1000 records into t in mode m cost, averaged
// over the rounds.
func (c Comparison) Cost(t Target, m Mode) PerThousand {
	var p PerThousand
	var n float64
	var sums [6]float64
	var known [6]bool
	for i := range known {
		known[i] = true
	}
	for _, round := range c.Rounds {
		for _, st := range round {
			if st.Target != t || st.Mode != m || st.Records == 0 {
				continue
			}
			k := float64(st.Records) / 1000
			vals := [6]float64{st.Cost.ClientCPU.Seconds() * 1000, st.Cost.MySQLCPU.Seconds() * 1000, st.Cost.PostgresCPU.Seconds() * 1000,
				float64(st.Cost.MySQLStatements), float64(st.Cost.MySQLRedoBytes) / 1024, float64(st.Cost.PostgresWALBytes) / 1024}
			for i, v := range vals {
				if v < 0 {
					known[i] = false
				}
				sums[i] += v / k
			}
			n++
		}
	}
	out := [6]float64{}
	for i := range out {
		out[i] = -1
		if known[i] && n > 0 {
			out[i] = sums[i] / n
		}
	}
	p.ClientCPU, p.MySQLCPU, p.PostgresCPU, p.MySQLStatements, p.MySQLRedoKB, p.PostgresWALKB = out[0], out[1], out[2], out[3], out[4], out[5]
	return p
}

func ratio(stats []Stats, t Target, a, b Mode) float64 {
	var ra, rb float64
	for _, st := range stats {
		if st.Target != t {
			continue
		}
		switch st.Mode {
		case a:
			ra = st.PerSecond
		case b:
			rb = st.PerSecond
		}
	}
	if rb == 0 {
		return 0
	}
	return ra / rb
}

// pgIdent is the events table for COPY.
var pgIdent = pgx.Identifier{table}

// MySQLSettings and PostgresSettings are the server settings a run starts
// its own servers with: the servers' own defaults for the buffer pool and
// the redo log (MariaDB 10.11: 128 MiB and 96 MiB) and shared buffers
// (PostgreSQL: 128 MB), where the lab's throw-away servers
// (internal/testrig/localdb) save memory with smaller ones, which a bulk
// load into InnoDB turns into constant checkpoint flushing. Durability is
// untouched: every commit is flushed (innodb_flush_log_at_trx_commit=1,
// fsync=on, as shipped).
var (
	MySQLSettings    = map[string]string{"innodb-buffer-pool-size": "128M", "innodb-log-file-size": "96M"}
	PostgresSettings = map[string]string{"shared_buffers": "128MB"}
)
