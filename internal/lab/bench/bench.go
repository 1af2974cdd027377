// Package bench measures the cost of atomicity across MariaDB/MySQL and
// PostgreSQL, in one run against the same two servers, with concurrent
// workers that update disjoint rows (a transfer: one row down in MySQL, one
// row up in PostgreSQL):
//
//	local  two local commits, not atomic: the floor
//	raw    hand-written two-phase commit without a transaction manager:
//	       XA START, UPDATE, XA END, XA PREPARE on MySQL and BEGIN, UPDATE,
//	       PREPARE TRANSACTION on PostgreSQL in parallel, then XA COMMIT and
//	       COMMIT PREPARED in parallel; no decision log, so not recoverable
//	tm     the transaction manager with its durable decision log
//	async  the same with Config.AsyncCommit: the caller is answered once
//	       the decision is durable, phase 2 goes on in the background
//	last   the transaction manager with PostgreSQL as the last resource:
//	       MySQL is prepared, PostgreSQL commits in one phase together with
//	       the decision row, then MySQL commits; no decision-log write (a
//	       recovery scanner prunes the decision rows meanwhile, as in
//	       production)
//
// It is used by `xalab bench` and by the package's Go benchmark.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// Mode is one way of making the transfer.
type Mode string

const (
	Local Mode = "local"
	Raw   Mode = "raw"
	TM    Mode = "tm"
	Async Mode = "tm-async"
	Last  Mode = "tm-last"
	// SQLPostgres and SQLMySQL are tm with the shared decision log
	// (recovery/sqllog) in PostgreSQL and in MariaDB/MySQL instead of the
	// embedded one (AddSQLLog).
	SQLPostgres Mode = "tm-sqllog-pg"
	SQLMySQL    Mode = "tm-sqllog-maria"
)

// Modes in the order they are reported; a Setup adds the SQL logs' modes
// it was given (Setup.Modes).
var Modes = []Mode{Local, Raw, TM, Async, Last}

// Setup holds the connections of a run.
type Setup struct {
	MySQL    *sql.DB       // plain pool for local and raw
	Postgres *pgxpool.Pool // plain pool for local and raw
	MyRM     *xamysql.RM
	PGRM     *xapg.RM
	Manager  *xa.Manager
	AsyncMgr *xa.Manager // with AsyncCommit
	LastPG   *xapg.RM    // PostgreSQL with a decision table: the last resource
	LastMgr  *xa.Manager
	// SQL are the managers on shared decision logs (AddSQLLog), by mode.
	SQL      map[Mode]*xa.Manager
	sqlModes []Mode
	stopScan func()
	Rows     int // rows per worker
}

// AddSQLLog adds mode m: the transaction manager with log, a shared
// decision log (recovery/sqllog) opened by its node's process, as tm has
// the embedded one.
func (s *Setup) AddSQLLog(m Mode, log xa.RecoveryLog) error {
	mgr, err := xa.NewManager(xa.Config{Node: log.Identity().Node, Log: log})
	if err != nil {
		return err
	}
	if s.SQL == nil {
		s.SQL = map[Mode]*xa.Manager{}
	}
	s.SQL[m] = mgr
	s.sqlModes = append(s.sqlModes, m)
	return nil
}

// Modes returns the modes this setup measures, in the order they are
// reported.
func (s *Setup) Modes() []Mode { return append(append([]Mode{}, Modes...), s.sqlModes...) }

