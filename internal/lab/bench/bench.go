// Package bench measures the cost of atomicity across MariaDB/MySQL and
// PostgreSQL, in one run against the same two servers, with concurrent
// workers that update disjoint rows (a transfer: one row down in MySQL, one
// row up in PostgreSQL; with more participants, rows up in a second MySQL
// and a second PostgreSQL database too):
//
//	local    local commits, not atomic: the floor
//	raw      the hand-written two-phase commit a careful programmer writes
//	         without a transaction manager, with the drivers and settings
//	         the transaction manager uses (go-sql-driver with
//	         interpolateParams=true, pgx): one statement per call (XA
//	         START, UPDATE, XA END, XA PREPARE on MySQL; BEGIN, UPDATE,
//	         PREPARE TRANSACTION on PostgreSQL), the participants prepared
//	         in parallel, then XA COMMIT and COMMIT PREPARED in parallel; no
//	         decision log, so not recoverable
//	raw-log  the same with a decision written the simple way between the
//	         phases: a line appended to a file (O_APPEND) and fdatasync'ed,
//	         by each transaction on its own
//	tm       the transaction manager with its durable decision log
//	tm-async the same with Config.AsyncCommit: the caller is answered once
//	         the decision is durable, phase 2 goes on in the background
//	tm-last  the transaction manager with PostgreSQL as the last resource:
//	         MySQL is prepared, PostgreSQL commits in one phase together
//	         with the decision row, then MySQL commits; no decision-log
//	         write (a recovery scanner prunes the decision rows meanwhile,
//	         as in production)
//
// Every mode's figures include the client's CPU time per transaction: this
// process's CPU (getrusage) over the measuring window, divided by the
// transactions that completed in it.
//
// It is used by `xalab bench` and by the package's Go benchmark.
package bench

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/lab/servercpu"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// Mode is one way of making the transfer.
type Mode string

const (
	Local  Mode = "local"
	Raw    Mode = "raw"
	RawLog Mode = "raw-log"
	TM     Mode = "tm"
	Async  Mode = "tm-async"
	Last   Mode = "tm-last"
	// SQLPostgres and SQLMySQL are tm with the shared decision log
	// (recovery/sqllog) in PostgreSQL and in MariaDB/MySQL instead of the
	// embedded one (AddSQLLog).
	SQLPostgres Mode = "tm-sqllog-pg"
	SQLMySQL    Mode = "tm-sqllog-maria"
)

// Modes in the order they are reported; a Setup adds the SQL logs' modes
// it was given (Setup.Modes).
var Modes = []Mode{Local, Raw, RawLog, TM, Async, Last}

// MaxParticipants is the most participants a transfer can have.
const MaxParticipants = 4

// Config says what Open connects to and makes.
type Config struct {
	// MySQLDSN and PostgresDSN name the databases of the first two
	// participants; they must exist and hold no accounts table.
	MySQLDSN, PostgresDSN string
	// Workers is the most concurrent workers a measurement will use;
	// Rows the rows each worker has (default 100).
	Workers, Rows int
	// Log is the transaction manager's decision log, created for node
	// "bench".
	Log xa.RecoveryLog
	// Participants is the most participants a transfer will have: 2 (the
	// default: MySQL and PostgreSQL), 3 (a second MySQL database, the
	// first's name with "_p3") or 4 (and a second PostgreSQL database,
	// "_p4"). The extra databases are created when missing; they must
	// hold no accounts table.
	Participants int
	// RawLogDir is where raw-log's decision file is made (and removed at
	// Close): a real disk, the decision log's. Default /var/tmp.
	RawLogDir string
}

// participant is one database of a transfer: its plain pool (local, raw)
// and its resource manager (tm).
type participant struct {
	my   *sql.DB       // MySQL, or nil
	pg   *pgxpool.Pool // PostgreSQL, or nil
	myRM *xamysql.RM
	pgRM *xapg.RM
}

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
	// Participants is the number of participants of each transfer, from
	// 2 to the Config's; set it between measurements.
	Participants int

	parts     []*participant
	rawLog    *os.File
	rawLogFD  int
	gidPrefix string
	gidSeq    atomic.Uint64

	pidOnce      sync.Once
	myPID, pgPID int // the servers' process ids, 0 if not on this machine
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
// created for node "bench". Transfers have two participants.
func Open(ctx context.Context, mysqlDSN, pgDSN string, workers, rows int, log xa.RecoveryLog) (*Setup, error) {
	return OpenConfig(ctx, Config{MySQLDSN: mysqlDSN, PostgresDSN: pgDSN, Workers: workers, Rows: rows, Log: log})
}

