package xa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTxDone is returned by operations on a transaction that has committed.
var ErrTxDone = errors.New("xa: transaction already finished")

// Result describes a finished global transaction.
type Result struct {
	ID        GlobalID
	Committed bool
	// OnePhase: the only branch that did work committed in one phase.
	OnePhase bool
	// Logged: a commit decision was written to the decision log.
	Logged bool
	// Pending names the participants whose branch is left to recovery:
	// for a committed transaction they are decided and will commit.
	// With Config.AsyncCommit it is empty when Commit returns.
	Pending []string
	// Phase2 is closed when phase 2 has ended, with Config.AsyncCommit;
	// nil otherwise (phase 2 ended before Commit returned).
	Phase2 <-chan struct{}
}

// Tx is one global transaction. Its methods are safe for concurrent use.
type Tx struct {
	mgr      *Manager
	id       GlobalID
	begun    time.Time
	deadline time.Time       // begun + Timeout: no decision is taken after it
	ctx      context.Context // bounds the work: ends at the timeout, on rollback or when finished
	cancel   context.CancelCauseFunc
	stopExp  func() bool // stops the expiry callback

	commitCalled atomic.Bool // Commit was called (Run must not report an abort then)

	mu       sync.Mutex
	m        *machine
	branches []Branch
	rms      []ResourceManager
	names    []string // the participants' names, by branch
	xids     []XID    // the branches' XIDs
	origins  []Origin
	durable  *decision     // set once the commit decision may be acted on
	phase2   chan struct{} // closed when an asynchronous phase 2 ends
	res      Result
	err      error
	finished bool
	stats    TxStats
	span     Span   // the transaction's span; nil when not traced (Config.Tracer)
	spans    []Span // spans of actions in flight, by branch (and the decision log last)

	// first holds the by-branch slices of the first two branches (the
	// common case) within the Tx's own allocation.
	first struct {
		branches [2]Branch
		rms      [2]ResourceManager
		names    [2]string
		xids     [2]XID
		origins  [2]Origin
	}
}

// decision is the proof that branches may be told to commit. Only
// logCommit (after the decision log returned nil) and soleDecision (when
// the only prepared branch needs no record) make one, and commitBranch
// demands one: no branch is committed before its decision is durable.
type decision struct {
	id     GlobalID
	logged bool
}

func newTx(parent context.Context, m *Manager, id GlobalID, now time.Time) *Tx {
	var span Span
	if tr := m.cfg.Tracer; tr != nil {
		if parent, span = tr.Start(parent, SpanTransaction); span != nil {
			span.SetAttributes(slog.String(AttrGlobalID, id.String()), slog.String(AttrNode, m.cfg.Node))
		}
	}
	ctx, cancel := context.WithCancelCause(parent)
	tctx, tcancel := context.WithDeadlineCause(ctx, now.Add(m.cfg.Timeout), ErrTimeout)
	tx := &Tx{
		mgr: m, id: id, begun: now, deadline: now.Add(m.cfg.Timeout),
		ctx:  tctx,
		m:    newMachine(id, m.cfg.Phase2Attempts),
		span: span,
	}
	tx.m.log = m.ident.ID
	tx.branches, tx.rms, tx.names = tx.first.branches[:0], tx.first.rms[:0], tx.first.names[:0]
	tx.xids, tx.origins = tx.first.xids[:0], tx.first.origins[:0]
	tx.cancel = func(cause error) { cancel(cause); tcancel() }
	tx.stopExp = context.AfterFunc(tctx, tx.expire)
	return tx
}

// ID returns the transaction's global id.
func (tx *Tx) ID() GlobalID { return tx.id }

// xid returns the XID of branch i: it names the manager's decision log.
func (tx *Tx) xid(i int) XID {
	if i < len(tx.xids) {
		return tx.xids[i]
	}
	return BranchRef{ID: tx.id, Index: i, Log: tx.mgr.ident.ID}.XID()
}

// Context returns the transaction's context: it ends when the transaction
// times out, rolls back or finishes. Statements on branch sessions are
// bounded by it.
func (tx *Tx) Context() context.Context { return tx.ctx }

