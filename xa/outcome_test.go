package xa_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// originRM hands out branches that report origin (xa.OriginReporter) and
// records the origin given to every rollback from another session.
type originRM struct {
	*memrm.RM
	origin     xa.Origin
	mu         sync.Mutex
	rolledBack []xa.Origin
}

type originBranch struct {
	*memrm.Branch
	origin xa.Origin
}

func (b *originBranch) Origin() xa.Origin { return b.origin }

func (o *originRM) Start(ctx context.Context, x xa.XID) (xa.Branch, error) {
	b, err := o.RM.Start(ctx, x)
	if err != nil {
		return nil, err
	}
	return &originBranch{Branch: b.(*memrm.Branch), origin: o.origin}, nil
}

func (o *originRM) Rollback(ctx context.Context, x xa.XID, origin xa.Origin) error {
	o.mu.Lock()
	o.rolledBack = append(o.rolledBack, origin)
	o.mu.Unlock()
	return o.RM.Rollback(ctx, x, origin)
}

// TestLostPrepareReplyKeepsOrigin: a prepare whose reply was lost may have
// prepared the branch; the rollback from another session that follows must
// carry the branch's origin, so that it waits for the preparing session
// (which may still hold the branch) instead of finding it "unknown".
func TestLostPrepareReplyKeepsOrigin(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.fault(memrm.OpPrepare, 1, memrm.LoseReply)
	want := xa.Origin{Session: 42, Prepared: time.UnixMilli(1700000000000)}
	orm := &originRM{RM: r.rms[1], origin: want}
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	s, err := tx.Enlist(ctx, orm)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.(*memrm.Branch).Put(tx.Context(), 1, 20); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if res.Committed || !errors.Is(err, xa.ErrAborted) || xa.OutcomeUnknown(err) {
		t.Fatalf("Commit = %+v, %v; want aborted", res, err)
	}
	orm.mu.Lock()
	defer orm.mu.Unlock()
	t.Logf("Commit: %v; rollbacks from another session: %+v", err, orm.rolledBack)
	if len(orm.rolledBack) == 0 {
		t.Fatal("the maybe-prepared branch was not rolled back from another session")
	}
	for _, o := range orm.rolledBack {
		if o.Session != want.Session || !o.Prepared.Equal(want.Prepared) {
			t.Fatalf("rollback after a lost prepare reply carried origin %+v, want the branch's %+v", o, want)
		}
	}
	r.noPrepared()
}

// TestSoleCommitFindsAbortRecorded: the only prepared branch (the other
// votes read-only) commits without a record. Before our first commit
// reaches it, recovery (a scanner whose clock runs ahead) records an abort
// and rolls the branch back: the commit answers "unknown XID", and the
// log's abort record is what tells Commit that the transaction aborted
// (ErrAbortRecorded), not that its outcome is unknown.
func TestSoleCommitFindsAbortRecorded(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	ctx := context.Background()
	scanner := memrm.New("rm0", r.dbs[0], nil) // recovery's own session
	var scanned []error
	r.hook(0, memrm.OpCommit, func(x xa.XID) {
		g, _, _ := xa.Owned(x)
		scanned = append(scanned,
			r.log.LogAbort(ctx, xa.AbortRecord{ID: g, Reason: "presumed abort (test)"}),
			scanner.Rollback(ctx, x, xa.Origin{}))
	})
	tx, _ := r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Enlist(ctx, &plainRM{r.rms[1]}); err != nil { // read-only
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	t.Logf("Commit: %+v, %v", res, err)
	if len(scanned) != 2 || scanned[0] != nil || scanned[1] != nil {
		t.Fatalf("the scanner's abort record and rollback: %v", scanned)
	}
	if _, ok, err := r.log.LookupAbort(ctx, tx.ID()); !ok || err != nil {
		t.Fatalf("no abort record for the transaction: %v", err)
	}
	if res.Committed || !errors.Is(err, xa.ErrAborted) || !errors.Is(err, xa.ErrAbortRecorded) || xa.OutcomeUnknown(err) {
		t.Fatalf("Commit = %+v, %v; want aborted with ErrAbortRecorded", res, err)
	}
	if _, ok := r.row(0, 1); ok {
		t.Fatal("rm0's row is committed")
	}
	r.noPrepared()
}

// TestHeuristicOutcomeObserved: a heuristic outcome (the database rolled a
// branch back although the decision was commit) reaches the Observer (the
// metrics) as "heuristic", neither "aborted" nor "committed".
func TestHeuristicOutcomeObserved(t *testing.T) {
	var mu sync.Mutex
	var seen []xa.TxStats
	obs := observerFunc(func(s xa.TxStats) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	})
	r := newRig(t, 2, xa.Config{Observer: obs})
	r.fault(memrm.OpCommit, 1, memrm.Heuristic)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, xa.ErrHeuristic) {
		t.Fatalf("Commit = %v; want heuristic", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("observed: %+v", seen)
	if len(seen) != 1 || seen[0].Outcome != "heuristic" || !seen[0].Logged || seen[0].Branches != 2 {
		t.Fatalf("observed %+v; want one transaction, outcome heuristic, logged, 2 branches", seen)
	}
}
