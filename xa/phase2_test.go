package xa_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

var (
	errLost    = &xa.Error{Op: "commit", Kind: xa.ErrOutcomeUnknown, Err: errors.New("connection reset")}
	errBusy    = &xa.Error{Op: "commit", Kind: xa.ErrRetryable, Err: errors.New("session still attached")}
	errPlain   = errors.New("server gone away")
	errUnknown = fmt.Errorf("commit: %w", xa.ErrUnknownXID)
	errRolled  = fmt.Errorf("commit: %w", xa.ErrRolledBack)
	errHeur    = &xa.HeuristicError{RolledBack: []string{"pg"}}
)

// TestJudgeCommitReply: the unknown-XID rule, heuristics, retries and the
// last attempt, one row each.
func TestJudgeCommitReply(t *testing.T) {
	for _, c := range []struct {
		name         string
		err          error
		proven, last bool
		want         xa.Phase2Verdict
	}{
		{"committed", nil, false, false, xa.Phase2Done},
		{"committed on the last attempt", nil, false, true, xa.Phase2Done},
		{"unknown XID with a decision's proof", errUnknown, true, false, xa.Phase2UnknownCommitted},
		{"unknown XID with proof, last attempt", errUnknown, true, true, xa.Phase2UnknownCommitted},
		{"unknown XID without proof", errUnknown, false, false, xa.Phase2UnknownUnproven},
		{"unknown XID without proof, last attempt", errUnknown, false, true, xa.Phase2UnknownUnproven},
		{"rolled back after the commit decision", errRolled, true, false, xa.Phase2Heuristic},
		{"rolled back, last attempt", errRolled, false, true, xa.Phase2Heuristic},
		{"heuristic error", errHeur, true, false, xa.Phase2Heuristic},
		{"lost reply", errLost, true, false, xa.Phase2Retry},
		{"lost reply, last attempt", errLost, true, true, xa.Phase2GiveUp},
		{"retryable", errBusy, false, false, xa.Phase2Retry},
		{"plain failure", errPlain, true, false, xa.Phase2Retry},
		{"plain failure, last attempt", errPlain, true, true, xa.Phase2GiveUp},
		{"context ended", context.DeadlineExceeded, true, false, xa.Phase2Retry},
	} {
		if got := xa.JudgeCommitReply(c.err, c.proven, c.last); got != c.want {
			t.Errorf("%s: JudgeCommitReply(%v, proven=%v, last=%v) = %v, want %v", c.name, c.err, c.proven, c.last, got, c.want)
		}
	}
}

func TestJudgeRollbackReply(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		last bool
		want xa.Phase2Verdict
	}{
		{"rolled back", nil, false, xa.Phase2Done},
		{"gone: rolled back", errUnknown, false, xa.Phase2Done},
		{"gone, last attempt", errUnknown, true, xa.Phase2Done},
		{"heuristic", errHeur, false, xa.Phase2Heuristic},
		{"lost reply", errLost, false, xa.Phase2Retry},
		{"plain failure", errPlain, false, xa.Phase2Retry},
		{"plain failure, last attempt", errPlain, true, xa.Phase2GiveUp},
		{"retryable, last attempt", errBusy, true, xa.Phase2GiveUp},
	} {
		if got := xa.JudgeRollbackReply(c.err, c.last); got != c.want {
			t.Errorf("%s: JudgeRollbackReply(%v, last=%v) = %v, want %v", c.name, c.err, c.last, got, c.want)
		}
	}
}

