package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// This file is the self-driven checkpoint protocol as a pure state
// machine, in the manner of etcd-io/raft and of xa/machine.go: it takes
// events (records were polled, a checkpoint was pre-committed, a commit
// came back, partitions were lost) and returns the actions to perform
// next. It does no I/O, reads no clock and starts no goroutine, so every
// interleaving of checkpoints, failures, rebalances and rewinds can be
// replayed deterministically (testdata/machine/*.txt). The Runner
// (runner.go) performs the actions and feeds their outcomes back.
//
// Actions have one of three performers:
//
//   - the reader (the goroutine that polls the Source; Handler calls come
//     from within its Poll): write, pre-commit, abort a checkpoint that
//     never reached the committer, pause, rewind, seek, acknowledge, take,
//     release, sweep, wait, stop;
//   - the committer (a goroutine of its own, so that the next checkpoint
//     is written while the previous one commits): commit, or abort without
//     deciding, the prepared checkpoints in order, one at a time;
//   - whoever stepped the machine: the Observer's notifications.
//
// A committer's outcome may unblock a reader that waits (actWait): the
// actions it asks of the reader are handed to it then.
//
// One checkpoint walks: written (actWrite, evWritten) -> due (enough
// records, CheckpointInterval: evDue, or the source's end) ->
// pre-committed (actPreCommit, evPreCommitted) -> queued -> decided and
// committed in order (actCommit, evCommitted) -> acknowledged to the
// source (actAck, at the reader's next collect). A failure aborts it and
// every checkpoint queued behind it, then the reader recovers: it waits
// for the queue to drain, pauses (aborts in a row), reads the committed
// positions back (actRewind) and seeks the source to them (actSeek).

// phase is what the reader is doing.
type phase int

const (
	phaseIdle      phase = 1 + iota // between steps: collect, poll, due
	phaseWriting                    // actWrite sent
	phaseSlot                       // a due checkpoint waits for fewer than MaxPending prepared ones
	phasePreparing                  // actPreCommit sent
	phaseAborting                   // actAbort sent (a checkpoint that never reached the committer)
	phaseDraining                   // waiting for every prepared checkpoint's outcome
	phasePausing                    // actPause sent
	phaseRewinding                  // actRewind sent
	phaseSeeking                    // actSeek sent
	phaseTaking                     // actTake sent (Assigned)
	phaseReleasing                  // actRelease sent (Revoked, Lost)
	phaseStopped                    // actStop sent: Run returns, then shuts down
	phaseShutdown                   // shutting down: the prepared checkpoints drain
	phaseDone                       // shut down
)

var phaseNames = [...]string{"", "idle", "writing", "slot", "preparing", "aborting", "draining", "pausing", "rewinding", "seeking",
	"taking", "releasing", "stopped", "shutdown", "done"}

func (p phase) String() string { return phaseNames[p] }

// flow is what the reader's phases serve: a flow runs over several
// phases (pre-commit, abort, drain...) and decides what follows them.
type flow int

const (
	flowRun      flow = 1 + iota // reading: a checkpoint came due
	flowEOF                      // the source ended: commit everything, then stop
	flowRecover                  // recovering from m.cause
	flowRevoke                   // Revoked(m.parts): finish every checkpoint, then release
	flowLose                     // Lost(m.parts): abort every checkpoint, then release
	flowShutdown                 // Run returns: abort the open checkpoint, drain the prepared ones
)

var flowNames = [...]string{"", "run", "eof", "recover", "revoke", "lose", "shutdown"}

func (f flow) String() string { return flowNames[f] }

// ckpt is one checkpoint of the run as the machine knows it.
type ckpt struct {
	n         uint64
	records   int
	positions map[string]string // partition -> position after its last record
}

// event is an input to the machine.
type event interface{ isEvent() }

