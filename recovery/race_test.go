package recovery_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// finishBeforeAbort plays the coordinator between a resolver's listing and
// its fence: it logs the commit (in time, by the log's clock), commits every
// branch on its own session and forgets the record, then lets the first
// LogAbort through.
type finishBeforeAbort struct {
	*memrm.Log
	rec  xa.CommitRecord
	rms  []*memrm.RM
	done bool
	t    *testing.T
}

func (l *finishBeforeAbort) LogAbort(ctx context.Context, a xa.AbortRecord) error {
	if !l.done {
		l.done = true
		l.SetClock(func() time.Time { return l.rec.ID.Begun })
		err := l.Log.LogCommit(ctx, l.rec)
		l.SetClock(time.Now)
		if err != nil {
			l.t.Fatalf("coordinator's LogCommit: %v", err)
		}
		for i, br := range l.rec.Branches {
			if err := l.rms[i].Commit(ctx, br.XID, xa.Origin{}); err != nil {
				l.t.Fatalf("coordinator's commit: %v", err)
			}
		}
		if err := l.Log.Forget(ctx, l.rec.ID); err != nil {
			l.t.Fatal(err)
		}
	}
	return l.Log.LogAbort(ctx, a)
}

// TestResolveRollbackAfterTheCoordinatorFinished: the coordinator logs
// its commit, commits every branch and forgets the record between the
// resolver's listing and its fence (xactl rollback, or an operator endpoint
// in the coordinator's process). The fence then succeeds, and the
// participant's rollback of a branch that is gone answers nil: Resolve must
// list the branch again after the fence and say nothing was rolled back,
// as Scan does, instead of "rolled back". (Found by review: it reported
// Done with both rows committed.)
func TestResolveRollbackAfterTheCoordinatorFinished(t *testing.T) {
	ctx := context.Background()
	db0, db1 := memrm.NewDB(), memrm.NewDB()
	rm0, rm1 := memrm.New("a", db0, nil), memrm.New("b", db1, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x0 := preparedRef(t, rm0, xa.BranchRef{ID: id, Index: 0, Log: log.Identity().ID})
	x1 := preparedRef(t, rm1, xa.BranchRef{ID: id, Index: 1, Log: log.Identity().ID})
	racing := &finishBeforeAbort{Log: log, t: t, rms: []*memrm.RM{rm0, rm1}, rec: xa.CommitRecord{ID: id, Logged: id.Begun,
		Branches: []xa.BranchRecord{{RM: "a", XID: x0}, {RM: "b", XID: x1}}}}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm0, rm1}, Log: racing})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sc.Resolve(ctx, x0, xa.OutcomeRollback, recovery.ResolveOptions{})
	_, c0 := db0.Get(0)
	_, c1 := db1.Get(1)
	t.Logf("Resolve(rollback) = %+v, err %v; rows committed: a %v, b %v", res, err, c0, c1)
	if res.Done || err == nil {
		t.Fatalf("the operator is told the branch was rolled back (Done %v, err %v), but it committed (a %v, b %v)", res.Done, err, c0, c1)
	}
	if !errors.Is(err, recovery.ErrNotPrepared) {
		t.Fatalf("Resolve: %v, want ErrNotPrepared (finished before the abort was recorded)", err)
	}
	if !c0 || !c1 {
		t.Fatalf("the committed rows changed: a %v, b %v", c0, c1)
	}
}

// skewedRM is a participant whose server's clock runs ahead (a PostgreSQL
// participant: recovery measures a branch's age as the server's now() minus
// its prepare time): every prepared branch looks skew old.
type skewedRM struct {
	*memrm.RM
	skew time.Duration
}

func (r *skewedRM) Recover(ctx context.Context) ([]xa.PreparedBranch, error) {
	ps, err := r.RM.Recover(ctx)
	for i := range ps {
		ps[i].ServerAge = r.skew
	}
	return ps, err
}

// slowRM's branches take until gate closes to prepare (a PREPARE that waits
// for a lock, or a slow server), inside the transaction's timeout.
type slowRM struct {
	*memrm.RM
	gate chan struct{}
}

