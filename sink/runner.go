package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
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
	// 30 s); what is left goes to restore.
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
type Runner[H any] struct {
	c    Committer[H]
	o    Owner
	opts RunOptions
}

// NewRunner returns a Runner over c and o.
func NewRunner[H any](c Committer[H], o Owner, opts RunOptions) *Runner[H] {
	return &Runner[H]{c: c, o: o, opts: opts.withDefaults()}
}

// errLost is the reason of the aborts that follow lost partitions; they
// do not count towards MaxAborts.
var errLost = errors.New("sink: its partitions were lost")

// errEarlierAborted is the reason of an abort of a checkpoint that was
// prepared after one that did not commit.
var errEarlierAborted = errors.New("sink: an earlier checkpoint did not commit")

// Run reads src until ctx ends, the source ends (io.EOF: everything read
// is committed first; Run returns nil), or an error stops it: ErrFenced
// when every partition was taken over, ErrUnresolved when a decision's
// fate is unknown, the last error after MaxAborts aborts in a row, or the
// source's error. When it returns, the open checkpoint is aborted and the
// prepared ones were committed (or left to restore after DrainTimeout).
// Run calls src.Start, not src.Close.
func (r *Runner[H]) Run(ctx context.Context, src Source) (err error) {
	x := &run[H]{
		r:       r,
		src:     src,
		owned:   map[string]bool{},
		queue:   make(chan slot[H], r.opts.MaxPending),
		results: make(chan outcome[H], r.opts.MaxPending),
		ack:     map[string]string{},
	}
	commitCtx, cancelCommit := context.WithCancel(context.WithoutCancel(ctx))
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
		x.shutdown(ctx)
		cancelCommit()
		<-done
	}()
	if err := src.Start(ctx, handler[H]{x}); err != nil {
		return fmt.Errorf("sink: starting the source: %w", err)
	}
	for {
		if err := x.collect(ctx); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		recs, perr := src.Poll(x.pollContext(ctx))
		if x.interrupted != nil {
			// Revoked failed to finish a checkpoint: what this poll
			// returned is past the positions to read again.
			cause := x.interrupted
			x.interrupted = nil
			if err := x.recover(ctx, cause); err != nil {
				return err
			}
			continue
		}
		eof := errors.Is(perr, io.EOF)
		if perr != nil && !eof && len(recs) == 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(perr, context.DeadlineExceeded) {
				return fmt.Errorf("sink: source: %w", perr)
			}
		}
		if err := x.write(ctx, recs); err != nil {
			if err := x.recover(ctx, err); err != nil {
				return err
			}
			continue
		}
		if x.open != nil && (eof || x.open.records >= r.opts.CheckpointRecords || time.Since(x.open.began) >= r.opts.CheckpointInterval) {
			if err := x.precommit(ctx); err != nil {
				if err := x.recover(ctx, err); err != nil {
					return err
				}
				continue
			}
		}
		if eof {
			if err := x.waitAll(ctx); err != nil {
				return err
			}
			if x.failed != nil {
				if err := x.recover(ctx, x.failed); err != nil {
					return err
				}
				continue
			}
			x.sweep(ctx)
			return nil
		}
	}
}

// slot is one checkpoint of the run.
type slot[H any] struct {
	id        uint64
	h         H
	era       uint64
	records   int
	positions map[string]string // partition -> position after its last record
	began     time.Time
	prepared  time.Duration
	preAt     time.Time
}

type outcome[H any] struct {
	s   slot[H]
	err error
	dur time.Duration
}

// run is one Run's state; everything but commitLoop runs on Run's
// goroutine (Handler calls come from within Poll).
type run[H any] struct {
	r     *Runner[H]
	src   Source
	owned map[string]bool
	open  *slot[H]
	next  uint64
	// era counts recoveries: after a failure, the committer aborts every
	// slot of the failed era without deciding it.
	era         uint64
	inflight    int
	queue       chan slot[H]
	results     chan outcome[H]
	failed      error // the first failure of the current era
	interrupted error // set by Revoked: recover after Poll returns
	ack         map[string]string
	aborts      int
	stopped     bool
	// abortBelow: the committer aborts, without deciding, the queued
	// checkpoints of eras below it (set when partitions are lost).
	abortBelow atomic.Uint64
}