// TestRetryPolicyNumbers pins each caller's numbers: the coordinator's
// defaults (8 × 10 s, 20 ms doubling to 2 s), and the wait sequence.
func TestRetryPolicyNumbers(t *testing.T) {
	p := xa.RetryPolicy{Attempts: 8, Timeout: 10 * time.Second, Backoff: 20 * time.Millisecond}
	wantWaits := []time.Duration{0, 0, 20, 40, 80, 160, 320, 640, 1280, 2000, 2000}
	for n, w := range wantWaits {
		if got := p.Wait(n); got != w*time.Millisecond {
			t.Errorf("Wait(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := p.Wait(100); got != xa.DefaultMaxBackoff {
		t.Errorf("Wait(100) = %v, want the cap %v", got, xa.DefaultMaxBackoff)
	}
	capped := xa.RetryPolicy{Backoff: time.Second, MaxBackoff: 1500 * time.Millisecond}
	if got := capped.Wait(3); got != 1500*time.Millisecond {
		t.Errorf("capped Wait(3) = %v, want 1.5s", got)
	}
	want := 80*time.Second + 2540*time.Millisecond
	if got := p.Budget(); got != want {
		t.Errorf("Budget() = %v, want %v", got, want)
	}
	if got := xa.Phase2Budget(xa.DefaultPhase2Attempts, xa.DefaultPhase2Timeout, xa.DefaultRetryBackoff); got != want {
		t.Errorf("Phase2Budget(defaults) = %v, want %v", got, want)
	}
	cfg := xa.Config{Phase2Attempts: 8, Phase2Timeout: 10 * time.Second, RetryBackoff: 20 * time.Millisecond}
	if got := cfg.Phase2Policy(); got.Budget() != want || got.Attempts != 8 {
		t.Errorf("Config.Phase2Policy() = %+v, budget %v, want %v", got, got.Budget(), want)
	}
	if got := (xa.RetryPolicy{Timeout: time.Second}).Budget(); got != time.Second {
		t.Errorf("zero policy's Budget() = %v, want one attempt of 1s", got)
	}
}

// script is a fake attempt: it answers with errs in turn (the last one
// from then on), and counts its calls.
type script struct {
	errs  []error
	calls int
	at    []time.Time
	dl    []bool // the attempt's context had a deadline
}

func (s *script) attempt(ctx context.Context) error {
	s.at = append(s.at, time.Now())
	_, ok := ctx.Deadline()
	s.dl = append(s.dl, ok)
	i := min(s.calls, len(s.errs)-1)
	s.calls++
	return s.errs[i]
}

func TestPhase2Loop(t *testing.T) {
	fast := xa.RetryPolicy{Attempts: 4, Backoff: time.Millisecond}
	for _, c := range []struct {
		name     string
		call     xa.Phase2Call
		errs     []error
		verdict  xa.Phase2Verdict
		attempts int
		lost     bool
		err      error // matched with errors.Is; nil: Err must be nil
	}{
		{"first attempt commits", xa.Phase2Call{}, []error{nil}, xa.Phase2Done, 1, false, nil},
		{"retried until it commits", xa.Phase2Call{}, []error{errPlain, errBusy, nil}, xa.Phase2Done, 3, false, nil},
		{"lost reply, then unknown XID, proven", xa.Phase2Call{Proven: true}, []error{errLost, errUnknown}, xa.Phase2UnknownCommitted, 2, true, nil},
		{"lost reply, then unknown XID, unproven", xa.Phase2Call{}, []error{errLost, errUnknown}, xa.Phase2UnknownUnproven, 2, true, xa.ErrUnknownXID},
		{"heuristic is not retried", xa.Phase2Call{Proven: true}, []error{errRolled}, xa.Phase2Heuristic, 1, false, xa.ErrRolledBack},
		{"attempts spent", xa.Phase2Call{}, []error{errPlain}, xa.Phase2GiveUp, 4, false, errPlain},
		{"attempts spent, a reply lost", xa.Phase2Call{}, []error{errLost, errPlain}, xa.Phase2GiveUp, 4, true, errPlain},
		{"rollback of a gone branch", xa.Phase2Call{Rollback: true}, []error{errPlain, errUnknown}, xa.Phase2Done, 2, false, nil},
		{"rollback given up", xa.Phase2Call{Rollback: true}, []error{errBusy}, xa.Phase2GiveUp, 4, false, xa.ErrRetryable},
		{"stopped by the caller", xa.Phase2Call{Stop: func() error { return errors.New("closed") }}, []error{errPlain, nil}, xa.Phase2GiveUp, 1, false, errPlain},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &script{errs: c.errs}
			res := xa.Phase2(context.Background(), fast, c.call, s.attempt)
			if res.Verdict != c.verdict || res.Attempts != c.attempts || s.calls != c.attempts || res.Lost != c.lost {
				t.Errorf("got %v after %d attempts (%d calls), lost %v; want %v after %d, lost %v", res.Verdict, res.Attempts, s.calls, res.Lost, c.verdict, c.attempts, c.lost)
			}
			if c.err == nil && res.Err != nil || c.err != nil && !errors.Is(res.Err, c.err) {
				t.Errorf("Err = %v, want %v", res.Err, c.err)
			}
			if res.Ended() != (c.err == nil) {
				t.Errorf("Ended() = %v with Err %v", res.Ended(), res.Err)
			}
			if res.Stopped != (c.call.Stop != nil) {
				t.Errorf("Stopped = %v", res.Stopped)
			}
		})
	}
}