type (
	// evCollect: the reader is at the top of its loop, about to poll.
	evCollect struct{}
	// evPolled: Poll returned. eof: the source ended (io.EOF); err: any
	// other error; canceled: the run's context had ended by then.
	evPolled struct {
		records  []Record
		eof      bool
		err      error
		canceled error
	}
	// evWritten: actWrite returned: beginErr, Begin failed (nothing was
	// written); err, Write failed.
	evWritten struct {
		n        uint64
		beginErr error
		err      error
	}
	// evDue: the open checkpoint has been open for CheckpointInterval.
	evDue struct{}
	// evPreCommitted: actPreCommit returned.
	evPreCommitted struct {
		n   uint64
		err error
	}
	// evCommitted: the committer's actCommit returned.
	evCommitted struct {
		n   uint64
		err error
	}
	// evAborted: an actAbort (the reader's) or an actAbortQueued (the
	// committer's) returned; err is the Abort's own error.
	evAborted struct {
		n   uint64
		err error
	}
	// evPaused: actPause ended; err: the run's context ended first.
	evPaused struct{ err error }
	// evRewound: actRewind (Owner.Rewind) returned. canceled: the
	// run's context had ended by then.
	evRewound struct {
		positions map[string]string
		lost      []string
		err       error
		canceled  bool
	}
	// evSought: actSeek (Source.Seek) returned.
	evSought struct {
		err      error
		canceled bool
	}
	// evAssigned, evRevoked, evLost: the Source's Handler calls.
	evAssigned struct{ parts []string }
	evRevoked  struct{ parts []string }
	evLost     struct{ parts []string }
	// evTaken: actTake (Owner.Take) returned.
	evTaken struct {
		parts []string
		err   error
	}
	// evReleased: actRelease (Owner.Release) returned.
	evReleased struct{}
	// evShutdown: Run is returning: shut down.
	evShutdown struct{}
	// evDrainTimeout: DrainTimeout passed while shutting down.
	evDrainTimeout struct{}
)

func (evCollect) isEvent()      {}
func (evPolled) isEvent()       {}
func (evWritten) isEvent()      {}
func (evDue) isEvent()          {}
func (evPreCommitted) isEvent() {}
func (evCommitted) isEvent()    {}
func (evAborted) isEvent()      {}
func (evPaused) isEvent()       {}
func (evRewound) isEvent()      {}
func (evSought) isEvent()       {}
func (evAssigned) isEvent()     {}
func (evRevoked) isEvent()      {}
func (evLost) isEvent()         {}
func (evTaken) isEvent()        {}
func (evReleased) isEvent()     {}
func (evShutdown) isEvent()     {}
func (evDrainTimeout) isEvent() {}

// action is an output of the machine.
type action interface{ isAction() }

// Reader actions.
type (
	// actWrite: write records into checkpoint n (Committer.Write),
	// beginning it first (Committer.Begin) if begin is set.
	actWrite struct {
		n       uint64
		begin   bool
		records []Record
	}
	// actPreCommit: pre-commit checkpoint n under its own number.
	actPreCommit struct{ n uint64 }
	// actAbort: abort checkpoint n, which never reached the committer.
	actAbort struct {
		n      uint64
		reason error
	}
	// actWait: block until the committer's outcomes bring the next
	// actions.
	actWait struct{}
	// actPause: wait d (aborts in a row), unless the run's context ends.
	actPause struct{ d time.Duration }
	// actRewind: read the committed positions of parts back
	// (Owner.Rewind).
	actRewind struct{ parts []string }
	// actSeek: make the source read again from positions.
	actSeek struct{ positions map[string]string }
	// actAck: acknowledge committed positions to the source
	// (Source.Committed): a copy, bounded in time, never waited for.
	actAck struct{ positions map[string]string }
	// actTake: take partitions over (Owner.Take).
	actTake struct{ parts []string }
	// actRelease: release partitions (Owner.Release).
	actRelease struct{ parts []string }
	// actSweep: run restore's orphan sweep once (Owner.Sweep).
	actSweep struct{}
	// actWarn: log a warning.
	actWarn struct {
		msg  string
		args []any
	}
	// actStop: Run returns err (after shutting down).
	actStop struct{ err error }
	// actStopped: the shutdown is over. err: a failure worse than an
	// abort among the checkpoints drained (a decision unresolved), which
	// Run reports with its own error.
	actStopped struct{ err error }
)

