package recovery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// Manual resolution judges as a scan does, and a rollback of an undecided
// branch takes the fence first: the coordinator can no longer commit.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := memrm.New("maria", db, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	young, _ := xa.NewGlobalID("n1", time.Now())
	xOld := preparedRef(t, rm, xa.BranchRef{ID: old, Log: log.Identity().ID})
	xYoung := preparedRef(t, rm, xa.BranchRef{ID: young, Log: log.Identity().ID})

	if _, err := sc.Resolve(ctx, xOld, xa.OutcomeCommit, recovery.ResolveOptions{}); !errors.Is(err, recovery.ErrContradiction) {
		t.Fatalf("commit of an undecided branch = %v, want ErrContradiction", err)
	}
	if _, err := sc.Resolve(ctx, xYoung, xa.OutcomeRollback, recovery.ResolveOptions{}); !errors.Is(err, recovery.ErrContradiction) {
		t.Fatalf("rollback inside the grace period = %v, want ErrContradiction", err)
	}
	res, err := sc.Resolve(ctx, xOld, xa.OutcomeRollback, recovery.ResolveOptions{})
	if err != nil || !res.Done || !res.Fenced || res.Forced {
		t.Fatalf("rollback of an old undecided branch = %+v, %v; want done, fenced", res, err)
	}
	// The coordinator, late, cannot log its commit any more.
	log.SetClock(func() time.Time { return old.Begun })
	err = log.LogCommit(ctx, xa.CommitRecord{ID: old, Logged: old.Begun, Branches: []xa.BranchRecord{{RM: "maria", XID: xOld}}})
	log.SetClock(time.Now)
	if !errors.Is(err, xa.ErrAbortRecorded) {
		t.Fatalf("LogCommit after a manual rollback = %v, want ErrAbortRecorded", err)
	}
	// Forced: done and recorded as a heuristic outcome.
	res, err = sc.Resolve(ctx, xYoung, xa.OutcomeCommit, recovery.ResolveOptions{Force: true, Reason: "test"})
	if err != nil || !res.Done || !res.Forced {
		t.Fatalf("forced commit = %+v, %v", res, err)
	}
	hs, _ := log.Heuristics(ctx)
	if len(hs) != 1 || hs[0].RM != "maria" || !hs[0].XID.Equal(xYoung) || hs[0].Reason != "test" {
		t.Fatalf("heuristics %+v", hs)
	}
	if _, err := sc.Resolve(ctx, xYoung, xa.OutcomeCommit, recovery.ResolveOptions{}); !errors.Is(err, recovery.ErrNotPrepared) {
		t.Fatalf("resolving a finished branch = %v, want ErrNotPrepared", err)
	}
}

// A commit recorded between the operator's look and the fence wins: the
// manual rollback is refused.
func TestResolveRollbackLosesToCommit(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := memrm.New("maria", db, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x := preparedRef(t, rm, xa.BranchRef{ID: id, Log: log.Identity().ID})
	racing := &commitBeforeAbort{Log: log, rec: xa.CommitRecord{ID: id, Logged: id.Begun, Branches: []xa.BranchRecord{{RM: "maria", XID: x}}}}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: racing})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Resolve(ctx, x, xa.OutcomeRollback, recovery.ResolveOptions{}); !errors.Is(err, recovery.ErrContradiction) {
		t.Fatalf("rollback racing a commit = %v, want ErrContradiction", err)
	}
	if len(db.Prepared()) != 1 {
		t.Fatal("the branch was rolled back although its commit was recorded")
	}
}
