package xa

import (
	"context"
	"errors"
	"time"
)

// This file is the phase-2 kernel (docs/protocol.md, "The phase-2
// kernel"): one retry policy, one pure judgement of a phase-2 reply, and
// one retry loop. The coordinator's machine (machine.go) judges its
// replies here; the recovery scanner, the SQL sink's commit and its
// restore run their phase 2 through Phase2. The rule it holds in one
// place:
//
//   - a commit that answers "unknown XID" (ErrUnknownXID) counts as
//     committed only when a decision proves it (a commit record, a
//     decision row); without proof its outcome is unknown;
//   - a branch the database rolled back although the decision was commit
//     (ErrRolledBack, ErrHeuristic) is a heuristic outcome: reported,
//     never retried, never hidden;
//   - a reply that was lost (ErrOutcomeUnknown) may have committed: the
//     loop says so (Phase2Result.Lost);
//   - any other failure is retried by the policy, then given up to
//     recovery (or restore).

// DefaultMaxBackoff caps a RetryPolicy's backoff when MaxBackoff is zero.
const DefaultMaxBackoff = 2 * time.Second

// RetryPolicy says how often and how patiently phase 2 of one branch is
// tried before it is left to recovery. The zero value tries once, bounded
// only by the caller's context.
type RetryPolicy struct {
	// Attempts is how many times the branch is told to commit (or roll
	// back); less than 1 means 1.
	Attempts int
	// Timeout bounds each attempt; 0: only the caller's context does.
	Timeout time.Duration
	// Backoff is the wait before the second attempt; it doubles with each
	// further attempt. 0: no wait.
	Backoff time.Duration
	// MaxBackoff caps the wait; 0 means DefaultMaxBackoff.
	MaxBackoff time.Duration
}

// Tries returns the number of attempts the policy allows (at least 1).
func (p RetryPolicy) Tries() int { return max(p.Attempts, 1) }

// Wait returns the pause before attempt n (n >= 1): none before the
// first, Backoff before the second, doubling after, at most MaxBackoff.
func (p RetryPolicy) Wait(n int) time.Duration {
	if n <= 1 || p.Backoff <= 0 {
		return 0
	}
	ceiling := p.MaxBackoff
	if ceiling <= 0 {
		ceiling = DefaultMaxBackoff
	}
	if n-2 >= 32 {
		return ceiling
	}
	d := p.Backoff << (n - 2)
	if d > ceiling || d <= 0 {
		d = ceiling
	}
	return d
}

// Budget is the longest the policy keeps working on one branch before it
// leaves it to recovery: every attempt's Timeout with the wait before it.
// A decision log's grace must cover a coordinator's budget (Phase2Budget).
func (p RetryPolicy) Budget() time.Duration {
	total := time.Duration(0)
	for n := 1; n <= p.Tries(); n++ {
		total += p.Timeout + p.Wait(n)
	}
	return total
}

// Phase2Verdict is the kernel's judgement of a phase-2 reply, and the
// outcome of a phase-2 loop.
type Phase2Verdict int

const (
	// Phase2Done: the branch ended as asked (committed, or rolled back;
	// a rollback that finds the branch gone is done too).
	Phase2Done Phase2Verdict = 1 + iota
	// Phase2Retry: the attempt failed in a way another attempt may
	// mend; the policy allows one more.
	Phase2Retry
	// Phase2UnknownCommitted: the commit answered "unknown XID" and a
	// decision proves the transaction committed: nothing else can have
	// ended the branch. Counts as committed.
	Phase2UnknownCommitted
	// Phase2UnknownUnproven: the commit answered "unknown XID" and
	// nothing at hand proves a commit: an earlier attempt (or recovery)
	// may have committed it, or something rolled it back. The outcome is
	// unknown until a decision is consulted.
	Phase2UnknownUnproven
	// Phase2Heuristic: the database rolled back a branch whose decision
	// was commit (or ended it against the decision): a heuristic outcome,
	// to be reported, never retried.
	Phase2Heuristic
	// Phase2GiveUp: the attempts are spent (or the loop was ended): the
	// branch is left to recovery, which finishes it from the decision.
	Phase2GiveUp
)

var phase2VerdictNames = [...]string{"", "done", "retry", "unknown-xid-committed", "unknown-xid-unproven", "heuristic", "give-up"}

func (v Phase2Verdict) String() string {
	if v <= 0 || int(v) >= len(phase2VerdictNames) {
		return "Phase2Verdict(invalid)"
	}
	return phase2VerdictNames[v]
}