// Enlist adds a branch on rm to the transaction and returns the branch's
// session: the driver's native API (drivers offer typed helpers, such as
// mysql.RM.Enlist). Enlisting the same participant again returns the same
// session. The branch is started with the transaction's own context, which
// bounds all work on it (ResourceManager.Start); ctx is only checked
// before, since drivers defer their I/O to the first statement.
func (tx *Tx) Enlist(ctx context.Context, rm ResourceManager) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.finished {
		if tx.err != nil {
			return nil, tx.err
		}
		return nil, ErrTxDone
	}
	name := rm.Name()
	for i, n := range tx.names {
		if n == name {
			if tx.rms[i] != rm {
				return nil, fmt.Errorf("xa: two participants are named %q", name)
			}
			return tx.branches[i].Session(), nil
		}
	}
	if err := tx.ctx.Err(); err != nil {
		return nil, &AbortError{ID: tx.id, Reason: context.Cause(tx.ctx)}
	}
	i := len(tx.branches)
	x := tx.xid(i)
	b, err := rm.Start(tx.ctx, x)
	if err != nil {
		return nil, err
	}
	if _, err := tx.m.enlist(name); err != nil {
		b.Close() //nolint:errcheck // never started
		return nil, err
	}
	tx.branches = append(tx.branches, b)
	tx.rms = append(tx.rms, rm)
	tx.names = append(tx.names, name)
	tx.xids = append(tx.xids, x)
	tx.origins = append(tx.origins, Origin{})
	return b.Session(), nil
}

// Commit commits the transaction atomically across its branches.
//
// The error is nil exactly when the transaction committed. Result.Pending
// then names branches that could not be told yet: the decision is durable
// and recovery commits them. An error matching ErrAborted (an *AbortError
// naming the branch that refused and why) means that nothing committed.
// An error matching ErrOutcomeUnknown means the decision's fate could not
// be learned (a lost reply or a failed decision-log write): recovery will
// resolve it from the decision log; do not retry the work blindly.
//
// Cancelling ctx before the decision aborts the transaction; once the
// commit decision is taken, phase 2 ignores ctx (it runs with its own
// deadline per attempt).
func (tx *Tx) Commit(ctx context.Context) (Result, error) {
	tx.commitCalled.Store(true)
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.finished {
		if tx.err != nil {
			return tx.res, tx.err
		}
		return tx.res, ErrTxDone
	}
	n := len(tx.branches)
	flags := make([]bool, 3*n)
	ev := evCommit{idle: flags[:n:n], onePhase: flags[n : 2*n : 2*n], last: flags[2*n:]}
	for i, b := range tx.branches {
		if id, ok := b.(Idler); ok {
			ev.idle[i] = id.Idle()
		}
		_, ev.onePhase[i] = b.(OnePhaseCommitter)
		if lr, ok := b.(LastResource); ok && lr.CanCommitLast() {
			ev.last[i] = tx.delegate(ctx, i)
		}
	}
	// Before anything is prepared, the log must know which store each
	// participant that did work is: recovery trusts a listing, and the
	// absence of a branch in it, only from that store.
	if err := tx.recordParticipants(ctx, ev.idle); err != nil {
		tx.run(ctx, evRollback{reason: err})
		return tx.res, tx.err
	}
	tx.run(ctx, ev)
	return tx.res, tx.err
}

// recordParticipants makes sure the decision log records the identity of
// every participant with a branch that did work (see Identified), once per
// manager and participant. An error means it could not: the participant's
// database has no identity, another store answered under a name the log
// recorded for another (an *IdentityError), or the log write failed;
// nothing was prepared, and the transaction aborts.
func (tx *Tx) recordParticipants(ctx context.Context, idle []bool) error {
	for i, rm := range tx.rms {
		if idle[i] {
			continue
		}
		idf, ok := rm.(Identified)
		if !ok {
			continue
		}
		id, err := idf.Identity()
		if err != nil {
			return err
		}
		name := rm.Name()
		if v, ok := tx.mgr.recorded.Load(name); ok && v.(string) == id.ID {
			continue
		}
		dctx, cancel := tx.decisionCtx(ctx)
		err = tx.mgr.cfg.Log.LogParticipant(dctx, ParticipantRecord{Name: name, Identity: id, Logged: time.Now()})
		cancel()
		if err != nil {
			return fmt.Errorf("xa: recording the identity of participant %q in the decision log: %w", name, err)
		}
		tx.mgr.recorded.Store(name, id.ID)
	}
	return nil
}