// Committer actions: one at a time, in checkpoint order.
type (
	// actCommit: decide and commit checkpoint n (Committer.Commit).
	actCommit struct{ n uint64 }
	// actAbortQueued: abort prepared checkpoint n without deciding it.
	actAbortQueued struct {
		n      uint64
		reason error
	}
)

// Observer actions, performed by whoever stepped the machine.
type (
	// actObserveRecords: Observer.RecordsWritten.
	actObserveRecords struct{ n int }
	// actObservePending: Observer.PendingChanged.
	actObservePending struct{ n int }
	// actObserveDone: Observer.CheckpointDone. queued: it reached the
	// committer (its durations are a prepared checkpoint's).
	actObserveDone struct {
		n         uint64
		records   int
		committed bool
		err       error
		queued    bool
	}
)

func (actWrite) isAction()       {}
func (actPreCommit) isAction()   {}
func (actAbort) isAction()       {}
func (actWait) isAction()        {}
func (actPause) isAction()       {}
func (actRewind) isAction()      {}
func (actSeek) isAction()        {}
func (actAck) isAction()         {}
func (actTake) isAction()        {}
func (actRelease) isAction()     {}
func (actSweep) isAction()       {}
func (actWarn) isAction()        {}
func (actStop) isAction()        {}
func (actStopped) isAction()     {}
func (actCommit) isAction()      {}
func (actAbortQueued) isAction() {}

func (a actCommit) number() uint64      { return a.n }
func (a actAbortQueued) number() uint64 { return a.n }
func (actObserveRecords) isAction()     {}
func (actObservePending) isAction()     {}
func (actObserveDone) isAction()        {}

// forCommitter reports whether a is the committer's to perform.
func forCommitter(a action) bool {
	switch a.(type) {
	case actCommit, actAbortQueued:
		return true
	}
	return false
}

// forObserver reports whether a is an Observer notification.
func forObserver(a action) bool {
	switch a.(type) {
	case actObserveRecords, actObservePending, actObserveDone:
		return true
	}
	return false
}

// errLost is the reason of the aborts that follow lost partitions; they
// do not count towards MaxAborts.
var errLost = errors.New("sink: its partitions were lost")

// errEarlierAborted is the reason of an abort of a checkpoint that was
// prepared after one that did not commit.
var errEarlierAborted = errors.New("sink: an earlier checkpoint did not commit")

// maxAbortBackoff bounds one pause between aborts in a row.
const maxAbortBackoff = 10 * time.Second

// machine is the self-driven protocol state of one Run.
type machine struct {
	opts RunOptions // CheckpointRecords, MaxPending, MaxAborts, AbortBackoff

	owned map[string]bool
	next  uint64 // the last checkpoint number begun
	open  *ckpt  // begun and written to, not yet pre-committed
	// writing holds what the actWrite in flight writes: its records'
	// count and positions.
	writing *ckpt
	// preparing is the checkpoint being pre-committed, or aborted by
	// the reader.
	preparing *ckpt
	// queue holds the prepared checkpoints in order; the first is at
	// the committer when atCommitter.
	queue       []*ckpt
	atCommitter bool

	phase phase
	flow  flow
	eof   bool // the poll being written ended the source

	// failed is the first failure among the queue's outcomes since the
	// last recovery: every checkpoint queued behind it is aborted, and
	// the reader recovers.
	failed error
	// lost: partitions were lost; every checkpoint queued is aborted
	// without being decided (its epochs moved on).
	lost bool
	// interrupted is a failure found inside the Source's Poll (Revoked,
	// Lost): the reader recovers once Poll returns.
	interrupted error
	// cause, lostCause, retry, last: the recovery in progress.
	cause     error
	lostCause bool
	retry     bool
	last      error
	// flowErr is the failure of the flow's pre-commit: what the flow
	// goes on with once its checkpoint is aborted.
	flowErr error
	// abortWhy is the reason of the reader's abort in flight;
	// committerWhy the reason of the committer's (actAbortQueued).
	abortWhy, committerWhy error
	// parts are the partitions of a Revoked or Lost in progress.
	parts []string
	// aborts counts aborts in a row.
	aborts int
	// ack holds committed positions not yet acknowledged to the source.
	ack map[string]string
	// ignored counts the events not accepted (accepts).
	ignored int
}