// OpenConfig is Open with every setting.
func OpenConfig(ctx context.Context, cfg Config) (*Setup, error) {
	if cfg.Participants == 0 {
		cfg.Participants = 2
	}
	if cfg.Participants < 2 || cfg.Participants > MaxParticipants {
		return nil, fmt.Errorf("bench: %d participants; 2 to %d are possible", cfg.Participants, MaxParticipants)
	}
	if cfg.Rows <= 0 {
		cfg.Rows = 100
	}
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.RawLogDir == "" {
		cfg.RawLogDir = "/var/tmp"
	}
	s := &Setup{Rows: cfg.Rows, Participants: 2,
		gidPrefix: "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"}
	fail := func(err error) (*Setup, error) { s.Close(); return nil, err }
	workers := cfg.Workers

	dsns := []string{cfg.MySQLDSN, cfg.PostgresDSN}
	if cfg.Participants >= 3 {
		dsn, err := mysqlDatabase(ctx, cfg.MySQLDSN, "_p3")
		if err != nil {
			return fail(err)
		}
		dsns = append(dsns, dsn)
	}
	if cfg.Participants >= 4 {
		dsn, err := postgresDatabase(ctx, cfg.PostgresDSN, "_p4")
		if err != nil {
			return fail(err)
		}
		dsns = append(dsns, dsn)
	}
	for i, dsn := range dsns {
		p, err := openParticipant(ctx, i, dsn, workers, workers*cfg.Rows)
		s.parts = append(s.parts, p)
		if err != nil {
			return fail(err)
		}
	}
	s.MySQL, s.Postgres = s.parts[0].my, s.parts[1].pg
	s.MyRM, s.PGRM = s.parts[0].myRM, s.parts[1].pgRM

	var err error
	s.Manager, err = xa.NewManager(xa.Config{Node: "bench", Log: cfg.Log})
	if err != nil {
		return fail(err)
	}
	s.AsyncMgr, err = xa.NewManager(xa.Config{Node: "bench", Log: cfg.Log, AsyncCommit: true})
	if err != nil {
		return fail(err)
	}
	s.LastPG, err = xapg.Open(ctx, xapg.Config{Name: "postgres", DSN: cfg.PostgresDSN, MaxConns: int32(workers + 4), DecisionTable: "xa_decisions", Init: true})
	if err != nil {
		return fail(err)
	}
	s.LastMgr, err = xa.NewManager(xa.Config{Node: "bench", Log: cfg.Log})
	if err != nil {
		return fail(err)
	}
	rms := []xa.ResourceManager{s.MyRM, s.LastPG}
	for _, p := range s.parts[2:] {
		if p.myRM != nil {
			rms = append(rms, p.myRM)
		} else {
			rms = append(rms, p.pgRM)
		}
	}
	sc, err := recovery.New(recovery.Config{Participants: rms, Log: cfg.Log})
	if err != nil {
		return fail(err)
	}
	if _, s.stopScan, err = sc.Start(context.WithoutCancel(ctx), time.Second, nil); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(cfg.RawLogDir, "xa-bench-raw-log-")
	if err != nil {
		return fail(fmt.Errorf("bench: raw-log's file: %w", err))
	}
	// Reopened with O_APPEND: each transaction appends its line.
	name := f.Name()
	f.Close()
	if s.rawLog, err = os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		os.Remove(name)
		return fail(fmt.Errorf("bench: raw-log's file: %w", err))
	}
	s.rawLogFD = int(s.rawLog.Fd())
	return s, nil
}

// participantNames are the participants' names, by index.
var participantNames = [MaxParticipants]string{"mysql", "postgres", "mysql-p3", "postgres-p4"}

