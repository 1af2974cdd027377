package sink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// unresolvedLater answers Commit of checkpoint `hold` with ErrUnresolved,
// but only once `release` is closed (the decision's reply is lost while the
// run is already inside Lost/Revoked).
type unresolvedLater struct {
	*fake
	hold    uint64
	entered chan struct{}
	release chan struct{}
	failPre uint64 // PreCommit of this checkpoint fails (0: none)
}

func (u *unresolvedLater) Commit(ctx context.Context, h uint64) error {
	if h == u.hold {
		close(u.entered)
		<-u.release
		return fmt.Errorf("sink: checkpoint %d: %w: the decision's reply was lost", h, ErrUnresolved)
	}
	return u.fake.Commit(ctx, h)
}

func (u *unresolvedLater) PreCommit(ctx context.Context, h uint64, cp uint64) (uint64, error) {
	if u.failPre != 0 && h == u.failPre {
		return 0, &AbortError{Checkpoint: h, Reason: errors.New("prepare refused")}
	}
	return u.fake.PreCommit(ctx, h, cp)
}

// losingLaterSource calls Lost(p1) once the held checkpoint's decision is
// in flight; the decision then comes back unresolved while Lost waits.
type losingLaterSource struct {
	memSource
	u     *unresolvedLater
	done  bool
	mode  string // "lost" or "revoked"
	at    int    // the poll that sees p0 read this far waits for checkpoint 1's Commit
	calls int
}

func (s *losingLaterSource) Poll(ctx context.Context) ([]Record, error) {
	s.calls++
	if !s.done && s.taken && s.next[0] >= s.at {
		select {
		case <-time.After(5 * time.Second):
			return nil, errors.New("checkpoint 1's Commit never started")
		case <-s.u.entered:
			s.done = true
			go func() { time.Sleep(20 * time.Millisecond); close(s.u.release) }()
			var err error
			if s.mode == "lost" {
				err = s.h.(LostHandler).Lost(ctx, []string{"p1"})
			} else {
				err = s.h.Revoked(ctx, []string{"p1"})
			}
			if err != nil {
				return nil, err
			}
			s.next[1] = s.n
		}
	}
	return s.memSource.Poll(ctx)
}

// TestRunnerLostKeepsUnresolved: checkpoint 1's decision is in flight when
// partition p1 is lost; Lost waits for it and it comes back ErrUnresolved.
// Run must stop with ErrUnresolved (as recover does for the same outcome
// behind an abort), not read p0 again from the committed positions and go
// on. (Found by review: Lost reset x.failed, "Run: <nil>; want
// ErrUnresolved".)
func TestRunnerLostKeepsUnresolved(t *testing.T) {
	f := newFake()
	u := &unresolvedLater{fake: f, hold: 1, entered: make(chan struct{}), release: make(chan struct{})}
	src := &losingLaterSource{memSource: memSource{k: 2, n: 60, batch: 4}, u: u, mode: "lost", at: 5}
	opts := fastOpts()
	opts.CheckpointRecords = 8
	opts.MaxPending = 4
	err := NewRunner[uint64](u, f, opts).Run(runnerCtx(t), src)
	if !errors.Is(err, ErrUnresolved) {
		t.Fatalf("Run: %v; want ErrUnresolved (checkpoint 1's decision came back unresolved inside Lost and was dropped; committed p0=%d)", err, len(f.committed["p0"]))
	}
}

// TestRunnerRevokedKeepsUnresolved: checkpoint 1's decision is in flight
// when p1 is revoked; finishAll pre-commits the open checkpoint, which fails
// to prepare, then waits for 1, which comes back ErrUnresolved: the
// unresolved outcome, not the prepare failure, decides, and Run stops.
// (Found by review: finishAll returned the prepare failure and Revoked
// reset x.failed; Run read again and went on.)
func TestRunnerRevokedKeepsUnresolved(t *testing.T) {
	f := newFake()
	u := &unresolvedLater{fake: f, hold: 1, entered: make(chan struct{}), release: make(chan struct{})}
	src := &losingLaterSource{memSource: memSource{k: 2, n: 60, batch: 1}, u: u, mode: "revoked", at: 6}
	opts := fastOpts()
	opts.CheckpointRecords = 8
	opts.MaxPending = 4
	// Checkpoint 2 is open when Revoked runs (1 is in Commit); make its
	// prepare fail.
	u.failPre = 2
	err := NewRunner[uint64](u, f, opts).Run(runnerCtx(t), src)
	if !errors.Is(err, ErrUnresolved) {
		t.Fatalf("Run: %v; want ErrUnresolved (checkpoint 1's decision came back unresolved inside Revoked and was dropped; committed p0=%d)", err, len(f.committed["p0"]))
	}
}

func runnerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