func newMachine(opts RunOptions) *machine {
	return &machine{opts: opts, owned: map[string]bool{}, ack: map[string]string{}, phase: phaseIdle, flow: flowRun}
}

// accepts reports whether ev is due in the machine's state: an outcome of
// the action in flight, a reader's step while it is idle (Handler calls
// come from within Poll, when the reader is idle), a committer's outcome
// of the checkpoint it holds.
func (m *machine) accepts(ev event) bool {
	switch ev := ev.(type) {
	case evCollect, evPolled, evAssigned, evRevoked, evLost:
		return m.phase == phaseIdle
	case evWritten:
		return m.phase == phaseWriting && m.writing != nil && ev.n == m.writing.n
	case evDue:
		return m.phase == phaseIdle && m.open != nil
	case evPreCommitted:
		return m.phase == phasePreparing && m.preparing != nil && ev.n == m.preparing.n
	case evCommitted:
		return m.atCommitter && len(m.queue) > 0 && m.queue[0].n == ev.n
	case evAborted:
		return m.atCommitter && len(m.queue) > 0 && m.queue[0].n == ev.n ||
			m.phase == phaseAborting && m.preparing != nil && m.preparing.n == ev.n
	case evPaused:
		return m.phase == phasePausing
	case evRewound:
		return m.phase == phaseRewinding
	case evSought:
		return m.phase == phaseSeeking
	case evTaken:
		return m.phase == phaseTaking
	case evReleased:
		return m.phase == phaseReleasing
	case evShutdown:
		// Run returns from its loop (idle) or on a stop, never while
		// its reader performs or waits.
		return m.phase == phaseIdle || m.phase == phaseStopped
	case evDrainTimeout:
		return m.phase == phaseShutdown
	}
	return false
}

// step applies ev and returns the actions to perform, in order. An event
// the machine does not accept in its state changes nothing and is counted
// (ignored): the Runner never sends one, and the tests check it.
func (m *machine) step(ev event) []action {
	if !m.accepts(ev) {
		m.ignored++
		return nil
	}
	switch ev := ev.(type) {
	case evCollect:
		acts := m.acknowledge()
		if m.failed != nil {
			acts = append(acts, m.recover(m.failed)...)
		}
		return acts
	case evPolled:
		return m.onPolled(ev)
	case evWritten:
		return m.onWritten(ev)
	case evDue:
		return m.precommit(flowRun)
	case evPreCommitted:
		return m.onPreCommitted(ev)
	case evCommitted:
		return m.onOutcome(ev.n, ev.err, true)
	case evAborted:
		if m.atCommitter && len(m.queue) > 0 && m.queue[0].n == ev.n {
			return m.onOutcome(ev.n, ev.err, false)
		}
		return m.onAborted(ev.err)
	case evPaused:
		if ev.err != nil {
			return m.stop(ev.err)
		}
		return m.rewind()
	case evRewound:
		return m.onRewound(ev)
	case evSought:
		if ev.err != nil {
			return m.rewindFailed(fmt.Errorf("sink: seeking the source back to the committed positions after an abort (%w): %w", m.cause, ev.err), ev.canceled)
		}
		m.phase, m.flow = phaseIdle, flowRun
		return nil
	case evAssigned:
		m.phase = phaseTaking
		return []action{actTake{parts: ev.parts}}
	case evTaken:
		m.phase = phaseIdle
		if ev.err == nil {
			for _, p := range ev.parts {
				m.owned[p] = true
			}
		}
		return nil
	case evRevoked:
		m.parts, m.flowErr = ev.parts, nil
		if m.open != nil {
			return m.precommit(flowRevoke)
		}
		return m.waitAll(flowRevoke)
	case evLost:
		m.parts, m.lost = ev.parts, true
		m.flow = flowLose
		if m.open != nil {
			return m.abortOpen(fmt.Errorf("%w: partitions %v were lost", ErrTakenOver, ev.parts))
		}
		return m.waitAll(flowLose)
	case evReleased:
		m.phase, m.flow = phaseIdle, flowRun
		return nil
	case evShutdown:
		m.flow = flowShutdown
		if m.open != nil {
			return m.abortOpen(context.Canceled)
		}
		return m.drainAtShutdown()
	case evDrainTimeout:
		m.phase = phaseDone
		return []action{actWarn{msg: "sink: checkpoints still committing at shutdown; restore will finish them", args: []any{"pending", len(m.queue)}},
			actStopped{err: m.drainFailure()}}
	}
	return nil
}

