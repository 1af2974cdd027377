package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xadb/xa/internal/cli"
	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/sqllog"
)

// sharedLease is the lease TTL of the shared-log tests' nodes: a dead
// node's log is taken over about this long after its death.
const sharedLease = 2 * time.Second

// fleet is three coordinator processes (nodes) of one service running the
// bank workload, their decision logs in one log database.
type fleet struct {
	t      *testing.T
	b      *bankEnv
	kind   string
	srv    *dbtest.Server // the log database's server: private, so it can be killed
	logDSN string
	store  *sqllog.Store
	nodes  []string
	skew   map[string]time.Duration
	cfg    string // xactl's configuration (participants; node by flag)

	mu    sync.Mutex
	procs map[string]*worker // the current process of each node
	gone  []*worker          // every process that ended (killed), for its lines
	// down says when a process (by pid) was dead or paused: a takeover of
	// a lease it held must fall in one of those windows.
	down  map[int][]window
	kills int
}

// window is a time a process was dead or paused: from, until (zero: still).
type window struct{ from, until time.Time }

func newFleet(t *testing.T, kind string) *fleet {
	t.Helper()
	b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 30)
	b.env = []string{workerLogEnv + "=info"}
	f := &fleet{t: t, b: b, kind: kind, procs: map[string]*worker{}, down: map[int][]window{}, skew: map[string]time.Duration{}}
	if kind == logdb.Postgres {
		f.srv = dbtest.NewPostgresServer(t)
	} else {
		f.srv = dbtest.NewMySQLServer(t)
	}
	f.logDSN = f.srv.CreateDB(t).DSN()
	db, d, err := logdb.Open(kind, f.logDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if f.store, err = sqllog.NewStore(db, d, sqllog.Options{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		f.nodes = append(f.nodes, fmt.Sprintf("%s-n%d", b.node, i))
	}
	// The third node's clock is three minutes behind: its transactions
	// must commit (the log checks deadlines on its own clock) and its log
	// be taken over like the others'.
	f.skew[f.nodes[2]] = -3 * time.Minute
	var c strings.Builder
	fmt.Fprintf(&c, "log:\n  kind: %s\n  dsn: %s\n  lease_ttl: %s\nparticipants:\n", kind, strconv.Quote(f.logDSN), sharedLease)
	fmt.Fprintf(&c, "  - name: %s\n    driver: mysql\n    dsn: %s\n", bank.MySQLName, strconv.Quote(b.my.DSN()))
	fmt.Fprintf(&c, "  - name: %s\n    driver: postgres\n    dsn: %s\n", bank.PostgresName, strconv.Quote(b.pg.DSN()))
	f.cfg = filepath.Join(t.TempDir(), "xactl.yaml")
	if err := os.WriteFile(f.cfg, []byte(c.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.nodes {
		f.xactl(0, "--node", n, "log", "init", "--timeout", b.timeout.String(), "--grace", b.grace().String())
	}
	return f
}

// xactl runs the operator's tool in process, as the operator would, and
// fails the test unless it exits with one of codes.
func (f *fleet) xactl(code int, args ...string) (int, string) {
	f.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := cli.MainContext(ctx, append([]string{"--config", f.cfg}, args...), &out, &errb)
	if code >= 0 && got != code {
		f.t.Fatalf("xactl %s: exit %d, want %d\n%s\n%s", strings.Join(args, " "), got, code, out.String(), errb.String())
	}
	return got, out.String() + errb.String()
}

// start starts node's coordinator process, logging warnings (and its
// lease's and takeovers' events) on its stderr.
func (f *fleet) start(node string) *worker {
	f.t.Helper()
	w := f.b.startWorker(bank.WorkerConfig{Node: node, Workers: 3, Seed: uint64(time.Now().UnixNano()), Timeout: f.b.timeout,
		LogKind: f.kind, LogDSN: f.logDSN, LeaseTTL: sharedLease, LeaseWait: 2 * time.Minute, Takeover: true,
		ClockSkew: f.skew[node], RecoveryInterval: time.Second})
	f.mu.Lock()
	f.procs[node] = w
	f.mu.Unlock()
	return w
}

// kill kills node's process with SIGKILL and waits for it to end.
func (f *fleet) kill(node string) *worker {
	f.t.Helper()
	f.mu.Lock()
	w := f.procs[node]
	f.down[w.cmd.Process.Pid] = append(f.down[w.cmd.Process.Pid], window{from: time.Now()})
	f.kills++
	f.mu.Unlock()
	w.kill()
	if !w.wait() {
		f.t.Fatalf("%s's process exited on its own:\n%s", node, w.errb.String())
	}
	f.mu.Lock()
	f.gone = append(f.gone, w)
	f.mu.Unlock()
	return w
}

// lines returns every line every process of the fleet wrote, with when.
func (f *fleet) lines() (out []string, at []time.Time) {
	f.mu.Lock()
	ws := append([]*worker{}, f.gone...)
	for _, w := range f.procs {
		if !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	f.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		out = append(out, w.lines...)
		at = append(at, w.at...)
		w.mu.Unlock()
	}
	return out, at
}

// committed returns the global ids the processes reported committed.
func (f *fleet) committed() []string {
	var ids []string
	lines, _ := f.lines()
	for _, l := range lines {
		kind, rest, _ := strings.Cut(l, " ")
		if kind == "committed" || kind == "pending" {
			id, _, _ := strings.Cut(rest, " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// count counts the lines that begin with prefix and contain sub.
func (f *fleet) count(prefix, sub string) int {
	n := 0
	lines, _ := f.lines()
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// waitLine waits until a process wrote a line with prefix and sub after
// since, and returns it with when it came.
func (f *fleet) waitLine(prefix, sub string, since time.Time, limit time.Duration) (string, time.Time) {
	f.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		lines, at := f.lines()
		for i, l := range lines {
			if at[i].After(since) && strings.HasPrefix(l, prefix) && strings.Contains(l, sub) {
				return l, at[i]
			}
		}
		if time.Now().After(deadline) {
			f.dump()
			f.t.Fatalf("no line %q ... %q within %v", prefix, sub, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitEvent waits for a lease event of node's log, action, taking the
// lease from the process pid, after since; it returns when it happened
// (the database's clock).
func (f *fleet) waitEvent(node, action string, pid int, since time.Time, limit time.Duration) time.Time {
	f.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		evs, err := f.store.Events(context.Background(), node, 20)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, e := range evs {
			if e.Action == action && holderPid(e.Previous) == pid && e.At.After(since.Add(-time.Second)) {
				return e.At
			}
		}
		if time.Now().After(deadline) {
			f.dump()
			f.t.Fatalf("no %s of %s's log from process %d within %v", action, node, pid, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dump logs the lease events and the tails of the processes' stderr.
func (f *fleet) dump() {
	evs, _ := f.store.Events(context.Background(), "", 30)
	for _, e := range evs {
		f.t.Logf("event %s %s %s epoch %d by %s (previous %s): %s", e.At.Format("15:04:05.000"), e.Node, e.Action, e.Epoch, e.Holder, e.Previous, e.Reason)
	}
	logs, _ := f.store.Logs(context.Background())
	for _, l := range logs {
		f.t.Logf("log %s: %s by %s epoch %d, %d commits, %d aborts", l.Identity.Node, l.State, l.Holder, l.Epoch, l.Commits, l.Aborts)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, w := range f.procs {
		s := w.errb.String()
		if len(s) > 6000 {
			s = s[len(s)-6000:]
		}
		f.t.Logf("%s's stderr ends with:\n%s", n, s)
	}
}

// progress waits until the fleet reported n more transfers committed.
func (f *fleet) progress(n int) {
	f.t.Helper()
	start := len(f.committed())
	deadline := time.Now().Add(time.Minute)
	for len(f.committed()) < start+n {
		if time.Now().After(deadline) {
			f.t.Fatalf("the fleet committed %d transfers in a minute, want %d", len(f.committed())-start, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holderPid is the process id in a holder name (sqllog.NewHolder).
func holderPid(h string) int {
	parts := strings.Split(h, "/")
	if len(parts) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}

// checkTakeovers fails the test for every takeover of a lease whose
// holder was alive and running at the time: a live node's transactions are
// never taken over.
func (f *fleet) checkTakeovers() int {
	f.t.Helper()
	evs, err := f.store.Events(context.Background(), "", 0)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range evs {
		if e.Action != "takeover" || e.Previous == "" {
			continue
		}
		n++
		pid := holderPid(e.Previous)
		// The database's clock and this machine's are one clock here;
		// half a second of slack for the event's stamp.
		const slack = 500 * time.Millisecond
		down := false
		for _, w := range f.down[pid] {
			if !e.At.Before(w.from.Add(-slack)) && (w.until.IsZero() || !e.At.After(w.until.Add(slack))) {
				down = true
			}
		}
		if !down {
			f.t.Errorf("%s's log was taken over at %s from %s (epoch %d), a process that was alive and running then (down %v): %s",
				e.Node, e.At.Format(time.RFC3339Nano), e.Previous, e.PreviousEpoch, f.down[pid], e.Reason)
		}
	}
	return n
}

// finish kills every process, recovers every log with xactl recover
// --takeover (once its lease expired), and checks the bank's invariants.
func (f *fleet) finish() bank.State {
	f.t.Helper()
	for _, n := range f.nodes {
		f.kill(n)
	}
	for _, n := range f.nodes {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			code, out := f.xactl(-1, "--node", n, "recover", "--takeover", "--reason", "the test's end")
			if code == 0 {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("xactl recover --takeover of %s: exit %d\n%s", n, code, out)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	var st bank.State
	for i, n := range f.nodes {
		s, err := bank.Read(context.Background(), f.b.my.DSN(), f.b.pg.DSN(), n)
		if err != nil {
			f.t.Fatal(err)
		}
		if i == 0 {
			st = s
		}
		if len(s.MySQLPrepared)+len(s.PGPrepared) > 0 {
			st.MySQLPrepared, st.PGPrepared = append(st.MySQLPrepared, s.MySQLPrepared...), append(st.PGPrepared, s.PGPrepared...)
		}
	}
	if err := st.Check(f.b.accounts, f.committed()); err != nil {
		f.t.Fatal(err)
	}
	return st
}

// TestSharedLog is the proof of issue 14 against real servers: three
// coordinator processes of one service, their decision logs in one
// PostgreSQL database (and again in MariaDB), run the bank workload
// (transfers between MariaDB and PostgreSQL), the third with its clock
// three minutes behind.
//
//  1. One is killed with SIGKILL: a survivor takes its log over once its
//     lease has expired by the database's clock, resolves its branches at
//     once and releases it; the killed node comes back at a new epoch.
//  2. One is stopped with SIGSTOP past its lease and resumed: a survivor
//     took its log over meanwhile; its decision writes are refused by the
//     database (it reports aborted, or unknown), it takes its log back at
//     a new epoch and goes on.
//  3. The log database is killed with SIGKILL mid-run and restarted: the
//     nodes report unknown outcomes meanwhile, renew their leases after
//     the restart, and nobody takes a live node's log over.
//  4. Random nodes are killed with SIGKILL and restarted, 20 times
//     (XA_SHARED_KILLS=n for more).
//
// At the end every process is killed and xactl recover --takeover
// recovers every log; then the bank's invariants hold (total balance, no
// transfer on one side only, every transfer reported committed in both
// ledgers, nothing prepared), and no takeover ever took a lease from a
// process that was alive and running. The takeover times are printed.
func TestSharedLog(t *testing.T) {
	kills := 20
	if s := os.Getenv("XA_SHARED_KILLS"); s != "" {
		var err error
		if kills, err = strconv.Atoi(s); err != nil {
			t.Fatalf("XA_SHARED_KILLS=%q", s)
		}
	}
	for _, kind := range []string{logdb.Postgres, logdb.MySQL} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, kind)
			begun := time.Now()
			for _, n := range f.nodes {
				f.start(n)
			}
			for _, n := range f.nodes {
				f.waitLine("lease "+n+" ", "", begun, time.Minute) // each holds its log
			}
			f.progress(20)
			if n := f.count("committed", ""); n == 0 {
				t.Fatal("nothing committed")
			}

			// 1. SIGKILL: a survivor takes over after the lease expires.
			dead := f.nodes[0]
			killed := time.Now()
			f.kill(dead)
			line, at := f.waitLine("takeover "+dead+" ", "released=true", killed, time.Minute)
			t.Logf("1. %s killed with SIGKILL; its log recovered by a survivor and released %v later: %s", dead, at.Sub(killed).Round(time.Millisecond), line)
			restarted := time.Now()
			f.start(dead)
			f.waitLine("lease "+dead+" ", "", restarted, time.Minute) // back, at a new epoch
			f.progress(10)

			// 2. SIGSTOP past the lease, then SIGCONT.
			zombie := f.nodes[1]
			f.mu.Lock()
			zw := f.procs[zombie]
			f.mu.Unlock()
			before := len(zw.lines)
			stopped := time.Now()
			f.mu.Lock()
			f.down[zw.cmd.Process.Pid] = append(f.down[zw.cmd.Process.Pid], window{from: stopped})
			f.mu.Unlock()
			if err := zw.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// A survivor takes its log over while it is stopped. (Its
			// MariaDB branches stay attached to its sessions, which are
			// open: nobody can end them before it resumes, fact 6 of
			// docs/server-facts.md, so the takeover holds the log.)
			took := f.waitEvent(zombie, "takeover", zw.cmd.Process.Pid, stopped, time.Minute)
			t.Logf("2. %s stopped with SIGSTOP; its log taken over by a survivor %v later", zombie, took.Sub(stopped).Round(time.Millisecond))
			time.Sleep(time.Second)
			if err := zw.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			resumed := time.Now()
			f.mu.Lock()
			f.down[zw.cmd.Process.Pid][0].until = resumed // running again: no takeover from it from now on
			f.mu.Unlock()
			line, at = f.waitLine("takeover "+zombie+" ", "released=true", stopped, time.Minute)
			t.Logf("2. %s resumed %v after SIGSTOP; the survivor released its log, recovered, %v after SIGSTOP: %s", zombie,
				resumed.Sub(stopped).Round(time.Millisecond), at.Sub(stopped).Round(time.Millisecond), line)
			// It takes its log back at a new epoch and commits again.
			deadline := time.Now().Add(time.Minute)
			for {
				zw.mu.Lock()
				var fenced, committed int
				for i, l := range zw.lines[before:] {
					if zw.at[before+i].Before(resumed) {
						continue
					}
					if strings.Contains(l, "lease was taken over") {
						fenced++
					}
					if strings.HasPrefix(l, "committed ") {
						committed++
					}
				}
				zw.mu.Unlock()
				if committed > 0 {
					t.Logf("2. after SIGCONT, %s had %d decisions refused by the database (reported aborted or unknown), then committed again", zombie, fenced)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s did not commit again within a minute of SIGCONT", zombie)
				}
				time.Sleep(50 * time.Millisecond)
			}

			// 3. The log database killed mid-run.
			f.progress(10)
			unknown0 := f.count("unknown", "")
			f.srv.Kill(t)
			time.Sleep(500 * time.Millisecond)
			f.srv.Start(t)
			f.progress(10)
			t.Logf("3. the log database killed with SIGKILL and restarted: %d outcomes reported unknown meanwhile, the fleet commits again", f.count("unknown", "")-unknown0)

			// 4. Random kills.
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
			for range kills {
				time.Sleep(time.Duration(300+r.IntN(1200)) * time.Millisecond)
				n := f.nodes[r.IntN(len(f.nodes))]
				f.kill(n)
				f.start(n)
			}
			f.progress(5)
			takeovers := f.checkTakeovers()
			st := f.finish()
			f.checkTakeovers()
			lines, _ := f.lines()
			var times []string
			for _, l := range lines {
				if strings.HasPrefix(l, "takeover ") {
					for _, field := range strings.Fields(l) {
						if strings.HasPrefix(field, "expired_for=") || strings.HasPrefix(field, "resolved=") {
							times = append(times, field)
						}
					}
				}
			}
			t.Logf("%d processes killed with SIGKILL (and one stopped), %d takeovers by live nodes (expired_for / resolved: %s); %d transfers reported committed (all in both ledgers), %d aborted, %d unknown; %d ledger rows; total balance %d",
				f.kills, takeovers, strings.Join(times, " "), len(f.committed()), f.count("aborted", ""), f.count("unknown", ""), len(st.MySQLLedger), st.Total())
			if takeovers < 2 {
				t.Errorf("%d takeovers: the survivors did not take the dead nodes' logs over", takeovers)
			}
		})
	}
}
