package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// flakyOwner is the fake Owner whose Rewind fails the first fails calls, as
// when the progress target is down for a moment (restarting).
type flakyOwner struct {
	*fake
	mu    sync.Mutex
	fails int
	calls int
}

func (o *flakyOwner) Rewind(ctx context.Context, parts []string) (map[string]string, []string, error) {
	o.mu.Lock()
	o.calls++
	fail := o.calls <= o.fails
	o.mu.Unlock()
	if fail {
		return nil, nil, errors.New("dial tcp: connection refused (the progress target is restarting)")
	}
	return o.fake.Rewind(ctx, parts)
}

// TestRunnerRewindOutageRiddenOut checks that an aborted checkpoint whose
// read-back of the committed positions (Owner.Rewind) fails because the
// progress target is down is tried again after the next pause, counted as
// one more abort, and that Run then reads on, exactly once. Found by an
// adversarial review: Run returned the first failed Rewind at once,
// uncounted ("sink: reading the committed positions after an abort (sink:
// checkpoint 2 aborted: refused): dial tcp: connection refused ...").
func TestRunnerRewindOutageRiddenOut(t *testing.T) {
	f := newFake()
	f.abortOnce[2] = true // the checkpoint that meets the outage
	o := &flakyOwner{fake: f, fails: 3}
	opts := fastOpts()
	opts.MaxAborts = 5
	opts.AbortBackoff = 5 * time.Millisecond
	err := NewRunner[uint64](f, o, opts).Run(context.Background(), &memSource{k: 1, n: 50, batch: 5})
	if err != nil {
		t.Fatalf("one abort (MaxAborts 5) while the progress target was down for three reads stopped Run: %v", err)
	}
	f.exactlyOnce(t, 1, 50)
}

// TestRunnerRewindOutageCounted checks that failed read-backs count
// against MaxAborts: a progress target that stays down stops Run after
// MaxAborts aborts in a row (one checkpoint, then the failed Rewinds),
// with the last error.
func TestRunnerRewindOutageCounted(t *testing.T) {
	f := newFake()
	f.abortOnce[2] = true
	o := &flakyOwner{fake: f, fails: 1 << 30}
	opts := fastOpts()
	opts.MaxAborts = 4
	opts.AbortBackoff = time.Millisecond
	err := NewRunner[uint64](f, o, opts).Run(context.Background(), &memSource{k: 1, n: 50, batch: 5})
	if err == nil || !errors.Is(err, ErrAborted) {
		t.Fatalf("Run with the progress target down for good: %v, want the abort after MaxAborts", err)
	}
	if o.calls != 3 {
		t.Fatalf("Rewind tried %d times, want 3 (MaxAborts 4: the checkpoint's abort and 3 failed read-backs)", o.calls)
	}
}

// TestRunnerUnresolvedBehindAnAbort: checkpoint 3's decision is in flight
// when checkpoint 4 fails to prepare; 3's decision then comes back
// unresolved. Run must stop with ErrUnresolved (a restart's restore settles
// 3) rather than read again and go on, leaving 3's branches prepared and
// undecided. (Found by internal/sinke2e TestKillDatabase, "maria killed
// during commit": the unresolved outcome, collected while recovering from
// the later abort, was dropped.)
func TestRunnerUnresolvedBehindAnAbort(t *testing.T) {
	f := newFake()
	c := &unresolvedBehindAbort{fake: f, failed: make(chan struct{})}
	src := &memSource{k: 2, n: 60, batch: 3}
	err := NewRunner[uint64](c, f, fastOpts()).Run(context.Background(), src)
	if !errors.Is(err, ErrUnresolved) {
		t.Fatalf("Run: %v; want it to stop with ErrUnresolved (checkpoint 3's decision)", err)
	}
}

// unresolvedBehindAbort fails PreCommit of checkpoint 4 and then answers
// checkpoint 3's Commit, held until then, with an unresolved decision.
type unresolvedBehindAbort struct {
	*fake
	failed chan struct{}
}

func (u *unresolvedBehindAbort) PreCommit(ctx context.Context, h uint64, cp uint64) (uint64, error) {
	if h == 4 {
		close(u.failed)
		return 0, &AbortError{Checkpoint: h, Reason: errors.New("prepare refused: the database went down")}
	}
	return u.fake.PreCommit(ctx, h, cp)
}

func (u *unresolvedBehindAbort) Commit(ctx context.Context, h uint64) error {
	if h == 3 {
		<-u.failed
		return fmt.Errorf("sink: checkpoint 3: %w: the decision's reply was lost", ErrUnresolved)
	}
	return u.fake.Commit(ctx, h)
}

// seekRevokingSource calls Revoked from within Seek: outside Poll, which
// the Source contract forbids.
type seekRevokingSource struct {
	memSource
	got error
}

func (s *seekRevokingSource) Seek(ctx context.Context, pos map[string]string) error {
	if s.taken && s.got == nil {
		s.got = s.h.Revoked(ctx, []string{"p0"})
		if s.got == nil {
			s.got = errors.New("accepted")
		}
	}
	return s.memSource.Seek(ctx, pos)
}

// TestRunnerHandlerOutsidePoll: a Handler call made outside Poll (here
// from Seek, while the Runner recovers from an abort) is refused with
// ErrConfig and changes nothing: the run goes on, exactly once.
func TestRunnerHandlerOutsidePoll(t *testing.T) {
	f := newFake()
	f.abortOnce[2] = true
	src := &seekRevokingSource{memSource: memSource{k: 2, n: 50, batch: 3}}
	if err := NewRunner[uint64](f, f, fastOpts()).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(src.got, ErrConfig) {
		t.Fatalf("Revoked from Seek returned %v, want ErrConfig", src.got)
	}
	f.exactlyOnce(t, 2, 50)
}