// openParticipant opens participant i (even: MySQL, odd: PostgreSQL) on
// dsn: its plain pool, its accounts table of n rows and its resource
// manager.
func openParticipant(ctx context.Context, i int, dsn string, workers, n int) (*participant, error) {
	p := &participant{}
	name := participantNames[i]
	if i%2 == 0 {
		mc, err := gomysql.ParseDSN(dsn)
		if err != nil {
			return p, fmt.Errorf("mysql DSN: %w", err)
		}
		// What a careful programmer sets: arguments interpolated on the
		// client, as the transaction manager's sessions do (one round trip
		// per statement, not a server-side prepare, execute and close).
		mc.InterpolateParams = true
		conn, err := gomysql.NewConnector(mc)
		if err != nil {
			return p, fmt.Errorf("mysql DSN: %w", err)
		}
		p.my = sql.OpenDB(conn)
		p.my.SetMaxOpenConns(workers + 4)
		p.my.SetMaxIdleConns(workers + 4)
		if _, err := p.my.ExecContext(ctx, "CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
			return p, fmt.Errorf("mysql: %w", err)
		}
		if _, err := p.my.ExecContext(ctx, "INSERT INTO accounts SELECT seq, 1000000 FROM seq_0_to_"+strconv.Itoa(n-1)); err != nil {
			// MySQL 8 has no sequence engine.
			if _, err := p.my.ExecContext(ctx, `INSERT INTO accounts WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n+1 FROM s WHERE n < ?) SELECT n, 1000000 FROM s`, n-1); err != nil {
				return p, fmt.Errorf("mysql: %w", err)
			}
		}
		// Phase 2 of tm-async outlives its transaction: a session each.
		p.myRM, err = xamysql.Open(ctx, xamysql.Config{Name: name, DSN: dsn, MaxConns: workers * 2, Init: true})
		return p, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return p, fmt.Errorf("postgres DSN: %w", err)
	}
	pcfg.MaxConns = int32(workers + 4)
	if p.pg, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return p, err
	}
	if _, err := p.pg.Exec(ctx, "CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		return p, fmt.Errorf("postgres: %w", err)
	}
	if _, err := p.pg.Exec(ctx, "INSERT INTO accounts SELECT g, 1000000 FROM generate_series(0, $1) g", n-1); err != nil {
		return p, fmt.Errorf("postgres: %w", err)
	}
	p.pgRM, err = xapg.Open(ctx, xapg.Config{Name: name, DSN: dsn, MaxConns: int32(workers * 2), Init: true})
	return p, err
}

func (p *participant) close() {
	if p.my != nil {
		p.my.Close()
	}
	if p.pg != nil {
		p.pg.Close()
	}
	if p.myRM != nil {
		p.myRM.Close()
	}
	if p.pgRM != nil {
		p.pgRM.Close()
	}
}

// mysqlDatabase creates, if missing, the database named as dsn's with
// suffix on the same server, and returns its DSN.
func mysqlDatabase(ctx context.Context, dsn, suffix string) (string, error) {
	mc, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("mysql DSN: %w", err)
	}
	mc.DBName += suffix
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+mc.DBName+"`"); err != nil {
		return "", fmt.Errorf("mysql: creating the database of another participant: %w", err)
	}
	return mc.FormatDSN(), nil
}

// postgresDatabase creates, if missing, the database named as dsn's with
// suffix on the same server, and returns its DSN.
func postgresDatabase(ctx context.Context, dsn, suffix string) (string, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("postgres DSN: %w", err)
	}
	name := pcfg.ConnConfig.Database + suffix
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := pool.Exec(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
			return "", fmt.Errorf("postgres: creating the database of another participant: %w", err)
		}
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil // keyword/value: the last one counts
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
	for _, p := range s.parts {
		p.close()
	}
	if s.rawLog != nil {
		s.rawLog.Close()
		os.Remove(s.rawLog.Name())
	}
}

// Stats are one mode's figures.
type Stats struct {
	Mode     Mode
	Workers  int
	Ops      int // transfers that completed in the window without an error
	Errors   int
	Elapsed  time.Duration // the measuring window
	TPS      float64
	P50, P99 time.Duration
	// CPU is this process's CPU time (user and system, every thread)
	// over the window divided by Ops: the client's cost of a transfer.
	CPU time.Duration
	// MySQLCPU and PostgresCPU are the servers' CPU time over the window
	// divided by Ops (PostgreSQL's: every process of the server), -1 when
	// the server does not run on this machine.
	MySQLCPU, PostgresCPU time.Duration
	// Participants per transfer.
	Participants int
}

// Transfer performs one transfer of mode m by worker w on its i-th row.
func (s *Setup) Transfer(ctx context.Context, m Mode, w, i int) error {
	row := w*s.Rows + i%s.Rows
	n := s.participants()
	switch m {
	case Local:
		return s.local(ctx, row, n)
	case Raw:
		return s.raw(ctx, row, n, false)
	case RawLog:
		return s.raw(ctx, row, n, true)
	case TM:
		return s.tm(ctx, s.Manager, s.PGRM, row, n)
	case Async:
		return s.tm(ctx, s.AsyncMgr, s.PGRM, row, n)
	case Last:
		return s.tm(ctx, s.LastMgr, s.LastPG, row, n)
	}
	if mgr, ok := s.SQL[m]; ok {
		return s.tm(ctx, mgr, s.PGRM, row, n)
	}
	return fmt.Errorf("bench: unknown mode %q", m)
}

