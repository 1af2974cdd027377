package xa

import (
	"errors"
	"fmt"
)

// This file is the two-phase commit protocol as a pure state machine, in
// the manner of etcd-io/raft: it takes events (a vote arrived, the decision
// is durable, a commit failed) and returns the actions to perform next. It
// does no I/O, reads no clock and starts no goroutine, so every
// interleaving of votes, failures and timeouts can be replayed
// deterministically (see testdata/machine/*.txt). The runner in tx.go
// performs the actions and feeds their outcomes back.

// phase is the coordinator's state for one global transaction.
type phase int

const (
	phaseActive     phase = 1 + iota // the application is working on branches
	phaseOnePhase                    // one branch is committing in one phase
	phasePreparing                   // prepare sent to every branch that worked
	phaseLogging                     // all voted yes; the decision is being made durable
	phaseDeciding                    // the others voted yes; the last resource commits with the decision
	phaseCommitting                  // decided commit: phase 2
	phaseAborting                    // decided abort: rolling back
	phaseDone
)

var phaseNames = [...]string{"", "active", "one-phase", "preparing", "logging", "deciding", "committing", "aborting", "done"}

func (p phase) String() string { return phaseNames[p] }

// bstate is one branch's state as the coordinator knows it.
type bstate int

const (
	bActive      bstate = 1 + iota // enlisted, not yet asked to prepare
	bPreparing                     // prepare sent
	bPrepared                      // voted prepared
	bMaybe                         // prepare reply lost: may be prepared, session gone
	bDone                          // finished: read-only, refused, committed or rolled back
	bCommitting                    // commit sent
	bRollingBack                   // rollback sent
	bPending                       // given up to recovery
	bChecking                      // commit answered "unknown XID": looking for an abort record
)

var bstateNames = [...]string{"", "active", "preparing", "prepared", "maybe-prepared", "done", "committing", "rolling-back", "pending", "checking"}

// fate is how a branch that reached bDone in phase 2 ended, when that is
// not plainly "committed".
type fate int

const (
	fateCommitted fate = iota
	fateHeuristic      // the database rolled it back in phase 2
	fateAborted        // recovery presumed abort (an abort record exists) before our commit
	fateUnknown        // it vanished and nothing proves it committed
)

func (s bstate) String() string { return bstateNames[s] }

// branch is the machine's view of one branch.
type branch struct {
	rm       string
	state    bstate
	idle     bool // ran no statement (known at commit time)
	onePhase bool // can commit in one phase
	viaRM    bool // its session is gone: phase 2 goes through the ResourceManager
	attempts int  // phase-2 attempts so far
	ackedRM  bool // acknowledged through the ResourceManager, not its own session
	lost     bool // a commit attempt's reply was lost: it may have committed
	fate     fate
	why      error // for fateUnknown
}

// event is an input to the machine.
type event interface{ isEvent() }

type (
	// evCommit: the application asked to commit. idle[i] says branch i
	// ran no statement; onePhase[i] that it can commit in one phase;
	// last[i] that it can take the decision as the last resource.
	evCommit struct {
		idle     []bool
		onePhase []bool
		last     []bool
	}
	// evRollback: the application asked to roll back, or its context
	// ended.
	evRollback struct{ reason error }
	// evTimeout: the global transaction timeout expired.
	evTimeout struct{}
	// evVote: branch i answered prepare.
	evVote struct {
		i    int
		vote Vote
		err  error
	}
	// evLogged: the decision log answered.
	evLogged struct{ err error }
	// evPhase2: a commit or rollback (or one-phase commit) of branch i
	// returned.
	evPhase2 struct {
		i   int
		err error
	}
	// evLookedUp: the decision log answered whether an abort is recorded
	// for the transaction, asked after branch i's commit answered
	// "unknown XID".
	evLookedUp struct {
		i       int
		aborted bool
		err     error
	}
)

