package sqlsink

import (
	"testing"
	"time"
)

// TestRetryNumbers pins the sink's retry numbers, now xa.RetryPolicy
// values: its own statements wait 50 ms doubling to 2 s and are tried 5
// times; phase 2 of a branch waits 100 ms before its first retry,
// doubling to 2 s, Phase2Attempts times of Phase2Timeout; restore tries
// once.
func TestRetryNumbers(t *testing.T) {
	for k, want := range []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000} {
		if got := backoff(k); got != want*time.Millisecond {
			t.Errorf("backoff(%d) = %v, want %v", k, got, want*time.Millisecond)
		}
	}
	if got := backoff(70); got != 2*time.Second {
		t.Errorf("backoff(70) = %v, want the 2s cap", got)
	}
	if sinkRetry.Tries() != 5 {
		t.Errorf("sinkRetry tries %d times, want 5", sinkRetry.Tries())
	}
	s := &Sink{cfg: Config{Phase2Attempts: 5, Phase2Timeout: 5 * time.Second}}
	p := s.phase2Retry()
	if p.Tries() != 5 || p.Timeout != 5*time.Second {
		t.Errorf("phase2Retry() = %+v, want 5 attempts of 5s", p)
	}
	// Retry k (attempt k+1) waits backoff(k), as the sink's own loop did.
	for k := 1; k < 10; k++ {
		if got, want := p.Wait(k+1), backoff(k); got != want {
			t.Errorf("phase2Retry().Wait(%d) = %v, want backoff(%d) = %v", k+1, got, k, want)
		}
	}
	if got := p.Budget(); got != 25*time.Second+1500*time.Millisecond {
		t.Errorf("phase2Retry().Budget() = %v, want 26.5s", got)
	}
	if r := s.restoreRetry(); r.Tries() != 1 || r.Timeout != 5*time.Second {
		t.Errorf("restoreRetry() = %+v, want one attempt of 5s", r)
	}
}
