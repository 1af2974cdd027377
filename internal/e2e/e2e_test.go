// Package e2e holds end-to-end tests of the transaction manager against
// real MariaDB and PostgreSQL servers: the bank invariant, the
// cross-database deadlock broken by the global timeout, and crash and
// fault tests with a coordinator process killed by SIGKILL. Invariants are
// checked with direct SQL, never by asking the transaction manager.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// workerEnv, when set in the environment, makes the test binary act as a
// coordinator process (bank.RunWorker) configured by its JSON value: the
// crash tests start it, kill it and recover after it.
const workerEnv = "XA_E2E_WORKER"

// workerLogEnv, when set (to a slog level: warn, info, debug), makes the
// worker log on its stderr, which a failing test prints.
const workerLogEnv = "XA_E2E_WORKER_LOG"

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		var cfg bank.WorkerConfig
		if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, "worker config:", err)
			os.Exit(2)
		}
		if lvl := os.Getenv(workerLogEnv); lvl != "" {
			var l slog.Level
			if err := l.UnmarshalText([]byte(lvl)); err == nil {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
			}
		}
		if err := bank.RunWorker(context.Background(), cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dbtest.Main(m)
}

// bankEnv is a pair of databases with the bank tables, and the node id
// of the test's transaction manager: unique, because tests share the
// MariaDB server, whose XA RECOVER lists every test's branches, and a
// scanner resolves every branch of its node.
type bankEnv struct {
	t        *testing.T
	my, pg   *dbtest.DB
	accounts int
	logDir   string
	node     string
	// timeout is the global transaction timeout the decision log is
	// created for (default 2 s): managers may use up to it.
	timeout time.Duration
	created bool
	// env is more environment for the coordinator processes.
	env []string
	// logKind is the decision log's kind: "" (the embedded log in
	// logDir), or postgres or mysql (recovery/sqllog in the database
	// logDSN): XA_E2E_LOG picks it, so that every test here can run
	// against the shared log too.
	logKind, logDSN string
}

// e2eLog is the test's decision log, of either kind.
type e2eLog interface {
	xa.RecoveryLog
	Close() error
	// SyncCount counts the log's syncs (filelog) or commits (sqllog).
	SyncCount() int64
}

// logLease is the shared log's lease TTL in these tests: a killed
// coordinator's log is free again this long after its death.
const logLease = time.Second

// Phase-2 settings of the tests' managers: short, so that the grace period
// (timeout + phase-2 budget + margin) stays a few seconds.
const (
	testPhase2Attempts = 3
	testPhase2Timeout  = time.Second
)

// grace returns the presumed-abort grace of the test's decision log.
func (b *bankEnv) grace() time.Duration {
	return b.timeout + xa.Phase2Budget(testPhase2Attempts, testPhase2Timeout, xa.DefaultRetryBackoff) + 500*time.Millisecond
}

// createLog creates the test's decision log (once): node b.node, timeout
// b.timeout, grace b.grace().
func (b *bankEnv) createLog() {
	b.t.Helper()
	if b.created {
		return
	}
	ident, err := xa.NewLogIdentity(b.node, b.timeout, b.grace(), time.Now())
	if err != nil {
		b.t.Fatal(err)
	}
	if b.logKind != "" {
		s, closeDB := b.sqlStore()
		defer closeDB()
		if _, err := s.CreateLog(context.Background(), ident); err != nil {
			b.t.Fatal(err)
		}
		b.created = true
		return
	}
	log, err := filelog.Create(b.logDir, ident, filelog.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		b.t.Fatal(err)
	}
	b.created = true
}

// sqlStore opens the shared log's tables.
func (b *bankEnv) sqlStore() (*sqllog.Store, func()) {
	b.t.Helper()
	db, d, err := logdb.Open(b.logKind, b.logDSN, logdb.Options{Idle: 3 * time.Second})
	if err != nil {
		b.t.Fatal(err)
	}
	s, err := sqllog.NewStore(db, d, sqllog.Options{LeaseTTL: logLease, LeaseWait: time.Minute})
	if err != nil {
		b.t.Fatal(err)
	}
	return s, func() { db.Close() }
}

