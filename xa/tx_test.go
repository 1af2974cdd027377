package xa_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// rig is a manager over in-memory participants with injectable faults.
type rig struct {
	t      *testing.T
	log    *memrm.Log
	dbs    []*memrm.DB
	rms    []*memrm.RM
	mgr    *xa.Manager
	faults sync.Map // "op/rm" -> memrm.Fault
}

func newRig(t *testing.T, n int, cfg xa.Config) *rig {
	t.Helper()
	r := &rig{t: t}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("rm%d", i)
		db := memrm.NewDB()
		r.dbs = append(r.dbs, db)
		r.rms = append(r.rms, memrm.New(name, db, func(op memrm.Op, x xa.XID) memrm.Fault {
			if f, ok := r.faults.Load(op.String() + "/" + name); ok {
				return f.(memrm.Fault)
			}
			return memrm.OK
		}))
	}
	if cfg.Node == "" {
		cfg.Node = "test"
	}
	// The log is created by the coordinator's clock (cfg.Now), as xactl
	// log init on its machine would.
	created := time.Now()
	if cfg.Now != nil {
		created = cfg.Now()
	}
	ident, err := xa.NewLogIdentity(cfg.Node, 0, 0, created)
	if err != nil {
		t.Fatal(err)
	}
	r.log = memrm.NewLogFor(ident)
	cfg.Log = r.log
	if cfg.Phase2Timeout == 0 {
		cfg.Phase2Timeout = time.Second
	}
	cfg.RetryBackoff = time.Millisecond
	mgr, err := xa.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.mgr = mgr
	return r
}

func (r *rig) fault(op memrm.Op, rm int, f memrm.Fault) {
	r.faults.Store(op.String()+"/"+r.rms[rm].Name(), f)
}

// put writes k = v on participant rm in tx.
func (r *rig) put(tx *xa.Tx, rm, k, v int) error {
	s, err := tx.Enlist(context.Background(), r.rms[rm])
	if err != nil {
		return err
	}
	return s.(*memrm.Branch).Put(tx.Context(), k, v)
}

func (r *rig) row(rm, k int) (int, bool) { return r.dbs[rm].Get(k) }

func (r *rig) noPrepared() {
	r.t.Helper()
	for i, db := range r.dbs {
		if p := db.Prepared(); len(p) > 0 {
			r.t.Fatalf("rm%d still has prepared branches %v", i, p)
		}
	}
}

func (r *rig) records() int {
	recs, _ := r.log.Commits(context.Background())
	return len(recs)
}