func (s *Setup) participants() int {
	return min(max(s.Participants, 2), len(s.parts))
}

const (
	myUpdate = "UPDATE accounts SET balance = balance + ? WHERE id = ?"
	pgUpdate = "UPDATE accounts SET balance = balance + $1 WHERE id = $2"
)

// amount is what participant i of n adds to its row: the first gives, the
// others receive, and the sum is 0.
func amount(i, n int) int {
	if i == 0 {
		return 1 - n
	}
	return 1
}

// parallel runs f(0) ... f(n-1) at once, f(0) on the calling goroutine,
// and returns their errors.
func parallel(n int, f func(i int) error) error {
	if n == 2 {
		var e1 error
		var wg sync.WaitGroup
		wg.Go(func() { e1 = f(1) })
		e0 := f(0)
		wg.Wait()
		return errors.Join(e0, e1)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = f(i) })
	}
	errs[0] = f(0)
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Setup) local(ctx context.Context, row, n int) error {
	return parallel(n, func(i int) error {
		p := s.parts[i]
		if p.my != nil {
			_, err := p.my.ExecContext(ctx, myUpdate, amount(i, n), row)
			return err
		}
		_, err := p.pg.Exec(ctx, pgUpdate, amount(i, n), row)
		return err
	})
}

// rawBranch is one participant's session in a hand-written two-phase
// commit.
type rawBranch struct {
	my       *sql.Conn
	pg       *pgxpool.Conn
	gid      string // the XID of this participant's branch: unique on its server
	prepared bool
}

// raw is the hand-written two-phase commit a careful programmer would
// write without a transaction manager: parallel prepare, parallel commit,
// one statement per call; with logged, an fdatasync'ed decision line in
// between. Without a log, a crash between the phases leaves branches
// nobody can resolve.
func (s *Setup) raw(ctx context.Context, row, n int, logged bool) error {
	gid := s.gidPrefix + strconv.FormatUint(s.gidSeq.Add(1), 10)
	var bs [MaxParticipants]rawBranch
	defer func() {
		for i := range n {
			b := &bs[i]
			if b.my != nil {
				if !b.prepared {
					b.my.Close()
				} else {
					// Still holding a branch: never pooled.
					b.my.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck
					b.my.Close()
				}
			}
			if b.pg != nil {
				b.pg.Release() // pgxpool closes a connection inside a transaction
			}
		}
	}()
	err := parallel(n, func(i int) error {
		b, p := &bs[i], s.parts[i]
		b.gid = gid
		if i >= 2 {
			b.gid = gid + "-" + strconv.Itoa(i) // a server of an earlier participant
		}
		var err error
		if p.my != nil {
			if b.my, err = p.my.Conn(ctx); err != nil {
				return err
			}
			xid := "'" + b.gid + "'"
			if _, err = b.my.ExecContext(ctx, "XA START "+xid); err != nil {
				return err
			}
			if _, err = b.my.ExecContext(ctx, myUpdate, amount(i, n), row); err == nil {
				if _, err = b.my.ExecContext(ctx, "XA END "+xid); err == nil {
					_, err = b.my.ExecContext(ctx, "XA PREPARE "+xid)
				}
			}
			b.prepared = err == nil
			return err
		}
		if b.pg, err = p.pg.Acquire(ctx); err != nil {
			return err
		}
		if _, err = b.pg.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		if _, err = b.pg.Exec(ctx, pgUpdate, amount(i, n), row); err != nil {
			return err
		}
		if _, err = b.pg.Exec(ctx, "PREPARE TRANSACTION '"+b.gid+"'"); err != nil {
			return err
		}
		b.prepared = true
		return nil
	})
	if err == nil && logged {
		err = s.logDecision(gid)
	}
	if err != nil {
		s.rawAbort(ctx, bs[:n])
		return err
	}
	return parallel(n, func(i int) error {
		b := &bs[i]
		if b.my != nil {
			_, err := b.my.ExecContext(ctx, "XA COMMIT '"+b.gid+"'")
			b.prepared = err != nil
			return err
		}
		_, err := b.pg.Exec(ctx, "COMMIT PREPARED '"+b.gid+"'")
		return err
	})
}