func (evCommit) isEvent()   {}
func (evRollback) isEvent() {}
func (evTimeout) isEvent()  {}
func (evVote) isEvent()     {}
func (evLogged) isEvent()   {}
func (evPhase2) isEvent()   {}
func (evLookedUp) isEvent() {}

// action is an output of the machine.
type action interface{ isAction() }

type (
	actPrepare  struct{ i int }
	actOnePhase struct{ i int }
	// actLog: make the commit decision durable; it covers the listed
	// prepared branches.
	actLog struct{ branches []int }
	// actCommitLast: commit branch i in one phase together with the
	// decision covering the listed prepared branches.
	actCommitLast struct {
		i        int
		branches []int
	}
	// actCommit: commit branch i, after waiting for retry number
	// attempt's backoff; viaRM: from another session.
	actCommit struct {
		i       int
		viaRM   bool
		attempt int
	}
	actRollback struct {
		i       int
		viaRM   bool
		attempt int
	}
	// actRelease: give branch i up to recovery: release its session
	// without ending it.
	actRelease struct{ i int }
	// actForget: every branch acknowledged on its own session; drop the
	// decision record.
	actForget struct{}
	// actLookupAbort: ask the decision log whether an abort is recorded
	// (branch i's commit answered "unknown XID").
	actLookupAbort struct{ i int }
	// actLogHeuristic: record that the database rolled branch i back
	// although the decision was commit.
	actLogHeuristic struct {
		i      int
		reason error
	}
	// actFinish: the transaction's outcome is known; tell the caller.
	actFinish struct{ res outcome }
)

func (actPrepare) isAction()      {}
func (actOnePhase) isAction()     {}
func (actLog) isAction()          {}
func (actCommitLast) isAction()   {}
func (actCommit) isAction()       {}
func (actRollback) isAction()     {}
func (actRelease) isAction()      {}
func (actForget) isAction()       {}
func (actLookupAbort) isAction()  {}
func (actLogHeuristic) isAction() {}
func (actFinish) isAction()       {}

// outcome is what the caller of Commit or Rollback learns.
type outcome struct {
	committed bool
	onePhase  bool
	logged    bool
	pending   []int // branches left to recovery
	err       error // nil when committed; *AbortError or ErrOutcomeUnknown otherwise
}

// machine is the protocol state of one global transaction.
type machine struct {
	id       GlobalID
	log      LogID // named by the branches' XIDs
	maxTries int   // phase-2 attempts per branch before it is left to recovery
	phase    phase
	branches []branch
	logged   bool // the decision is durable (in the log, or in the last resource)
	sole     bool // committing the only prepared branch without a record
	last     int  // the branch that takes the decision as last resource, or -1
	// inResource: the decision record lives in the last resource's
	// database; recovery forgets it, not the coordinator.
	inResource bool
	abort      *AbortError
	result     *outcome // set once actFinish has been emitted
}

func newMachine(id GlobalID, maxTries int) *machine {
	if maxTries < 1 {
		maxTries = 1
	}
	return &machine{id: id, maxTries: maxTries, phase: phaseActive, last: -1}
}

// xid returns the XID of branch i.
func (m *machine) xid(i int) XID { return BranchRef{ID: m.id, Index: i, Log: m.log}.XID() }

// enlist adds a branch; only while active.
func (m *machine) enlist(rm string) (int, error) {
	if m.phase != phaseActive {
		return 0, fmt.Errorf("xa: transaction %s is %s: cannot enlist %s", m.id, m.phase, rm)
	}
	m.branches = append(m.branches, branch{rm: rm, state: bActive})
	return len(m.branches) - 1, nil
}

