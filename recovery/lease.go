package recovery

import (
	"context"
	"fmt"
	"time"
)

// Presumption says when recovery may presume abort of a decision log's
// undecided branches (docs/protocol.md, "Leases, epochs, takeover").
type Presumption int

const (
	// PresumeAfterGrace: the log's own coordinator may still be deciding:
	// presumed abort once a branch is older than the grace period. Logs
	// without a lease (recovery/filelog: one process has the log) always
	// say this.
	PresumeAfterGrace Presumption = 1 + iota
	// PresumeNow: this process took the log over at a new epoch; the
	// database refuses every decision of the log's previous holders
	// since, so a branch with no decision now never gets one: presumed
	// abort without waiting for the grace period.
	PresumeNow
	// PresumeNever: another process holds the log (or took it over from
	// this one): presuming abort is its recovery's, never this one's.
	// Decided branches are still committed, aborted ones rolled back.
	PresumeNever
)

var presumptionNames = [...]string{"", "after-grace", "now", "never"}

func (p Presumption) String() string {
	if p <= 0 || int(p) >= len(presumptionNames) {
		return "Presumption(invalid)"
	}
	return presumptionNames[p]
}

// Leased is implemented by decision logs held under a lease
// (recovery/sqllog): a scan asks it once, at its start, whether and when
// it may presume abort, and why (for reports). A log that does not
// implement it is PresumeAfterGrace.
type Leased interface {
	Presumption(ctx context.Context) (p Presumption, why string, err error)
}

// leaseView is what a scan learned from the log's lease.
type leaseView struct {
	presume Presumption // 0: the log has no lease (after the grace)
	why     string
}

// presumption asks the log when this scan may presume abort. An error
// reading it is PresumeNever: nothing is presumed on a guess.
func (s *Scanner) presumption(ctx context.Context) leaseView {
	l, ok := s.cfg.Log.(Leased)
	if !ok {
		return leaseView{}
	}
	p, why, err := l.Presumption(ctx)
	if err != nil {
		return leaseView{presume: PresumeNever, why: fmt.Sprintf("the decision log's lease could not be read (%v): nothing is presumed aborted", err)}
	}
	return leaseView{presume: p, why: why}
}

// wait reports whether a branch of this log with no decision, young
// (within the grace period) or not, is left alone for now (verdict Wait):
// its coordinator may still decide.
func (lv leaseView) wait(young bool) bool {
	switch lv.presume {
	case PresumeNever:
		return true
	case PresumeNow:
		return false
	}
	return young
}

// waitReason says why such a branch is left alone.
func (lv leaseView) waitReason(grace time.Duration) string {
	if lv.presume == PresumeNever {
		return "no decision yet; " + lv.why
	}
	return fmt.Sprintf("no decision yet; presumed aborted once older than %v", grace)
}

// abortReason is the reason recorded with a presumed abort.
func (lv leaseView) abortReason(participant string, age, grace time.Duration) string {
	if lv.presume == PresumeNow {
		return fmt.Sprintf("presumed abort: prepared on %s for %v with no decision; %s", participant, age.Round(time.Millisecond), lv.why)
	}
	return fmt.Sprintf("presumed abort: prepared on %s for %v with no decision (grace %v)", participant, age.Round(time.Millisecond), grace)
}

// NodeClock is implemented by decision logs whose node's clock may differ
// from the clock that stamped the log's creation (recovery/sqllog: the
// node stamps its transactions' begin times, the database stamped the
// log's creation; the node measures the offset). Recovery translates a
// branch's begin time by it before it compares it with the log's creation
// (Predates): a node whose clock runs behind would otherwise have every
// branch "older than its log".
type NodeClock interface {
	// OnLogClock returns the time on the log's clock at which the log's
	// node's clock said begun.
	OnLogClock(begun time.Time) time.Time
}

// predates reports whether a branch begun at begun (its node's clock) began
// before the scanner's log was created.
func (s *Scanner) predates(begun time.Time) bool {
	if nc, ok := s.cfg.Log.(NodeClock); ok {
		begun = nc.OnLogClock(begun)
	}
	return begun.Before(s.ident.Created.Truncate(time.Millisecond))
}