// logDecision appends raw-log's decision line and makes it durable: a
// write to the file (O_APPEND) and an fdatasync, by each transaction on
// its own (concurrent fdatasyncs of the file share what the file system
// shares of them).
func (s *Setup) logDecision(gid string) error {
	if _, err := s.rawLog.Write([]byte("commit " + gid + "\n")); err != nil {
		return err
	}
	return unix.Fdatasync(s.rawLogFD)
}

// rawAbort rolls back what a failed hand-written transaction prepared or
// started.
func (s *Setup) rawAbort(ctx context.Context, bs []rawBranch) {
	for i := range bs {
		b := &bs[i]
		switch {
		case b.my != nil && b.prepared:
			if _, err := b.my.ExecContext(ctx, "XA ROLLBACK '"+b.gid+"'"); err == nil {
				b.prepared = false
			}
		case b.my != nil:
			// Whatever state the session is in, closing it ends it.
			b.my.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck
		case b.pg != nil && b.prepared:
			b.pg.Exec(ctx, "ROLLBACK PREPARED '"+b.gid+"'") //nolint:errcheck
		case b.pg != nil:
			b.pg.Exec(ctx, "ROLLBACK") //nolint:errcheck
		}
	}
}

// tm makes the transfer with mgr; first is the PostgreSQL participant of
// the first two (with a decision table for tm-last).
func (s *Setup) tm(ctx context.Context, mgr *xa.Manager, first *xapg.RM, row, n int) error {
	_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		var my [MaxParticipants]*xamysql.Conn
		var pg [MaxParticipants]*xapg.Conn
		for i := range n {
			var err error
			switch p := s.parts[i]; {
			case i == 1:
				pg[i], err = first.Enlist(ctx, tx)
			case p.myRM != nil:
				my[i], err = p.myRM.Enlist(ctx, tx)
			default:
				pg[i], err = p.pgRM.Enlist(ctx, tx)
			}
			if err != nil {
				return err
			}
		}
		return parallel(n, func(i int) error {
			if my[i] != nil {
				_, err := my[i].ExecContext(ctx, myUpdate, amount(i, n), row)
				return err
			}
			_, err := pg[i].Exec(ctx, pgUpdate, amount(i, n), row)
			return err
		})
	})
	return err
}