// onPolled writes the records of owned partitions into the open
// checkpoint (beginning one), or recovers from a failure found inside
// Poll, or stops on the source's error.
func (m *machine) onPolled(ev evPolled) []action {
	if m.interrupted != nil {
		// Revoked or Lost failed to finish a checkpoint: what this poll
		// returned is past the positions to read again.
		cause := m.interrupted
		m.interrupted = nil
		return m.recover(cause)
	}
	if ev.err != nil && !ev.eof && len(ev.records) == 0 {
		if ev.canceled != nil {
			return m.stop(ev.canceled)
		}
		if !errors.Is(ev.err, context.DeadlineExceeded) {
			return m.stop(fmt.Errorf("sink: source: %w", ev.err))
		}
	}
	// Records come in runs of one partition: ownership is looked up once
	// per run, and the records are copied only when some are not owned.
	kept, part, owned := ev.records, "", false
	for i, rec := range ev.records {
		if i == 0 || rec.Partition != part {
			part, owned = rec.Partition, m.owned[rec.Partition]
		}
		if !owned {
			kept = slices.DeleteFunc(slices.Clone(ev.records), func(r Record) bool { return !m.owned[r.Partition] })
			break
		}
	}
	if len(kept) == 0 {
		return m.afterWrite(ev.eof)
	}
	begin := m.open == nil
	n := m.next + 1
	if !begin {
		n = m.open.n
	} else {
		m.next = n
	}
	w := &ckpt{n: n, records: len(kept), positions: map[string]string{}}
	for i, rec := range kept {
		if i == len(kept)-1 || kept[i+1].Partition != rec.Partition {
			w.positions[rec.Partition] = rec.Next
		}
	}
	m.writing, m.eof = w, ev.eof
	m.phase = phaseWriting
	return []action{actWrite{n: n, begin: begin, records: kept}}
}

func (m *machine) onWritten(ev evWritten) []action {
	w, eof := m.writing, m.eof
	m.writing, m.eof = nil, false
	m.phase = phaseIdle
	if ev.beginErr != nil {
		return m.recover(fmt.Errorf("sink: beginning checkpoint %d: %w", w.n, ev.beginErr))
	}
	if m.open == nil {
		m.open = &ckpt{n: w.n, positions: map[string]string{}}
	}
	if ev.err != nil {
		err := ev.err
		if !errors.Is(err, ErrAborted) {
			err = &AbortError{Checkpoint: w.n, Reason: err}
		}
		return m.recover(err)
	}
	m.open.records += w.records
	maps.Copy(m.open.positions, w.positions)
	return append([]action{actObserveRecords{n: w.records}}, m.afterWrite(eof)...)
}

// afterWrite pre-commits the open checkpoint when it holds enough records
// or the source ended, and waits for everything at the source's end.
func (m *machine) afterWrite(eof bool) []action {
	switch {
	case m.open != nil && (eof || m.open.records >= m.opts.CheckpointRecords):
		if eof {
			return m.precommit(flowEOF)
		}
		return m.precommit(flowRun)
	case eof:
		return m.waitAll(flowEOF)
	}
	return nil
}

// precommit takes the open checkpoint to its pre-commit, once fewer than
// MaxPending are prepared (or one failed: then it is aborted).
func (m *machine) precommit(f flow) []action {
	m.flow = f
	m.preparing, m.open = m.open, nil
	if len(m.queue) >= m.opts.MaxPending && m.failed == nil {
		m.phase = phaseSlot
		return []action{actWait{}}
	}
	return m.precommitNow()
}

