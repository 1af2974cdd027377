package sqlsink

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/xadb/xa/xa"
)

// The sink's retries of its own statements (the decision's fate, a claim,
// restore's waits, an incarnation's allocation) wait backoff(attempt)
// between attempts; allocations, where instances starting together
// collide, a jittered part of it. Phase 2 of a branch runs through xa's
// phase-2 kernel (xa.Phase2) with Sink.phase2Retry.

// sinkRetry is the sink's retry policy (docs/sink.md): 5 tries of its own
// statements (a claim, an external decision), waiting 50 ms doubling to
// at most 2 s.
var sinkRetry = xa.RetryPolicy{Attempts: 5, Backoff: 50 * time.Millisecond, MaxBackoff: 2 * time.Second}

// backoff is the pause after attempt number attempt (0 for the first)
// failed, before the next: 50 ms, doubling, at most 2 s.
func backoff(attempt int) time.Duration { return sinkRetry.Wait(attempt + 2) }

// phase2Retry is the policy of phase 2 of one branch (a decided
// checkpoint's commit): Phase2Attempts attempts of at most Phase2Timeout
// each, waiting backoff(k) before retry k (100 ms before the first,
// doubling, at most 2 s).
func (s *Sink) phase2Retry() xa.RetryPolicy {
	return xa.RetryPolicy{Attempts: s.cfg.Phase2Attempts, Timeout: s.cfg.Phase2Timeout, Backoff: backoff(1), MaxBackoff: sinkRetry.MaxBackoff}
}

// restoreRetry is the policy of restore's phase 2 of one branch: one
// attempt of at most Phase2Timeout; the next restore is the retry.
func (s *Sink) restoreRetry() xa.RetryPolicy {
	return xa.RetryPolicy{Attempts: 1, Timeout: s.cfg.Phase2Timeout}
}

// jitter returns a random duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// retryCollisions runs f up to tries times while it fails with an error
// that again says is a collision with instances starting together (a
// taken key, a deadlock), waiting a jittered, growing backoff before each
// retry so that they stop colliding. It returns f's last error (nil once
// f succeeds), or the last before ctx ended.
func retryCollisions(ctx context.Context, tries int, again func(error) bool, f func() error) error {
	var err error
	for attempt := range tries {
		if attempt > 0 && !sleep(ctx, jitter(backoff(attempt))) {
			break
		}
		if err = f(); err == nil || !again(err) {
			return err
		}
	}
	return err
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