// TestPhase2LoopWaits: the loop waits the policy's backoff before each
// retry, and bounds each attempt by its Timeout.
func TestPhase2LoopWaits(t *testing.T) {
	p := xa.RetryPolicy{Attempts: 3, Timeout: time.Minute, Backoff: 40 * time.Millisecond}
	s := &script{errs: []error{errPlain}}
	res := xa.Phase2(context.Background(), p, xa.Phase2Call{}, s.attempt)
	if res.Verdict != xa.Phase2GiveUp || s.calls != 3 {
		t.Fatalf("got %v after %d calls, want give-up after 3", res.Verdict, s.calls)
	}
	for n := 2; n <= 3; n++ {
		if gap := s.at[n-1].Sub(s.at[n-2]); gap < p.Wait(n) {
			t.Errorf("attempt %d came %v after the one before, want at least Wait(%d) = %v", n, gap, n, p.Wait(n))
		}
	}
	for i, ok := range s.dl {
		if !ok {
			t.Errorf("attempt %d had no deadline, want Timeout's", i+1)
		}
	}
	s = &script{errs: []error{nil}}
	xa.Phase2(context.Background(), xa.RetryPolicy{}, xa.Phase2Call{}, s.attempt)
	if s.dl[0] {
		t.Errorf("a policy without Timeout gave the attempt a deadline")
	}
}

// TestPhase2LoopContext: once the caller's context ends, no retry starts;
// the first attempt always runs.
func TestPhase2LoopContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := xa.RetryPolicy{Attempts: 10, Backoff: time.Hour}
	s := &script{errs: []error{errPlain}}
	done := make(chan xa.Phase2Result)
	go func() { done <- xa.Phase2(ctx, p, xa.Phase2Call{}, s.attempt) }()
	time.Sleep(20 * time.Millisecond) // the loop is in its hour-long backoff
	cancel()
	select {
	case res := <-done:
		if res.Verdict != xa.Phase2GiveUp || res.Attempts != 1 || !errors.Is(res.Err, context.Canceled) || !errors.Is(res.Err, errPlain) {
			t.Errorf("got %v after %d attempts, err %v; want give-up after 1, with the reply and context.Canceled", res.Verdict, res.Attempts, res.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end with its context")
	}

	s = &script{errs: []error{errPlain, nil}}
	res := xa.Phase2(ctx, xa.RetryPolicy{Attempts: 3}, xa.Phase2Call{}, s.attempt)
	if s.calls != 1 || res.Verdict != xa.Phase2GiveUp {
		t.Errorf("with an ended context: %d calls, %v; want the first attempt only, give-up", s.calls, res.Verdict)
	}
}

func TestPhase2VerdictString(t *testing.T) {
	if got := xa.Phase2UnknownUnproven.String(); got != "unknown-xid-unproven" {
		t.Errorf("String() = %q", got)
	}
	if got := xa.Phase2Verdict(0).String(); got != "Phase2Verdict(invalid)" {
		t.Errorf("String() = %q", got)
	}
}