// Rollback rolls the transaction back. It returns nil if the transaction
// is rolled back (now or before, by a timeout or a Commit that aborted),
// ErrTxDone if it committed. After a Commit whose outcome is not a clean
// abort, it changes nothing and returns Commit's error again: one matching
// ErrOutcomeUnknown (the decision or a one-phase commit may have taken
// effect; recovery settles it) or ErrHeuristic (some branches committed).
// Branches that cannot be reached are left to recovery, which presumes
// abort.
func (tx *Tx) Rollback(ctx context.Context) error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.finished {
		switch {
		case tx.res.Committed:
			return ErrTxDone
		case errors.Is(tx.err, ErrOutcomeUnknown), errors.Is(tx.err, ErrHeuristic):
			return tx.err
		}
		return nil
	}
	tx.run(ctx, evRollback{})
	return nil
}

func (tx *Tx) result() (Result, error) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return tx.res, tx.err
}

// expire runs when the transaction's context ends (timeout, or the Begin
// context ended). If nobody is committing, it rolls the transaction back
// now so that its locks are released at once; a Commit in progress sees
// the same context end and handles it itself.
func (tx *Tx) expire() {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.finished {
		return
	}
	tx.run(context.Background(), tx.expiryEvent())
}

func (tx *Tx) expiryEvent() event {
	if errors.Is(context.Cause(tx.ctx), ErrTimeout) {
		return evTimeout{}
	}
	return evRollback{reason: context.Cause(tx.ctx)}
}

// run drives the machine from ev until the transaction finishes,
// performing actions concurrently. It is called with tx.mu held. With
// Config.AsyncCommit it returns as soon as the commit decision is durable
// and finishes phase 2 on a goroutine of its own.
func (tx *Tx) run(ctx context.Context, ev event) {
	d := &driver{
		tx: tx, ctx: ctx, t: &tracker{start: time.Now()},
		events:    make(chan event, 2*len(tx.branches)+2),
		expired:   tx.ctx.Done(),
		cancelled: ctx.Done(),
	}
	d.loop(tx.m.step(ev), tx.mgr.cfg.AsyncCommit)
}

// driver is one run of the machine: the actions in flight and their
// results.
type driver struct {
	tx        *Tx
	ctx       context.Context
	t         *tracker
	events    chan event
	inflight  int
	expired   <-chan struct{}
	cancelled <-chan struct{}
	fin       *outcome
}

// loop performs acts and steps the machine with their outcomes until the
// transaction finishes, or, if mayHandOff, until the commit decision is
// durable: the rest of phase 2 then goes on in a goroutine.
//
// Of the actions started together, one (see ownAction) is performed on
// the loop's own goroutine, the caller's, after the others were started on
// goroutines of their own: as a hand-written two-phase commit does, which
// saves a goroutine per step and the growth of its stack. The machine is
// stepped with its outcome as with any other. Meanwhile the loop cannot
// notice the timeout or the caller giving up; the action's own context
// ends with them (a prepare is bounded by both, later actions ignore
// them), and when it has ended, the timeout or cancellation is stepped
// before the outcome (as it would have been noticed first on a goroutine
// of its own).
func (d *driver) loop(acts []action, mayHandOff bool) {
	tx := d.tx
	for {
		handOff := mayHandOff && tx.m.phase == phaseCommitting && tx.m.logged
		if own := d.start(acts, !handOff); own != nil {
			d.perform(own)
		}
		if d.fin != nil && d.inflight == 0 {
			tx.finish(*d.fin, d.t)
			return
		}
		if handOff {
			tx.handOff()
			go func() {
				d.loop(nil, false)
			}()
			return
		}
		// The timeout and the caller's cancellation first, when they are
		// due together with an outcome.
		select {
		case <-d.expired:
			d.expired = nil
			acts = tx.m.step(tx.expiryEvent())
			continue
		case <-d.cancelled:
			d.cancelled = nil
			acts = tx.m.step(evRollback{reason: d.ctx.Err()})
			continue
		default:
		}
		select {
		case ev := <-d.events:
			d.inflight--
			d.t.done(ev)
			if tx.span != nil {
				tx.traceDone(ev)
			}
			acts = tx.m.step(ev)
		case <-d.expired:
			d.expired = nil
			acts = tx.m.step(tx.expiryEvent())
		case <-d.cancelled:
			d.cancelled = nil
			// Before the decision, the caller giving up aborts; after
			// it, phase 2 goes on regardless.
			acts = tx.m.step(evRollback{reason: d.ctx.Err()})
		}
	}
}