// Measure runs mode m with workers concurrent workers for d (after a
// warm-up of d/5) and returns its figures: the transfers that completed
// within the window, and the CPU this process spent in it.
func (s *Setup) Measure(ctx context.Context, m Mode, workers int, d time.Duration) Stats {
	type done struct {
		at  time.Time
		lat time.Duration
		err bool
	}
	start := time.Now()
	// The window opens at open and the workers stop at stop (nanoseconds
	// since start), each set when it comes; inWindow counts the transfers
	// that ended in the window.
	var open, stop, inWindow atomic.Int64
	open.Store(math.MaxInt64)
	stop.Store(math.MaxInt64)
	var mu sync.Mutex
	var all []done
	var wg, warm sync.WaitGroup
	warm.Add(workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			mine := make([]done, 0, 1024)
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.Sub(start) >= time.Duration(stop.Load()) || ctx.Err() != nil {
					break
				}
				err := s.Transfer(ctx, m, w, i)
				t1 := time.Now()
				mine = append(mine, done{at: t1, lat: t1.Sub(t0), err: err != nil})
				if t1.Sub(start) >= time.Duration(open.Load()) {
					inWindow.Add(1)
				}
				if i == 0 {
					warm.Done()
				}
			}
			if len(mine) == 0 {
				warm.Done()
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	// The warm-up: d/5, and until every worker has made a transfer (its
	// connections are made), so that the window measures the steady state.
	sleepUntil(ctx, start.Add(d/5))
	warmed := make(chan struct{})
	go func() { warm.Wait(); close(warmed) }()
	select {
	case <-warmed:
	case <-ctx.Done():
	}
	from, cpu0, srv0 := time.Now(), processCPU(), s.serversCPU(ctx)
	open.Store(int64(from.Sub(start)))
	sleepUntil(ctx, from.Add(d))
	// A window in which no transfer ended (one slower than the window, on
	// a loaded machine) measures nothing: it lasts until one ends.
	for inWindow.Load() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	to, cpu1, srv1 := time.Now(), processCPU(), s.serversCPU(ctx)
	stop.Store(int64(to.Sub(start)))
	wg.Wait()
	st := Stats{Mode: m, Workers: workers, Elapsed: to.Sub(from), Participants: s.participants()}
	lat := make([]time.Duration, 0, len(all))
	for _, x := range all {
		if x.at.Before(from) || x.at.After(to) {
			continue
		}
		if x.err {
			st.Errors++
			continue
		}
		lat = append(lat, x.lat)
	}
	st.Ops = len(lat)
	if st.Elapsed > 0 {
		st.TPS = float64(st.Ops) / st.Elapsed.Seconds()
	}
	st.MySQLCPU, st.PostgresCPU = -1, -1
	if st.Ops > 0 {
		n := time.Duration(st.Ops)
		st.CPU = (cpu1 - cpu0) / n
		if srv0[0] >= 0 && srv1[0] >= 0 {
			st.MySQLCPU = (srv1[0] - srv0[0]) / n
		}
		if srv0[1] >= 0 && srv1[1] >= 0 {
			st.PostgresCPU = (srv1[1] - srv0[1]) / n
		}
	}
	st.P50, st.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return st
}

func sleepUntil(ctx context.Context, t time.Time) {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// serversCPU returns the CPU time so far of the MySQL server and of the
// PostgreSQL server (all their processes), -1 for one that does not run on
// this machine. Servers of the extra participants are the same servers.
func (s *Setup) serversCPU(ctx context.Context) [2]time.Duration {
	s.pidOnce.Do(func() {
		s.myPID = servercpu.MySQLPID(ctx, s.MySQL)
		s.pgPID = servercpu.PostgresPID(ctx, s.Postgres)
	})
	out := [2]time.Duration{-1, -1}
	if s.myPID > 0 {
		out[0] = servercpu.Process(s.myPID)
	}
	if s.pgPID > 0 {
		out[1] = servercpu.Tree(s.pgPID)
	}
	return out
}

// processCPU returns this process's CPU time so far: user and system, of
// every thread.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

// Balance returns the sum of balances in the MySQL databases and in the
// PostgreSQL databases, for checking that the modes moved money without
// losing any.
func (s *Setup) Balance(ctx context.Context) (mysqlSum, pgSum int64, err error) {
	for _, p := range s.parts {
		var v int64
		if p.my != nil {
			err = p.my.QueryRowContext(ctx, "SELECT COALESCE(SUM(balance),0) FROM accounts").Scan(&v)
			mysqlSum += v
		} else {
			err = p.pg.QueryRow(ctx, "SELECT COALESCE(SUM(balance),0)::bigint FROM accounts").Scan(&v)
			pgSum += v
		}
		if err != nil {
			return
		}
	}
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
	return CompareModes(ctx, s, s.Modes(), workers, d, rounds)
}

// CompareModes is Compare of the given modes only.
func CompareModes(ctx context.Context, s *Setup, modes []Mode, workers int, d time.Duration, rounds int) (Comparison, error) {
	var c Comparison
	my, pg, err := s.Balance(ctx)
	if err != nil {
		return c, err
	}
	c.total = my + pg
	if rounds < 1 {
		rounds = 1
	}
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
			if c.Best[i].Mode == "" || st.TPS > c.Best[i].TPS {
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

// RoundCPURatios returns, per round, the client CPU per transfer of mode a
// over that of mode b in the same round (0 when b has no figure).
func (c Comparison) RoundCPURatios(a, b Mode) []float64 {
	rs := make([]float64, len(c.Rounds))
	for i, round := range c.Rounds {
		var ca, cb time.Duration
		for _, st := range round {
			switch st.Mode {
			case a:
				ca = st.CPU
			case b:
				cb = st.CPU
			}
		}
		if cb > 0 {
			rs[i] = float64(ca) / float64(cb)
		}
	}
	return rs
}

// Median returns the median of rs (0 for none).
func Median(rs []float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	s := append([]float64(nil), rs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
// losing any: every transfer, of every mode, debits and credits alike.
func (c Comparison) CheckBalances(ctx context.Context, s *Setup) error {
	if err := s.AsyncMgr.Wait(ctx); err != nil {
		return err
	}
	my, pg, err := s.Balance(ctx)
	if err != nil {
		return err
	}
	if my+pg != c.total {
		return fmt.Errorf("bench: balance over the databases went from %d to %d: a transfer was half-applied", c.total, my+pg)
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

// LoadAverage returns the machine's load averages over 1, 5 and 15
// minutes, as /proc/loadavg (and uptime) print them; "" if unknown.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