// Open connects to both databases and creates the accounts tables (rows
// rows for each of workers workers) in the given databases, which must
// exist and be empty of an accounts table. log is the TM's decision log,
// created for node "bench".
func Open(ctx context.Context, mysqlDSN, pgDSN string, workers, rows int, log xa.RecoveryLog) (*Setup, error) {
	mc, err := gomysql.ParseDSN(mysqlDSN)
	if err != nil {
		return nil, fmt.Errorf("mysql DSN: %w", err)
	}
	mdb, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return nil, err
	}
	mdb.SetMaxOpenConns(workers * 2)
	mdb.SetMaxIdleConns(workers * 2)
	pcfg, err := pgxpool.ParseConfig(pgDSN)
	if err != nil {
		mdb.Close()
		return nil, fmt.Errorf("postgres DSN: %w", err)
	}
	pcfg.MaxConns = int32(workers * 2)
	ppool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		mdb.Close()
		return nil, err
	}
	s := &Setup{MySQL: mdb, Postgres: ppool, Rows: rows}
	fail := func(err error) (*Setup, error) { s.Close(); return nil, err }

	if _, err := mdb.ExecContext(ctx, "CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		return fail(fmt.Errorf("mysql: %w", err))
	}
	if _, err := ppool.Exec(ctx, "CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		return fail(fmt.Errorf("postgres: %w", err))
	}
	n := workers * rows
	if _, err := mdb.ExecContext(ctx, "INSERT INTO accounts SELECT seq, 1000000 FROM seq_0_to_"+fmt.Sprint(n-1)); err != nil {
		// MySQL 8 has no sequence engine.
		if _, err := mdb.ExecContext(ctx, `INSERT INTO accounts WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n+1 FROM s WHERE n < ?) SELECT n, 1000000 FROM s`, n-1); err != nil {
			return fail(fmt.Errorf("mysql: %w", err))
		}
	}
	if _, err := ppool.Exec(ctx, "INSERT INTO accounts SELECT g, 1000000 FROM generate_series(0, $1) g", n-1); err != nil {
		return fail(fmt.Errorf("postgres: %w", err))
	}

	if s.MyRM, err = xamysql.Open(ctx, xamysql.Config{Name: "mysql", DSN: mysqlDSN, MaxConns: workers * 2, Init: true}); err != nil {
		return fail(err)
	}
	if s.PGRM, err = xapg.Open(ctx, xapg.Config{Name: "postgres", DSN: pgDSN, MaxConns: int32(workers * 2), Init: true}); err != nil {
		return fail(err)
	}
	s.Manager, err = xa.NewManager(xa.Config{Node: "bench", Log: log})
	if err != nil {
		return fail(err)
	}
	s.AsyncMgr, err = xa.NewManager(xa.Config{Node: "bench", Log: log, AsyncCommit: true})
	if err != nil {
		return fail(err)
	}
	s.LastPG, err = xapg.Open(ctx, xapg.Config{Name: "postgres", DSN: pgDSN, MaxConns: int32(workers * 2), DecisionTable: "xa_decisions", Init: true})
	if err != nil {
		return fail(err)
	}
	s.LastMgr, err = xa.NewManager(xa.Config{Node: "bench", Log: log})
	if err != nil {
		return fail(err)
	}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{s.MyRM, s.LastPG}, Log: log})
	if err != nil {
		return fail(err)
	}
	if _, s.stopScan, err = sc.Start(context.WithoutCancel(ctx), time.Second, nil); err != nil {
		return fail(err)
	}
	return s, nil
}

// stopRecovery stops the recovery scanner of the last-resource mode.
func (s *Setup) stopRecovery() {
	if s.stopScan != nil {
		s.stopScan()
		s.stopScan = nil
	}
}

// Close waits for asynchronous phase 2s and closes every connection.
func (s *Setup) Close() {
	s.stopRecovery()
	if s.LastPG != nil {
		s.LastPG.Close()
	}
	if s.AsyncMgr != nil {
		s.AsyncMgr.Close(context.Background()) //nolint:errcheck
	}
	if s.MySQL != nil {
		s.MySQL.Close()
	}
	if s.Postgres != nil {
		s.Postgres.Close()
	}
	if s.MyRM != nil {
		s.MyRM.Close()
	}
	if s.PGRM != nil {
		s.PGRM.Close()
	}
}

// Stats are one mode's figures.
type Stats struct {
	Mode     Mode
	Workers  int
	Ops      int
	Errors   int
	Elapsed  time.Duration
	TPS      float64
	P50, P99 time.Duration
}

