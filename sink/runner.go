package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// RunOptions configure a self-driven Runner: the sink is its own
// checkpoint coordinator.
type RunOptions struct {
	// CheckpointRecords: a checkpoint is pre-committed once it holds this
	// many records (default 10000).
	CheckpointRecords int
	// CheckpointInterval: ... or once this long has passed since its
	// first record (default 1 s).
	CheckpointInterval time.Duration
	// MaxPending bounds the prepared checkpoints waiting for their
	// decision and phase two while the next one is written (default 2).
	MaxPending int
	// MaxAborts: Run returns after this many aborts in a row (default
	// 8). Each aborted checkpoint counts, and so does each failed attempt
	// to read the committed positions back after one (Owner.Rewind, then
	// Source.Seek: the progress target may be the database that is
	// down); after an abort the records are read again from the last
	// committed positions.
	MaxAborts int
	// AbortBackoff is the pause after the first abort in a row; it
	// doubles with each further one, up to 10 s (default 250 ms), so that
	// a short outage of a database is ridden out rather than used up in
	// MaxAborts quick failures. With the defaults the pauses add up to
	// 25.75 s (0.25+0.5+1+2+4+8+10), so an outage that ends within about
	// 25 s of the first abort is ridden out (a database restart of 10-20
	// s); in general the pauses before Run gives up add up to the sum of
	// min(AbortBackoff<<k, 10 s) for k from 0 to MaxAborts-2. An outage
	// of the progress target while a checkpoint is being decided is not
	// ridden out: if the decision and then the abort marker both fail,
	// Run stops with ErrUnresolved (see docs/sink.md).
	AbortBackoff time.Duration
	// SweepInterval: how often restore's orphan sweep runs while the
	// instance runs (default 10 s; negative: only when partitions are
	// taken and at the end).
	SweepInterval time.Duration
	// DrainTimeout bounds how long Run waits, when it stops, for the
	// checkpoints already prepared to be decided and committed (default
	// 30 s); what is left goes to restore. Once Run's context ends, the
	// committer's context ends DrainTimeout later, whatever the reader
	// was doing then (waiting for a slot or for a drain).
	DrainTimeout time.Duration
	// Observer receives counts and durations; nil: none.
	Observer Observer
	// Logger receives warnings; nil: none.
	Logger *slog.Logger
}

