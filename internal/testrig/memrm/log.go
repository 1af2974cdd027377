package memrm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/xadb/xa/xa"
)

// Log is an in-memory decision log for protocol tests: "durable" means
// stored in its maps. It implements xa.RecoveryLog with the semantics of
// recovery/filelog (it passes recovery/logtest): the fence between commit
// and abort records, ErrDecisionTooLate by its clock, abort retention by
// its clock. Kill makes every later write fail without effect, as when the
// process writing it has died; reads go on working, as recovery reading the
// log after that process died.
type Log struct {
	mu          sync.Mutex
	ident       xa.LogIdentity
	now         func() time.Time
	records     map[string]xa.CommitRecord
	aborts      map[string]xa.AbortRecord
	delegations map[string]xa.Delegation
	parts       map[string]xa.ParticipantRecord
	heuristics  []xa.HeuristicRecord
	dead        bool
	// Writes counts LogCommit calls that stored a record.
	Writes int
}

var _ xa.RecoveryLog = (*Log)(nil)

// NewLog returns an empty log for node, with a fresh identity created now:
// xa.DefaultTimeout and the default grace (xa.GracePeriod). Its clock is
// time.Now (see SetClock). It panics if node is not a valid node id.
func NewLog(node string) *Log {
	ident, err := xa.NewLogIdentity(node, 0, 0, time.Now())
	if err != nil {
		panic(fmt.Sprintf("memrm: NewLog(%q): %v", node, err))
	}
	return NewLogFor(ident)
}

// NewLogFor returns an empty log with identity ident. Its clock is time.Now
// (see SetClock). It panics if ident is not valid.
func NewLogFor(ident xa.LogIdentity) *Log {
	if err := ident.Validate(); err != nil {
		panic(fmt.Sprintf("memrm: NewLogFor: %v", err))
	}
	return &Log{
		ident:       ident,
		now:         time.Now,
		records:     map[string]xa.CommitRecord{},
		aborts:      map[string]xa.AbortRecord{},
		delegations: map[string]xa.Delegation{},
		parts:       map[string]xa.ParticipantRecord{},
	}
}

// SetClock replaces the log's clock (time.Now by default): LogCommit
// refuses a decision past Begun + Timeout by it, LogAbort and LogDelegation
// stamp their records with it, ForgetAbort measures retention with it.
func (l *Log) SetClock(now func() time.Time) {
	l.mu.Lock()
	l.now = now
	l.mu.Unlock()
}

// Errors of the in-memory log.
var (
	// ErrDead is returned by a killed log.
	ErrDead = errors.New("memrm: log writer is dead")
	// ErrRetained: ForgetAbort of an abort record younger than
	// xa.AbortRetention by the log's clock; the record stays.
	ErrRetained = errors.New("memrm: abort record still within its retention")
)

// Kill makes every later write (LogCommit, LogAbort, LogDelegation,
// LogHeuristic, ClearHeuristic, Forget, ForgetAbort) fail with ErrDead;
// stored records stay and reads go on working.
func (l *Log) Kill() {
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
}

// Revive undoes Kill, as a restarted process reopening the log.
func (l *Log) Revive() {
	l.mu.Lock()
	l.dead = false
	l.mu.Unlock()
}

// Identity implements xa.DecisionLog.
func (l *Log) Identity() xa.LogIdentity { return l.ident }

// write runs f under the lock unless the log is dead.
func (l *Log) write(f func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return ErrDead
	}
	return f()
}

// LogCommit implements xa.DecisionLog: refused with xa.ErrAbortRecorded
// when an abort record exists for rec.ID, and with xa.ErrDecisionTooLate
// past rec.ID.Begun + Identity().Timeout by the log's clock.
func (l *Log) LogCommit(_ context.Context, rec xa.CommitRecord) error {
	if rec.ID.IsZero() {
		return errors.New("memrm: commit record without a global id")
	}
	return l.write(func() error {
		k := rec.ID.String()
		if _, ok := l.aborts[k]; ok {
			return fmt.Errorf("memrm: commit %v refused: %w", rec.ID, xa.ErrAbortRecorded)
		}
		if now := l.now(); now.After(rec.ID.Begun.Add(l.ident.Timeout)) {
			return fmt.Errorf("memrm: commit %v refused at %v: %w", rec.ID, now, xa.ErrDecisionTooLate)
		}
		l.records[k] = rec
		l.Writes++
		return nil
	})
}

// Forget implements xa.DecisionLog.
func (l *Log) Forget(_ context.Context, id xa.GlobalID) error {
	return l.write(func() error {
		delete(l.records, id.String())
		return nil
	})
}

// Lookup returns the record of id.
func (l *Log) Lookup(_ context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[id.String()]
	return r, ok, nil
}

// Commits returns every record, oldest first.
func (l *Log) Commits(context.Context) ([]xa.CommitRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]xa.CommitRecord, 0, len(l.records))
	for _, r := range l.records {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b xa.CommitRecord) int {
		return cmp.Or(a.Logged.Compare(b.Logged), cmp.Compare(a.ID.String(), b.ID.String()))
	})
	return out, nil
}

