package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// TestAtomicityUnderFaults: for random fault schedules (refusals, transient
// failures, lost replies, hangs, and the coordinator's process dying at
// any operation), after recovery every branch of the transaction has the
// same outcome, and it is COMMIT exactly when the caller was told
// committed. Aborted means nothing committed; outcome unknown and a crash
// may go either way, but never half.
func TestAtomicityUnderFaults(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(rt, "branches")
		works := make([]bool, n)
		anyWork := false
		for i := range works {
			works[i] = rapid.IntRange(0, 4).Draw(rt, "works"+strconv.Itoa(i)) > 0
			anyWork = anyWork || works[i]
		}
		appRollback := rapid.IntRange(0, 9).Draw(rt, "appRollback") == 0

		// The fault table is drawn up front, keyed by (operation, branch,
		// attempt), so that the schedule does not depend on goroutine
		// interleaving.
		faultOf := map[string]memrm.Fault{}
		ops := []memrm.Op{memrm.OpPrepare, memrm.OpCommit, memrm.OpCommitRM, memrm.OpRollback, memrm.OpRollbackRM, memrm.OpOnePhase, memrm.OpCommitLast}
		for _, op := range ops {
			for b := 0; b < n; b++ {
				for a := 1; a <= 3; a++ {
					k := fmt.Sprintf("%s/%d/%d", op, b, a)
					// Phase 2 fails often enough that branches run out of
					// attempts and are left to recovery.
					hi := 2
					if op == memrm.OpPrepare {
						hi = 11
					}
					switch f := rapid.IntRange(0, hi).Draw(rt, k); {
					case f == 0:
						faultOf[k] = memrm.Fail
					case f == 1:
						faultOf[k] = memrm.LoseReply
					case f == 2 && op == memrm.OpPrepare:
						faultOf[k] = memrm.Refuse
					case f == 3 && op == memrm.OpPrepare && a == 1:
						faultOf[k] = memrm.Hang
					}
				}
			}
		}
		crashAt := ""
		if rapid.Bool().Draw(rt, "crash") {
			op := rapid.SampledFrom(ops).Draw(rt, "crashOp")
			crashAt = fmt.Sprintf("%s/%d/%d", op, rapid.IntRange(0, n-1).Draw(rt, "crashBranch"), rapid.IntRange(1, 2).Draw(rt, "crashAttempt"))
		}
		// A second process's scanner whose clock runs an hour ahead may
		// scan at one moment of the coordinator's work: before one of its
		// operations, or just before its decision write (a stalled fsync).
		// The fence must make either outcome consistent.
		scanAt := ""
		if rapid.IntRange(0, 2).Draw(rt, "scanDuring") > 0 {
			if rapid.IntRange(0, 3).Draw(rt, "scanAtLog") == 0 {
				scanAt = "log"
			} else {
				op := rapid.SampledFrom(ops).Draw(rt, "scanOp")
				scanAt = fmt.Sprintf("%s/%d/%d", op, rapid.IntRange(0, n-1).Draw(rt, "scanBranch"), rapid.IntRange(1, 2).Draw(rt, "scanAttempt"))
			}
		}
		logFails := rapid.IntRange(0, 19).Draw(rt, "logFails") == 0
		async := rapid.Bool().Draw(rt, "asyncCommit")
		// The last participant may take the decision as the last resource.
		lastResource := rapid.Bool().Draw(rt, "lastResource")

		var mu sync.Mutex
		crashed := false
		seen := map[string]int{}
		log := memrm.NewLog("prop")
		if logFails {
			log.Kill()
		}
		dbs := make([]*memrm.DB, n)
		// scanNow runs the skewed scanner, as another process would, on
		// fresh sessions of the same databases.
		scanned := false
		scanNow := func() {
			if scanned {
				return
			}
			scanned = true
			var ps []xa.ResourceManager
			for i := range dbs {
				ps = append(ps, memrm.New("rm"+strconv.Itoa(i), dbs[i], nil))
			}
			sc, err := recovery.New(recovery.Config{Participants: ps, Log: log,
				Now: func() time.Time { return time.Now().Add(time.Hour) }})
			if err != nil {
				rt.Fatal(err)
			}
			sc.Scan(context.Background()) //nolint:errcheck // what it did is checked at the end
		}
		inject := func(op memrm.Op, x xa.XID) memrm.Fault {
			mu.Lock()
			defer mu.Unlock()
			if crashed {
				return memrm.Dead
			}
			_, b, _ := xa.Owned(x)
			k0 := fmt.Sprintf("%s/%d", op, b)
			seen[k0]++
			k := fmt.Sprintf("%s/%d", k0, seen[k0])
			if k == scanAt {
				scanNow()
			}
			if k == crashAt {
				crashed = true
				log.Kill()
				return memrm.Dead
			}
			return faultOf[k]
		}

		rms := make([]*memrm.RM, n)
		for i := range dbs {
			dbs[i] = memrm.NewDB()
			rms[i] = memrm.New("rm"+strconv.Itoa(i), dbs[i], inject)
			if lastResource && i == n-1 {
				rms[i].EnableLastResource()
			}
		}
		var decisions xa.DecisionLog = log
		if scanAt == "log" {
			decisions = &stallingLog{Log: log, before: func() { mu.Lock(); scanNow(); mu.Unlock() }}
		}
		mgr, err := xa.NewManager(xa.Config{Node: "prop", Log: decisions, Timeout: 100 * time.Millisecond,
			Phase2Attempts: 2, Phase2Timeout: 50 * time.Millisecond, RetryBackoff: time.Microsecond, AsyncCommit: async})
		if err != nil {
			rt.Fatal(err)
		}
		ctx := context.Background()
		tx, err := mgr.Begin(ctx)
		if err != nil {
			rt.Fatal(err)
		}
		for i := range rms {
			s, err := tx.Enlist(ctx, rms[i])
			if err == nil && works[i] {
				err = s.(*memrm.Branch).Put(ctx, 1, i)
			}
			if errors.Is(err, xa.ErrTimeout) {
				// The 100 ms timeout passed before the work was done (a
				// loaded machine): nothing of the schedule was tried.
				tx.Rollback(ctx) //nolint:errcheck
				rt.Skip("the global timeout passed before the branches' work was done")
			}
			if err != nil {
				rt.Fatal(err)
			}
		}
		var told string
		if appRollback {
			tx.Rollback(ctx) //nolint:errcheck
			told = "aborted"
		} else {
			_, err = tx.Commit(ctx)
			switch {
			case err == nil:
				told = "committed"
			case errors.Is(err, xa.ErrAborted):
				told = "aborted"
			case xa.OutcomeUnknown(err):
				told = "unknown"
			case errors.Is(err, xa.ErrHeuristic):
				rt.Fatalf("heuristic outcome without a heuristic database: %v", err)
			default:
				rt.Fatalf("Commit returned an error of no known kind: %v", err)
			}
		}
		// The process lives on until its asynchronous phase 2 ends (or
		// it dies: every operation then fails at once).
		if err := mgr.Close(ctx); err != nil {
			rt.Fatal(err)
		}
		mu.Lock()
		if crashed {
			told = "crashed" // the caller never heard back
		}
		crashed = false
		mu.Unlock()

		// Restart: the dead process's sessions are gone, the log is
		// reopened, fresh handles without faults recover.
		for i := range dbs {
			dbs[i].Disconnect(rms[i])
		}
		log.Revive()
		var fresh []xa.ResourceManager
		for i := range dbs {
			fresh = append(fresh, memrm.New("rm"+strconv.Itoa(i), dbs[i], nil))
		}
		sc, err := recovery.New(recovery.Config{Participants: fresh, Log: log, Nodes: []string{"prop"},
			Now: func() time.Time { return time.Now().Add(time.Hour) }})
		if err != nil {
			rt.Fatal(err)
		}
		for pass := 0; pass < 2; pass++ {
			rep, err := sc.Scan(ctx)
			if err != nil {
				rt.Fatal(err)
			}
			for _, b := range rep.Branches {
				if b.Err != nil {
					rt.Fatalf("recovery failed on %s: %v", b.Participant, b.Err)
				}
			}
		}

		committed, absent := 0, 0
		for i := range dbs {
			if p := dbs[i].Prepared(); len(p) > 0 {
				rt.Fatalf("rm%d: branches still prepared after recovery: %v", i, p)
			}
			if !works[i] {
				continue
			}
			if _, ok := dbs[i].Get(1); ok {
				committed++
			} else {
				absent++
			}
		}
		if recs, _ := log.Commits(ctx); len(recs) != 0 {
			rt.Fatalf("decision records left after recovery: %v", recs)
		}
		for i := range fresh {
			if decs, _ := fresh[i].(*memrm.RM).Decisions(ctx); len(decs) != 0 {
				rt.Fatalf("decisions left in rm%d after recovery: %v", i, decs)
			}
		}
		if committed > 0 && absent > 0 {
			rt.Fatalf("partial commit: %d branches committed, %d not (told %s)", committed, absent, told)
		}
		switch told {
		case "committed":
			if absent > 0 {
				rt.Fatalf("told committed, but %d branches are not", absent)
			}
		case "aborted":
			if committed > 0 {
				rt.Fatalf("told aborted, but %d branches committed", committed)
			}
		}
		_ = anyWork
	})
}

