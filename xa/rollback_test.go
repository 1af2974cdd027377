package xa_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// Tx.Rollback after a Commit whose outcome is unknown must not return nil,
// which its documentation defines as "the transaction is rolled back"
// (found by review: it did). Here the one-phase commit took effect and only its reply
// was lost: the row is committed, yet Rollback tells the caller it was
// rolled back (the usual `defer tx.Rollback(ctx)` pattern, or a caller that
// retries "Rollback to be sure" after an unknown outcome).
func TestRollbackAfterUnknownOnePhase(t *testing.T) {
	r := newRig(t, 1, xa.Config{})
	r.fault(memrm.OpOnePhase, 0, memrm.LoseReply)
	ctx := context.Background()
	tx, err := r.mgr.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if !xa.OutcomeUnknown(err) || res.Committed {
		t.Fatalf("Commit = %+v, %v; want outcome unknown", res, err)
	}
	rbErr := tx.Rollback(ctx)
	_, committed := r.row(0, 1)
	t.Logf("Commit: %v; Rollback: %v; row committed: %v", err, rbErr, committed)
	if committed && rbErr == nil {
		t.Fatalf("Rollback returned nil (\"rolled back\") for a transaction whose row is committed")
	}
	if !xa.OutcomeUnknown(rbErr) {
		t.Fatalf("Rollback after an unknown outcome: %v, want Commit's outcome-unknown error", rbErr)
	}
}

// Same with a two-phase commit whose decision write failed after it was
// durable (a timeout on a write that still reached the disk): the caller is
// told "outcome unknown" by Commit, then "rolled back" by Rollback, and
// recovery commits every branch from the durable record.
func TestRollbackAfterUnknownLogWrite(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	// Replace the manager's log by one that stores the record but loses
	// the reply.
	ll := &lostReplyLog{RecoveryLog: r.log}
	mgr, err := xa.NewManager(xa.Config{Node: "test", Log: ll, Phase2Timeout: time.Second, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.mgr = mgr
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Commit(ctx)
	if !xa.OutcomeUnknown(err) {
		t.Fatalf("Commit = %v; want outcome unknown", err)
	}
	rbErr := tx.Rollback(ctx)
	if !xa.OutcomeUnknown(rbErr) {
		t.Errorf("Rollback after an unknown outcome: %v, want Commit's outcome-unknown error", rbErr)
	}
	recs, _ := r.log.Commits(ctx)
	t.Logf("Commit: %v; Rollback: %v; durable commit records: %d", err, rbErr, len(recs))
	if len(recs) == 1 && rbErr == nil {
		// Recovery will commit both branches from this record.
		for i, rm := range r.rms {
			if err := rm.Commit(ctx, recs[0].Branches[i].XID, xa.Origin{}); err != nil {
				t.Fatal(err)
			}
		}
		_, c0 := r.row(0, 1)
		_, c1 := r.row(1, 1)
		t.Fatalf("Rollback returned nil (\"rolled back\"), but the commit decision is durable and recovery committed the rows (rm0 %v, rm1 %v)", c0, c1)
	}
}

type lostReplyLog struct{ xa.RecoveryLog }

func (l *lostReplyLog) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	if err := l.RecoveryLog.LogCommit(ctx, rec); err != nil {
		return err
	}
	return &xa.Error{Op: "log commit", Kind: xa.ErrOutcomeUnknown, Err: errors.New("write timed out (it reached the disk)")}
}

// And after a heuristic outcome: one branch committed, the database rolled
// the other back in phase 2. Commit says ErrHeuristic; Rollback then says
// nil, "rolled back", for a transaction whose rows on rm0 are committed.
func TestRollbackAfterHeuristic(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.fault(memrm.OpCommit, 1, memrm.Heuristic)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	_, err := tx.Commit(ctx)
	if !errors.Is(err, xa.ErrHeuristic) {
		t.Fatalf("Commit = %v; want heuristic", err)
	}
	rbErr := tx.Rollback(ctx)
	_, c0 := r.row(0, 1)
	t.Logf("Commit: %v; Rollback: %v; rm0 row committed: %v", err, rbErr, c0)
	if c0 && rbErr == nil {
		t.Fatal("Rollback returned nil (\"rolled back\") for a transaction with committed rows")
	}
	if !errors.Is(rbErr, xa.ErrHeuristic) {
		t.Fatalf("Rollback after a heuristic outcome: %v, want ErrHeuristic", rbErr)
	}
}

// TestRollbackAfterAbort: after a Commit that aborted cleanly (a branch
// voted no), Rollback says rolled back.
func TestRollbackAfterAbort(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	r.fault(memrm.OpPrepare, 1, memrm.Refuse)
	ctx := context.Background()
	tx, _ := r.mgr.Begin(ctx)
	r.put(tx, 0, 1, 10) //nolint:errcheck
	r.put(tx, 1, 1, 20) //nolint:errcheck
	if res, err := tx.Commit(ctx); err == nil || res.Committed || xa.OutcomeUnknown(err) {
		t.Fatalf("Commit = %+v, %v; want aborted", res, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after an abort: %v, want nil", err)
	}
	if _, c := r.row(0, 1); c {
		t.Fatal("rm0's row is committed")
	}
}