// step applies ev and returns the actions to perform. Events that do not
// apply to the current phase (a late timeout) are ignored.
func (m *machine) step(ev event) []action {
	switch ev := ev.(type) {
	case evCommit:
		return m.onCommit(ev)
	case evRollback:
		if m.phase == phaseActive || m.phase == phasePreparing {
			reason := ev.reason
			if reason == nil {
				reason = errRolledBackByApp
			}
			return m.startAbort(&AbortError{ID: m.id, Reason: reason})
		}
	case evTimeout:
		if m.phase == phaseActive || m.phase == phasePreparing {
			return m.startAbort(&AbortError{ID: m.id, Reason: ErrTimeout})
		}
	case evVote:
		return m.onVote(ev)
	case evLogged:
		return m.onLogged(ev)
	case evPhase2:
		return m.onPhase2(ev)
	case evLookedUp:
		return m.onLookedUp(ev)
	}
	return nil
}

// errTooLate is the reason of an abort when Begin + Timeout passed before
// the decision could be taken: the coordinator then writes no decision
// (and sends no sole commit), since recovery may already be presuming
// abort.
var errTooLate = ErrDecisionTooLate

// notDecided reports whether a failed decision (log write, last-resource
// commit, sole commit) certainly took no effect and the transaction must
// abort.
func notDecided(err error) bool {
	return !OutcomeUnknown(err) && (errors.Is(err, ErrAbortRecorded) || errors.Is(err, ErrDecisionTooLate) ||
		errors.Is(err, ErrFenced) || errors.Is(err, errNotAttempted))
}

// errRolledBackByApp is the reason of an application's own rollback.
var errRolledBackByApp = errors.New("rolled back by the application")

func (m *machine) onCommit(ev evCommit) []action {
	if m.phase != phaseActive {
		return nil
	}
	var working []int
	for i := range m.branches {
		m.branches[i].idle = i < len(ev.idle) && ev.idle[i]
		m.branches[i].onePhase = i < len(ev.onePhase) && ev.onePhase[i]
		if !m.branches[i].idle {
			working = append(working, i)
		}
	}
	if len(working) == 1 && working[0] < len(ev.onePhase) && ev.onePhase[working[0]] {
		i := working[0]
		m.phase = phaseOnePhase
		m.branches[i].state = bCommitting
		acts := m.closeIdle()
		return append(acts, actOnePhase{i: i})
	}
	// With two or more working branches, one that can take the decision
	// itself is kept out of the prepare: it commits last, with the
	// decision, in one phase.
	for _, i := range working {
		if len(working) > 1 && i < len(ev.last) && ev.last[i] {
			m.last = i
			break
		}
	}
	m.phase = phasePreparing
	var acts []action
	// Idle branches are asked too: they vote read-only at no cost and
	// release their sessions.
	for i := range m.branches {
		if i == m.last {
			continue
		}
		m.branches[i].state = bPreparing
		acts = append(acts, actPrepare{i: i})
	}
	if len(acts) == 0 {
		return m.finish(outcome{committed: true})
	}
	return acts
}

// closeIdle prepares idle branches during a one-phase commit so that they
// release their sessions (they vote read-only without I/O).
func (m *machine) closeIdle() []action {
	var acts []action
	for i := range m.branches {
		if m.branches[i].idle {
			m.branches[i].state = bPreparing
			acts = append(acts, actPrepare{i: i})
		}
	}
	return acts
}

