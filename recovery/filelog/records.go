package filelog

import (
	"context"
	"fmt"
	"time"

	"github.com/xadb/xa/xa"
)

// Identity returns the log's identity, as written by Create.
func (l *Log) Identity() xa.LogIdentity { return l.ident }

// LogCommit appends rec and returns nil once it is durable: written and
// fdatasync'ed together with whatever other records were pending (group
// commit). Until then it is invisible to Lookup and Commits. Logging an ID
// again replaces its record.
//
// The fence: if an abort record for rec.ID is durable, or queued or being
// written, LogCommit returns an error wrapping xa.ErrAbortRecorded and
// queues nothing. It also refuses, with an error wrapping
// xa.ErrDecisionTooLate, a record whose transaction began more than
// Identity().Timeout ago by the log's clock (Options.Now). Both checks and
// the enqueue are one critical section, so a LogAbort for the same id
// either sees this record and is refused, or is seen by it.
//
// If ctx ends first, LogCommit returns an error wrapping ctx.Err() and
// xa.ErrOutcomeUnknown: the record was queued and may still become
// durable. The same holds for every other error once the record was queued
// (a failed write or sync stops the log, see ErrFailed). Only when ctx is
// already done on entry, the record was refused, or it does not survive
// an encode and decode round trip, is it known not to be logged.
func (l *Log) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	payload, err := rec.MarshalBinary()
	if err != nil {
		return fmt.Errorf("filelog: commit %v: %w", rec.ID, err)
	}
	// A record that does not read back would make the log unreadable.
	// The codec refuses those itself; this round trip guards against a
	// codec bug, at the price of one decode per decision.
	var check xa.CommitRecord
	if err := check.UnmarshalBinary(payload); err != nil {
		return fmt.Errorf("filelog: commit %v cannot be logged, it would not decode: %w", rec.ID, err)
	}
	key := commitKey(payload, check.ID)
	deadline := check.ID.Begun.Add(l.ident.Timeout)
	return l.appendDurable(ctx, RecordCommit, payload, key, nil, func() (bool, error) {
		if l.st.aborts[key] != nil || l.pending[key].aborts > 0 {
			return false, fmt.Errorf("filelog: commit %v refused: %w", rec.ID, xa.ErrAbortRecorded)
		}
		// Read the clock here, next to the enqueue: a coordinator
		// paused after its own deadline check is caught.
		if now := l.now(); now.After(deadline) {
			return false, fmt.Errorf("filelog: commit %v refused: the transaction began at %v and its timeout of %v "+
				"passed at %v; the log's clock says %v: %w", rec.ID, check.ID.Begun.UTC().Format(time.RFC3339Nano),
				l.ident.Timeout, deadline.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), xa.ErrDecisionTooLate)
		}
		return false, nil
	})
}

// LogAbort appends an abort record for rec.ID and returns nil once it is
// durable, like LogCommit. rec.Logged is set to the log's clock
// (Options.Now): retention is measured on it.
//
// The fence: if a commit record for rec.ID is durable, or queued or being
// written, LogAbort returns an error wrapping xa.ErrCommitRecorded and
// queues nothing. If a durable abort record exists already, LogAbort
// returns nil and writes nothing (an abort being written by another caller
// is written again, and the first one is kept).
func (l *Log) LogAbort(ctx context.Context, rec xa.AbortRecord) error {
	rec.Logged = l.now()
	payload, err := rec.MarshalBinary()
	if err != nil {
		return fmt.Errorf("filelog: abort %v: %w", rec.ID, err)
	}
	d, err := decodePayload(RecordAbort, payload)
	if err != nil {
		return fmt.Errorf("filelog: abort %v cannot be logged, it would not decode: %w", rec.ID, err)
	}
	return l.appendDurable(ctx, RecordAbort, payload, d.key, &d, func() (bool, error) {
		if l.st.commits[d.key] != nil || l.pending[d.key].commits > 0 {
			return false, fmt.Errorf("filelog: abort %v refused: %w", rec.ID, xa.ErrCommitRecorded)
		}
		return l.st.aborts[d.key] != nil, nil
	})
}