// commitLoop decides and commits the queued checkpoints in order.
func (x *run[H]) commitLoop(ctx context.Context) {
	failedEra, failed := uint64(0), false
	for s := range x.queue {
		start := time.Now()
		var err error
		reason := errEarlierAborted
		if s.era < x.abortBelow.Load() {
			// Lost: abort without trying.
			failedEra, failed = s.era, true
			reason = errLost
		}
		if failed && s.era == failedEra {
			err = &AbortError{Checkpoint: s.id, Reason: reason}
			if aerr := x.r.c.Abort(ctx, s.h); aerr != nil {
				err = &AbortError{Checkpoint: s.id, Reason: errors.Join(reason, aerr)}
			}
		} else if err = x.r.c.Commit(ctx, s.h); err != nil {
			failedEra, failed = s.era, true
		}
		x.results <- outcome[H]{s: s, err: err, dur: time.Since(start)}
	}
}

// pollContext bounds a Poll: until the open checkpoint is due, at most a
// quarter second so that outcomes are acknowledged promptly.
func (x *run[H]) pollContext(ctx context.Context) context.Context {
	wait := 250 * time.Millisecond
	if x.open != nil {
		wait = min(wait, x.r.opts.CheckpointInterval-time.Since(x.open.began))
	}
	wait = max(wait, time.Millisecond)
	c, cancel := context.WithTimeout(ctx, wait)
	context.AfterFunc(c, cancel)
	return c
}

// write adds the records of owned partitions to the open checkpoint.
func (x *run[H]) write(ctx context.Context, recs []Record) error {
	// Records come in runs of one partition: ownership is looked up once
	// per run, and the records are copied only when some are not owned.
	kept, part, owned := recs, "", false
	for i, rec := range recs {
		if i == 0 || rec.Partition != part {
			part, owned = rec.Partition, x.owned[rec.Partition]
		}
		if !owned {
			kept = slices.DeleteFunc(slices.Clone(recs), func(r Record) bool { return !x.owned[r.Partition] })
			break
		}
	}
	if len(kept) == 0 {
		return nil
	}
	if x.open == nil {
		x.next++
		h, err := x.r.c.Begin(ctx, x.next)
		if err != nil {
			return fmt.Errorf("sink: beginning checkpoint %d: %w", x.next, err)
		}
		x.open = &slot[H]{id: x.next, h: h, era: x.era, began: time.Now(), positions: map[string]string{}}
	}
	if err := x.r.c.Write(ctx, x.open.h, kept); err != nil {
		if !errors.Is(err, ErrAborted) {
			err = &AbortError{Checkpoint: x.open.id, Reason: err}
		}
		return err
	}
	x.open.records += len(kept)
	for i, rec := range kept {
		if i == len(kept)-1 || kept[i+1].Partition != rec.Partition {
			x.open.positions[rec.Partition] = rec.Next
		}
	}
	x.r.opts.Observer.RecordsWritten(len(kept))
	return nil
}

// precommit prepares the open checkpoint and queues it for its decision.
func (x *run[H]) precommit(ctx context.Context) error {
	s := x.open
	x.open = nil
	for x.inflight >= x.r.opts.MaxPending && x.failed == nil {
		x.handle(<-x.results)
	}
	if x.failed != nil {
		x.abort(ctx, s, errEarlierAborted)
		return x.failed
	}
	s.preAt = time.Now()
	h, err := x.r.c.PreCommit(ctx, s.h, s.id)
	s.prepared = time.Since(s.preAt)
	if err != nil {
		x.abort(ctx, s, err)
		if !errors.Is(err, ErrAborted) {
			err = &AbortError{Checkpoint: s.id, Reason: err}
		}
		return err
	}
	s.h = h
	x.inflight++
	x.r.opts.Observer.PendingChanged(x.inflight)
	x.queue <- *s
	return nil
}

// abort aborts a checkpoint that never reached the committer.
func (x *run[H]) abort(ctx context.Context, s *slot[H], reason error) {
	start := time.Now()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.r.opts.DrainTimeout)
	defer cancel()
	if err := x.r.c.Abort(actx, s.h); err != nil {
		x.r.opts.Logger.Warn("sink: abort failed; restore will roll the checkpoint back", "checkpoint", s.id, "err", err)
		reason = errors.Join(reason, err)
	}
	x.r.opts.Observer.CheckpointDone(CheckpointStats{Checkpoint: s.id, Records: s.records, Err: reason,
		Write: time.Since(s.began), Commit: time.Since(start)})
}

