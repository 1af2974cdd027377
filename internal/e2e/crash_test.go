package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// worker is a coordinator child process (this test binary as
// bank.RunWorker).
type worker struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	at    []time.Time // when each line arrived
	done  chan struct{}
	err   error
	errb  strings.Builder
}

func (b *bankEnv) startWorker(cfg bank.WorkerConfig) *worker {
	b.t.Helper()
	cfg.MySQLDSN, cfg.PGDSN = b.my.DSN(), b.pg.DSN()
	switch {
	case cfg.LogKind == "" && b.logKind != "":
		// The test's log is a shared one (XA_E2E_LOG).
		b.createLog()
		cfg.LogKind, cfg.LogDSN, cfg.LeaseTTL, cfg.LeaseWait = b.logKind, b.logDSN, logLease, time.Minute
	case cfg.LogKind == "":
		b.createLog()
		cfg.LogDir = b.logDir
	}
	if cfg.Accounts == 0 {
		cfg.Accounts = b.accounts
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = b.timeout
	}
	cfg.Phase2Attempts, cfg.Phase2Timeout = testPhase2Attempts, testPhase2Timeout
	spec, err := json.Marshal(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	w := &worker{t: b.t, done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0], "-test.run=^$")
	w.cmd.Env = append(append(os.Environ(), b.env...), workerEnv+"="+string(spec))
	w.cmd.Stderr = &w.errb
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.at = append(w.at, time.Now())
			w.mu.Unlock()
		}
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	return w
}

// kill sends SIGKILL.
func (w *worker) kill() { w.cmd.Process.Kill() } //nolint:errcheck

// wait waits for the process to end and reports whether SIGKILL ended it.
func (w *worker) wait() (killed bool) {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(2 * time.Minute):
		w.kill()
		<-w.done
		w.t.Fatalf("worker did not finish; stderr:\n%s", w.errb.String())
	}
	var ee *exec.ExitError
	if errors.As(w.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	if w.err != nil {
		w.t.Fatalf("worker failed: %v\n%s", w.err, w.errb.String())
	}
	return false
}

// reported returns the global ids the worker said were committed, and the
// count of lines of each kind.
func (w *worker) reported() (committed []string, counts map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts = map[string]int{}
	for _, l := range w.lines {
		kind, rest, _ := strings.Cut(l, " ")
		id, _, _ := strings.Cut(rest, " ")
		counts[kind]++
		if kind == "committed" || kind == "pending" {
			committed = append(committed, id)
		}
	}
	return committed, counts
}

// TestCrashAtEveryStep kills the coordinator with SIGKILL at each step of
// the protocol of a two-branch transfer and recovers: every branch ends as
// the decision says — rolled back when no commit was durable, committed
// when it was.
func TestCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		crash     string
		last      bool // PostgreSQL is the last resource
		committed bool // the transfer must be committed after recovery
	}{
		{"prepare:1", false, false}, // one of two branches prepared
		{"prepare:2", false, false}, // both prepared, no decision
		{"log:1", false, true},      // decision durable, no branch told
		{"commit:1", false, true},   // one of two committed
		{"commit:2", false, true},   // both committed, record not yet forgotten
		{"prepare:1", true, false},  // MySQL prepared, PostgreSQL not committed
		{"last:1", true, true},      // PostgreSQL committed with the decision, MySQL not told
		{"commit:1", true, true},    // MySQL committed too, decision row not yet pruned
	} {
		name := strings.ReplaceAll(tc.crash, ":", "-")
		if tc.last {
			name = "last-resource-" + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 2)
			w := b.startWorker(bank.WorkerConfig{Node: b.node, Workers: 1, Transfers: 1, Crash: tc.crash, Seed: 3, LastResource: tc.last})
			if !w.wait() {
				t.Fatalf("the worker was not killed at %s", tc.crash)
			}
			if committed, _ := w.reported(); len(committed) > 0 {
				t.Fatalf("the worker reported %v before its crash point", committed)
			}
			rep := b.recoverAll(2*time.Second + 500*time.Millisecond)
			st := b.check(nil)
			n := len(st.MySQLLedger)
			if tc.committed && n != 1 || !tc.committed && n != 0 {
				t.Fatalf("after a crash at %s and recovery, %d transfers are committed; want committed=%v", tc.crash, n, tc.committed)
			}
			t.Logf("crash at %s: recovery resolved %d branch(es), forgot %d record(s)", tc.crash, countDone(rep), len(rep.Forgotten))
		})
	}
}