// LogDelegation durably records delegation d, like LogCommit, under the
// rule of xa.MergeDelegation: the same delegation again is a no-op, one
// naming another decision table than the one recorded is refused with an
// *xa.IdentityError. Delegations are never forgotten.
func (l *Log) LogDelegation(ctx context.Context, d xa.Delegation) error {
	d.Logged = l.now()
	payload, err := encodeDelegation(d)
	if err != nil {
		return fmt.Errorf("filelog: delegation to %q: %w", truncate(d.Participant, 80), err)
	}
	dec, err := decodePayload(RecordDelegation, payload)
	if err != nil {
		return fmt.Errorf("filelog: delegation to %q cannot be logged, it would not decode: %w", truncate(d.Participant, 80), err)
	}
	l.identMu.Lock()
	defer l.identMu.Unlock()
	return l.appendDurable(ctx, RecordDelegation, payload, dec.key, &dec, func() (bool, error) {
		held := l.st.delegations[dec.key]
		store, err := xa.MergeDelegation(heldDelegation(held), held != nil, dec.delegation)
		return !store, err
	})
}

func heldDelegation(r *liveRecord) xa.Delegation {
	if r == nil {
		return xa.Delegation{}
	}
	return r.delegation
}

// LogParticipant durably records p, like LogCommit, under the rule of
// xa.MergeParticipant: the same identity again is a no-op, another one
// under a recorded name is refused with an *xa.IdentityError. Participant
// records are never forgotten.
func (l *Log) LogParticipant(ctx context.Context, p xa.ParticipantRecord) error {
	p.Logged = l.now()
	payload, err := p.MarshalBinary()
	if err != nil {
		return fmt.Errorf("filelog: participant %q: %w", truncate(p.Name, 80), err)
	}
	dec, err := decodePayload(RecordParticipant, payload)
	if err != nil {
		return fmt.Errorf("filelog: participant %q cannot be logged, it would not decode: %w", truncate(p.Name, 80), err)
	}
	// Identity records are rare (once per participant and process) and
	// are checked against the durable state only: one at a time, so that
	// two writers cannot both pass the check.
	l.identMu.Lock()
	defer l.identMu.Unlock()
	return l.appendDurable(ctx, RecordParticipant, payload, dec.key, &dec, func() (bool, error) {
		held := l.st.parts[dec.key]
		var hp xa.ParticipantRecord
		if held != nil {
			hp = held.part
		}
		store, err := xa.MergeParticipant(hp, held != nil, dec.part)
		return !store, err
	})
}

// Participants returns the participant records, by name.
func (l *Log) Participants(ctx context.Context) (out []xa.ParticipantRecord, err error) {
	err = l.read(ctx, func(s *state) { out = s.participantList() })
	return out, err
}

// LogHeuristic appends h and returns once it is durable, like LogCommit.
// The record is kept, across compaction and restarts, until ClearHeuristic
// names its participant and XID. A record equal in every field to one kept
// already is kept once (replay cannot tell it from a compaction copy).
func (l *Log) LogHeuristic(ctx context.Context, h xa.HeuristicRecord) error {
	payload, err := h.MarshalBinary()
	if err != nil {
		return fmt.Errorf("filelog: heuristic %v: %w", h.XID, err)
	}
	// Keep the decoded form of what is on disk, so that reads give the
	// same before and after a restart.
	d, err := decodePayload(RecordHeuristic, payload)
	if err != nil {
		return fmt.Errorf("filelog: heuristic %v cannot be logged, it would not decode: %w", h.XID, err)
	}
	return l.appendDurable(ctx, RecordHeuristic, payload, d.key, &d, nil)
}