func (o RunOptions) withDefaults() RunOptions {
	if o.CheckpointRecords <= 0 {
		o.CheckpointRecords = 10000
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Second
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 2
	}
	if o.MaxAborts <= 0 {
		o.MaxAborts = 8
	}
	if o.AbortBackoff <= 0 {
		o.AbortBackoff = 250 * time.Millisecond
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = 10 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Runner drives checkpoints itself: it reads a Source, writes the records
// into the open checkpoint's transaction, pre-commits it every
// CheckpointRecords records or CheckpointInterval, and hands it to a
// committer goroutine that decides and commits pending checkpoints in
// order while the next one is written. A checkpoint is decided only after
// every earlier one committed; when one aborts, every later one aborts
// too, and the records are read again from the committed positions
// (Owner.Rewind, Source.Seek).
//
// Every decision is the checkpoint machine's (machine.go: pure, replayed
// from the scripts in testdata/machine); the Runner performs its actions
// and steps it with their outcomes. Its reader goroutine (Run's, from
// which the Source calls the Handler) writes, pre-commits, aborts what
// never reached the committer and recovers; its committer goroutine
// commits or aborts the prepared checkpoints, one at a time, in order.
type Runner[H any] struct {
	c    Committer[H]
	o    Owner
	opts RunOptions
}

// NewRunner returns a Runner over c and o.
func NewRunner[H any](c Committer[H], o Owner, opts RunOptions) *Runner[H] {
	return &Runner[H]{c: c, o: o, opts: opts.withDefaults()}
}

// Run reads src until ctx ends, the source ends (io.EOF: everything read
// is committed first; Run returns nil), or an error stops it: ErrFenced
// when every partition was taken over, ErrUnresolved when a decision's
// fate is unknown, the last error after MaxAborts aborts in a row, or the
// source's error. When it returns, the open checkpoint is aborted and the
// prepared ones were committed (or left to restore after DrainTimeout); a
// decision among them that came back unresolved is joined to the error
// (errors.Is(err, ErrUnresolved)). Run calls src.Start, not src.Close.
func (r *Runner[H]) Run(ctx context.Context, src Source) (err error) {
	x := &run[H]{
		r:       r,
		src:     src,
		m:       newMachine(r.opts),
		handles: map[uint64]H{},
		times:   map[uint64]*times{},
		// The machine hands the committer one checkpoint at a time, and
		// a waiting reader one batch of actions per wait.
		commits: make(chan action, 1),
		inbox:   make(chan []action, 1),
	}
	commitCtx, cancelCommit := context.WithCancel(context.WithoutCancel(ctx))
	// Once ctx ends, the committer has DrainTimeout to finish what it
	// holds: a reader that waits for it (a slot, a drain) does not look at
	// ctx, and would otherwise wait for as long as a Commit that does not
	// answer takes. What is left goes to restore.
	drainClock := make(chan struct{})
	stopDrainClock := context.AfterFunc(ctx, func() {
		defer close(drainClock)
		t := time.NewTimer(r.opts.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelCommit()
		case <-commitCtx.Done():
		}
	})
	x.prepareCtx = commitCtx
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.commitLoop(commitCtx)
	}()
	sweepCtx, stopSweeps := context.WithCancel(ctx)
	sweeps := make(chan struct{})
	go func() {
		defer close(sweeps)
		x.sweeper(sweepCtx)
	}()
	defer func() {
		stopSweeps()
		<-sweeps
		if f := x.shutdown(ctx); f != nil && !errors.Is(err, f) {
			// A decision unresolved while draining: say so.
			err = errors.Join(err, f)
		}
		cancelCommit()
		x.mu.Lock()
		close(x.commits)
		x.mu.Unlock()
		<-done
		if !stopDrainClock() {
			<-drainClock // it ran: commitCtx has ended, so it returns
		}
	}()
	if err := src.Start(ctx, handler[H]{x}); err != nil {
		return fmt.Errorf("sink: starting the source: %w", err)
	}
	for {
		if stop, err := x.do(ctx, evCollect{}); stop {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		recs, perr := src.Poll(x.pollContext(ctx))
		eof := errors.Is(perr, io.EOF)
		if stop, err := x.do(ctx, evPolled{records: recs, eof: eof, err: perr, canceled: ctx.Err()}); stop {
			return err
		}
		if x.openAged() {
			if stop, err := x.do(ctx, evDue{}); stop {
				return err
			}
		}
	}
}

// times are one checkpoint's timestamps, for the Observer.
type times struct {
	began, preAt time.Time
	prepared     time.Duration
	start        time.Time // its commit, or abort, began
}

// run is one Run's state. The machine is stepped by the reader (Run's
// goroutine, and the Handler's calls from within Poll) and by the
// committer goroutine, under mu; each performs the actions that are its
// own.
type run[H any] struct {
	r   *Runner[H]
	src Source

	mu      sync.Mutex
	m       *machine
	handles map[uint64]H // the checkpoints begun and not finished
	times   map[uint64]*times
	commits chan action   // to the committer
	inbox   chan []action // to the reader, while it waits
	stopped bool          // shutdown ran

	// What the Handler's calls return: the last actTake's positions and
	// error, the last actRelease's error.
	taken    map[string]string
	takeErr  error
	released error

	// prepareCtx is the context of PreCommit: Run's until it ends, then
	// DrainTimeout more (the committer's). A prepare is not cut by a stop:
	// cut between its branches' prepares, or with a prepare's reply
	// lost, it leaves branches prepared that only the next instance's
	// restore settles; let through, the shutdown commits the checkpoint.
	prepareCtx context.Context
}

// step applies ev under mu and performs the observer's and the
// committer's actions (sending never blocks: the machine hands the
// committer one checkpoint at a time). It returns the reader's actions.
func (x *run[H]) step(ev event) []action {
	x.mu.Lock()
	defer x.mu.Unlock()
	var reader []action
	for _, a := range x.m.step(ev) {
		switch {
		case forCommitter(a):
			x.commits <- a
		case forObserver(a):
			x.observe(a)
		default:
			reader = append(reader, a)
		}
	}
	return reader
}

// observe calls the Observer; mu is held.
func (x *run[H]) observe(a action) {
	o := x.r.opts.Observer
	switch a := a.(type) {
	case actObserveRecords:
		o.RecordsWritten(a.n)
	case actObservePending:
		o.PendingChanged(a.n)
	case actObserveDone:
		st := CheckpointStats{Checkpoint: a.n, Records: a.records, Committed: a.committed, Err: a.err}
		if t := x.times[a.n]; t != nil {
			if a.queued {
				st.Write, st.Prepare, st.Commit = t.preAt.Sub(t.began), t.prepared, time.Since(t.start)
			} else {
				st.Write, st.Commit = time.Since(t.began), time.Since(t.start)
			}
		}
		delete(x.times, a.n)
		delete(x.handles, a.n)
		o.CheckpointDone(st)
	}
}

// do steps ev and performs the reader's actions that follow, stepping
// their outcomes, until the machine asks nothing more of the reader.
// stop: Run returns err.
func (x *run[H]) do(ctx context.Context, ev event) (stop bool, err error) {
	todo := x.step(ev)
	for len(todo) > 0 {
		a := todo[0]
		todo = todo[1:]
		switch a := a.(type) {
		case actWait:
			todo = append(todo, <-x.inbox...)
		case actStop:
			return true, a.err
		case actStopped:
		default:
			if ev := x.perform(ctx, a); ev != nil {
				todo = append(todo, x.step(ev)...)
			}
		}
	}
	return false, nil
}

// perform performs one of the reader's actions and returns its outcome
// (nil for those the machine does not wait for).
func (x *run[H]) perform(ctx context.Context, a action) event {
	switch a := a.(type) {
	case actWrite:
		if a.begin {
			h, err := x.r.c.Begin(ctx, a.n)
			if err != nil {
				return evWritten{n: a.n, beginErr: err}
			}
			x.mu.Lock()
			x.handles[a.n], x.times[a.n] = h, &times{began: time.Now()}
			x.mu.Unlock()
		}
		return evWritten{n: a.n, err: x.r.c.Write(ctx, x.handle(a.n), a.records)}
	case actPreCommit:
		x.mu.Lock()
		t := x.times[a.n]
		t.preAt = time.Now()
		x.mu.Unlock()
		pctx := ctx
		if x.prepareCtx != nil {
			pctx = x.prepareCtx
		}
		h, err := x.r.c.PreCommit(pctx, x.handle(a.n), a.n)
		x.mu.Lock()
		t.prepared = time.Since(t.preAt)
		if err == nil {
			x.handles[a.n] = h
		}
		x.mu.Unlock()
		return evPreCommitted{n: a.n, err: err}
	case actAbort:
		x.mu.Lock()
		if t := x.times[a.n]; t != nil {
			t.start = time.Now()
		}
		x.mu.Unlock()
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.r.opts.DrainTimeout)
		defer cancel()
		return evAborted{n: a.n, err: x.r.c.Abort(actx, x.handle(a.n))}
	case actPause:
		select {
		case <-ctx.Done():
			return evPaused{err: ctx.Err()}
		case <-time.After(a.d):
			return evPaused{}
		}
	case actRewind:
		positions, lost, err := x.r.o.Rewind(ctx, a.parts)
		return evRewound{positions: positions, lost: lost, err: err, canceled: ctx.Err() != nil}
	case actSeek:
		err := x.src.Seek(ctx, a.positions)
		return evSought{err: err, canceled: ctx.Err() != nil}
	case actAck:
		x.acknowledge(ctx, a.positions)
	case actTake:
		x.taken, x.takeErr = x.r.o.Take(ctx, a.parts)
		return evTaken{parts: a.parts, err: x.takeErr}
	case actRelease:
		// Its error is the Handler's to return (Revoked, Lost); the
		// partitions are gone either way.
		x.released = x.r.o.Release(ctx, a.parts)
		return evReleased{}
	case actSweep:
		x.sweep(ctx)
	case actWarn:
		x.r.opts.Logger.Warn(a.msg, a.args...)
	}
	return nil
}

// handle returns the handle of checkpoint n.
func (x *run[H]) handle(n uint64) H {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.handles[n]
}

// commitLoop performs the committer's actions: each prepared checkpoint
// is committed, or aborted without being decided, in order.
func (x *run[H]) commitLoop(ctx context.Context) {
	for a := range x.commits {
		var ev event
		n := a.(interface{ number() uint64 }).number()
		x.mu.Lock()
		if t := x.times[n]; t != nil {
			t.start = time.Now()
		}
		x.mu.Unlock()
		switch a := a.(type) {
		case actCommit:
			ev = evCommitted{n: a.n, err: x.r.c.Commit(ctx, x.handle(a.n))}
		case actAbortQueued:
			ev = evAborted{n: a.n, err: x.r.c.Abort(ctx, x.handle(a.n))}
		}
		if acts := x.step(ev); len(acts) > 0 {
			// The reader waits for these (actWait).
			x.inbox <- acts
		}
	}
}

// openAged reports whether the open checkpoint is due by
// CheckpointInterval.
func (x *run[H]) openAged() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m.open == nil {
		return false
	}
	t := x.times[x.m.open.n]
	return t != nil && time.Since(t.began) >= x.r.opts.CheckpointInterval
}