func (r *slowRM) Start(ctx context.Context, x xa.XID) (xa.Branch, error) {
	b, err := r.RM.Start(ctx, x)
	if err != nil {
		return nil, err
	}
	return &slowBranch{Branch: b.(*memrm.Branch), gate: r.gate}, nil
}

type slowBranch struct {
	*memrm.Branch
	gate chan struct{}
}

func (b *slowBranch) Prepare(ctx context.Context) (xa.Vote, error) {
	<-b.gate
	return b.Branch.Prepare(ctx)
}

// TestAbortOutlivesTheCommitDeadline: a log whose timeout (48 h) exceeds
// xa.AbortRetention. A scanner presumes abort early because a server's
// clock runs ahead (allowed: a spurious abort), records the abort at T and
// rolls the branch back. Were the abort forgotten at T+24h, the log would
// still accept the coordinator's commit until Begin+48h; the coordinator
// would find its rolled-back branch "unknown", see no abort record and
// report committed: a partial commit. The abort record must outlive the
// commit deadline (xa.AbortRecord.KeptUntil). (Found by review: "caller
// told committed, but pgA committed=false".)
func TestAbortOutlivesTheCommitDeadline(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clk := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	advance := func(d time.Duration) { mu.Lock(); clk = clk.Add(d); mu.Unlock() }

	ident, err := xa.NewLogIdentity("n1", 48*time.Hour, 0, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	log, err := filelog.Create(t.TempDir(), ident, filelog.Options{NoSync: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()

	dbA, dbC := memrm.NewDB(), memrm.NewDB()
	rmA := &skewedRM{RM: memrm.New("pgA", dbA, nil), skew: ident.Grace + time.Hour}
	rmC := &slowRM{RM: memrm.New("c", dbC, nil), gate: make(chan struct{})}
	mgr, err := xa.NewManager(xa.Config{Node: "n1", Log: log, Phase2Timeout: time.Second, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rmA, rmC}, Log: log, Now: now})
	if err != nil {
		t.Fatal(err)
	}

	tx, _ := mgr.Begin(ctx)
	for i, rm := range []xa.ResourceManager{rmA, rmC} {
		s, err := tx.Enlist(ctx, rm)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.(*memrm.Branch).Put(ctx, 1, 10+i); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		res xa.Result
		err error
	}
	done := make(chan result, 1)
	go func() { r, err := tx.Commit(ctx); done <- result{r, err} }()
	for len(dbA.Prepared()) == 0 {
		time.Sleep(time.Millisecond)
	}

	// The scanner (in the coordinator's process) sees pgA's branch as
	// older than the grace by its server's clock: presumed abort.
	rep, err := sc.Scan(ctx)
	if err != nil || len(rep.Aborted) != 1 {
		t.Fatalf("first scan: %+v, %v", rep, err)
	}
	// 25 hours later (C's prepare is still running, well within the 48 h
	// timeout), the next scan forgets the abort record: no branch left.
	advance(25 * time.Hour)
	rep, err = sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ForgottenAborts) != 0 {
		t.Errorf("the second scan forgot aborts %v before their transaction's commit deadline", rep.ForgottenAborts)
	}
	close(rmC.gate)
	r := <-done
	_, a := dbA.Get(1)
	_, c := dbC.Get(1)
	t.Logf("Commit = %+v, %v; rows committed: pgA %v, c %v", r.res, r.err, a, c)
	if r.err == nil && r.res.Committed && (!a || !c) {
		t.Fatalf("caller told committed, but pgA committed=%v and c committed=%v (pgA was rolled back by presumed abort)", a, c)
	}
	if a != c {
		t.Fatalf("partial commit: pgA %v, c %v", a, c)
	}
	if r.err == nil || !errors.Is(r.err, xa.ErrAbortRecorded) {
		t.Fatalf("Commit = %+v, %v; want refused by the abort record", r.res, r.err)
	}
}