func (m *machine) onVote(ev evVote) []action {
	if ev.i < 0 || ev.i >= len(m.branches) || m.branches[ev.i].state != bPreparing {
		return nil
	}
	b := &m.branches[ev.i]
	switch {
	case ev.err == nil && ev.vote == VotePrepared:
		b.state = bPrepared
	case ev.err == nil && ev.vote == VoteReadOnly:
		b.state = bDone
	case OutcomeUnknown(ev.err):
		b.state, b.viaRM = bMaybe, true
	default:
		b.state = bDone
		if m.abort == nil {
			reason := ev.err
			if reason == nil {
				reason = fmt.Errorf("voted %v", ev.vote)
			}
			m.abort = &AbortError{ID: m.id, RM: b.rm, Reason: reason}
		}
	}
	if b.state == bMaybe && m.abort == nil {
		// The transaction aborts for sure; the reason must not match
		// ErrOutcomeUnknown, which would tell the caller otherwise.
		m.abort = &AbortError{ID: m.id, RM: b.rm, Reason: fmt.Errorf("prepare reply lost (the branch is rolled back): %s", ev.err)}
	}

	switch m.phase {
	case phaseOnePhase:
		// Only branches believed idle vote during a one-phase commit. One
		// that voted prepared (or may have) did work after all: a
		// statement raced the commit. It is no part of the one-phase
		// commit and nothing decides it: roll it back.
		acts := m.rollbackIfNeeded(ev.i)
		return append(acts, m.maybeFinishOnePhase()...)
	case phaseAborting:
		// A late vote after the decision to abort: roll it back.
		return append(m.rollbackIfNeeded(ev.i), m.maybeFinishAbort()...)
	case phasePreparing:
	default:
		return nil
	}
	if m.abort != nil {
		return m.startAbort(m.abort)
	}
	var prepared []int
	for i, br := range m.branches {
		switch br.state {
		case bPreparing:
			return nil // still waiting
		case bPrepared:
			prepared = append(prepared, i)
		}
	}
	if m.last >= 0 {
		lr := &m.branches[m.last]
		lr.state = bCommitting
		if len(prepared) == 0 && lr.onePhase {
			// Every other branch is read-only: the last commits alone.
			m.phase = phaseOnePhase
			return []action{actOnePhase{i: m.last}}
		}
		m.phase = phaseDeciding
		return []action{actCommitLast{i: m.last, branches: prepared}}
	}
	switch len(prepared) {
	case 0:
		return m.finish(outcome{committed: true})
	case 1:
		// Every other branch is read-only: the sole prepared branch
		// decides alone, as in a one-phase commit. Nothing is logged: if
		// we crash before it commits, presumed abort rolls it back,
		// which is right since nobody was told it committed.
		m.phase, m.sole = phaseCommitting, true
		return m.commitAll()
	}
	m.phase = phaseLogging
	return []action{actLog{branches: prepared}}
}

func (m *machine) onLogged(ev evLogged) []action {
	if m.phase != phaseLogging {
		return nil
	}
	if ev.err != nil && notDecided(ev.err) {
		return m.startAbort(&AbortError{ID: m.id, Reason: ev.err})
	}
	if ev.err != nil {
		return m.undecided("log commit decision", ev.err)
	}
	m.logged = true
	m.phase = phaseCommitting
	return m.commitAll()
}

// undecided: the decision may or may not be durable (its write failed in
// an unknown way). Nobody may commit or roll back now: the prepared
// branches are released and recovery, which reads the decision, finishes.
func (m *machine) undecided(op string, cause error) []action {
	var acts []action
	var pending []int
	for i := range m.branches {
		if m.branches[i].state == bPrepared {
			m.branches[i].state = bPending
			pending = append(pending, i)
			acts = append(acts, actRelease{i: i})
		}
	}
	err := &Error{Op: op, XID: XID{FormatID: FormatID, Gtrid: m.id.Gtrid()}, Kind: ErrOutcomeUnknown, Err: cause}
	return append(acts, m.finish(outcome{pending: pending, err: err})...)
}

func (m *machine) commitAll() []action {
	var acts []action
	for i := range m.branches {
		if m.branches[i].state == bPrepared {
			m.branches[i].state = bCommitting
			m.branches[i].attempts = 1
			acts = append(acts, actCommit{i: i, attempt: 1})
		}
	}
	return acts
}

func (m *machine) startAbort(reason *AbortError) []action {
	if m.abort == nil {
		m.abort = reason
	}
	m.phase = phaseAborting
	var acts []action
	for i := range m.branches {
		switch m.branches[i].state {
		case bActive:
			// Not yet asked to prepare: roll back on its session.
			m.branches[i].state = bRollingBack
			m.branches[i].attempts = 1
			acts = append(acts, actRollback{i: i, attempt: 1})
		default:
			acts = append(acts, m.rollbackIfNeeded(i)...)
		}
	}
	return append(acts, m.maybeFinishAbort()...)
}