// pollContext bounds a Poll: until the open checkpoint is due, at most a
// quarter second so that outcomes are acknowledged promptly.
func (x *run[H]) pollContext(ctx context.Context) context.Context {
	wait := 250 * time.Millisecond
	x.mu.Lock()
	if x.m.open != nil {
		if t := x.times[x.m.open.n]; t != nil {
			wait = min(wait, x.r.opts.CheckpointInterval-time.Since(t.began))
		}
	}
	x.mu.Unlock()
	wait = max(wait, time.Millisecond)
	c, cancel := context.WithTimeout(ctx, wait)
	context.AfterFunc(c, cancel)
	return c
}

// ackTimeout bounds an acknowledgement to the source: the positions it
// carries are a copy (the progress table is the truth, and the next
// acknowledgement carries newer ones), and a source that does not answer
// (Kafka cut off) must not hold the instance's loop, which would keep it
// from learning that it was fenced.
const ackTimeout = 5 * time.Second

func (x *run[H]) acknowledge(ctx context.Context, positions map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if err := x.src.Committed(ctx, positions); err != nil {
		x.r.opts.Logger.Warn("sink: acknowledging committed positions to the source", "err", err)
	}
}

// sweeper runs Owner.Sweep every SweepInterval on a goroutine of its own:
// an orphan whose locks block a write of the run is resolved meanwhile.
func (x *run[H]) sweeper(ctx context.Context) {
	if x.r.opts.SweepInterval <= 0 {
		return
	}
	t := time.NewTicker(x.r.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			x.sweep(ctx)
		}
	}
}