// LogAbort implements xa.RecoveryLog: rec.Logged is set to the log's
// clock; refused with xa.ErrCommitRecorded when a commit record exists
// for rec.ID; a no-op when an abort record does.
func (l *Log) LogAbort(_ context.Context, rec xa.AbortRecord) error {
	if rec.ID.IsZero() {
		return errors.New("memrm: abort record without a global id")
	}
	return l.write(func() error {
		k := rec.ID.String()
		if _, ok := l.records[k]; ok {
			return fmt.Errorf("memrm: abort %v refused: %w", rec.ID, xa.ErrCommitRecorded)
		}
		if _, ok := l.aborts[k]; ok {
			return nil
		}
		rec.Logged = l.now()
		l.aborts[k] = rec
		return nil
	})
}

// LookupAbort implements xa.DecisionLog.
func (l *Log) LookupAbort(_ context.Context, id xa.GlobalID) (xa.AbortRecord, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.aborts[id.String()]
	return a, ok, nil
}

// Aborts implements xa.RecoveryLog.
func (l *Log) Aborts(context.Context) ([]xa.AbortRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]xa.AbortRecord, 0, len(l.aborts))
	for _, a := range l.aborts {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b xa.AbortRecord) int {
		return cmp.Or(a.Logged.Compare(b.Logged), cmp.Compare(a.ID.String(), b.ID.String()))
	})
	return out, nil
}

// ForgetAbort implements xa.RecoveryLog: only a record whose KeptUntil
// has passed by the log's clock is dropped; any other is kept and the
// error wraps ErrRetained.
func (l *Log) ForgetAbort(_ context.Context, id xa.GlobalID) error {
	return l.write(func() error {
		k := id.String()
		a, ok := l.aborts[k]
		if !ok {
			return nil
		}
		if until := a.KeptUntil(l.ident.Timeout); l.now().Before(until) {
			return fmt.Errorf("memrm: forget abort %v, kept until %v: %w", id, until, ErrRetained)
		}
		delete(l.aborts, k)
		return nil
	})
}

// LogDelegation implements xa.DecisionLog (xa.MergeDelegation).
func (l *Log) LogDelegation(_ context.Context, d xa.Delegation) error {
	return l.write(func() error {
		held, ok := l.delegations[d.Participant]
		store, err := xa.MergeDelegation(held, ok, d)
		if store {
			d.Logged = l.now()
			l.delegations[d.Participant] = d
		}
		return err
	})
}

// LogParticipant implements xa.DecisionLog (xa.MergeParticipant).
func (l *Log) LogParticipant(_ context.Context, p xa.ParticipantRecord) error {
	return l.write(func() error {
		held, ok := l.parts[p.Name]
		store, err := xa.MergeParticipant(held, ok, p)
		if store {
			p.Logged = l.now()
			l.parts[p.Name] = p
		}
		return err
	})
}

// Participants implements xa.RecoveryLog.
func (l *Log) Participants(context.Context) ([]xa.ParticipantRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]xa.ParticipantRecord, 0, len(l.parts))
	for _, p := range l.parts {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b xa.ParticipantRecord) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Delegations implements xa.RecoveryLog.
func (l *Log) Delegations(context.Context) ([]xa.Delegation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]xa.Delegation, 0, len(l.delegations))
	for _, d := range l.delegations {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b xa.Delegation) int {
		return cmp.Or(a.Logged.Compare(b.Logged), cmp.Compare(a.Participant, b.Participant))
	})
	return out, nil
}

// LogHeuristic implements xa.DecisionLog. A record equal to one kept
// already is kept once, as recovery/filelog does.
func (l *Log) LogHeuristic(_ context.Context, h xa.HeuristicRecord) error {
	if err := h.XID.Validate(); err != nil {
		return err
	}
	if h.Action != xa.OutcomeCommit && h.Action != xa.OutcomeRollback {
		return fmt.Errorf("memrm: heuristic record with action %v", h.Action)
	}
	return l.write(func() error {
		if slices.ContainsFunc(l.heuristics, func(o xa.HeuristicRecord) bool {
			return o.RM == h.RM && o.XID.Equal(h.XID) && o.Action == h.Action && o.Forced == h.Forced &&
				o.Time.Equal(h.Time) && o.Reason == h.Reason
		}) {
			return nil
		}
		h.XID = cloneXID(h.XID)
		l.heuristics = append(l.heuristics, h)
		return nil
	})
}

// Heuristics implements xa.RecoveryLog.
func (l *Log) Heuristics(context.Context) ([]xa.HeuristicRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]xa.HeuristicRecord, 0, len(l.heuristics))
	for _, h := range l.heuristics {
		h.XID = cloneXID(h.XID)
		out = append(out, h)
	}
	slices.SortStableFunc(out, func(a, b xa.HeuristicRecord) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.XID.String(), b.XID.String()), cmp.Compare(a.RM, b.RM))
	})
	return out, nil
}

// ClearHeuristic implements xa.RecoveryLog: it drops the records of x on
// rm only.
func (l *Log) ClearHeuristic(_ context.Context, rm string, x xa.XID) error {
	return l.write(func() error {
		l.heuristics = slices.DeleteFunc(l.heuristics, func(h xa.HeuristicRecord) bool { return h.RM == rm && h.XID.Equal(x) })
		return nil
	})
}

func cloneXID(x xa.XID) xa.XID {
	x.Gtrid = slices.Clone(x.Gtrid)
	x.Bqual = slices.Clone(x.Bqual)
	return x
}