// rollbackIfNeeded rolls back branch i if it is or may be prepared.
func (m *machine) rollbackIfNeeded(i int) []action {
	b := &m.branches[i]
	if b.state != bPrepared && b.state != bMaybe {
		return nil
	}
	b.state = bRollingBack
	b.attempts = 1
	return []action{actRollback{i: i, viaRM: b.viaRM, attempt: 1}}
}

func (m *machine) onPhase2(ev evPhase2) []action {
	if ev.i < 0 || ev.i >= len(m.branches) {
		return nil
	}
	b := &m.branches[ev.i]
	switch {
	case m.phase == phaseOnePhase && b.state == bRollingBack:
		// A stray prepared vote during a one-phase commit.
		acts := m.rolledBack(ev.i, ev.err)
		if b.state == bRollingBack {
			return acts // retrying
		}
		return append(acts, m.maybeFinishOnePhase()...)
	case m.phase == phaseOnePhase && b.state == bCommitting:
		b.state = bDone
		switch {
		case ev.err == nil:
			m.result = &outcome{committed: true, onePhase: true}
		case OutcomeUnknown(ev.err):
			m.result = &outcome{onePhase: true, err: ev.err}
		default:
			m.result = &outcome{onePhase: true, err: &AbortError{ID: m.id, RM: b.rm, Reason: ev.err}}
		}
		return m.maybeFinishOnePhase()
	case m.phase == phaseDeciding && ev.i == m.last && b.state == bCommitting:
		return m.onDecided(ev.err)
	case m.phase == phaseCommitting && b.state == bCommitting:
		return m.onCommitted(ev.i, ev.err)
	case m.phase == phaseAborting && b.state == bRollingBack:
		return m.onRolledBack(ev.i, ev.err)
	}
	return nil
}

// onDecided: the last resource's commit with the decision returned.
func (m *machine) onDecided(err error) []action {
	lr := &m.branches[m.last]
	lr.state = bDone
	switch {
	case err == nil:
		// The decision is durable in the last resource's database.
		m.logged, m.inResource = true, true
		m.phase = phaseCommitting
		return m.commitAll()
	case OutcomeUnknown(err):
		// Committed with the decision, or neither: nobody may act on
		// the prepared branches; recovery reads the last resource.
		return m.undecided("commit last with the decision", err)
	}
	return m.startAbort(&AbortError{ID: m.id, RM: lr.rm, Reason: err})
}

func (m *machine) onCommitted(i int, err error) []action {
	b := &m.branches[i]
	switch {
	case err == nil && m.sole && b.viaRM:
		// The only prepared branch, committed from another session with
		// no record behind it. On MariaDB such a commit can answer
		// success without committing (docs/xa-facts.md, fact 7): the
		// branch then reappears prepared after a restart, and with no
		// record recovery presumes it aborted. Nothing proves it
		// committed: the caller must not be told so (found by the model,
		// docs/model.md).
		b.state, b.ackedRM = bDone, true
		b.fate, b.why = fateUnknown, errors.New("the only prepared branch was committed from another session, with no decision record behind it: "+
			"a server that can answer such a commit without committing it (MariaDB, fact 7) leaves it to recovery, which would presume abort")
	case m.sole && b.attempts == 1 && errors.Is(err, errTooLate):
		// The sole commit was not sent: the timeout passed first.
		b.state = bPrepared
		return m.startAbort(&AbortError{ID: m.id, Reason: err})
	default:
		return m.judgedCommit(i, err)
	}
	return m.maybeFinishCommit()
}