// TestRandomKills runs the bank workload in a coordinator process and
// kills it with SIGKILL at a random moment, recovers, checks the
// invariants, and does it again: 20 times here, XA_KILLS=n times for a
// longer run.
func TestRandomKills(t *testing.T) {
	t.Parallel()
	kills := 20
	if s := os.Getenv("XA_KILLS"); s != "" {
		var err error
		if kills, err = strconv.Atoi(s); err != nil {
			t.Fatalf("XA_KILLS=%q", s)
		}
	}
	b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 10)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var committed []string
	totals := map[string]int{}
	for i := 0; i < kills; i++ {
		// Every other run with PostgreSQL as the last resource.
		w := b.startWorker(bank.WorkerConfig{Node: b.node, Workers: 6, Seed: uint64(i), Timeout: time.Second, LastResource: i%2 == 1})
		// Let it get going, then kill it at a random moment.
		deadline := time.Now().Add(30 * time.Second)
		for {
			c, _ := w.reported()
			if len(c) >= 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(r.IntN(400)) * time.Millisecond)
		w.kill()
		if !w.wait() {
			t.Fatalf("kill %d: the worker exited on its own", i)
		}
		c, counts := w.reported()
		committed = append(committed, c...)
		for k, v := range counts {
			totals[k] += v
		}
		rep := b.recoverAll(1500 * time.Millisecond)
		totals["recovered"] += countDone(rep)
		b.check(committed)
	}
	t.Logf("%d kills survived: %d transfers reported committed (all present), %d aborted, %d unknown, %d branches resolved by recovery",
		kills, len(committed), totals["aborted"], totals["unknown"], totals["recovered"])
	if totals["recovered"] == 0 {
		t.Error("no kill ever left a branch in doubt: the test did not test recovery")
	}
}

func countDone(rep recovery.Report) int {
	n := 0
	for _, b := range rep.Branches {
		if b.Done {
			n++
		}
	}
	return n
}

// TestServerRestartsWithPreparedBranches leaves branches prepared (some
// with a durable commit decision, some without), then stops one server
// cleanly and kills the other with SIGKILL, restarts both, and recovers.
func TestServerRestartsWithPreparedBranches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		killMySQL, killPG bool
	}{
		{"stop-mariadb-kill-postgres", false, true},
		{"kill-mariadb-stop-postgres", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mySrv, pgSrv := dbtest.NewMySQLServer(t), dbtest.NewPostgresServer(t)
			b := newBank(t, mySrv.CreateDB(t), pgSrv.CreateDB(t), 4)
			// One transfer not decided (crash after both prepared), then
			// one decided (crash after the log write). In that order:
			// each coordinator recovers at start-up, which would commit
			// a decided leftover, and leaves an undecided young one be.
			for i, crash := range []string{"prepare:2", "log:1"} {
				// Disjoint rows: the first transfer's prepared branches
				// keep their locks.
				fixed := &bank.Transfer{From: 2 * i, To: 2*i + 1, Amount: 10, ToPostgres: true}
				w := b.startWorker(bank.WorkerConfig{Node: b.node, Workers: 1, Transfers: 1, Crash: crash, Fixed: fixed})
				if !w.wait() {
					t.Fatalf("worker not killed at %s", crash)
				}
			}
			st, err := bank.Read(context.Background(), b.my.DSN(), b.pg.DSN(), b.node)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.MySQLPrepared) != 2 || len(st.PGPrepared) != 2 {
				t.Fatalf("want 2 prepared branches on each side before the restart, got %v / %v", st.MySQLPrepared, st.PGPrepared)
			}
			for srv, kill := range map[*dbtest.Server]bool{mySrv: tc.killMySQL, pgSrv: tc.killPG} {
				if kill {
					srv.Kill(t)
				} else {
					srv.Stop(t)
				}
				srv.Start(t)
			}
			b.recoverAll(2500 * time.Millisecond)
			st = b.check(nil)
			if len(st.MySQLLedger) != 1 {
				t.Fatalf("%d transfers committed after restarts and recovery; want exactly the decided one", len(st.MySQLLedger))
			}
		})
	}
}

