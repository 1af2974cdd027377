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

// The coordinator takes no commit decision after Begin + Timeout: recovery
// may be presuming abort by then. Its own checks matter where no log stands
// behind them (the sole commit, the last resource's commit) and where the
// log's clock does not see the deadline (Config.Timeout shorter than the
// log's timeout). In each test the prepare phase runs past the deadline
// while the last vote wins the race against the transaction's timer
// (xa.SetDeadline): Commit must roll back and report an abort whose reason
// is the timeout, and nothing may commit.

// hook replaces participant i of r by one on the same database that runs f
// before every op operation (then the rig's faults apply).
func (r *rig) hook(i int, op memrm.Op, f func(x xa.XID)) {
	name := r.rms[i].Name()
	r.rms[i] = memrm.New(name, r.dbs[i], func(o memrm.Op, x xa.XID) memrm.Fault {
		if o == op {
			f(x)
		}
		if v, ok := r.faults.Load(o.String() + "/" + name); ok {
			return v.(memrm.Fault)
		}
		return memrm.OK
	})
}

// plainRM hands out branches that offer only xa.Branch: no Idler, no
// one-phase commit, no last resource. A plain branch that wrote nothing is
// asked to prepare and votes read-only.
type plainRM struct{ *memrm.RM }

func (p *plainRM) Start(ctx context.Context, x xa.XID) (xa.Branch, error) {
	b, err := p.RM.Start(ctx, x)
	if err != nil {
		return nil, err
	}
	return struct{ xa.Branch }{b}, nil
}

// pastDeadlineOnPrepare makes participant i's prepare run past tx's
// deadline (see xa.SetDeadline); *tx is read when the prepare runs.
func (r *rig) pastDeadlineOnPrepare(i int, tx **xa.Tx) {
	r.hook(i, memrm.OpPrepare, func(xa.XID) { xa.SetDeadline(*tx, time.Now()) })
}

// wantTimedOut checks that Commit aborted for the timeout and that nothing
// committed or stayed prepared.
func (r *rig) wantTimedOut(res xa.Result, err error, rows ...int) {
	r.t.Helper()
	r.t.Logf("Commit: %+v, %v", res, err)
	if res.Committed || !errors.Is(err, xa.ErrAborted) || !errors.Is(err, xa.ErrDecisionTooLate) || !errors.Is(err, xa.ErrTimeout) || xa.OutcomeUnknown(err) {
		r.t.Fatalf("Commit past the deadline = %+v, %v; want aborted with ErrDecisionTooLate (a timeout)", res, err)
	}
	for _, i := range rows {
		if v, ok := r.row(i, 1); ok {
			r.t.Errorf("rm%d row 1 = %d is committed", i, v)
		}
	}
	r.noPrepared()
}

// TestDeadlinePassedBeforeLogWriteAborts: both branches prepared, but the
// deadline passed before the decision is written. The log's own clock
// would accept the record (its timeout is longer than Config.Timeout): the
// coordinator must not write it.
func TestDeadlinePassedBeforeLogWriteAborts(t *testing.T) {
	r := newRig(t, 2, xa.Config{Timeout: 10 * time.Second})
	var tx *xa.Tx
	r.pastDeadlineOnPrepare(1, &tx)
	ctx := context.Background()
	tx, _ = r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	r.wantTimedOut(res, err, 0, 1)
	if r.log.Writes != 0 || r.records() != 0 {
		t.Fatalf("decision log writes %d, records %d; want none", r.log.Writes, r.records())
	}
}

// TestDeadlinePassedBeforeSoleCommitAborts: the only prepared branch (the
// other votes read-only) commits without a record, so its commit is the
// decision: nothing behind it checks the deadline.
func TestDeadlinePassedBeforeSoleCommitAborts(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	var tx *xa.Tx
	r.pastDeadlineOnPrepare(0, &tx)
	ctx := context.Background()
	tx, _ = r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Enlist(ctx, &plainRM{r.rms[1]}); err != nil { // read-only
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	r.wantTimedOut(res, err, 0)
	if r.log.Writes != 0 {
		t.Fatalf("decision log writes %d; a sole commit writes none", r.log.Writes)
	}
}

// TestDeadlinePassedBeforeCommitLastAborts: the last resource commits with
// the decision in its own database, which has no clock of the decision log
// behind it: the coordinator must not send CommitLast past the deadline.
func TestDeadlinePassedBeforeCommitLastAborts(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	var tx *xa.Tx
	r.pastDeadlineOnPrepare(0, &tx)
	r.rms[1].EnableLastResource()
	ctx := context.Background()
	tx, _ = r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	r.wantTimedOut(res, err, 0, 1)
	if recs, _ := r.rms[1].Decisions(ctx); len(recs) != 0 {
		t.Fatalf("the last resource stored decisions %v", recs)
	}
}

// deadlineLog records the deadline of the context of each LogCommit.
type deadlineLog struct {
	*memrm.Log
	mu        sync.Mutex
	deadlines []time.Time
}

func (l *deadlineLog) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	d, _ := ctx.Deadline()
	l.mu.Lock()
	l.deadlines = append(l.deadlines, d)
	l.mu.Unlock()
	return l.Log.LogCommit(ctx, rec)
}

// TestDecisionLogWriteBoundByTimeLeft: the decision's write is bounded by
// the time left before Begin + Timeout (a write that outlives it is settled
// by the log's fence), not only by Phase2Timeout.
func TestDecisionLogWriteBoundByTimeLeft(t *testing.T) {
	const timeout = 2 * time.Second
	r := newRig(t, 2, xa.Config{})
	dl := &deadlineLog{Log: r.log}
	mgr, err := xa.NewManager(xa.Config{Node: "test", Log: dl, Timeout: timeout, Phase2Timeout: 10 * time.Second, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.mgr = mgr
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	latest := time.Now().Add(timeout) // Begin + Timeout is no later
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	if res, err := tx.Commit(ctx); err != nil || !res.Committed || !res.Logged {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if len(dl.deadlines) != 1 {
		t.Fatalf("LogCommit called %d times, want 1", len(dl.deadlines))
	}
	d := dl.deadlines[0]
	t.Logf("LogCommit's deadline is %v after Begin + Timeout (at the latest)", d.Sub(latest))
	if d.IsZero() || d.After(latest) {
		t.Fatalf("LogCommit's context ends %v after Begin + Timeout; want no later than it", d.Sub(latest))
	}
}