// stallingLog runs before at its first LogCommit, before writing: a
// decision write that stalls while a scanner runs.
type stallingLog struct {
	*memrm.Log
	before func()
	once   sync.Once
}

func (l *stallingLog) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	l.once.Do(l.before)
	return l.Log.LogCommit(ctx, rec)
}

// TestStartScansFirstThenPeriodically: Start resolves leftovers before it
// returns, then keeps scanning until stopped.
func TestStartScansFirstThenPeriodically(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	log := oldLog(t, "start", 2*time.Hour)
	g, _ := xa.NewGlobalID("start", time.Now().Add(-time.Hour))
	leftover := memrm.New("rm", db, nil)
	b, _ := leftover.Start(ctx, xa.BranchRef{ID: g, Log: log.Identity().ID}.XID())
	b.(*memrm.Branch).Put(ctx, 1, 1) //nolint:errcheck
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{memrm.New("rm", db, nil)}, Log: log, Nodes: []string{"start"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	scans := 0
	first, stop, err := sc.Start(ctx, 10*time.Millisecond, func(recovery.Report, error) { mu.Lock(); scans++; mu.Unlock() })
	if err != nil || len(first.Branches) != 1 || !first.Branches[0].Done || first.Branches[0].Verdict != recovery.Rollback {
		t.Fatalf("first scan = %+v, %v; want the leftover rolled back", first, err)
	}
	if len(db.Prepared()) != 0 {
		t.Fatal("leftover still prepared after Start returned")
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	mu.Lock()
	n := scans
	mu.Unlock()
	if n < 3 {
		t.Fatalf("%d scans in 100ms at a 10ms interval", n)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if scans != n {
		t.Fatal("scans went on after stop")
	}
}