// handle takes one outcome from the committer.
func (x *run[H]) handle(o outcome[H]) {
	x.inflight--
	x.r.opts.Observer.PendingChanged(x.inflight)
	x.r.opts.Observer.CheckpointDone(CheckpointStats{Checkpoint: o.s.id, Records: o.s.records, Committed: o.err == nil, Err: o.err,
		Write: o.s.preAt.Sub(o.s.began), Prepare: o.s.prepared, Commit: o.dur})
	if o.err != nil {
		if x.failed == nil {
			x.failed = o.err
		}
		return
	}
	x.aborts = 0
	maps.Copy(x.ack, o.s.positions)
}

// collect handles the outcomes ready, acknowledges committed positions to
// the source, and recovers from a failure.
func (x *run[H]) collect(ctx context.Context) error {
	for {
		select {
		case o := <-x.results:
			x.handle(o)
			continue
		default:
		}
		break
	}
	x.acknowledge(ctx)
	if x.failed != nil {
		return x.recover(ctx, x.failed)
	}
	return nil
}

// ackTimeout bounds an acknowledgement to the source: the positions it
// carries are a copy (the progress table is the truth, and the next
// acknowledgement carries newer ones), and a source that does not answer
// (Kafka cut off) must not hold the instance's loop, which would keep it
// from learning that it was fenced.
const ackTimeout = 5 * time.Second

func (x *run[H]) acknowledge(ctx context.Context) {
	if len(x.ack) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if err := x.src.Committed(ctx, x.ack); err != nil {
		x.r.opts.Logger.Warn("sink: acknowledging committed positions to the source", "err", err)
	}
	x.ack = map[string]string{}
}

// waitAll waits for every queued checkpoint's outcome.
func (x *run[H]) waitAll(ctx context.Context) error {
	for x.inflight > 0 {
		x.handle(<-x.results)
	}
	x.acknowledge(ctx)
	return nil
}

// recover handles a failed checkpoint: abort the open one, wait until every
// queued one is aborted, then read again from the committed positions. It
// returns an error when Run must stop.
func (x *run[H]) recover(ctx context.Context, cause error) error {
	if x.open != nil {
		s := x.open
		x.open = nil
		x.abort(ctx, s, cause)
	}
	if err := x.waitAll(ctx); err != nil {
		return err
	}
	// A checkpoint in flight may have failed worse than cause (its
	// decision unresolved): that one decides whether Run goes on.
	cause = worse(cause, x.failed)
	x.era++
	x.failed = nil
	if !errors.Is(cause, ErrAborted) || errors.Is(cause, ErrClosed) {
		return cause
	}
	lost := errors.Is(cause, errLost)
	if !lost {
		x.aborts++
	}
	last, retry := cause, false
	for {
		if x.aborts >= x.r.opts.MaxAborts {
			return fmt.Errorf("sink: %d aborts in a row (checkpoints, or reading the committed positions back after one); the last: %w", x.aborts, last)
		}
		if x.aborts > 0 && (!lost || retry) {
			if err := x.pause(ctx); err != nil {
				return err
			}
		}
		err := x.rewind(ctx, cause)
		if err == nil || ctx.Err() != nil || errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed) {
			return err
		}
		// The progress target (or the source) is down: this counts as
		// one more abort in a row, and is tried again after the pause.
		x.r.opts.Logger.Warn("sink: reading the committed positions back failed; trying again", "aborts", x.aborts+1, "err", err)
		x.aborts++
		last, retry = err, true
	}
}

// pause waits AbortBackoff, doubled for each abort in a row after the
// first, at most 10 s; it returns ctx's error if ctx ends first.
func (x *run[H]) pause(ctx context.Context) error {
	pause := x.r.opts.AbortBackoff << min(x.aborts-1, 16)
	if pause > maxAbortBackoff || pause <= 0 {
		pause = maxAbortBackoff
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pause):
		return nil
	}
}

// maxAbortBackoff bounds one pause between aborts in a row.
const maxAbortBackoff = 10 * time.Second

