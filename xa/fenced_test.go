package xa_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// fencedLog refuses every commit decision as a log held under a lease does
// once another process took it over (recovery/sqllog): the database
// refused the write, nothing was logged.
type fencedLog struct{ xa.RecoveryLog }

func (fencedLog) LogCommit(context.Context, xa.CommitRecord) error {
	return fmt.Errorf("sqllog: log commit: %w (epoch 3, the log is at epoch 4)", xa.ErrFenced)
}

// TestFencedDecisionAborts: a coordinator whose decision write is refused
// because its lease epoch moved on (a paused node, taken over) reports
// aborted, never committed and never "outcome unknown" (nothing was
// logged, and the process that took the log over rolls its branches back,
// or has): it rolls its own branches back at once.
func TestFencedDecisionAborts(t *testing.T) {
	r := newRig(t, 2, xa.Config{})
	mgr, err := xa.NewManager(xa.Config{Node: "test", Log: fencedLog{r.log}, Phase2Timeout: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, _ := mgr.Begin(ctx)
	if err := r.put(tx, 0, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := r.put(tx, 1, 1, 20); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	t.Logf("Commit = %+v, %v", res, err)
	if res.Committed || xa.OutcomeUnknown(err) || !errors.Is(err, xa.ErrAborted) || !errors.Is(err, xa.ErrFenced) {
		t.Fatalf("Commit after a fenced decision write: %+v, %v; want aborted, because of the fence", res, err)
	}
	for i := range 2 {
		if v, c := r.row(i, 1); c {
			t.Fatalf("rm%d's row is committed (%d)", i, v)
		}
		if p := r.dbs[i].Prepared(); len(p) != 0 {
			t.Fatalf("rm%d still holds prepared branches %v: the coordinator did not roll back", i, p)
		}
	}
}

// TestClockOff: a coordinator whose clock is minutes off stamps its
// transactions' begin time with it, and commits as usual: its own timeout
// runs on the process's monotonic clock. (A clock three minutes behind
// made the transaction's context end at once, and its expiry ran before
// the transaction was set up: a nil stopExp.)
func TestClockOff(t *testing.T) {
	for _, skew := range []time.Duration{-3 * time.Minute, 3 * time.Minute} {
		clock := func() time.Time { return time.Now().Add(skew) }
		r := newRig(t, 2, xa.Config{Now: clock})
		r.log.SetClock(clock) // the log in the coordinator's process reads the same clock
		ctx := context.Background()
		tx, err := r.mgr.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := tx.ID().Begun.Sub(time.Now()); d < skew-time.Second || d > skew+time.Second {
			t.Fatalf("skew %v: the global id says begun %v from now", skew, d)
		}
		if err := r.put(tx, 0, 1, 10); err != nil {
			t.Fatal(err)
		}
		if err := r.put(tx, 1, 1, 20); err != nil {
			t.Fatal(err)
		}
		if res, err := tx.Commit(ctx); err != nil || !res.Committed {
			t.Fatalf("skew %v: Commit = %+v, %v", skew, res, err)
		}
	}
}