// Transfer performs one transfer of mode m by worker w on its i-th row.
func (s *Setup) Transfer(ctx context.Context, m Mode, w, i int) error {
	row := w*s.Rows + i%s.Rows
	switch m {
	case Local:
		return s.local(ctx, row)
	case Raw:
		return s.raw(ctx, row)
	case TM:
		return s.tm(ctx, s.Manager, row)
	case Async:
		return s.tm(ctx, s.AsyncMgr, row)
	case Last:
		return s.tmWith(ctx, s.LastMgr, s.LastPG, row)
	}
	if mgr, ok := s.SQL[m]; ok {
		return s.tm(ctx, mgr, row)
	}
	return fmt.Errorf("bench: unknown mode %q", m)
}

const (
	myDebit  = "UPDATE accounts SET balance = balance - 1 WHERE id = ?"
	pgCredit = "UPDATE accounts SET balance = balance + 1 WHERE id = $1"
)

func (s *Setup) local(ctx context.Context, row int) error {
	var wg sync.WaitGroup
	var e1, e2 error
	wg.Add(1)
	go func() { defer wg.Done(); _, e1 = s.MySQL.ExecContext(ctx, myDebit, row) }()
	_, e2 = s.Postgres.Exec(ctx, pgCredit, row)
	wg.Wait()
	return errors.Join(e1, e2)
}

var rawSeq struct {
	sync.Mutex
	n uint64
}

// raw is the hand-written two-phase commit a careful programmer would
// write without a transaction manager: parallel prepare, parallel commit,
// no log (a crash between the two leaves branches nobody can resolve).
func (s *Setup) raw(ctx context.Context, row int) error {
	rawSeq.Lock()
	rawSeq.n++
	id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), rawSeq.n)
	rawSeq.Unlock()
	myConn, err := s.MySQL.Conn(ctx)
	if err != nil {
		return err
	}
	defer myConn.Close()
	pgConn, err := s.Postgres.Acquire(ctx)
	if err != nil {
		return err
	}
	defer pgConn.Release()

	var wg sync.WaitGroup
	var e1, e2 error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, q := range []string{"XA START '" + id + "'", "", "XA END '" + id + "'", "XA PREPARE '" + id + "'"} {
			if q == "" {
				_, e1 = myConn.ExecContext(ctx, myDebit, row)
			} else {
				_, e1 = myConn.ExecContext(ctx, q)
			}
			if e1 != nil {
				return
			}
		}
	}()
	for _, q := range []string{"BEGIN", "", "PREPARE TRANSACTION '" + id + "'"} {
		if q == "" {
			_, e2 = pgConn.Exec(ctx, pgCredit, row)
		} else {
			_, e2 = pgConn.Exec(ctx, q)
		}
		if e2 != nil {
			break
		}
	}
	wg.Wait()
	if e1 != nil || e2 != nil {
		myConn.ExecContext(ctx, "XA ROLLBACK '"+id+"'") //nolint:errcheck
		pgConn.Exec(ctx, "ROLLBACK PREPARED '"+id+"'")  //nolint:errcheck
		return errors.Join(e1, e2)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _, e1 = myConn.ExecContext(ctx, "XA COMMIT '"+id+"'") }()
	_, e2 = pgConn.Exec(ctx, "COMMIT PREPARED '"+id+"'")
	wg.Wait()
	return errors.Join(e1, e2)
}

func (s *Setup) tm(ctx context.Context, mgr *xa.Manager, row int) error {
	return s.tmWith(ctx, mgr, s.PGRM, row)
}

func (s *Setup) tmWith(ctx context.Context, mgr *xa.Manager, pgRM *xapg.RM, row int) error {
	_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		my, err := s.MyRM.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		pg, err := pgRM.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		var e1 error
		wg.Add(1)
		go func() { defer wg.Done(); _, e1 = my.ExecContext(ctx, myDebit, row) }()
		_, e2 := pg.Exec(ctx, pgCredit, row)
		wg.Wait()
		return errors.Join(e1, e2)
	})
	return err
}

