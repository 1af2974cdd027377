package recovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// TestScanLeavesSiblingOfForcedCommit: an operator force-commits one branch
// of an undecided transaction (xactl commit --force). Resolve then refuses
// to roll back the sibling ("the outcome would be mixed"), and the scanner
// leaves it prepared (Blocked) instead of presuming abort. (Found by
// review: the scanner did not read the heuristic records and rolled the
// sibling back, a mixed outcome.)
func TestScanLeavesSiblingOfForcedCommit(t *testing.T) {
	ctx := context.Background()
	db0, db1 := memrm.NewDB(), memrm.NewDB()
	rm0, rm1 := memrm.New("maria", db0, nil), memrm.New("pg", db1, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm0, rm1}, Log: log, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x0 := preparedRef(t, rm0, xa.BranchRef{ID: id, Index: 0, Log: log.Identity().ID})
	x1 := preparedRef(t, rm1, xa.BranchRef{ID: id, Index: 1, Log: log.Identity().ID})

	res, err := sc.Resolve(ctx, x0, xa.OutcomeCommit, recovery.ResolveOptions{Force: true, Reason: "customer paid"})
	if err != nil || !res.Done || !res.Forced {
		t.Fatalf("forced commit = %+v, %v", res, err)
	}
	// Resolve protects the transaction from a mixed outcome ...
	if _, err := sc.Resolve(ctx, x1, xa.OutcomeRollback, recovery.ResolveOptions{}); !errors.Is(err, recovery.ErrContradiction) {
		t.Fatalf("manual rollback of the sibling = %v, want ErrContradiction (mixed)", err)
	}
	// ... the scanner does not.
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := verdictOf(t, rep, x1)
	t.Logf("scan verdict of the sibling %s: %v (%s); aborted %v", x1, b.Verdict, b.Reason, rep.Aborted)
	if _, ok := db1.Get(1); !ok && len(db1.Prepared()) == 0 {
		t.Fatalf("the scanner rolled back %s although its sibling %s was committed by hand (heuristic record): the transaction is now mixed", x1, x0)
	}
	if b.Verdict != recovery.Blocked || len(rep.Aborted) != 0 {
		t.Fatalf("verdict %v, aborted %v; want blocked, nothing aborted", b.Verdict, rep.Aborted)
	}
}

// TestScanAfterFenceSeesForcedCommit: the operator's forced commit lands
// between the scan's start (heuristics read) and its fence. The scanner
// reads the heuristic records again after its fence and leaves the branch
// prepared; xactl writes its record before committing, so one of the two
// sees the other.
func TestScanAfterFenceSeesForcedCommit(t *testing.T) {
	ctx := context.Background()
	db0, db1 := memrm.NewDB(), memrm.NewDB()
	rm0, rm1 := memrm.New("maria", db0, nil), memrm.New("pg", db1, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x0 := preparedRef(t, rm0, xa.BranchRef{ID: id, Index: 0, Log: log.Identity().ID})
	x1 := preparedRef(t, rm1, xa.BranchRef{ID: id, Index: 1, Log: log.Identity().ID})
	hand := &handCommitOnFence{Log: log, t: t, hr: xa.HeuristicRecord{RM: "maria", XID: x0, Action: xa.OutcomeCommit, Forced: true, Time: time.Now()}}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm1}, Log: hand, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := verdictOf(t, rep, x1)
	if len(db1.Prepared()) != 1 || b.Verdict != recovery.Blocked {
		t.Fatalf("verdict %v (%s), %d prepared on pg: want the branch left prepared, blocked", b.Verdict, b.Reason, len(db1.Prepared()))
	}
}

// handCommitOnFence records an operator's hand commit just before the
// scanner's abort record.
type handCommitOnFence struct {
	*memrm.Log
	hr   xa.HeuristicRecord
	done bool
	t    *testing.T
}

func (l *handCommitOnFence) LogAbort(ctx context.Context, a xa.AbortRecord) error {
	if !l.done {
		l.done = true
		if err := l.Log.LogHeuristic(ctx, l.hr); err != nil {
			l.t.Fatal(err)
		}
	}
	return l.Log.LogAbort(ctx, a)
}