// TestRestartOnNewEmptyLog: the coordinator dies right after its commit
// decision is durable, and comes back pointed at a new, empty decision log
// (a deleted directory, a mistyped path, a fresh volume). Before logs had
// identities, its start-up recovery found no record, waited out the grace
// period and rolled back the committed transaction. Now the branches name
// the first log: the new one's recovery reports them as another log's and
// leaves them prepared, however old; recovery with the right log commits
// them.
func TestRestartOnNewEmptyLog(t *testing.T) {
	t.Parallel()
	b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 2)
	if b.logKind != "" {
		// A node has one log in the shared tables: a new empty one is
		// refused (sqllog TestOpenNeverCreates), not a scenario.
		t.Skip("a shared log cannot be made anew for its node")
	}
	w := b.startWorker(bank.WorkerConfig{Node: b.node, Workers: 1, Transfers: 1, Crash: "log:1", Seed: 5})
	if !w.wait() {
		t.Fatal("the worker was not killed after its decision")
	}
	ctx := context.Background()

	// The restarted coordinator, on a new empty log of the same node.
	ident, err := xa.NewLogIdentity(b.node, b.timeout, b.grace(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := filelog.Create(t.TempDir()+"/new-log", ident, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	my, pg := b.rms()
	if _, err := xa.NewManager(xa.Config{Node: b.node, Log: fresh, Timeout: b.timeout,
		Phase2Attempts: testPhase2Attempts, Phase2Timeout: testPhase2Timeout}); err != nil {
		t.Fatal(err)
	}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: fresh})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(sc.Grace() + time.Second) // wait out the grace period
	for pass := 0; pass < 2; pass++ {
		rep, err := sc.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ours := 0
		for _, br := range rep.Branches {
			if br.ID.Node != b.node {
				continue
			}
			ours++
			if br.Verdict != recovery.OtherLog || br.Done || !strings.Contains(br.Reason, "belongs to decision log") {
				t.Fatalf("pass %d: %s verdict %v done %v (%s); want left alone as another log's", pass, br.Prepared.XID, br.Verdict, br.Done, br.Reason)
			}
			t.Logf("new log's scan: %s %s: %s", br.Participant, br.Prepared.XID, br.Reason)
		}
		if ours != 2 || rep.InDoubt() < 2 || len(rep.Aborted) != 0 {
			t.Fatalf("pass %d: %d branches of ours, %d in doubt, %d aborts recorded; want 2, 2, 0", pass, ours, rep.InDoubt(), len(rep.Aborted))
		}
	}
	st, err := bank.Read(ctx, b.my.DSN(), b.pg.DSN(), b.node)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.MySQLLedger)+len(st.PGLedger) != 0 {
		t.Fatalf("committed before recovery: %v %v", st.MySQLLedger, st.PGLedger)
	}
	// With the right log, recovery commits the transaction.
	b.recoverAll(0)
	st = b.check(nil)
	if len(st.MySQLLedger) != 1 || len(st.PGLedger) != 1 {
		t.Logf("ledgers: %v %v", st.MySQLLedger, st.PGLedger)
		t.Fatalf("after recovery with the coordinator's own log: %d and %d ledger rows, want 1 and 1", len(st.MySQLLedger), len(st.PGLedger))
	}
}