func (m *machine) precommitNow() []action {
	if m.failed != nil {
		// A checkpoint before it did not commit: it cannot.
		m.phase = phaseAborting
		m.flowErr, m.abortWhy = m.failed, errEarlierAborted
		return []action{actAbort{n: m.preparing.n, reason: errEarlierAborted}}
	}
	m.phase = phasePreparing
	return []action{actPreCommit{n: m.preparing.n}}
}

func (m *machine) onPreCommitted(ev evPreCommitted) []action {
	c := m.preparing
	if ev.err != nil {
		err := ev.err
		if !errors.Is(err, ErrAborted) {
			err = &AbortError{Checkpoint: c.n, Reason: err}
		}
		m.phase = phaseAborting
		m.flowErr, m.abortWhy = err, ev.err
		return []action{actAbort{n: c.n, reason: ev.err}}
	}
	m.preparing = nil
	m.queue = append(m.queue, c)
	acts := []action{actObservePending{n: len(m.queue)}}
	acts = append(acts, m.toCommitter()...)
	switch m.flow {
	case flowEOF, flowRevoke:
		return append(acts, m.waitAll(m.flow)...)
	}
	m.phase = phaseIdle
	return acts
}

// abortOpen aborts the open checkpoint on the reader, for m.flow.
func (m *machine) abortOpen(reason error) []action {
	m.preparing, m.open = m.open, nil
	m.phase = phaseAborting
	m.flowErr, m.abortWhy = nil, reason
	return []action{actAbort{n: m.preparing.n, reason: reason}}
}

// onAborted: the reader's abort of m.preparing returned.
func (m *machine) onAborted(err error) []action {
	c := m.preparing
	m.preparing = nil
	reason := m.abortWhy
	m.abortWhy = nil
	if err != nil {
		reason = errors.Join(reason, err)
	}
	acts := []action{actObserveDone{n: c.n, records: c.records, err: reason}}
	if err != nil {
		acts = append([]action{actWarn{msg: "sink: abort failed; restore will roll the checkpoint back", args: []any{"checkpoint", c.n, "err", err}}}, acts...)
	}
	switch m.flow {
	case flowRun, flowEOF:
		// A failed pre-commit (or one behind a failure): recover.
		cause := m.flowErr
		m.flowErr = nil
		return append(acts, m.recover(cause)...)
	case flowRecover:
		return append(acts, m.waitAll(flowRecover)...)
	case flowRevoke:
		return append(acts, m.waitAll(flowRevoke)...)
	case flowLose:
		return append(acts, m.waitAll(flowLose)...)
	case flowShutdown:
		return append(acts, m.drainAtShutdown()...)
	}
	return acts
}

// toCommitter hands the first queued checkpoint to the committer if it is
// idle: to commit it, or, behind a failure or after lost partitions, to
// abort it without deciding it.
func (m *machine) toCommitter() []action {
	if m.atCommitter || len(m.queue) == 0 || m.phase == phaseDone {
		return nil
	}
	m.atCommitter = true
	c := m.queue[0]
	switch {
	case m.lost:
		m.committerWhy = errLost
	case m.failed != nil:
		m.committerWhy = errEarlierAborted
	default:
		m.committerWhy = nil
		return []action{actCommit{n: c.n}}
	}
	return []action{actAbortQueued{n: c.n, reason: m.committerWhy}}
}

// onOutcome takes the committer's outcome for the first queued
// checkpoint: committed (err nil, commit), or not.
func (m *machine) onOutcome(n uint64, err error, commit bool) []action {
	if !m.atCommitter || len(m.queue) == 0 || m.queue[0].n != n {
		return nil
	}
	c := m.queue[0]
	m.queue = m.queue[1:]
	m.atCommitter = false
	if !commit {
		reason := m.committerWhy
		if err != nil {
			reason = errors.Join(reason, err)
		}
		err = &AbortError{Checkpoint: n, Reason: reason}
	}
	acts := []action{actObservePending{n: len(m.queue)},
		actObserveDone{n: n, records: c.records, committed: err == nil, err: err, queued: true}}
	if err != nil {
		if m.failed == nil {
			m.failed = err
		}
	} else {
		m.aborts = 0
		maps.Copy(m.ack, c.positions)
	}
	acts = append(acts, m.toCommitter()...)
	// A reader that waits on the committer may go on.
	switch m.phase {
	case phaseSlot:
		if m.failed != nil || len(m.queue) < m.opts.MaxPending {
			acts = append(acts, m.precommitNow()...)
		}
	case phaseDraining:
		if len(m.queue) == 0 {
			acts = append(acts, m.drained()...)
		}
	case phaseShutdown:
		if len(m.queue) == 0 {
			acts = append(acts, m.shutdownDone()...)
		}
	}
	return acts
}