// ClearHeuristic drops every heuristic record of branch x on participant
// rm and returns once that is durable, like LogCommit. Records of x on
// other participants stay.
func (l *Log) ClearHeuristic(ctx context.Context, rm string, x xa.XID) error {
	payload, err := encodeClear(rm, x)
	if err != nil {
		return fmt.Errorf("filelog: clear heuristic: %w", err)
	}
	d, err := decodePayload(RecordClear, payload)
	if err != nil {
		return fmt.Errorf("filelog: clear heuristic of %v cannot be logged, it would not decode: %w", x, err)
	}
	return l.appendDurable(ctx, RecordClear, payload, d.key, &d, nil)
}

// appendDurable queues a record (payload, and what the state needs of it in
// d) and waits until it is durable or ctx ends. admit, if not nil, runs
// under l.mu right before the enqueue: an error refuses the record, skip
// returns nil without queueing it.
//
// key is the record's key (decoded.key); d is its decoded form, nil for a
// commit record (which needs only its key).
func (l *Log) appendDurable(ctx context.Context, t RecordType, payload []byte, key string, d *decoded, admit func() (skip bool, err error)) error {
	name := key
	if d != nil && (t == RecordHeuristic || t == RecordClear) {
		name = d.xid.String()
	}
	if len(payload) > maxPayload {
		return fmt.Errorf("filelog: %v %s: record of %d bytes exceeds the limit of %d", t, name, len(payload), maxPayload)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filelog: %v %s not logged: %w", t, name, err)
	}
	o := &op{t: t, key: key, d: d, frame: appendFrame(make([]byte, 0, frameHeader+len(payload)), t, payload)}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return err
	}
	if admit != nil {
		if skip, err := admit(); err != nil || skip {
			l.mu.Unlock()
			return err
		}
	}
	l.pend(o)
	l.queue = append(l.queue, o)
	l.queuedDurable++
	g := l.waiting
	if g == nil {
		g = &group{done: make(chan struct{})}
		l.waiting = g
	}
	l.mu.Unlock()
	l.wake()
	select {
	case <-g.done:
		if g.err != nil {
			return fmt.Errorf("filelog: %v %s: %w", t, name, g.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("filelog: %v %s: %w (the record may still become durable): %w", t, name, xa.ErrOutcomeUnknown, ctx.Err())
	}
}

// pend counts a commit or abort record from its enqueue until the writer
// applies it to the state; l.mu is held.
func (l *Log) pend(o *op) {
	if o.t != RecordCommit && o.t != RecordAbort {
		return
	}
	p := l.pending[o.key]
	if o.t == RecordCommit {
		p.commits++
	} else {
		p.aborts++
	}
	l.pending[o.key] = p
}

// unpend undoes pend once o is in the state; l.mu is held.
func (l *Log) unpend(o *op) {
	if o.t != RecordCommit && o.t != RecordAbort {
		return
	}
	p, ok := l.pending[o.key]
	if !ok {
		return
	}
	if o.t == RecordCommit {
		p.commits--
	} else {
		p.aborts--
	}
	if p.commits <= 0 && p.aborts <= 0 {
		delete(l.pending, o.key)
	} else {
		l.pending[o.key] = p
	}
}

// Forget drops the commit record of id. It queues a forget record and
// returns without waiting for it to be written; the writer writes it with
// the next group, without a sync of its own, and the next sync (of a later
// group, a rotation or Close) makes it durable. Lookup and Commits stop
// showing id at once. After a crash a forgotten record may come back
// (presumed abort allows this: recovery resolves and forgets it again).
func (l *Log) Forget(ctx context.Context, id xa.GlobalID) error {
	return l.queueForget(ctx, RecordForget, id, func(k string) error {
		l.st.forget(k)
		return nil
	})
}

// ForgetAbort drops the abort record of id, without waiting, like Forget,
// but only once the log's clock (Options.Now) has passed the record's
// xa.AbortRecord.KeptUntil for the log's timeout: until then the record
// (or one still being written) is kept and the error wraps ErrRetained,
// whatever clock the caller trusts.
// Forgetting an id without an abort record is a no-op. After a crash a
// forgotten abort record may come back; recovery forgets it again.
func (l *Log) ForgetAbort(ctx context.Context, id xa.GlobalID) error {
	return l.queueForget(ctx, RecordForgetAbort, id, func(k string) error {
		if l.pending[k].aborts > 0 {
			return fmt.Errorf("filelog: forget abort %v: %w: an abort record for it is being written", id, ErrRetained)
		}
		r := l.st.aborts[k]
		if r == nil {
			return nil
		}
		now := l.now()
		if until := r.abort.KeptUntil(l.ident.Timeout); now.Before(until) {
			return fmt.Errorf("filelog: forget abort %v: %w: logged at %v (the transaction began at %v, timeout %v); "+
				"the log's clock says %v; it is kept until %v",
				id, ErrRetained, r.abort.Logged.UTC().Format(time.RFC3339), r.abort.ID.Begun.UTC().Format(time.RFC3339),
				l.ident.Timeout, now.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
		}
		l.st.forgetAbort(k)
		return nil
	})
}

// queueForget queues a forget or forget-abort record for id after drop
// (under l.mu) has updated the state, and returns without waiting.
func (l *Log) queueForget(ctx context.Context, t RecordType, id xa.GlobalID, drop func(k string) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filelog: %v %v: %w", t, id, err)
	}
	if id.IsZero() {
		return fmt.Errorf("filelog: %v: zero global id", t)
	}
	k := id.String()
	// The frame is made when the writer writes it: no state keeps it.
	o := &op{t: t, key: k}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return err
	}
	if err := drop(k); err != nil {
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, o)
	l.mu.Unlock()
	// No wake: the record goes with the next group (or at Close), which
	// saves a write and a wake-up of the writer per decision.
	return nil
}