// JudgeCommitReply judges the reply err to a commit of a prepared branch
// whose transaction is decided commit. proven says a decision (a commit
// record, a decision row) proves that nothing but a commit can have ended
// the branch; last says the policy allows no further attempt. It does no
// I/O.
func JudgeCommitReply(err error, proven, last bool) Phase2Verdict {
	switch {
	case err == nil:
		return Phase2Done
	case errors.Is(err, ErrUnknownXID) && proven:
		return Phase2UnknownCommitted
	case errors.Is(err, ErrUnknownXID):
		return Phase2UnknownUnproven
	case errors.Is(err, ErrRolledBack), errors.Is(err, ErrHeuristic):
		return Phase2Heuristic
	case last:
		return Phase2GiveUp
	}
	return Phase2Retry
}

// JudgeRollbackReply judges the reply err to a rollback of a branch whose
// transaction aborts; last says the policy allows no further attempt. A
// branch the database does not know is rolled back (ResourceManager's
// contract). It does no I/O.
func JudgeRollbackReply(err error, last bool) Phase2Verdict {
	switch {
	case err == nil, errors.Is(err, ErrUnknownXID):
		return Phase2Done
	case errors.Is(err, ErrHeuristic):
		return Phase2Heuristic
	case last:
		return Phase2GiveUp
	}
	return Phase2Retry
}

// Phase2Call says what a Phase2 loop does.
type Phase2Call struct {
	// Rollback: the branch is rolled back; otherwise committed.
	Rollback bool
	// Proven: a decision proves the transaction committed, so a commit
	// that answers "unknown XID" counts as committed (commits only).
	Proven bool
	// Stop, if set, is asked after each failed attempt; a non-nil answer
	// ends the loop at once (the caller is closing): Phase2Result.Stopped.
	Stop func() error
}

// Phase2Result is the outcome of a Phase2 loop.
type Phase2Result struct {
	// Verdict is never Phase2Retry: Done, UnknownCommitted (the branch
	// ended as asked), UnknownUnproven, Heuristic or GiveUp.
	Verdict Phase2Verdict
	// Attempts made.
	Attempts int
	// Lost: an attempt's reply was lost (ErrOutcomeUnknown): it may have
	// taken effect although the loop did not see it.
	Lost bool
	// Stopped: Phase2Call.Stop ended the loop (Err is the last reply).
	Stopped bool
	// Err is nil when the branch ended as asked (Done, UnknownCommitted);
	// otherwise the last reply's error, joined with the context's error
	// when the context ended the retries.
	Err error
}

// Ended reports whether the branch is known to have ended as asked.
func (r Phase2Result) Ended() bool {
	return r.Verdict == Phase2Done || r.Verdict == Phase2UnknownCommitted
}

// Phase2 runs phase 2 of one branch: attempt (the caller's I/O, given a
// context bounded by p.Timeout) until the kernel judges its reply final or
// p's attempts are spent, waiting p.Wait between attempts. The first
// attempt always runs; a retry does not start once ctx has ended.
func Phase2(ctx context.Context, p RetryPolicy, c Phase2Call, attempt func(ctx context.Context) error) Phase2Result {
	var res Phase2Result
	tries := p.Tries()
	for n := 1; ; n++ {
		if n > 1 && !pause(ctx, p.Wait(n)) {
			res.Verdict, res.Err = Phase2GiveUp, errors.Join(res.Err, ctx.Err())
			return res
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if p.Timeout > 0 {
			actx, cancel = context.WithTimeout(ctx, p.Timeout)
		}
		err := attempt(actx)
		cancel()
		res.Attempts = n
		res.Lost = res.Lost || OutcomeUnknown(err)
		last := n >= tries
		var v Phase2Verdict
		if c.Rollback {
			v = JudgeRollbackReply(err, last)
		} else {
			v = JudgeCommitReply(err, c.Proven, last)
		}
		res.Verdict, res.Err = v, err
		if res.Ended() {
			res.Err = nil
		}
		if v == Phase2Retry || v == Phase2GiveUp {
			if c.Stop != nil && c.Stop() != nil {
				res.Verdict, res.Stopped = Phase2GiveUp, true
				return res
			}
		}
		if v != Phase2Retry {
			return res
		}
	}
}

// pause waits d; false if ctx ended first (or had ended).
func pause(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