// acknowledge returns the acknowledgement of the positions committed
// since the last one, if any.
func (m *machine) acknowledge() []action {
	if len(m.ack) == 0 {
		return nil
	}
	a := actAck{positions: m.ack}
	m.ack = map[string]string{}
	return []action{a}
}

// waitAll waits for every queued checkpoint's outcome, then goes on with
// flow f (drained).
func (m *machine) waitAll(f flow) []action {
	m.flow = f
	if len(m.queue) > 0 {
		m.phase = phaseDraining
		return []action{actWait{}}
	}
	return m.drained()
}

// drained: every prepared checkpoint has its outcome; acknowledge the
// committed positions and go on with m.flow.
func (m *machine) drained() []action {
	m.phase = phaseIdle
	acts := m.acknowledge()
	switch m.flow {
	case flowRecover:
		return append(acts, m.decideRecovery()...)
	case flowEOF:
		if m.failed != nil {
			return append(acts, m.recover(m.failed)...)
		}
		return append(acts, actSweep{}, m.stopAction(nil))
	case flowRevoke:
		// The partitions go at the committed positions; the others are
		// read again after this Poll. (Unresolved: Run stops after this
		// Poll.)
		err := m.flowErr
		m.flowErr = nil
		if err == nil {
			err = m.failed
		} else {
			err = worse(err, m.failed)
		}
		if err != nil {
			m.failed = nil
			m.interrupted = worse(m.interrupted, err)
		}
		return append(acts, m.release()...)
	case flowLose:
		failed := m.failed
		m.failed, m.lost = nil, false
		if m.interrupted == nil {
			m.interrupted = &AbortError{Reason: fmt.Errorf("%w: %w: partitions %v", errLost, ErrTakenOver, m.parts)}
		}
		// A checkpoint whose decision came back unresolved stops Run.
		m.interrupted = worse(m.interrupted, failed)
		return append(acts, m.release()...)
	}
	return acts
}

func (m *machine) release() []action {
	for _, p := range m.parts {
		delete(m.owned, p)
	}
	m.phase = phaseReleasing
	parts := m.parts
	m.parts = nil
	return []action{actRelease{parts: parts}}
}

// recover handles a failed checkpoint: abort the open one, wait until
// every queued one has its outcome, then decide whether Run goes on
// (decideRecovery).
func (m *machine) recover(cause error) []action {
	m.flow, m.cause = flowRecover, cause
	if m.open != nil {
		m.preparing, m.open = m.open, nil
		m.phase = phaseAborting
		m.abortWhy = cause
		return []action{actAbort{n: m.preparing.n, reason: cause}}
	}
	return m.waitAll(flowRecover)
}

// decideRecovery: a checkpoint in flight may have failed worse than the
// cause (its decision unresolved): that one decides whether Run goes on.
// An abort is counted (unless partitions were lost) and, after a pause
// that doubles with each abort in a row, the committed positions are read
// back.
func (m *machine) decideRecovery() []action {
	cause := worse(m.cause, m.failed)
	m.failed = nil
	m.cause = cause
	if !errors.Is(cause, ErrAborted) || errors.Is(cause, ErrClosed) {
		return m.stop(cause)
	}
	m.lostCause = errors.Is(cause, errLost)
	if !m.lostCause {
		m.aborts++
	}
	m.last, m.retry = cause, false
	return m.recoverStep()
}