// judgedCommit applies the kernel's judgement (JudgeCommitReply) of a
// commit's reply err for branch i. No proof is at hand yet: an "unknown
// XID" is checked against the log (onLookedUp).
func (m *machine) judgedCommit(i int, err error) []action {
	b := &m.branches[i]
	switch JudgeCommitReply(err, false, b.attempts >= m.maxTries) {
	case Phase2Done, Phase2UnknownCommitted:
		b.state = bDone
		b.ackedRM = b.viaRM
	case Phase2UnknownUnproven:
		// The database no longer lists the branch. An earlier attempt of
		// ours, or recovery acting on the decision, may have committed it;
		// or recovery presumed abort and rolled it back, which it does
		// only after recording the abort. Ask the log.
		b.state = bChecking
		b.ackedRM = true
		return []action{actLookupAbort{i: i}}
	case Phase2Heuristic:
		// The database rolled back a branch we decided to commit: a
		// heuristic decision (by the server, or an operator by hand).
		// Retrying elsewhere would only find it gone.
		b.state, b.fate = bDone, fateHeuristic
		return append([]action{actLogHeuristic{i: i, reason: err}}, m.maybeFinishCommit()...)
	case Phase2GiveUp:
		b.lost = b.lost || OutcomeUnknown(err)
		b.state = bPending
		acts := []action{}
		if !b.viaRM {
			acts = append(acts, actRelease{i: i})
		}
		return append(acts, m.maybeFinishCommit()...)
	default: // Phase2Retry
		b.lost = b.lost || OutcomeUnknown(err)
		if !Retryable(err) {
			// The session is gone or unusable: continue elsewhere.
			b.viaRM = true
		}
		b.attempts++
		return []action{actCommit{i: i, viaRM: b.viaRM, attempt: b.attempts}}
	}
	return m.maybeFinishCommit()
}

// onLookedUp: the log answered whether an abort is recorded for the
// transaction, after branch ev.i's commit found the branch gone.
func (m *machine) onLookedUp(ev evLookedUp) []action {
	if ev.i < 0 || ev.i >= len(m.branches) || m.branches[ev.i].state != bChecking {
		return nil
	}
	b := &m.branches[ev.i]
	b.state = bDone
	// The proof the kernel's rule asks for: a commit record this
	// transaction wrote (not a sole commit's, which has none), and no
	// abort, which recovery records before it rolls anything back.
	proven := ev.err == nil && !ev.aborted && !m.sole
	if JudgeCommitReply(ErrUnknownXID, proven, true) == Phase2UnknownCommitted {
		b.fate = fateCommitted
		return m.maybeFinishCommit()
	}
	// Unproven: say why the outcome is unknown, or that recovery aborted.
	switch {
	case ev.err != nil:
		b.fate, b.why = fateUnknown, fmt.Errorf("the branch is gone and the decision log could not be asked whether an abort is recorded: %w", ev.err)
	case ev.aborted && m.sole && !b.lost:
		// Recovery recorded an abort and rolled the branch back before
		// any commit of ours could reach it.
		b.fate = fateAborted
	case ev.aborted && m.sole:
		b.fate, b.why = fateUnknown, errors.New("recovery recorded an abort, and an earlier commit attempt whose reply was lost may have committed the branch first")
	case ev.aborted:
		// The log refuses an abort record once a commit record exists:
		// this is a log that is not the one the decision went to.
		b.fate, b.why = fateUnknown, errors.New("the decision log holds an abort record for a transaction whose commit it logged: is this the right log?")
	case m.sole && !b.lost:
		// Nothing of ours can have committed it, and recovery did not
		// roll it back: someone else ended it (by hand?).
		b.fate, b.why = fateUnknown, errors.New("the branch vanished before our first commit reached it, and no abort is recorded")
	default:
		// The only prepared branch, and an earlier attempt's reply was
		// lost: it may have committed the branch, or (from another
		// session, on MariaDB: fact 7) answered without committing it and
		// left it hidden, to reappear after a restart with no record
		// behind it. Only a record could tell (found by the model,
		// docs/model.md).
		b.fate, b.why = fateUnknown, errors.New("the only prepared branch is gone after a commit whose reply was lost, and no record backs it")
	}
	return m.maybeFinishCommit()
}