// rewind reads the committed positions back (Owner.Rewind), drops the
// partitions lost to another instance and seeks the source to the others
// (Source.Seek). It returns ErrFenced if every partition was lost.
func (x *run[H]) rewind(ctx context.Context, cause error) error {
	parts := slices.Sorted(maps.Keys(x.owned))
	positions, lost, err := x.r.o.Rewind(ctx, parts)
	if err != nil {
		return fmt.Errorf("sink: reading the committed positions after an abort (%w): %w", cause, err)
	}
	for _, p := range lost {
		delete(x.owned, p)
	}
	if len(lost) > 0 {
		x.r.opts.Logger.Warn("sink: partitions taken over by another instance", "partitions", lost)
		if len(x.owned) == 0 {
			return fmt.Errorf("%w (the last checkpoint: %v)", ErrFenced, cause)
		}
	}
	for _, p := range lost {
		delete(positions, p)
	}
	if err := x.src.Seek(ctx, positions); err != nil {
		return fmt.Errorf("sink: seeking the source back to the committed positions after an abort (%w): %w", cause, err)
	}
	return nil
}

// finishAll pre-commits the open checkpoint and waits for every queued one
// (partitions are about to be revoked).
func (x *run[H]) finishAll(ctx context.Context) error {
	var err error
	if x.open != nil {
		err = x.precommit(ctx)
	}
	if werr := x.waitAll(ctx); err == nil {
		err = werr
	}
	if err == nil {
		return x.failed
	}
	return worse(err, x.failed)
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
// queued ones, within DrainTimeout.
func (x *run[H]) shutdown(ctx context.Context) {
	if x.stopped {
		return
	}
	x.stopped = true
	if x.open != nil {
		s := x.open
		x.open = nil
		x.abort(ctx, s, context.Canceled)
	}
	close(x.queue)
	timer := time.NewTimer(x.r.opts.DrainTimeout)
	defer timer.Stop()
	for x.inflight > 0 {
		select {
		case o := <-x.results:
			x.handle(o)
		case <-timer.C:
			x.r.opts.Logger.Warn("sink: checkpoints still committing at shutdown; restore will finish them", "pending", x.inflight)
			return
		}
	}
	x.acknowledge(context.WithoutCancel(ctx))
}

// handler receives the source's assignments.
type handler[H any] struct{ x *run[H] }

var _ LostHandler = handler[int]{}

// Assigned takes the partitions over (Owner.Take) and owns them.
func (h handler[H]) Assigned(ctx context.Context, partitions []string) (map[string]string, error) {
	pos, err := h.x.r.o.Take(ctx, partitions)
	if err != nil {
		return nil, err
	}
	for _, p := range partitions {
		h.x.owned[p] = true
	}
	return pos, nil
}

// Revoked finishes every checkpoint in flight (or aborts it), then
// releases the partitions.
func (h handler[H]) Revoked(ctx context.Context, partitions []string) error {
	x := h.x
	if err := x.finishAll(ctx); err != nil {
		// Aborted: the partitions go at the committed positions; the
		// others are read again after this Poll. (Unresolved: Run stops
		// after this Poll.)
		x.era++
		x.failed = nil
		x.interrupted = worse(x.interrupted, err)
	}
	for _, p := range partitions {
		delete(x.owned, p)
	}
	return x.r.o.Release(ctx, partitions)
}

// Lost aborts every checkpoint in flight (their partitions may be another
// instance's already: they could not be decided), then releases the
// partitions; the other partitions are read again from their committed
// positions after this Poll.
func (h handler[H]) Lost(ctx context.Context, partitions []string) error {
	x := h.x
	x.abortBelow.Store(x.era + 1)
	if x.open != nil {
		s := x.open
		x.open = nil
		x.abort(ctx, s, fmt.Errorf("%w: partitions %v were lost", ErrTakenOver, partitions))
	}
	x.waitAll(ctx)
	failed := x.failed
	x.era++
	x.failed = nil
	if x.interrupted == nil {
		x.interrupted = &AbortError{Reason: fmt.Errorf("%w: %w: partitions %v", errLost, ErrTakenOver, partitions)}
	}
	// A checkpoint whose decision came back unresolved stops Run.
	x.interrupted = worse(x.interrupted, failed)
	for _, p := range partitions {
		delete(x.owned, p)
	}
	return x.r.o.Release(ctx, partitions)
}