func (m *machine) recoverStep() []action {
	if m.aborts >= m.opts.MaxAborts {
		return m.stop(fmt.Errorf("sink: %d aborts in a row (checkpoints, or reading the committed positions back after one); the last: %w", m.aborts, m.last))
	}
	if m.aborts > 0 && (!m.lostCause || m.retry) {
		m.phase = phasePausing
		return []action{actPause{d: m.pause()}}
	}
	return m.rewind()
}

// pause is AbortBackoff, doubled for each abort in a row after the
// first, at most maxAbortBackoff.
func (m *machine) pause() time.Duration {
	p := m.opts.AbortBackoff << min(m.aborts-1, 16)
	if p > maxAbortBackoff || p <= 0 {
		p = maxAbortBackoff
	}
	return p
}

func (m *machine) rewind() []action {
	m.phase = phaseRewinding
	return []action{actRewind{parts: slices.Sorted(maps.Keys(m.owned))}}
}

// onRewound drops the partitions lost to another instance and seeks the
// source to the others; every partition lost is ErrFenced.
func (m *machine) onRewound(ev evRewound) []action {
	if ev.err != nil {
		return m.rewindFailed(fmt.Errorf("sink: reading the committed positions after an abort (%w): %w", m.cause, ev.err), ev.canceled)
	}
	var acts []action
	for _, p := range ev.lost {
		delete(m.owned, p)
	}
	if len(ev.lost) > 0 {
		acts = append(acts, actWarn{msg: "sink: partitions taken over by another instance", args: []any{"partitions", ev.lost}})
		if len(m.owned) == 0 {
			return append(acts, m.stop(fmt.Errorf("%w (the last checkpoint: %v)", ErrFenced, m.cause))...)
		}
	}
	positions := maps.Clone(ev.positions)
	if positions == nil {
		positions = map[string]string{}
	}
	for _, p := range ev.lost {
		delete(positions, p)
	}
	m.phase = phaseSeeking
	return append(acts, actSeek{positions: positions})
}

// rewindFailed: the progress target (or the source) is down: this counts
// as one more abort in a row, and is tried again after the pause; it
// stops Run when the run's context ended, or when the instance is fenced
// or closed.
func (m *machine) rewindFailed(err error, canceled bool) []action {
	if canceled || errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed) {
		return m.stop(err)
	}
	m.aborts++
	m.last, m.retry = err, true
	acts := []action{actWarn{msg: "sink: reading the committed positions back failed; trying again", args: []any{"aborts", m.aborts, "err", err}}}
	return append(acts, m.recoverStep()...)
}

// stop makes Run return err.
func (m *machine) stop(err error) []action {
	return []action{m.stopAction(err)}
}

func (m *machine) stopAction(err error) action {
	m.phase, m.flow = phaseStopped, flowRun
	return actStop{err: err}
}

// drainAtShutdown lets the committer finish the prepared checkpoints (the
// runner bounds it with DrainTimeout: evDrainTimeout).
func (m *machine) drainAtShutdown() []action {
	if len(m.queue) == 0 {
		return m.shutdownDone()
	}
	m.phase = phaseShutdown
	return []action{actWait{}}
}

func (m *machine) shutdownDone() []action {
	m.phase = phaseDone
	return append(m.acknowledge(), actStopped{err: m.drainFailure()})
}

// drainFailure is the failure among the checkpoints that had their
// outcome since the last recovery (those drained at shutdown) when it is
// worse than an abort: an unresolved decision must not be lost behind the
// error Run stops with.
func (m *machine) drainFailure() error {
	if f := m.failed; f != nil && (!errors.Is(f, ErrAborted) || errors.Is(f, ErrClosed) || errors.Is(f, ErrUnresolved)) {
		return f
	}
	return nil
}

// worse returns the failure that decides whether Run goes on: f, one
// collected from a checkpoint in flight, when it is worse than an abort
// (its decision unresolved, the sink closed, anything but ErrAborted), and
// cause otherwise. Carrying on past an unresolved decision would leave its
// branches prepared and undecided behind the checkpoints that follow, and
// read its records again while the decision may yet land.
func worse(cause, f error) error {
	if f != nil && f != cause && (cause == nil || !errors.Is(f, ErrAborted) || errors.Is(f, ErrClosed)) {
		return f
	}
	return cause
}