// ownAction returns the index in acts of the action the loop performs on
// its own goroutine, -1 for none: the last prepare, decision-log write,
// last-resource commit, one-phase commit or first commit attempt, and
// commits only if mayCommit (not before an asynchronous hand-off, whose
// caller must not wait for phase 2). Rollbacks and retries, which may wait
// for a backoff, run on goroutines of their own.
func ownAction(acts []action, mayCommit bool) int {
	for i := len(acts) - 1; i >= 0; i-- {
		switch a := acts[i].(type) {
		case actPrepare, actLog, actCommitLast:
			return i
		case actOnePhase:
			if mayCommit {
				return i
			}
		case actCommit:
			if mayCommit && a.attempt == 1 {
				return i
			}
		}
	}
	return -1
}

// start starts the I/O of acts; their outcomes arrive on d.events. One
// action (see ownAction) is not started but returned, counted in flight,
// for the caller to perform with d.perform.
func (d *driver) start(acts []action, mayCommit bool) action {
	tx := d.tx
	own := ownAction(acts, mayCommit)
	for k, a := range acts {
		if k == own {
			d.inflight++
			d.t.started(a)
			continue
		}
		switch a := a.(type) {
		case actFinish:
			d.fin = &a.res
		case actRelease:
			if err := tx.branches[a.i].Close(); err != nil {
				tx.mgr.log.WarnContext(tx.ctx, "releasing branch session", "tx", tx.id, "rm", tx.rms[a.i].Name(), "err", err)
			}
		case actForget:
			if err := tx.mgr.cfg.Log.Forget(detached(d.ctx), tx.id); err != nil {
				tx.mgr.log.WarnContext(tx.ctx, "forgetting decision record; recovery will", "tx", tx.id, "err", err)
			}
		case actLogHeuristic:
			tx.logHeuristic(d.ctx, a)
		case actCommit:
			d.inflight++
			d.t.started(a)
			ctx, proof, events := d.actionCtx(a), tx.decided(), d.events
			spawn(func() { tx.performCommit(ctx, a, proof, events) })
		default:
			d.inflight++
			d.t.started(a)
			ctx, events := d.actionCtx(a), d.events
			spawn(func() { tx.perform(ctx, a, events) })
		}
	}
	if own < 0 {
		return nil
	}
	return acts[own]
}

// perform does the I/O of an action that start returned, on the calling
// goroutine; its outcome goes to d.events like any other.
func (d *driver) perform(a action) {
	ctx := d.actionCtx(a)
	if c, ok := a.(actCommit); ok {
		d.tx.performCommit(ctx, c, d.tx.decided(), d.events)
		return
	}
	d.tx.perform(ctx, a, d.events)
}

// perform does one action's I/O and reports its outcome on events.
func (tx *Tx) perform(ctx context.Context, a action, events chan<- event) {
	cfg := &tx.mgr.cfg
	switch a := a.(type) {
	case actPrepare:
		// Prepare is bounded by the transaction's timeout and by the
		// caller: a prepare that hangs aborts the transaction.
		pctx, cancel := mergeCtx(tx.ctx, ctx)
		v, err := tx.branches[a.i].Prepare(pctx)
		cancel()
		// A lost reply may have left the branch prepared: its origin says
		// which session recovery must wait for before rolling it back.
		if err == nil && v == VotePrepared || OutcomeUnknown(err) {
			if o, ok := tx.branches[a.i].(OriginReporter); ok {
				tx.origins[a.i] = o.Origin()
			}
		}
		events <- evVote{i: a.i, vote: v, err: err}
	case actOnePhase:
		pctx, cancel := context.WithTimeout(detached(ctx), cfg.Phase2Timeout)
		err := tx.branches[a.i].(OnePhaseCommitter).CommitOnePhase(pctx)
		cancel()
		events <- evPhase2{i: a.i, err: err}
	case actLog:
		// No decision once Begin + Timeout has passed: recovery may be
		// presuming abort by now. The write is bounded by the time left
		// (the log's fence settles a write that outlives it).
		if !time.Now().Before(tx.deadline) {
			events <- evLogged{err: errTooLate}
			return
		}
		lctx, cancel := tx.decisionCtx(ctx)
		err := tx.logCommit(lctx, a.branches)
		cancel()
		events <- evLogged{err: err}
	case actCommitLast:
		err := tx.commitLast(ctx, a.i, a.branches)
		events <- evPhase2{i: a.i, err: err}
	case actLookupAbort:
		lctx, cancel := context.WithTimeout(detached(ctx), cfg.Phase2Timeout)
		_, aborted, err := cfg.Log.LookupAbort(lctx, tx.id)
		cancel()
		events <- evLookedUp{i: a.i, aborted: aborted, err: err}
	case actRollback:
		time.Sleep(tx.mgr.backoff(a.attempt))
		pctx, cancel := context.WithTimeout(detached(ctx), cfg.Phase2Timeout)
		var err error
		if a.viaRM {
			err = tx.rms[a.i].Rollback(pctx, tx.xid(a.i), tx.origins[a.i])
		} else {
			err = tx.branches[a.i].Rollback(pctx)
		}
		cancel()
		events <- evPhase2{i: a.i, err: err}
	default:
		panic(fmt.Sprintf("xa: unexpected action %T", a))
	}
}