func TestCommitTwoBranches(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	ctx := context.Background()
	tx, err := r.mgr.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || !res.Committed || !res.Logged || res.OnePhase || len(res.Pending) != 0 {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	if v, ok := r.row(0, 1); !ok || v != 10 {
		t.Fatalf("rm0 row = %d %v", v, ok)
	}
	if v, ok := r.row(1, 1); !ok || v != 20 {
		t.Fatalf("rm1 row = %d %v", v, ok)
	}
	if r.log.Writes != 1 || r.records() != 0 {
		t.Fatalf("log writes %d, records left %d; want 1, 0", r.log.Writes, r.records())
	}
	r.noPrepared()
	if _, err := tx.Commit(ctx); !errors.Is(err, xa.ErrTxDone) {
		t.Fatalf("second Commit = %v, want ErrTxDone", err)
	}
	if err := tx.Rollback(ctx); !errors.Is(err, xa.ErrTxDone) {
		t.Fatalf("Rollback after commit = %v, want ErrTxDone", err)
	}
}

func TestOnePhaseWhenOneBranchWorked(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	// Enlisted but idle.
	if _, err := tx.Enlist(ctx, r.rms[1]); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || !res.OnePhase || res.Logged {
		t.Fatalf("Commit = %+v, %v; want one-phase, not logged", res, err)
	}
	if r.log.Writes != 0 {
		t.Fatalf("one-phase commit wrote %d records", r.log.Writes)
	}
	if _, ok := r.row(0, 1); !ok {
		t.Fatal("row missing")
	}
}

func TestAbortVoteNamesBranch(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.fault(memrm.OpPrepare, 1, memrm.Refuse)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	res, err := tx.Commit(ctx)
	var ae *xa.AbortError
	if !errors.As(err, &ae) || ae.RM != "rm1" || !errors.Is(err, xa.ErrAborted) || !errors.Is(err, xa.ErrRolledBack) {
		t.Fatalf("Commit = %+v, %v; want AbortError by rm1", res, err)
	}
	if res.Committed {
		t.Fatal("aborted result says committed")
	}
	if _, ok := r.row(0, 1); ok {
		t.Fatal("rm0 committed a row of an aborted transaction")
	}
	r.noPrepared()
	if r.log.Writes != 0 {
		t.Fatal("an abort was logged (presumed abort logs nothing)")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after abort = %v, want nil", err)
	}
}

func TestTimeoutRollsBackIdleTransaction(t *testing.T) {
	r := newRig(t, 2, xa.Config{Timeout: 100 * time.Millisecond})
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	// The application goes away without committing; the timeout must end
	// the branches on its own.
	select {
	case <-tx.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("transaction context did not end at the timeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := r.put(tx, 0, 2, 1); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("work still accepted after the timeout")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := tx.Commit(ctx)
	if !errors.Is(err, xa.ErrAborted) || !errors.Is(err, xa.ErrTimeout) {
		t.Fatalf("Commit after timeout = %v; want abort by timeout", err)
	}
	if _, ok := r.row(0, 1); ok {
		t.Fatal("row committed after timeout")
	}
}

func TestHangingPrepareBoundedByTimeout(t *testing.T) {
	r := newRig(t, 2, xa.Config{Timeout: 300 * time.Millisecond})
	r.fault(memrm.OpPrepare, 1, memrm.Hang)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	began := time.Now()
	_, err := tx.Commit(ctx)
	if !errors.Is(err, xa.ErrAborted) {
		t.Fatalf("Commit = %v; want aborted", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("Commit took %v with a 300ms timeout", d)
	}
	r.noPrepared()
}

func TestPhase2FailureLeavesPendingAndRecord(t *testing.T) {
	r := newRig(t, 2, xa.Config{Phase2Attempts: 3})
	r.fault(memrm.OpCommit, 1, memrm.Fail)
	r.fault(memrm.OpCommitRM, 1, memrm.Fail)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	res, err := tx.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit = %v; a decided transaction must not report an error", err)
	}
	if !res.Committed || len(res.Pending) != 1 || res.Pending[0] != "rm1" {
		t.Fatalf("Result = %+v; want committed with rm1 pending", res)
	}
	if r.records() != 1 {
		t.Fatal("the decision record was forgotten while a branch is pending")
	}
	if got := r.dbs[1].Prepared(); len(got) != 1 {
		t.Fatalf("rm1 prepared = %v; want the pending branch", got)
	}
}

func TestLogFailureIsOutcomeUnknown(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.log.Kill()
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	res, err := tx.Commit(ctx)
	if !xa.OutcomeUnknown(err) || errors.Is(err, xa.ErrAborted) || res.Committed {
		t.Fatalf("Commit = %+v, %v; want outcome unknown", res, err)
	}
	// Nobody committed anything: both branches wait for recovery.
	for i := range r.dbs {
		if _, ok := r.row(i, 1); ok {
			t.Fatalf("rm%d committed without a durable decision", i)
		}
		if len(r.dbs[i].Prepared()) != 1 {
			t.Fatalf("rm%d: branch not left prepared for recovery", i)
		}
	}
}

func TestRunRollsBackOnErrorAndPanic(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	ctx := context.Background()
	boom := errors.New("boom")
	_, err := r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		r.put(tx, 0, 1, 10) //nolint:errcheck
		r.put(tx, 1, 1, 10) //nolint:errcheck
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	func() {
		defer func() {
			if p := recover(); p != "panic!" {
				t.Fatalf("recovered %v", p)
			}
		}()
		r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error { //nolint:errcheck
			r.put(tx, 0, 2, 10) //nolint:errcheck
			r.put(tx, 1, 2, 10) //nolint:errcheck
			panic("panic!")
		})
	}()
	for i := range r.dbs {
		for k := 1; k <= 2; k++ {
			if _, ok := r.row(i, k); ok {
				t.Fatalf("rm%d row %d committed", i, k)
			}
		}
	}
	r.noPrepared()
}

func TestConcurrentTransactions(t *testing.T) {
	var committed atomic.Int64
	obs := observerFunc(func(s xa.TxStats) {
		if s.Outcome == "committed" {
			committed.Add(1)
		}
	})
	r := newRig(t, 3, xa.Config{Observer: obs})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			_, err := r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
				for i := 0; i < 3; i++ {
					if err := r.put(tx, i, g, g); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}(g)
	}
	wg.Wait()
	for i := range r.dbs {
		for g := 0; g < 50; g++ {
			if v, ok := r.row(i, g); !ok || v != g {
				t.Fatalf("rm%d row %d = %d %v", i, g, v, ok)
			}
		}
	}
	if committed.Load() != 50 || r.records() != 0 {
		t.Fatalf("observer saw %d commits, %d records left", committed.Load(), r.records())
	}
}

func TestEnlistSameParticipantTwice(t *testing.T) {
	r := newRig(t, 1, xa.Config{})
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	s1, _ := tx.Enlist(ctx, r.rms[0])
	s2, _ := tx.Enlist(ctx, r.rms[0])
	if s1 != s2 {
		t.Fatal("enlisting twice gave two sessions")
	}
	impostor := memrm.New("rm0", memrm.NewDB(), nil)
	if _, err := tx.Enlist(ctx, impostor); err == nil {
		t.Fatal("two participants with one name accepted")
	}
	tx.Rollback(ctx) //nolint:errcheck
}

type observerFunc func(xa.TxStats)

func (f observerFunc) ObserveTx(s xa.TxStats) { f(s) }

func TestAsyncCommitReturnsAtTheDecision(t *testing.T) {
	r := newRig(t, 2, xa.Config{AsyncCommit: true, Phase2Attempts: 50})
	// rm1's first commits fail: phase 2 outlives Commit.
	r.fault(memrm.OpCommit, 1, memrm.Fail)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	res, err := tx.Commit(ctx)
	if err != nil || !res.Committed || !res.Logged || res.Phase2 == nil {
		t.Fatalf("Commit = %+v, %v; want committed, logged, with a Phase2 channel", res, err)
	}
	if _, ok := r.row(1, 1); ok {
		t.Fatal("rm1 committed although its commits fail")
	}
	if r.records() != 1 {
		t.Fatal("the decision record must stay while phase 2 runs")
	}
	select {
	case <-res.Phase2:
		t.Fatal("phase 2 ended while rm1 fails")
	case <-time.After(50 * time.Millisecond):
	}
	r.fault(memrm.OpCommit, 1, memrm.OK)
	select {
	case <-res.Phase2:
	case <-time.After(10 * time.Second):
		t.Fatal("phase 2 did not end")
	}
	if v, ok := r.row(1, 1); !ok || v != 20 {
		t.Fatal("rm1 not committed after phase 2")
	}
	if err := r.mgr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r.records() != 0 {
		t.Fatal("record not forgotten after phase 2")
	}
	if _, err := r.mgr.Begin(ctx); !errors.Is(err, xa.ErrClosed) {
		t.Fatalf("Begin after Close: %v", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, xa.ErrTxDone) {
		t.Fatalf("Commit again: %v", err)
	}
}

// With a last resource the decision is committed with that resource's own
// work, in its database: the log is not written and the prepared branches
// commit afterwards.
func TestLastResourceTakesTheDecision(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.rms[1].EnableLastResource()
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	res, err := tx.Commit(ctx)
	if err != nil || !res.Committed || !res.Logged || res.OnePhase {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	if r.log.Writes != 0 {
		t.Fatalf("the decision log was written %d times", r.log.Writes)
	}
	decs, _ := r.rms[1].Decisions(ctx)
	if len(decs) != 1 || decs[0].ID != tx.ID() || len(decs[0].Branches) != 1 || decs[0].Branches[0].RM != "rm0" {
		t.Fatalf("stored decisions = %+v", decs)
	}
	for i := range r.dbs {
		if _, ok := r.row(i, 1); !ok {
			t.Fatalf("rm%d not committed", i)
		}
	}
	r.noPrepared()

	// The last resource refuses: the prepared branch rolls back.
	r.fault(memrm.OpCommitLast, 1, memrm.Refuse)
	tx, _ = r.mgr.Begin(ctx)
	r.put(tx, 0, 2, 10) //nolint:errcheck
	r.put(tx, 1, 2, 20) //nolint:errcheck
	if _, err := tx.Commit(ctx); !errors.Is(err, xa.ErrAborted) {
		t.Fatalf("Commit = %v; want aborted", err)
	}
	for i := range r.dbs {
		if _, ok := r.row(i, 2); ok {
			t.Fatalf("rm%d committed an aborted transaction", i)
		}
	}
	r.noPrepared()
}

// A database that rolls a decided branch back in phase 2 makes a heuristic
// outcome: reported as such (never "committed"), recorded in the log, the
// commit record kept for recovery.
func TestHeuristicRollbackInPhase2(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.fault(memrm.OpCommit, 1, memrm.Heuristic)
	ctx := context.Background()
	res, err := r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		if err := r.put(tx, 0, 1, 10); err != nil {
			return err
		}
		return r.put(tx, 1, 1, 20)
	})
	var he *xa.HeuristicError
	if !errors.As(err, &he) || !errors.Is(err, xa.ErrHeuristic) || res.Committed || errors.Is(err, xa.ErrAborted) {
		t.Fatalf("Run = %+v, %v; want a heuristic outcome", res, err)
	}
	if len(he.RolledBack) != 1 || he.RolledBack[0] != "rm1" {
		t.Fatalf("rolled back by %v, want rm1", he.RolledBack)
	}
	if _, ok := r.row(0, 1); !ok {
		t.Fatal("rm0 did not commit")
	}
	if _, ok := r.row(1, 1); ok {
		t.Fatal("rm1 committed: the fault did not roll it back")
	}
	hs, _ := r.log.Heuristics(ctx)
	if len(hs) != 1 || hs[0].RM != "rm1" || hs[0].Action != xa.OutcomeRollback {
		t.Fatalf("heuristic records %+v, want rm1's rollback", hs)
	}
	if r.records() != 1 {
		t.Fatalf("%d commit records left, want 1 (kept, not forgotten)", r.records())
	}
}

// fn calling tx.Commit and then failing: Run reports what Commit did, not
// an abort.
func TestRunAfterCommitInFn(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	ctx := context.Background()
	errLater := errors.New("fn failed after committing")
	res, err := r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		if err := r.put(tx, 0, 1, 10); err != nil {
			return err
		}
		if err := r.put(tx, 1, 1, 20); err != nil {
			return err
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		return errLater
	})
	if !res.Committed || errors.Is(err, xa.ErrAborted) || !errors.Is(err, errLater) {
		t.Fatalf("Run = %+v, %v; want committed, with fn's error, not aborted", res, err)
	}
	if _, ok := r.row(0, 1); !ok {
		t.Fatal("not committed")
	}
}