// TestForcedRollbackFences: xactl rollback --force of an undecided branch
// of this log (inside the grace period, the usual reason to force) records
// the transaction's abort first, so the live coordinator can no longer log
// its commit and commit the other branch. (Found by review: the fence was
// taken only for unforced rollbacks; the coordinator then logged its
// commit, and "unknown XID" on the rolled-back branch counted as
// committed: a mixed outcome reported committed.)
func TestForcedRollbackFences(t *testing.T) {
	ctx := context.Background()
	db0, db1 := memrm.NewDB(), memrm.NewDB()
	rm0, rm1 := memrm.New("maria", db0, nil), memrm.New("pg", db1, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm0, rm1}, Log: log, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := xa.NewGlobalID("n1", time.Now())
	x0 := preparedRef(t, rm0, xa.BranchRef{ID: id, Index: 0, Log: log.Identity().ID})
	x1 := preparedRef(t, rm1, xa.BranchRef{ID: id, Index: 1, Log: log.Identity().ID})

	res, err := sc.Resolve(ctx, x0, xa.OutcomeRollback, recovery.ResolveOptions{Force: true, Reason: "stuck"})
	if err != nil || !res.Done {
		t.Fatalf("forced rollback = %+v, %v", res, err)
	}
	if !res.Fenced {
		t.Errorf("forced rollback = %+v: not fenced", res)
	}
	// The coordinator, still inside its timeout, logs its commit.
	err = log.LogCommit(ctx, xa.CommitRecord{ID: id, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: "maria", XID: x0}, {RM: "pg", XID: x1}}})
	if err == nil {
		err1 := rm1.Commit(ctx, x1, xa.Origin{})
		t.Errorf("after xactl rollback --force of %s, the coordinator could still log its commit (LogCommit = nil) and commit %s (%v): "+
			"mixed outcome; want the forced rollback to record the abort first (LogCommit = ErrAbortRecorded)", x0, x1, err1)
	} else if !errors.Is(err, xa.ErrAbortRecorded) {
		t.Fatalf("LogCommit = %v", err)
	}
}

// TestCommitRefusalSaysWhy: a commit refused because no commit is logged
// names the scanner's real verdict: another log's branch, one inside the
// grace period (recovery waits, it does not roll back), one whose sibling
// was committed by hand. (Found by a walkthrough: every refusal said
// "presumed abort says roll it back".)
func TestCommitRefusalSaysWhy(t *testing.T) {
	ctx := context.Background()
	db0, db1 := memrm.NewDB(), memrm.NewDB()
	rm0, rm1 := memrm.New("maria", db0, nil), memrm.New("pg", db1, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm0, rm1}, Log: log, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	refusal := func(x xa.XID) string {
		t.Helper()
		_, err := sc.Resolve(ctx, x, xa.OutcomeCommit, recovery.ResolveOptions{})
		if !errors.Is(err, recovery.ErrContradiction) {
			t.Fatalf("commit of %s: %v, want ErrContradiction", x, err)
		}
		return err.Error()
	}
	other, _ := xa.NewLogID()
	old, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	young, _ := xa.NewGlobalID("n1", time.Now())
	hand, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	xOther := preparedRef(t, rm0, xa.BranchRef{ID: old, Index: 0, Log: other})
	xYoung := preparedRef(t, rm0, xa.BranchRef{ID: young, Index: 0, Log: log.Identity().ID})
	xHand0 := preparedRef(t, rm0, xa.BranchRef{ID: hand, Index: 0, Log: log.Identity().ID})
	xHand1 := preparedRef(t, rm1, xa.BranchRef{ID: hand, Index: 1, Log: log.Identity().ID})
	if _, err := sc.Resolve(ctx, xHand0, xa.OutcomeCommit, recovery.ResolveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		x    xa.XID
		want string
	}{
		{xOther, "belongs to decision log " + other.String()},
		{xYoung, "grace period, and its coordinator may still decide"},
		{xHand1, "was committed by hand"},
	} {
		if got := refusal(c.x); !strings.Contains(got, c.want) {
			t.Errorf("commit of %s refused with %q; want it to say %q", c.x, got, c.want)
		}
	}
}