// performCommit tells a branch to commit; d proves that the decision is
// durable (or needs no record).
func (tx *Tx) performCommit(ctx context.Context, a actCommit, d decision, events chan<- event) {
	if !d.logged && a.attempt == 1 && !time.Now().Before(tx.deadline) {
		// A sole commit is the decision: not after Begin + Timeout.
		events <- evPhase2{i: a.i, err: errTooLate}
		return
	}
	time.Sleep(tx.mgr.backoff(a.attempt))
	pctx, cancel := context.WithTimeout(detached(ctx), tx.mgr.cfg.Phase2Timeout)
	err := tx.commitBranch(pctx, d, a.i, a.viaRM)
	cancel()
	events <- evPhase2{i: a.i, err: err}
}

// record is the commit decision covering the prepared branches.
func (tx *Tx) record(prepared []int) CommitRecord {
	rec := CommitRecord{ID: tx.id, Logged: time.Now(), Branches: make([]BranchRecord, 0, len(prepared))}
	for _, i := range prepared {
		rec.Branches = append(rec.Branches, BranchRecord{RM: tx.names[i], XID: tx.xid(i), Origin: tx.origins[i]})
	}
	return rec
}

// logCommit makes the commit decision durable and, only then, records the
// proof that lets branches commit.
func (tx *Tx) logCommit(ctx context.Context, prepared []int) error {
	if err := tx.mgr.cfg.Log.LogCommit(ctx, tx.record(prepared)); err != nil {
		return err
	}
	tx.durable = &decision{id: tx.id, logged: true}
	return nil
}

// commitLast commits the last resource i together with the decision and,
// only if that succeeded, records the proof that lets branches commit.
//
// The log holds the participant's delegation (see delegate). When the
// decision cannot be attempted (Begin + Timeout passed), the last
// resource's branch is rolled back and the error says the transaction
// aborts.
func (tx *Tx) commitLast(ctx context.Context, i int, prepared []int) error {
	lr := tx.branches[i].(LastResource)
	name := tx.rms[i].Name()
	refuse := func(reason error) error {
		rctx, cancel := context.WithTimeout(detached(ctx), tx.mgr.cfg.Phase2Timeout)
		defer cancel()
		if err := tx.branches[i].Rollback(rctx); err != nil {
			tx.mgr.log.WarnContext(tx.ctx, "rolling back the last resource; its session is closed", "tx", tx.id, "rm", name, "err", err)
			tx.branches[i].Close() //nolint:errcheck // a closed session rolls back a branch that is not prepared
		}
		return &Error{Op: "commit last", RM: name, XID: tx.xid(i), Err: reason}
	}
	if v, ok := tx.mgr.delegated.Load(name); !ok || !v.(bool) {
		// delegate runs before any branch is prepared; never reached.
		return refuse(fmt.Errorf("%w: %s holds no delegation in the decision log", errNotAttempted, name))
	}
	if !time.Now().Before(tx.deadline) {
		return refuse(errTooLate)
	}
	lctx, cancel := tx.decisionCtx(ctx)
	defer cancel()
	if err := lr.CommitLast(lctx, tx.record(prepared)); err != nil {
		return err
	}
	tx.durable = &decision{id: tx.id, logged: true}
	return nil
}

