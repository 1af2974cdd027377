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
	"sync/atomic"
	"testing"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
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
}

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
	log, err := filelog.Create(b.logDir, ident, filelog.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		b.t.Fatal(err)
	}
	b.created = true
}

// openLog opens the test's decision log, creating it the first time.
func (b *bankEnv) openLog() *filelog.Log {
	b.t.Helper()
	b.createLog()
	log, err := filelog.Open(b.logDir, filelog.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	return log
}

var nodeSeq atomic.Int64

func newBank(t *testing.T, my, pg *dbtest.DB, accounts int) *bankEnv {
	t.Helper()
	ctx := context.Background()
	if err := bank.Setup(ctx, my.DSN(), pg.DSN(), accounts); err != nil {
		t.Fatal(err)
	}
	node := fmt.Sprintf("e2e%d-%d", os.Getpid(), nodeSeq.Add(1))
	return &bankEnv{t: t, my: my, pg: pg, accounts: accounts, logDir: t.TempDir() + "/log", node: node, timeout: 2 * time.Second}
}

// rms opens both resource managers with the bank's participant names;
// with last, PostgreSQL is the last resource (its decision table is read
// by recovery either way).
func (b *bankEnv) rms(last ...bool) (*xamysql.RM, *xapg.RM) {
	b.t.Helper()
	ctx := context.Background()
	my, err := xamysql.Open(ctx, xamysql.Config{Name: bank.MySQLName, DSN: b.my.DSN(), MaxConns: 64})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { my.Close() })
	cfg := xapg.Config{Name: bank.PostgresName, DSN: b.pg.DSN(), MaxConns: 64}
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
func (b *bankEnv) manager(timeout time.Duration) (*xa.Manager, *filelog.Log) {
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