func (m *machine) onRolledBack(i int, err error) []action {
	acts := m.rolledBack(i, err)
	if m.branches[i].state == bRollingBack {
		return acts // retrying
	}
	return append(acts, m.maybeFinishAbort()...)
}

// rolledBack applies the result of a rollback of branch i and returns a
// retry or a release, if one is needed.
func (m *machine) rolledBack(i int, err error) []action {
	b := &m.branches[i]
	switch JudgeRollbackReply(err, b.attempts >= m.maxTries) {
	case Phase2Done:
		b.state = bDone
	case Phase2Retry:
		if !Retryable(err) {
			b.viaRM = true
		}
		b.attempts++
		return []action{actRollback{i: i, viaRM: b.viaRM, attempt: b.attempts}}
	default:
		// Presumed abort: recovery rolls it back later.
		b.state = bPending
		if !b.viaRM {
			return []action{actRelease{i: i}}
		}
	}
	return nil
}

func (m *machine) maybeFinishCommit() []action {
	var pending, heuristic []int
	viaRM := false
	var unknown error
	unknownAt, abortedAt := -1, -1
	for i, b := range m.branches {
		switch b.state {
		case bCommitting, bChecking:
			return nil
		case bPending:
			pending = append(pending, i)
		}
		switch b.fate {
		case fateHeuristic:
			heuristic = append(heuristic, i)
		case fateUnknown:
			if unknown == nil {
				unknown, unknownAt = b.why, i
			}
		case fateAborted:
			abortedAt = i
		}
		viaRM = viaRM || b.ackedRM
	}
	switch {
	case abortedAt >= 0:
		// Only a sole commit gets here: recovery rolled the branch back.
		return m.finish(outcome{err: &AbortError{ID: m.id, RM: m.branches[abortedAt].rm, Reason: ErrAbortRecorded}})
	case unknown != nil:
		err := &Error{Op: "commit", RM: m.branches[unknownAt].rm, XID: m.xid(unknownAt), Kind: ErrOutcomeUnknown, Err: unknown}
		return m.finish(outcome{logged: m.logged, pending: pending, err: err})
	case len(heuristic) > 0:
		he := &HeuristicError{ID: m.id}
		for _, i := range heuristic {
			he.RolledBack = append(he.RolledBack, m.branches[i].rm)
		}
		return m.finish(outcome{logged: m.logged, pending: pending, err: he})
	}
	if m.sole && len(pending) > 0 {
		// No record was written: recovery would presume abort. The
		// caller must not be told "committed".
		err := &Error{Op: "commit", RM: m.branches[pending[0]].rm, XID: m.xid(pending[0]), Kind: ErrOutcomeUnknown,
			Err: errors.New("the only prepared branch could not be committed")}
		return m.finish(outcome{pending: pending, err: err})
	}
	var acts []action
	// A record may be dropped only once every branch acknowledged on
	// the session that prepared it; otherwise recovery checks the
	// databases and forgets it (fact 7).
	if m.logged && !m.inResource && len(pending) == 0 && !viaRM {
		acts = append(acts, actForget{})
	}
	return append(acts, m.finish(outcome{committed: true, logged: m.logged, pending: pending})...)
}

func (m *machine) maybeFinishAbort() []action {
	var pending []int
	for i, b := range m.branches {
		switch b.state {
		case bActive, bPreparing, bPrepared, bMaybe, bRollingBack:
			return nil
		case bPending:
			pending = append(pending, i)
		}
	}
	return m.finish(outcome{pending: pending, err: m.abort})
}

func (m *machine) maybeFinishOnePhase() []action {
	for _, b := range m.branches {
		if b.state == bPreparing || b.state == bCommitting || b.state == bRollingBack {
			return nil
		}
	}
	if m.result == nil {
		return nil
	}
	res := *m.result
	m.result = nil
	return m.finish(res)
}

func (m *machine) finish(res outcome) []action {
	if m.phase == phaseDone {
		return nil
	}
	m.phase = phaseDone
	m.result = &res
	return []action{actFinish{res: res}}
}