// delegate makes sure the decision log records that participant i may
// hold decisions, with its decision table's name and identity, before any
// branch of the transaction is prepared: a scanner that lists a prepared
// branch then finds the delegation, and fences that table before presuming
// abort. It reports whether branch i may commit last; if the delegation
// cannot be recorded, the transaction commits with the log instead. A
// delegation the log refuses because it names another table than the one
// recorded (ErrIdentity) is not tried again by this manager.
func (tx *Tx) delegate(ctx context.Context, i int) bool {
	name := tx.rms[i].Name()
	if v, ok := tx.mgr.delegated.Load(name); ok {
		return v.(bool)
	}
	d := Delegation{Participant: name}
	dt, ok := tx.rms[i].(DecisionTable)
	if !ok {
		dt, ok = tx.branches[i].(DecisionTable)
	}
	if ok {
		table, id, err := dt.DecisionTableIdentity()
		if err != nil {
			tx.mgr.log.WarnContext(tx.ctx, "the last resource's decision table has no identity; committing through the decision log", "tx", tx.id, "rm", name, "err", err)
			return false
		}
		d.Table, d.TableID = table, id.ID
	}
	dctx, cancel := tx.decisionCtx(ctx)
	err := tx.mgr.cfg.Log.LogDelegation(dctx, d)
	cancel()
	switch {
	case errors.Is(err, ErrIdentity):
		if _, loaded := tx.mgr.delegated.LoadOrStore(name, false); !loaded {
			tx.mgr.log.ErrorContext(tx.ctx, "the decision log delegated decisions to another table of this participant; committing through the decision log", "rm", name, "err", err)
		}
		return false
	case err != nil:
		tx.mgr.log.WarnContext(tx.ctx, "recording the last resource's delegation failed; committing through the decision log", "tx", tx.id, "rm", name, "err", err)
		return false
	}
	tx.mgr.delegated.Store(name, true)
	return true
}

// errNotAttempted: the decision was not attempted; the transaction aborts.
var errNotAttempted = errors.New("xa: commit decision not attempted")

// decisionCtx bounds a decision's write: by the time left before Begin +
// Timeout, and by Phase2Timeout.
func (tx *Tx) decisionCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := time.Now().Add(tx.mgr.cfg.Phase2Timeout)
	if tx.deadline.Before(d) {
		d = tx.deadline
	}
	return context.WithDeadline(detached(ctx), d)
}

// decided returns the proof that branches may commit. It panics if there
// is none: that would be a protocol bug, and committing would risk a
// partial commit.
func (tx *Tx) decided() decision {
	if tx.durable != nil {
		return *tx.durable
	}
	if tx.m.sole {
		return decision{id: tx.id}
	}
	panic("xa: commit without a durable decision")
}

// commitBranch tells branch i to commit; d proves the decision.
func (tx *Tx) commitBranch(ctx context.Context, d decision, i int, viaRM bool) error {
	if d.id != tx.id {
		panic("xa: decision of another transaction")
	}
	if viaRM {
		return tx.rms[i].Commit(ctx, tx.xid(i), tx.origins[i])
	}
	return tx.branches[i].Commit(ctx)
}

// logHeuristic records that a database rolled back branch a.i although the
// decision was commit. It runs on the driver's goroutine: the path is rare,
// and the record must be durable before the caller learns the outcome.
func (tx *Tx) logHeuristic(ctx context.Context, a actLogHeuristic) {
	name := tx.rms[a.i].Name()
	tx.mgr.log.ErrorContext(tx.ctx, "heuristic outcome: the database rolled back a branch whose commit was decided", "tx", tx.id, "rm", name, "err", a.reason)
	h := HeuristicRecord{RM: name, XID: tx.xid(a.i), Action: OutcomeRollback, Forced: true, Time: time.Now(),
		Reason: "the database rolled the branch back in phase 2 although the decision was commit: " + a.reason.Error()}
	hctx, cancel := context.WithTimeout(detached(ctx), tx.mgr.cfg.Phase2Timeout)
	defer cancel()
	if err := tx.mgr.cfg.Log.LogHeuristic(hctx, h); err != nil {
		tx.mgr.log.ErrorContext(tx.ctx, "recording a heuristic outcome in the decision log failed", "tx", tx.id, "rm", name, "err", err)
	}
}

// handOff tells the caller that the transaction committed, once its
// decision is durable, while phase 2 goes on (Config.AsyncCommit).
func (tx *Tx) handOff() {
	tx.finished = true
	tx.stopExp()
	tx.cancel(ErrTxDone)
	tx.phase2 = make(chan struct{})
	tx.res = Result{ID: tx.id, Committed: true, Logged: true, Phase2: tx.phase2}
	tx.err = nil
	tx.mgr.asyncStarted()
}

