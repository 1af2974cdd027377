package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// stuckCommit is a Committer whose Commit does not answer until its
// context ends (a progress target that takes the statement and never
// replies, within the minutes of its own timeouts); release ends every
// Commit still held, so that the test leaves nothing behind.
type stuckCommit struct {
	*fake
	entered chan struct{}
	release chan struct{}
}

func (s *stuckCommit) Commit(ctx context.Context, h uint64) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		return &AbortError{Checkpoint: h, Reason: context.Cause(ctx)}
	case <-s.release:
		return errors.New("released by the test")
	}
}

// TestRunnerCancelWhileWaitingForCommitter: Run's context ends while its
// reader waits for the committer (MaxPending checkpoints are prepared and
// the first one's Commit does not answer). Run must return within about
// DrainTimeout of the cancel, leaving what it could not finish to restore
// (RunOptions.DrainTimeout: "what is left goes to restore"), rather than
// wait for the Commit for as long as it takes: the committer's context
// was not ended until Run's shutdown, which the waiting reader never
// reached, so an operator's stop (xactl sink run, SIGTERM) hung.
func TestRunnerCancelWhileWaitingForCommitter(t *testing.T) {
	f := newFake()
	c := &stuckCommit{fake: f, entered: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(c.release)
	opts := fastOpts()
	opts.MaxPending = 1
	opts.DrainTimeout = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- NewRunner[uint64](c, f, opts).Run(ctx, &memSource{k: 1, n: 100, batch: 10}) }()
	select {
	case <-c.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("checkpoint 1 never reached Commit")
	}
	time.Sleep(50 * time.Millisecond) // the reader waits for a slot by now
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its context ended with a checkpoint undecided")
		}
		t.Logf("Run: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatalf("Run still running 5 s after its context ended (DrainTimeout %v): the reader waits for a Commit that nothing ends", opts.DrainTimeout)
	}
}

// unresolvedAtShutdown answers checkpoint 1's Commit, a moment after
// Run's context has ended (Run is shutting down by then), with an
// unresolved decision.
type unresolvedAtShutdown struct {
	*fake
	entered chan struct{}
	ctx     context.Context
}

func (u *unresolvedAtShutdown) Commit(ctx context.Context, h uint64) error {
	if h == 1 {
		close(u.entered)
		<-u.ctx.Done()
		time.Sleep(100 * time.Millisecond) // the reader has left its loop
		return fmt.Errorf("sink: checkpoint 1: %w: the decision's reply was lost", ErrUnresolved)
	}
	return u.fake.Commit(ctx, h)
}

// idleSource returns its records in the first Poll, then none: each Poll
// waits for its context, as a source with nothing new does.
type idleSource struct{ memSource }

func (s *idleSource) Poll(ctx context.Context) ([]Record, error) {
	if !s.taken {
		return s.memSource.Poll(ctx)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRunnerUnresolvedAtShutdown: a checkpoint whose decision comes back
// unresolved while Run shuts down (its context ended) must not be
// reported as a plain cancel: Run's error says ErrUnresolved, so that
// the caller knows branches may stay prepared and undecided, holding
// their locks until a restore settles them.
func TestRunnerUnresolvedAtShutdown(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &unresolvedAtShutdown{fake: f, entered: make(chan struct{}), ctx: ctx}
	go func() {
		<-c.entered
		cancel()
	}()
	err := NewRunner[uint64](c, f, fastOpts()).Run(ctx, &idleSource{memSource{k: 1, n: 10, batch: 10}})
	if !errors.Is(err, ErrUnresolved) {
		t.Fatalf("Run: %v; want ErrUnresolved (checkpoint 1's decision came back unresolved while Run shut down)", err)
	}
	t.Logf("Run: %v", err)
}

// slowPrepare is a Committer whose PreCommit of checkpoint 1 signals
// entered and then takes a while, failing if its context ends meanwhile
// (a prepare cut between its branches: some prepared, some not).
type slowPrepare struct {
	*fake
	entered chan struct{}
	cut     chan error
}

func (s *slowPrepare) PreCommit(ctx context.Context, h uint64, cp uint64) (uint64, error) {
	if h != 1 {
		return s.fake.PreCommit(ctx, h, cp)
	}
	close(s.entered)
	select {
	case <-ctx.Done():
		s.cut <- context.Cause(ctx)
		return 0, fmt.Errorf("prepare cut: %w", context.Cause(ctx))
	case <-time.After(300 * time.Millisecond):
	}
	return s.fake.PreCommit(ctx, h, cp)
}

// TestRunnerStopDoesNotCutAPrepare: Run's context ends (SIGTERM) while a
// checkpoint's PreCommit runs. The prepare goes on (within DrainTimeout)
// and the shutdown commits the checkpoint. Before, PreCommit ran with
// Run's context and was cut: on MariaDB a branch whose XA PREPARE was
// under way stayed prepared after the stop, left to the next instance.
func TestRunnerStopDoesNotCutAPrepare(t *testing.T) {
	f := newFake()
	c := &slowPrepare{fake: f, entered: make(chan struct{}), cut: make(chan error, 1)}
	opts := fastOpts()
	opts.DrainTimeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- NewRunner[uint64](c, f, opts).Run(ctx, &memSource{k: 1, n: 10, batch: 10}) }()
	select {
	case <-c.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("checkpoint 1 never reached PreCommit")
	}
	cancel()
	select {
	case err := <-done:
		t.Logf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10 s after its context ended")
	}
	select {
	case err := <-c.cut:
		t.Fatalf("the stop cut checkpoint 1's PreCommit (%v): its branches are left to restore", err)
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.order, 1) {
		t.Fatalf("checkpoint 1, prepared during the stop, was not committed by the shutdown: committed %v, aborted %v", f.order, f.aborted)
	}
}