func (x *run[H]) sweep(ctx context.Context) {
	if err := x.r.o.Sweep(ctx); err != nil && ctx.Err() == nil {
		x.r.opts.Logger.Warn("sink: orphan sweep", "err", err)
	}
}

// shutdown aborts the open checkpoint and lets the committer finish the
// queued ones, within DrainTimeout. It returns a failure among them worse
// than an abort (an unresolved decision).
func (x *run[H]) shutdown(ctx context.Context) error {
	if x.stopped {
		return nil
	}
	x.stopped = true
	ctx = context.WithoutCancel(ctx)
	todo := x.step(evShutdown{})
	timer := time.NewTimer(x.r.opts.DrainTimeout)
	defer timer.Stop()
	for len(todo) > 0 {
		a := todo[0]
		todo = todo[1:]
		switch a := a.(type) {
		case actWait:
			select {
			case acts := <-x.inbox:
				todo = append(todo, acts...)
			case <-timer.C:
				todo = append(todo, x.step(evDrainTimeout{})...)
			}
		case actStopped:
			return a.err
		default:
			if ev := x.perform(ctx, a); ev != nil {
				todo = append(todo, x.step(ev)...)
			}
		}
	}
	return nil
}

// call performs a Handler's call. The machine takes one only while the
// reader is idle, inside Poll (the Source contract); another is refused
// with ErrConfig, and changes nothing.
func (x *run[H]) call(ctx context.Context, ev event) error {
	x.mu.Lock()
	before := x.m.ignored
	x.mu.Unlock()
	x.do(ctx, ev) // a handler's flow never stops Run: it leaves that to the poll
	x.mu.Lock()
	ignored := x.m.ignored > before
	x.mu.Unlock()
	if ignored {
		return fmt.Errorf("%w: the source called the handler (%T) outside Poll", ErrConfig, ev)
	}
	return nil
}

// handler receives the source's assignments.
type handler[H any] struct{ x *run[H] }

var _ LostHandler = handler[int]{}

// Assigned takes the partitions over (Owner.Take) and owns them.
func (h handler[H]) Assigned(ctx context.Context, partitions []string) (map[string]string, error) {
	x := h.x
	x.taken, x.takeErr = nil, nil
	if err := x.call(ctx, evAssigned{parts: partitions}); err != nil {
		return nil, err
	}
	if x.takeErr != nil {
		return nil, x.takeErr
	}
	return x.taken, nil
}

// Revoked finishes every checkpoint in flight (or aborts it), then
// releases the partitions.
func (h handler[H]) Revoked(ctx context.Context, partitions []string) error {
	h.x.released = nil
	if err := h.x.call(ctx, evRevoked{parts: partitions}); err != nil {
		return err
	}
	return h.x.released
}

// Lost aborts every checkpoint in flight (their partitions may be another
// instance's already: they could not be decided), then releases the
// partitions; the other partitions are read again from their committed
// positions after this Poll.
func (h handler[H]) Lost(ctx context.Context, partitions []string) error {
	h.x.released = nil
	if err := h.x.call(ctx, evLost{parts: partitions}); err != nil {
		return err
	}
	return h.x.released
}