// finish records the outcome. After a hand-off it runs on phase 2's own
// goroutine, without tx.mu: it takes it.
func (tx *Tx) finish(o outcome, t *tracker) {
	if tx.phase2 != nil {
		tx.mu.Lock()
		defer tx.mu.Unlock()
		defer tx.mgr.asyncEnded()
		defer close(tx.phase2)
	}
	tx.finished = true
	tx.stopExp()
	tx.cancel(ErrTxDone)
	tx.res = Result{ID: tx.id, Committed: o.committed, OnePhase: o.onePhase, Logged: o.logged, Phase2: tx.phase2}
	for _, i := range o.pending {
		tx.res.Pending = append(tx.res.Pending, tx.rms[i].Name())
	}
	tx.err = o.err
	st := TxStats{
		ID: tx.id, Protocol: t.protocolOf(),
		OnePhase: o.onePhase, Logged: o.logged, Branches: len(tx.branches), Pending: len(o.pending),
		Prepare: t.prepare, Log: t.log, Commit: t.commit, Total: time.Since(tx.begun),
	}
	lvl := slog.LevelDebug
	switch {
	case o.committed:
		st.Outcome = "committed"
	case OutcomeUnknown(o.err):
		st.Outcome = "unknown"
		lvl = slog.LevelWarn
	case errors.Is(o.err, ErrHeuristic):
		st.Outcome = "heuristic"
		lvl = slog.LevelError
	default:
		st.Outcome = "aborted"
	}
	if len(o.pending) > 0 {
		lvl = slog.LevelWarn
	}
	if tx.mgr.log.Enabled(tx.ctx, lvl) { // the arguments cost allocations
		tx.mgr.log.Log(tx.ctx, lvl, "transaction finished", "tx", tx.id, "outcome", st.Outcome, "protocol", st.Protocol,
			"one_phase", o.onePhase, "logged", o.logged, "branches", len(tx.branches), "pending", tx.res.Pending, "err", o.err)
	}
	if obs := tx.mgr.cfg.Observer; obs != nil {
		if co, ok := obs.(ContextObserver); ok {
			co.ObserveTxContext(tx.ctx, st)
		} else {
			obs.ObserveTx(st)
		}
	}
	if tx.span != nil {
		tx.traceFinish(st, o.err)
	}
}

// tracker measures the protocol's phases.
type tracker struct {
	start                     time.Time
	prepStart, logStart, c2St time.Time
	prepare, log, commit      time.Duration
	prepOpen, logOpen, c2Open int
	last                      int    // 1 + the last resource's index, 0 if none
	proto                     string // the protocol's actions seen (see protocol)
}

func (t *tracker) started(a action) {
	now := time.Now()
	t.protocol(a)
	switch a := a.(type) {
	case actPrepare:
		if t.prepOpen == 0 && t.prepStart.IsZero() {
			t.prepStart = now
		}
		t.prepOpen++
	case actLog:
		t.logStart = now
		t.logOpen++
	case actCommitLast:
		t.logStart = now
		t.logOpen++
		t.last = a.i + 1
	case actCommit, actOnePhase:
		if t.c2St.IsZero() {
			t.c2St = now
		}
		t.c2Open++
	}
}

func (t *tracker) done(ev event) {
	now := time.Now()
	switch ev.(type) {
	case evVote:
		t.prepOpen--
		t.prepare = now.Sub(t.prepStart)
	case evLogged:
		t.logOpen--
		t.log = now.Sub(t.logStart)
	case evPhase2:
		if t.last == ev.(evPhase2).i+1 && t.logOpen > 0 {
			// The last resource's commit made the decision durable.
			t.logOpen--
			t.log = now.Sub(t.logStart)
			return
		}
		if !t.c2St.IsZero() {
			t.commit = now.Sub(t.c2St)
		}
	}
}

// mergeCtx returns a context that ends when either a or b ends.
func mergeCtx(a, b context.Context) (context.Context, context.CancelFunc) {
	if b.Done() == nil {
		return a, func() {} // b never ends
	}
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// detached returns ctx's values without its cancellation or deadline, as
// context.WithoutCancel does, and ctx itself, without an allocation, when
// it has neither (context.Background, or values on it).
func detached(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		if _, ok := ctx.Deadline(); !ok {
			return ctx
		}
	}
	return context.WithoutCancel(ctx)
}
