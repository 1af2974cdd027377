package sqlsink

import (
	"context"
	"math/rand/v2"
	"time"
)

// The sink's retries of its own statements (the decision's fate, a claim,
// restore's waits, an incarnation's allocation) wait backoff(attempt)
// between attempts; allocations, where instances starting together
// collide, a jittered part of it.

// backoff is the pause before retry number attempt: 50 ms, doubling, at
// most 2 s.
func backoff(attempt int) time.Duration {
	return min(50*time.Millisecond<<attempt, 2*time.Second)
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