// Measure runs mode m with workers concurrent workers for d (after a short
// warm-up) and returns its figures.
func (s *Setup) Measure(ctx context.Context, m Mode, workers int, d time.Duration) Stats {
	warm := d / 5
	start := time.Now()
	measureFrom := start.Add(warm)
	end := measureFrom.Add(d)
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					break
				}
				err := s.Transfer(ctx, m, w, i)
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	st := Stats{Mode: m, Workers: workers, Ops: len(lat), Errors: errs, Elapsed: d}
	st.TPS = float64(len(lat)) / d.Seconds()
	st.P50, st.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return st
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

// Balance returns the sum of balances in both databases, for checking
// that the modes moved money without losing any.
func (s *Setup) Balance(ctx context.Context) (mysqlSum, pgSum int64, err error) {
	if err = s.MySQL.QueryRowContext(ctx, "SELECT COALESCE(SUM(balance),0) FROM accounts").Scan(&mysqlSum); err != nil {
		return
	}
	err = s.Postgres.QueryRow(ctx, "SELECT COALESCE(SUM(balance),0)::bigint FROM accounts").Scan(&pgSum)
	return
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Rounds [][]Stats // per round, in Modes order
	Best   []Stats   // per mode, the round with the highest TPS
	total  int64     // the balance over both databases before the run
}

// Compare measures every mode of s rounds times, interleaved (local, raw,
// tm, local, raw, tm, ...), so that drift in the machine's speed hits all
// modes alike. A round's figures count only error-free transfers.
func Compare(ctx context.Context, s *Setup, workers int, d time.Duration, rounds int) (Comparison, error) {
	var c Comparison
	my, pg, err := s.Balance(ctx)
	if err != nil {
		return c, err
	}
	c.total = my + pg
	if rounds < 1 {
		rounds = 1
	}
	modes := s.Modes()
	c.Best = make([]Stats, len(modes))
	for r := 0; r < rounds; r++ {
		var round []Stats
		for i, m := range modes {
			st := s.Measure(ctx, m, workers, d)
			if err := ctx.Err(); err != nil {
				return c, err
			}
			// Phase 2s still running must not slow the next mode down.
			if err := s.AsyncMgr.Wait(ctx); err != nil {
				return c, err
			}
			round = append(round, st)
			if r == 0 || st.TPS > c.Best[i].TPS {
				c.Best[i] = st
			}
		}
		c.Rounds = append(c.Rounds, round)
	}
	return c, nil
}

// Ratio returns Best TPS of mode a over that of mode b.
func (c Comparison) Ratio(a, b Mode) float64 {
	return ratio(c.Best, a, b)
}

// RoundRatios returns, per round, the TPS of mode a over that of mode b
// measured in the same round: their spread shows how much of a ratio is
// the machine's noise. A round in which b did nothing gives 0.
func (c Comparison) RoundRatios(a, b Mode) []float64 {
	rs := make([]float64, len(c.Rounds))
	for i, round := range c.Rounds {
		rs[i] = ratio(round, a, b)
	}
	return rs
}

// ratio returns the TPS of mode a over that of mode b in stats, 0 when b
// has none.
func ratio(stats []Stats, a, b Mode) float64 {
	var ta, tb float64
	for _, st := range stats {
		switch st.Mode {
		case a:
			ta = st.TPS
		case b:
			tb = st.TPS
		}
	}
	if tb == 0 {
		return 0
	}
	return ta / tb
}

// CheckBalances verifies that the run moved money without creating or
// losing any: every transfer, of every mode, debits and credits 1.
func (c Comparison) CheckBalances(ctx context.Context, s *Setup) error {
	if err := s.AsyncMgr.Wait(ctx); err != nil {
		return err
	}
	my, pg, err := s.Balance(ctx)
	if err != nil {
		return err
	}
	if my+pg != c.total {
		return fmt.Errorf("bench: balance over both databases went from %d to %d: a transfer was half-applied", c.total, my+pg)
	}
	return nil
}

// CreateLog creates the decision log of a benchmark run in dir: node
// "bench", the default timeout and grace.
func CreateLog(dir string, opts filelog.Options) (*filelog.Log, error) {
	ident, err := xa.NewLogIdentity("bench", 0, 0, time.Now())
	if err != nil {
		return nil, err
	}
	return filelog.Create(dir, ident, opts)
}