// read runs f on the state under l.mu, if the log is usable.
func (l *Log) read(ctx context.Context, f func(*state)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	f(&l.st)
	return nil
}

// Lookup returns the live commit record of id, if there is one.
func (l *Log) Lookup(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	var r *liveRecord
	if err := l.read(ctx, func(s *state) { r = s.commits[id.String()] }); err != nil {
		return xa.CommitRecord{}, false, err
	}
	if r == nil {
		return xa.CommitRecord{}, false, nil
	}
	c, err := r.commit() // frames never change: decode without the lock
	if err != nil {
		return xa.CommitRecord{}, false, err
	}
	return c, true, nil
}

// Commits returns the live (durable, not forgotten) commit records, oldest
// first: ordered by Logged, then by ID.
func (l *Log) Commits(ctx context.Context) ([]xa.CommitRecord, error) {
	var live []*liveRecord
	if err := l.read(ctx, func(s *state) { live = s.liveCommits() }); err != nil {
		return nil, err
	}
	return commitList(live) // frames never change: decode without the lock
}

// LookupAbort returns the live (durable, not forgotten) abort record of
// id, if there is one.
func (l *Log) LookupAbort(ctx context.Context, id xa.GlobalID) (a xa.AbortRecord, ok bool, err error) {
	err = l.read(ctx, func(s *state) { a, ok = s.lookupAbort(id) })
	return a, ok, err
}

// Aborts returns the live abort records, oldest first: ordered by Logged,
// then by ID.
func (l *Log) Aborts(ctx context.Context) (out []xa.AbortRecord, err error) {
	err = l.read(ctx, func(s *state) { out = s.abortList() })
	return out, err
}

// Delegations returns the durable delegations, oldest first.
func (l *Log) Delegations(ctx context.Context) (out []xa.Delegation, err error) {
	err = l.read(ctx, func(s *state) { out = s.delegationList() })
	return out, err
}

// Heuristics returns the heuristic records not cleared, oldest first:
// ordered by Time, then XID, then RM.
func (l *Log) Heuristics(ctx context.Context) (out []xa.HeuristicRecord, err error) {
	err = l.read(ctx, func(s *state) { out = s.heuristicList() })
	return out, err
}