// Wait whose context ends first leaves no goroutine behind.
func TestWaitDoesNotLeak(t *testing.T) {
	r := newRig(t, 2, xa.Config{AsyncCommit: true, Phase2Timeout: 2 * time.Second})
	r.fault(memrm.OpCommit, 1, memrm.Hang) // phase 2 hangs until its attempt times out
	ctx := context.Background()
	if _, err := r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		if err := r.put(tx, 0, 1, 10); err != nil {
			return err
		}
		return r.put(tx, 1, 1, 20)
	}); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for i := 0; i < 100; i++ {
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := r.mgr.Wait(wctx); err == nil {
			t.Fatal("Wait returned nil with phase 2 still running")
		}
	}
	if after := runtime.NumGoroutine(); after > before+5 {
		t.Fatalf("%d goroutines after 100 abandoned Waits, %d before", after, before)
	}
	r.fault(memrm.OpCommit, 1, memrm.OK)
	r.fault(memrm.OpCommitRM, 1, memrm.OK)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.mgr.Wait(wctx); err != nil {
		t.Fatal(err)
	}
}

// NewManager checks the manager against its log's identity.
func TestNewManagerChecksTheLog(t *testing.T) {
	ident, err := xa.NewLogIdentity("n1", 10*time.Second, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	log := memrm.NewLogFor(ident)
	for _, c := range []struct {
		cfg  xa.Config
		want string
	}{
		{xa.Config{Node: "n2", Log: log}, `belongs to node "n1"`},
		{xa.Config{Node: "n1", Log: log, Timeout: 20 * time.Second}, "exceeds the timeout"},
		{xa.Config{Node: "n1", Log: log, Phase2Timeout: time.Hour}, "shorter than the timeout plus the phase-2 retry budget"},
	} {
		if _, err := xa.NewManager(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewManager(%+v) = %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
	m, err := xa.NewManager(xa.Config{Node: "n1", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if m.Timeout() != 10*time.Second || m.GracePeriod() != ident.Grace || m.LogID() != ident.ID {
		t.Fatalf("manager takes timeout %v, grace %v, log %v; want the log's", m.Timeout(), m.GracePeriod(), m.LogID())
	}
}

// Every branch XID names the manager's log.
func TestBranchesNameTheLog(t *testing.T) {
	r := newRig(t, 1, xa.Config{})
	ctx := context.Background()
	tx, err := r.mgr.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 0, 1, 1); err != nil {
		t.Fatal(err)
	}
	s, _ := tx.Enlist(ctx, r.rms[0])
	ref, ok := xa.ParseOwned(s.(*memrm.Branch).XID())
	if !ok || ref.Log != r.log.Identity().ID || ref.ID != tx.ID() {
		t.Fatalf("branch XID says %+v, %v; want the log %v", ref, ok, r.log.Identity().ID)
	}
	tx.Rollback(ctx) //nolint:errcheck
}