// openLog opens the test's decision log as its node's process, creating
// it the first time.
func (b *bankEnv) openLog() e2eLog {
	b.t.Helper()
	b.createLog()
	if b.logKind != "" {
		s, closeDB := b.sqlStore()
		l, err := s.Open(context.Background(), b.node)
		if err != nil {
			closeDB()
			b.t.Fatal(err)
		}
		return &sqlE2ELog{Log: l, closeDB: closeDB}
	}
	log, err := filelog.Open(b.logDir, filelog.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	return log
}

// sqlE2ELog is a shared log with its database, closed together (twice is
// fine).
type sqlE2ELog struct {
	*sqllog.Log
	closeDB func()
	once    sync.Once
}

func (l *sqlE2ELog) Close() error {
	var err error
	l.once.Do(func() { err = l.Log.Close(); l.closeDB() })
	return err
}

var nodeSeq atomic.Int64

func newBank(t *testing.T, my, pg *dbtest.DB, accounts int) *bankEnv {
	t.Helper()
	ctx := context.Background()
	if err := bank.Setup(ctx, my.DSN(), pg.DSN(), accounts); err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("e2e%d-%d", os.Getpid(), nodeSeq.Add(1))
	b := &bankEnv{t: t, my: my, pg: pg, accounts: accounts, logDir: t.TempDir() + "/log", node: node, timeout: 2 * time.Second}
	switch k := os.Getenv("XA_E2E_LOG"); k {
	case "", "file":
	case logdb.Postgres:
		b.logKind, b.logDSN = k, dbtest.PostgresDB(t).DSN()
	case logdb.MySQL:
		b.logKind, b.logDSN = k, dbtest.MySQLDB(t).DSN()
	default:
		t.Fatalf("XA_E2E_LOG=%q: want file, postgres or mysql", k)
	}
	return b
}

// rms opens both resource managers with the bank's participant names;
// with last, PostgreSQL is the last resource (its decision table is read
// by recovery either way).
func (b *bankEnv) rms(last ...bool) (*xamysql.RM, *xapg.RM) {
	b.t.Helper()
	ctx := context.Background()
	my, err := xamysql.Open(ctx, xamysql.Config{Name: bank.MySQLName, DSN: b.my.DSN(), MaxConns: 64, Init: true})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { my.Close() })
	cfg := xapg.Config{Name: bank.PostgresName, DSN: b.pg.DSN(), MaxConns: 64, Init: true}
	if len(last) > 0 && last[0] {
		cfg.DecisionTable = bank.DecisionTable
	}
	pg, err := xapg.Open(ctx, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(pg.Close)
	return my, pg
}

// manager opens the decision log and a Manager on it for node b.node. The
// log is closed when t ends or when the caller does (Close twice is fine).
func (b *bankEnv) manager(timeout time.Duration) (*xa.Manager, e2eLog) {
	b.t.Helper()
	log := b.openLog()
	b.t.Cleanup(func() { log.Close() })
	mgr, err := xa.NewManager(xa.Config{Node: b.node, Log: log, Timeout: timeout,
		Phase2Attempts: testPhase2Attempts, Phase2Timeout: testPhase2Timeout})
	if err != nil {
		b.t.Fatal(err)
	}
	return mgr, log
}

// recoverAll runs recovery until nothing of node is in doubt and every
// record is forgotten. grace is short because the coordinator is known to
// be dead.
func (b *bankEnv) recoverAll(grace time.Duration) recovery.Report {
	b.t.Helper()
	ctx := context.Background()
	log := b.openLog()
	defer log.Close()
	my, pg := b.rms(true)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Nodes: []string{b.node}, Grace: grace})
	if err != nil {
		b.t.Fatal(err)
	}
	var all recovery.Report
	deadline := time.Now().Add(grace + time.Minute)
	for {
		rep, err := sc.Scan(ctx)
		if err != nil {
			b.t.Fatal(err)
		}
		all.Branches = append(all.Branches, rep.Branches...)
		all.Forgotten = append(all.Forgotten, rep.Forgotten...)
		recs, err := log.Commits(ctx)
		if err != nil {
			b.t.Fatal(err)
		}
		decs, err := pg.Decisions(ctx)
		if err != nil {
			b.t.Fatal(err)
		}
		if rep.InDoubt() == 0 && len(recs) == 0 && len(decs) == 0 && len(rep.Errors) == 0 {
			return all
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("recovery did not finish: %d in doubt, %d records, %d stored decisions, errors %v, kept %v",
				rep.InDoubt(), len(recs), len(decs), rep.Errors, rep.Kept)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check verifies the bank invariants with direct SQL; prepared branches
// count when node owns them (other tests share the MariaDB server).
func (b *bankEnv) check(committed []string) bank.State {
	b.t.Helper()
	st, err := bank.Read(context.Background(), b.my.DSN(), b.pg.DSN(), b.node)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := st.Check(b.accounts, committed); err != nil {
		b.t.Fatal(err)
	}
	return st
}
