package sqlsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// instance is one incarnation (self-driven) or one member in one
// generation (external) of a Sink. It implements Committer[Handle], Owner
// and Restorer: the protocol of docs/sink.md.
type instance struct {
	s          *Sink
	inc        uint64
	external   bool
	generation uint32
	log        *slog.Logger

	mu     sync.Mutex
	epochs map[string]int64       // self-driven: the partitions taken, with their epochs
	live   map[uint64]*checkpoint // checkpoints begun and not finished, by number
	// spent (external): transactions of this incarnation whose Abort
	// could not claim the abort marker. No handle names them, and
	// Restore leaves transactions numbered at or below the restored
	// checkpoint to the states that name them; so each later handle
	// names them (Handle.Spent) and its Commit, or a Restore's, fences
	// them.
	spent map[uint64]bool
	// poison holds the records refused by their database whose
	// checkpoint was aborted to set them aside whole, by partition and
	// position (refusal.go): read again, each is a dead letter.
	poison map[string]error
}

var (
	_ sink.Committer[Handle] = (*instance)(nil)
	_ sink.Owner             = (*instance)(nil)
	_ sink.Restorer          = (*instance)(nil)
)

// checkpoint is the live state of one checkpoint of this instance: its
// handle, its branches (one per target written), its buffered rows, and
// the positions and epochs of its records.
type checkpoint struct {
	h         Handle
	work      context.Context // bounds the branches' statements
	stop      context.CancelFunc
	mu        sync.Mutex             // guards branches (closeLive reads it)
	branches  map[string]*liveBranch // by target
	bufs      map[string]*buffer     // by table id
	positions map[string]string
	epochs    map[string]int64
	decided   bool
	dead      int // dead letters buffered (OnErrorDeadLetter)
	// refused are the rows refused by the last flushes, for
	// settleRefused; guarded by mu while the flushes run.
	refused []refusedRow
	// left are the targets whose branch Commit decided and left to
	// restore (phase two failed: the target did not answer).
	left []string
	// poisoned are the instance.poison keys of the records this
	// checkpoint sets aside as remembered refusals: forgotten once its
	// decision is taken, kept if it aborts (read again, they are set
	// aside again rather than refused again).
	poisoned []string
	// doomed is the abort (ErrRefusedElsewhere) that PreCommit returns:
	// a refused record has rows elsewhere in the checkpoint. The
	// checkpoint goes on being written until then, so that one reading
	// finds (and remembers) every such record of it, not one poll's.
	doomed error
	// setAside counts the records this checkpoint remembered as refused
	// (dead letters when it is read again): they count towards
	// MaxDeadLetters as its dead letters do.
	setAside int
}

// liveBranch is one target's branch of a live transaction. Its fields are
// used by the goroutine driving the transaction; the branch itself is also
// reached by Close (closeLive), hence the mutex around it.
type liveBranch struct {
	tg       *target
	prepared bool // voted yes
	maybe    bool // prepare's outcome unknown: may be prepared
	origin   xa.Origin

	w rowWriter // the dialect's writer of its session

	mu sync.Mutex
	b  xa.Branch // nil once it released its session
}

// branch returns the branch, nil once it released its session.
func (lb *liveBranch) branch() xa.Branch {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.b
}

// drop forgets the branch (it released its session, or is being closed)
// and returns it.
func (lb *liveBranch) drop() xa.Branch {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	b := lb.b
	lb.b = nil
	return b
}

func (in *instance) get(h Handle) (*checkpoint, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.live[h.Checkpoint]
	if c == nil || h.Incarnation != in.inc {
		return nil, fmt.Errorf("sink: transaction %s is not live in this instance", h.Ref("").String())
	}
	return c, nil
}

// lookup returns the live transaction of h, or nil (a handle from an
// earlier process, or one finished).
func (in *instance) lookup(h Handle) *checkpoint {
	if h.Incarnation != in.inc {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.live[h.Checkpoint]
}

func (in *instance) inFlight(n uint64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.live[n] != nil
}

func (in *instance) finish(c *checkpoint) {
	if c == nil {
		return
	}
	in.mu.Lock()
	delete(in.live, c.h.Checkpoint)
	in.mu.Unlock()
	c.stop()
}

// closeLive closes every live branch's session without ending it: a
// prepared branch stays prepared, the others are rolled back by their
// databases.
func (in *instance) closeLive() {
	in.mu.Lock()
	ts := slices.Collect(maps.Values(in.live))
	in.mu.Unlock()
	// Statements still running are interrupted first (a branch's Close
	// waits for its statement).
	for _, c := range ts {
		c.stop()
	}
	for _, c := range ts {
		c.mu.Lock()
		lbs := slices.Collect(maps.Values(c.branches))
		c.mu.Unlock()
		for _, lb := range lbs {
			if b := lb.drop(); b != nil {
				b.Close() //nolint:errcheck // best effort: the session is going
			}
		}
	}
}

// Begin opens transaction n. No I/O: each target's branch starts at its
// first flush.
func (in *instance) Begin(ctx context.Context, n uint64) (Handle, error) {
	if err := in.s.check(); err != nil {
		return Handle{}, err
	}
	h := Handle{Sink: in.s.cfg.Name, Incarnation: in.inc, Checkpoint: n}
	if err := h.Ref(in.s.names[0]).Validate(); err != nil {
		return Handle{}, err
	}
	work, stop := context.WithCancel(context.WithoutCancel(ctx))
	c := &checkpoint{h: h, work: work, stop: stop, branches: map[string]*liveBranch{}, bufs: map[string]*buffer{},
		positions: map[string]string{}, epochs: map[string]int64{}}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.live[n] != nil {
		stop()
		return Handle{}, fmt.Errorf("%w: transaction %d begun twice", sink.ErrConfig, n)
	}
	in.live[n] = c
	return h, nil
}

// Write maps records to rows and buffers them; a table's buffer that is
// full is flushed on its target's branch. A batch refused for its data is
// narrowed to its records (refusal.go); any other failed statement is not
// retried: the error makes the driver abort the checkpoint.
func (in *instance) Write(ctx context.Context, h Handle, records []sink.Record) error {
	if err := in.s.check(); err != nil {
		return err
	}
	c, err := in.get(h)
	if err != nil {
		return err
	}
	// Records come in runs of one partition (a source's batch): a
	// partition's epoch is looked up, and its position stored, once per
	// run; a table's buffer once per run of rows of that table.
	part, next := "", ""
	for i := range records {
		r := &records[i]
		if r.Partition != part || i == 0 {
			if part != "" {
				c.positions[part] = next
			}
			part = r.Partition
			if part != "" {
				var epoch int64
				if !in.external {
					in.mu.Lock()
					e, ok := in.epochs[part]
					in.mu.Unlock()
					if !ok {
						return fmt.Errorf("sink: a record of partition %s, which this instance has not taken", part)
					}
					epoch = e
				}
				if _, ok := c.epochs[part]; !ok {
					c.epochs[part] = epoch
				}
			}
		}
		next = r.Next
		if re := in.poisoned(r.Partition, r.Next); re != nil {
			if err := in.addDead(c, r.Partition, r.Next, r.Key, r.Value, re); err != nil {
				return err
			}
			c.poisoned = append(c.poisoned, poisonKey(r.Partition, r.Next))
			continue
		}
		rows, err := in.s.mapFn(*r)
		if err != nil {
			if err := in.deadLetter(c, r, &MappingError{Partition: r.Partition, Position: r.Next, Err: err}); err != nil {
				return err
			}
			continue
		}
		// The record's rows are checked whole before any is buffered: a
		// bad record lands nowhere but in the dead letters.
		type fitted struct {
			id   string
			tb   *table
			vals []any
			del  bool
		}
		var ok []fitted
		var bad *MappingError
		var id string
		var tb *table
		for _, row := range rows {
			if tb == nil || row.Table != id {
				id = row.Table
				if tb = in.s.tables[id]; tb == nil || id == deadTableID {
					return &MappingError{Partition: r.Partition, Position: r.Next, Err: fmt.Errorf("no table %q", row.Table)}
				}
			}
			if len(row.Values) != len(tb.Columns) {
				return &MappingError{Partition: r.Partition, Position: r.Next,
					Err: fmt.Errorf("table %s: %d values for %d columns", row.Table, len(row.Values), len(tb.Columns))}
			}
			if row.Delete && !tb.Upsert {
				bad = &MappingError{Partition: r.Partition, Position: r.Next, Err: fmt.Errorf("table %s: a delete by key, but the table is not an upsert table (it has no key to delete by)", row.Table)}
				break
			}
			vals, err := tb.fit(row.Values)
			if err != nil {
				bad = &MappingError{Partition: r.Partition, Position: r.Next, Err: err}
				break
			}
			ok = append(ok, fitted{id, tb, vals, row.Delete})
		}
		if bad != nil {
			if err := in.deadLetter(c, r, bad); err != nil {
				return err
			}
			continue
		}
		o := &origin{partition: r.Partition, position: r.Next, key: r.Key, value: r.Value, rows: len(ok)}
		for _, f := range ok {
			buf := c.bufs[f.id]
			if buf == nil {
				buf = &buffer{}
				c.bufs[f.id] = buf
			}
			buf.add(f.tb, f.vals, f.del, o)
		}
	}
	if part != "" {
		c.positions[part] = next
	}
	return in.flushFull(ctx, c)
}

// flushFull flushes the full buffers, the targets in parallel, and with
// each the buffers of its target's tables listed before it (Config.Tables):
// their rows came first and may be what its rows' foreign keys reference.
func (in *instance) flushFull(ctx context.Context, c *checkpoint) error {
	last := map[string]int{} // by target: the last full table's place
	for id, buf := range c.bufs {
		if tb := in.s.tables[id]; buf.full(tb) {
			if o, ok := last[tb.Target]; !ok || in.s.order[id] > o {
				last[tb.Target] = in.s.order[id]
			}
		}
	}
	byTarget := map[string][]string{}
	for id, buf := range c.bufs {
		tb := in.s.tables[id]
		if o, ok := last[tb.Target]; ok && len(buf.rows) > 0 && in.s.order[id] <= o {
			byTarget[tb.Target] = append(byTarget[tb.Target], id)
		}
	}
	return in.flushTargets(ctx, c, byTarget)
}

// flushTargets flushes the given tables' buffers: the targets in parallel,
// each target's tables in their Config.Tables order on its branch.
func (in *instance) flushTargets(ctx context.Context, c *checkpoint, byTarget map[string][]string) error {
	if len(byTarget) == 0 {
		return nil
	}
	err := parallel(slices.Sorted(maps.Keys(byTarget)), func(tg string) error {
		ids := byTarget[tg]
		slices.SortFunc(ids, func(a, b string) int { return in.s.order[a] - in.s.order[b] })
		for _, id := range ids {
			if err := in.flush(ctx, c, in.s.tables[id], c.bufs[id]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return in.settleRefused(c)
}

// branch returns c's branch on target tg, starting it if needed.
func (in *instance) branch(c *checkpoint, tg *target) (*liveBranch, error) {
	c.mu.Lock()
	lb := c.branches[tg.cfg.Name]
	c.mu.Unlock()
	if lb != nil {
		if lb.branch() == nil {
			return nil, fmt.Errorf("sink: the branch on %s has ended", tg.cfg.Name)
		}
		return lb, nil
	}
	b, err := tg.rm.Start(c.work, c.h.Ref(tg.cfg.Name).XID())
	if err != nil {
		return nil, err
	}
	w, err := tg.d.writer(b)
	if err != nil {
		b.Close() //nolint:errcheck // nothing was written on it
		return nil, err
	}
	lb = &liveBranch{tg: tg, b: b, w: w}
	c.mu.Lock()
	c.branches[tg.cfg.Name] = lb
	c.mu.Unlock()
	return lb, nil
}

// flush sends a table's buffered rows on its target's branch.
func (in *instance) flush(ctx context.Context, c *checkpoint, tb *table, buf *buffer) error {
	if len(buf.rows) == 0 {
		return nil
	}
	lb, err := in.branch(c, tb.t)
	if err != nil {
		return err
	}
	if lb.branch() == nil {
		return fmt.Errorf("sink: the branch on %s has ended", tb.Target)
	}
	// A key is in the buffer once (buffer.add): its deletes and its rows
	// may go in either order.
	rows, keys := buf.split(tb)
	// A refused batch (of rows, or of deletes by key) is narrowed to its
	// refused rows, which settleRefused handles once every flush is done.
	for _, del := range []bool{true, false} {
		todo := rows
		if del {
			todo = keys
		}
		if len(todo) == 0 {
			continue
		}
		bad, why, err := putRows(ctx, lb.w, tb, todo, in.refusalLimit(c), del)
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			from := buf.origins(del)
			c.mu.Lock()
			for i, j := range bad {
				c.refused = append(c.refused, refusedRow{tb: tb, from: from[j], why: why[i]})
			}
			c.mu.Unlock()
		}
	}
	buf.reset()
	return nil
}

// parallel runs f for each name at once and joins the errors.
func parallel(names []string, f func(name string) error) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PreCommit flushes every buffer (targets in parallel), then prepares every
// branch in parallel. Any vote but yes fails it (the driver aborts).
func (in *instance) PreCommit(ctx context.Context, h Handle, id uint64) (Handle, error) {
	if err := in.s.check(); err != nil {
		return Handle{}, err
	}
	c, err := in.get(h)
	if err != nil {
		return Handle{}, err
	}
	// Refusals set records aside as dead letters, which fill the
	// dead-letter table's buffer: flush until every buffer is empty.
	for {
		byTarget := map[string][]string{}
		for id, buf := range c.bufs {
			if len(buf.rows) > 0 {
				tg := in.s.tables[id].Target
				byTarget[tg] = append(byTarget[tg], id)
			}
		}
		if len(byTarget) == 0 {
			break
		}
		if err := in.flushTargets(ctx, c, byTarget); err != nil {
			return Handle{}, err
		}
	}
	if c.doomed != nil {
		return Handle{}, c.doomed
	}
	if err := in.s.step("flushed", c.h); err != nil {
		return Handle{}, err
	}
	names := slices.Sorted(maps.Keys(c.branches))
	err = parallel(names, func(name string) error {
		lb := c.branches[name]
		b := lb.branch()
		if b == nil {
			return fmt.Errorf("sink: the branch on %s has ended", name)
		}
		vote, err := b.Prepare(ctx)
		if or, ok := b.(xa.OriginReporter); ok {
			lb.origin = or.Origin()
		}
		switch vote {
		case xa.VotePrepared:
			lb.prepared = true
			return nil
		case xa.VoteReadOnly:
			lb.drop()
			return nil
		}
		lb.drop()
		lb.maybe = xa.OutcomeUnknown(err)
		if err == nil {
			err = errors.New("voted abort")
		}
		return fmt.Errorf("sink: target %s refused to prepare: %w", name, err)
	})
	if err != nil {
		return Handle{}, err
	}
	out := c.h
	out.ID = id
	in.mu.Lock()
	out.Spent = slices.Sorted(maps.Keys(in.spent))
	in.mu.Unlock()
	for _, name := range names {
		if lb := c.branches[name]; lb.prepared {
			out.Branches = append(out.Branches, BranchState{Target: name, Session: lb.origin.Session, Prepared: lb.origin.Prepared})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(c.positions)) {
		epoch := c.epochs[p]
		if in.external {
			epoch = int64(in.generation)
		}
		out.Partitions = append(out.Partitions, PartitionPosition{Partition: p, Position: c.positions[p], Epoch: epoch})
	}
	c.h = out
	if err := in.s.step("prepared", out); err != nil {
		return Handle{}, err
	}
	return out, nil
}

// Commit decides h (step 3) unless it is decided, then commits its
// branches (step 4). See Committer.
func (in *instance) Commit(ctx context.Context, h Handle) error {
	if err := in.s.check(); err != nil {
		return err
	}
	if h.Sink != in.s.cfg.Name {
		return fmt.Errorf("%w: a handle of sink %q given to sink %q", sink.ErrConfig, h.Sink, in.s.cfg.Name)
	}
	c := in.lookup(h)
	if len(h.Branches) == 0 && len(h.Partitions) == 0 {
		// An empty checkpoint (an idle stream) still names the spent
		// transactions to fence.
		in.finish(c)
		in.fenceSpent(ctx, h)
		return nil
	}
	if c == nil || !c.decided {
		if err := in.decide(ctx, h, c); err != nil {
			return err
		}
		if c != nil {
			c.decided = true
			if f := in.s.cfg.DeadLettersCommitted; f != nil && c.dead > 0 {
				f(c.dead)
			}
			in.forgetPoison(c.poisoned)
		}
	}
	if err := in.s.step("decided", h); err != nil {
		return err
	}
	for i, b := range h.Branches {
		var lb *liveBranch
		if c != nil {
			lb = c.branches[b.Target]
		}
		if !in.commitBranch(ctx, h, b, lb) && c != nil {
			c.left = append(c.left, b.Target)
		}
		if i == 0 && len(h.Branches) > 1 {
			if err := in.s.step("phase2", h); err != nil {
				return err
			}
		}
	}
	in.finish(c)
	in.fenceSpent(ctx, h)
	return nil
}

// fenceSpent fences and rolls back the transactions h names as spent
// (their PreCommit failed and their abort could not claim the marker):
// no state names them, and being numbered below h's checkpoint, no
// Restore would touch them. A failure is logged; a later handle names
// them again.
func (in *instance) fenceSpent(ctx context.Context, h Handle) {
	for _, n := range h.Spent {
		if n >= h.Checkpoint {
			continue
		}
		sp := Handle{Sink: h.Sink, Incarnation: h.Incarnation, Checkpoint: n}
		row, err := in.claim(ctx, sp)
		switch {
		case err == nil && !row.aborted:
			// It holds a decision (it cannot: it was never decided);
			// nothing to fence, and it is not named again.
			in.log.Error("sink: a spent transaction holds a commit decision; left to restore", "txn", n)
			in.mu.Lock()
			delete(in.spent, n)
			in.mu.Unlock()
			continue
		case err == nil:
			// Its branches may be on any target, or on none (gone:
			// rolled back, for the kernel).
			for _, name := range slices.Sorted(maps.Keys(in.s.targets)) {
				res := xa.Phase2(context.WithoutCancel(ctx), in.s.restoreRetry(), xa.Phase2Call{Rollback: true}, func(ctx context.Context) error {
					return in.s.targets[name].rm.Rollback(ctx, sp.Ref(name).XID(), xa.Origin{})
				})
				if res.Err != nil {
					err = errors.Join(err, fmt.Errorf("%s: %w", name, res.Err))
				}
			}
		}
		if err != nil {
			in.log.Warn("sink: fencing a spent transaction failed; a later handle names it again", "txn", n, "err", err)
			continue
		}
		in.mu.Lock()
		delete(in.spent, n)
		in.mu.Unlock()
	}
}

func (h Handle) id() uint64 {
	if h.ID != 0 {
		return h.ID
	}
	return h.Checkpoint
}

// decide writes the decision (step 3).
//
// Self-driven, the decision row is the decision: on a definite refusal (an
// epoch moved) the checkpoint aborts; on anything else the fence settles
// the fate: the abort marker is claimed, and if the decision holds the key
// instead, it won.
//
// External, the caller's completed checkpoint is the decision and the row
// only records it: the marker is never claimed here (that could abort a
// completed checkpoint), the decision is retried until it is known to be
// stored, and a refusal because a generation above the committer's has
// started (whoever's handle it is: the committer's generation is the
// fence) leaves the branches prepared for that generation's Restore.
func (in *instance) decide(ctx context.Context, h Handle, c *checkpoint) error {
	if h.Ref("").External() {
		if !in.external {
			return fmt.Errorf("%w: an external member's handle (%s) given to a self-driven instance", sink.ErrConfig, h.Ref(""))
		}
		return in.decideExternal(ctx, h, c)
	}
	err := in.s.books.decide(ctx, h, in.generation)
	if err == nil {
		return nil
	}
	if errors.Is(err, errEpochMoved) {
		in.rollback(ctx, h, c)
		return &sink.AbortError{Checkpoint: h.id(), Reason: fmt.Errorf("%w: %v", sink.ErrTakenOver, err)}
	}
	row, cerr := in.claim(ctx, h)
	if cerr != nil {
		in.log.Warn("sink: decision unresolved: the fence could not be claimed", "checkpoint", h.id(), "decide", err, "claim", cerr)
		return &unresolvedError{checkpoint: h.id(), err: errors.Join(err, cerr)}
	}
	if !row.aborted {
		return nil
	}
	in.rollback(ctx, h, c)
	return &sink.AbortError{Checkpoint: h.id(), Reason: fmt.Errorf("%w (the decision failed: %v)", sink.ErrAbortMarked, err)}
}

func (in *instance) decideExternal(ctx context.Context, h Handle, c *checkpoint) error {
	var err error
	for attempt := range sinkRetry.Tries() {
		if attempt > 0 && !sleep(ctx, backoff(attempt)) {
			break
		}
		err = in.s.books.decide(ctx, h, in.generation)
		if err == nil {
			return nil
		}
		if errors.Is(err, errEpochMoved) {
			return fmt.Errorf("sink: checkpoint %d: %w: a generation above the committer's (%d) has started, whose Restore finishes or fences this checkpoint (%v)",
				h.id(), sink.ErrFenced, in.generation, err)
		}
		// Stored already (an earlier attempt, or another process), or a
		// marker: read the key. Nothing there: try again (a decision
		// still running makes the next attempt wait for it).
		rows, lerr := in.s.books.lookup(ctx, h.Sink, []checkpointKey{h.key()})
		if lerr != nil {
			continue
		}
		if row, ok := rows[h.key()]; ok {
			if !row.aborted {
				return nil
			}
			in.rollback(ctx, h, c)
			return &sink.AbortError{Checkpoint: h.id(), Reason: fmt.Errorf("%w: a Restore fenced it, or Abort aborted it", sink.ErrAbortMarked)}
		}
	}
	return &unresolvedError{checkpoint: h.id(), err: fmt.Errorf("the decision could not be stored (Commit may be called again): %w", err)}
}

// claim claims the abort marker of h, retrying a few times.
func (in *instance) claim(ctx context.Context, h Handle) (stored, error) {
	var err error
	for attempt := range sinkRetry.Tries() {
		if attempt > 0 && !sleep(ctx, backoff(attempt)) {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		var row stored
		row, err = in.s.books.claim(cctx, h.Sink, h.key())
		cancel()
		if err == nil {
			return row, nil
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return stored{}, err
}

// commitBranch commits one prepared branch of a decided checkpoint: on its
// own session if it is live, else by XID from another session, through
// xa's phase-2 kernel. "Unknown XID" counts as committed: the decision row
// proves that nothing else can have happened to it. After Phase2Attempts
// (Sink.phase2Retry) it is left to restore. It reports whether the branch
// is finished (false: left to restore).
func (in *instance) commitBranch(ctx context.Context, h Handle, b BranchState, lb *liveBranch) bool {
	tg := in.s.targets[b.Target]
	ref := h.Ref(b.Target)
	if tg == nil {
		in.log.Error("sink: a decided branch on a target this sink does not have: restore it with a sink that has it", "branch", ref.String())
		return false
	}
	origin := xa.Origin{Session: b.Session, Prepared: b.Prepared}
	res := xa.Phase2(ctx, in.s.phase2Retry(), xa.Phase2Call{Proven: true, Stop: in.s.check}, func(actx context.Context) error {
		var b xa.Branch
		if lb != nil {
			b = lb.branch()
		}
		if b == nil {
			return tg.rm.Commit(actx, ref.XID(), origin)
		}
		err := b.Commit(actx)
		if err != nil && !xa.Retryable(err) {
			lb.drop() // the branch released its session
		}
		return err
	})
	switch {
	case res.Ended():
		return true
	case res.Stopped:
		return false
	case res.Verdict == xa.Phase2Heuristic:
		in.log.Error("sink: heuristic outcome: a branch of a checkpoint decided commit was rolled back by its database; its rows are lost",
			"branch", ref.String(), "err", res.Err)
		return true
	}
	if lb != nil {
		if b := lb.drop(); b != nil {
			b.Close() //nolint:errcheck // the branch stays prepared for restore
		}
	}
	in.log.Warn("sink: phase two left to restore", "branch", ref.String(), "err", res.Err)
	return false
}

// Abort rolls h back. If a branch may be prepared it first claims the
// abort marker, so that no decision of h can ever commit; if the decision
// holds the key instead, it returns ErrDecided and rolls nothing back.
func (in *instance) Abort(ctx context.Context, h Handle) error {
	if err := in.s.check(); err != nil {
		return err
	}
	c := in.lookup(h)
	maybe := len(h.Branches) > 0
	if c != nil {
		for _, lb := range c.branches {
			maybe = maybe || lb.prepared || lb.maybe
		}
	}
	if maybe {
		row, err := in.claim(ctx, h)
		if err != nil {
			in.abandonCheckpoint(c)
			if in.external && h.Incarnation == in.inc {
				in.mu.Lock()
				if in.spent == nil {
					in.spent = map[uint64]bool{}
				}
				in.spent[h.Checkpoint] = true
				in.mu.Unlock()
			}
			return fmt.Errorf("sink: aborting checkpoint %d: claiming its abort marker: %w (restore will)", h.id(), err)
		}
		if !row.aborted {
			return fmt.Errorf("sink: aborting checkpoint %d: %w", h.id(), sink.ErrDecided)
		}
	}
	return in.rollback(ctx, h, c)
}

// abandonCheckpoint gives a transaction's branches up to restore.
func (in *instance) abandonCheckpoint(c *checkpoint) {
	if c == nil {
		return
	}
	for _, lb := range c.branches {
		if b := lb.drop(); b != nil {
			b.Close() //nolint:errcheck // prepared branches stay for restore
		}
	}
	in.finish(c)
}

// rollback rolls back every branch of h that may exist, live or by XID.
// Failures are left to restore (an undecided prepared branch is fenced
// there).
func (in *instance) rollback(ctx context.Context, h Handle, c *checkpoint) error {
	type br struct {
		lb     *liveBranch
		origin xa.Origin
	}
	todo := map[string]br{}
	for _, b := range h.Branches {
		todo[b.Target] = br{origin: xa.Origin{Session: b.Session, Prepared: b.Prepared}}
	}
	if c != nil {
		for name, lb := range c.branches {
			if lb.branch() != nil || lb.prepared || lb.maybe {
				todo[name] = br{lb: lb, origin: lb.origin}
			}
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(todo)) {
		x := todo[name]
		tg := in.s.targets[name]
		if tg == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.s.cfg.Phase2Timeout)
		var err error
		var b xa.Branch
		if x.lb != nil {
			b = x.lb.drop()
		}
		if b != nil {
			err = b.Rollback(rctx)
			if err != nil {
				b.Close() //nolint:errcheck // left to restore
			}
		} else {
			err = tg.rm.Rollback(rctx, h.Ref(name).XID(), x.origin)
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	in.finish(c)
	if len(errs) > 0 {
		err := errors.Join(errs...)
		in.log.Warn("sink: rollback left to restore", "checkpoint", h.id(), "err", err)
		return err
	}
	return nil
}

// Take raises the epochs of partitions (restore step 1), resolves orphans
// (step 2) and returns the positions to resume from (step 3).
func (in *instance) Take(ctx context.Context, partitions []string) (map[string]string, error) {
	if err := in.s.check(); err != nil {
		return nil, err
	}
	if len(partitions) == 0 {
		return map[string]string{}, nil
	}
	rows, err := in.s.books.take(ctx, in.s.cfg.Name, in.inc, partitions)
	if err != nil {
		return nil, err
	}
	pos := map[string]string{}
	in.mu.Lock()
	for _, r := range rows {
		in.epochs[r.Partition] = r.Epoch
		if r.Position != "" {
			pos[r.Partition] = r.Position
		}
	}
	in.mu.Unlock()
	deadline := time.Now().Add(in.s.cfg.RestoreWait)
	for attempt := 0; ; attempt++ {
		err := in.Sweep(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, xa.ErrIdentity) {
			// Not the stores the sink was set up with: read nothing.
			return nil, err
		}
		if time.Now().After(deadline) || !sleep(ctx, backoff(attempt)) {
			in.log.Warn("sink: restore after taking partitions left orphans; reading on", "err", err)
			break
		}
	}
	return pos, nil
}

// Release forgets partitions.
func (in *instance) Release(ctx context.Context, partitions []string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, p := range partitions {
		delete(in.epochs, p)
	}
	in.forgetPoisonOf(partitions)
	return nil
}

// Rewind reads the committed positions back; a partition whose row no
// longer carries this instance's epoch is lost.
func (in *instance) Rewind(ctx context.Context, partitions []string) (map[string]string, []string, error) {
	if err := in.s.check(); err != nil {
		return nil, nil, err
	}
	rows, err := in.s.books.read(ctx, in.s.cfg.Name, partitions)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]PartitionStatus{}
	for _, r := range rows {
		byName[r.Partition] = r
	}
	pos := map[string]string{}
	var lost []string
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, p := range partitions {
		r, ok := byName[p]
		if !ok || r.Owner != in.inc || r.Epoch != in.epochs[p] {
			lost = append(lost, p)
			delete(in.epochs, p)
			continue
		}
		pos[p] = r.Position
	}
	in.forgetPoisonOf(lost)
	return pos, lost, nil
}

// Sweep resolves the sink's orphaned branches with the self-driven rules.
func (in *instance) Sweep(ctx context.Context) error {
	return in.resolve(ctx, View{Incarnation: in.inc, InFlight: in.inFlight, Grace: in.s.cfg.RestoreGrace})
}

// AbortLingering resolves the sink's branches with the external rules,
// retrying for up to RestoreWait what it cannot finish yet (a MySQL branch
// whose preparing session is still closing: MariaDB, fact 7), as taking
// partitions does. An identity error is not retried.
func (in *instance) AbortLingering(ctx context.Context, restored uint64) error {
	deadline := time.Now().Add(in.s.cfg.RestoreWait)
	for attempt := 0; ; attempt++ {
		err := in.resolve(ctx, View{External: true, Generation: in.generation, Restored: restored})
		if err == nil || errors.Is(err, xa.ErrIdentity) || time.Now().After(deadline) || !sleep(ctx, backoff(attempt)) {
			return err
		}
	}
}

// resolve is restore's step 2.
func (in *instance) resolve(ctx context.Context, v View) error {
	if err := in.s.check(); err != nil {
		return err
	}
	// Restore acts only on the stores the sink was set up with: the
	// progress store whose decisions it trusts, the targets whose
	// branches it resolves (identity.go).
	removed, err := in.s.verify(ctx)
	if err != nil {
		return fmt.Errorf("sink: restore refused: %w", err)
	}
	orphans, err := in.s.list(ctx)
	if err != nil {
		return err
	}
	keys := slices.SortedFunc(maps.Keys(orphans), func(a, b checkpointKey) int {
		return cmp.Or(cmp.Compare(a.incarnation, b.incarnation), cmp.Compare(a.checkpoint, b.checkpoint))
	})
	rows, err := in.s.books.lookup(ctx, in.s.cfg.Name, keys)
	if err != nil {
		return err
	}
	if !v.External {
		owners, err := in.s.books.owners(ctx, in.s.cfg.Name)
		if err != nil {
			return err
		}
		v.Owns = func(inc uint64) bool { return owners[inc] }
	}
	var errs []error
	for _, k := range keys {
		bs := orphans[k]
		o := Orphan{Ref: bs[0].ref, Decision: decisionOf(rows, k)}
		for _, b := range bs {
			o.Age = max(o.Age, b.age)
		}
		act, why := Classify(o, v)
		if act == ActLeave {
			continue
		}
		row := rows[k]
		if act == ActFence {
			row, err = in.s.books.claim(ctx, in.s.cfg.Name, k)
			if err != nil {
				errs = append(errs, fmt.Errorf("fencing %s: %w", o.Ref, err))
				continue
			}
			act = ActRollback
			if !row.aborted {
				act, why = ActCommit, "the fence found its decision"
			}
		}
		in.log.Info("sink: restore", "checkpoint", o.Ref.String(), "action", act.String(), "why", why)
		origins := decodeOrigins(row.origins)
		for _, b := range bs {
			tg := in.s.targets[b.ref.Target]
			// A commit is proven: the decision row says so, and an
			// unknown XID counts as committed.
			err = xa.Phase2(ctx, in.s.restoreRetry(), xa.Phase2Call{Rollback: act != ActCommit, Proven: true}, func(rctx context.Context) error {
				if act == ActCommit {
					return tg.rm.Commit(rctx, b.ref.XID(), origins[b.ref.Target])
				}
				return tg.rm.Rollback(rctx, b.ref.XID(), xa.Origin{})
			}).Err
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", act, b.ref, err))
			}
		}
	}
	if in.s.cfg.DecisionRetention > 0 && in.s.forgetDue() {
		if len(removed) > 0 {
			// Its branches are not listed: the decisions they may need
			// are kept until it is configured again, or forgotten.
			in.log.Warn("sink: keeping old decision rows: a target set up for the sink is not configured; its prepared branches are neither listed nor resolved",
				"target", removed[0].Name, "where", removed[0].Where)
		} else if why := in.s.hiddenPrepared(ctx); why != "" {
			// A decided branch hidden by the server (MariaDB, fact 7)
			// comes back after a restart, and only its decision row then
			// says it committed.
			in.log.Warn("sink: keeping old decision rows", "why", why)
		} else if _, err := in.s.books.forget(ctx, in.s.cfg.Name, in.s.cfg.DecisionRetention, keys); err != nil {
			errs = append(errs, fmt.Errorf("forgetting old decisions: %w", err))
		}
	}
	return errors.Join(errs...)
}

func decisionOf(rows map[checkpointKey]stored, k checkpointKey) Decision {
	row, ok := rows[k]
	switch {
	case !ok:
		return NoDecision
	case row.aborted:
		return DecidedAbort
	}
	return DecidedCommit
}

// listed is one prepared branch of the sink found on a target.
type listed struct {
	ref Ref
	age time.Duration
}

// list lists the sink's prepared branches on every target, by checkpoint.
// A branch's age is the database's where it says (PostgreSQL), else the
// time since this Sink first listed it.
func (s *Sink) list(ctx context.Context) (map[checkpointKey][]listed, error) {
	type res struct {
		bs  []xa.PreparedBranch
		err error
	}
	out := make([]res, len(s.names))
	var wg sync.WaitGroup
	for i, name := range s.names {
		wg.Go(func() { out[i].bs, out[i].err = s.targets[name].rm.Recover(ctx) })
	}
	wg.Wait()
	now := time.Now()
	byKey := map[checkpointKey][]listed{}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	seen := map[string]bool{}
	for i, name := range s.names {
		if out[i].err != nil {
			errs = append(errs, fmt.Errorf("listing %s: %w", name, out[i].err))
			continue
		}
		for _, p := range out[i].bs {
			ref, ok := ParseXID(p.XID)
			if !ok || ref.Sink != s.cfg.Name || ref.Target != name {
				continue
			}
			text := p.XID.String()
			seen[text] = true
			first, ok := s.seen[text]
			if !ok {
				first = now
				s.seen[text] = now
			}
			age := p.ServerAge
			if age == 0 && !p.Prepared.IsZero() {
				age = now.Sub(p.Prepared)
			}
			age = max(age, now.Sub(first))
			k := checkpointKey{ref.Incarnation, ref.Checkpoint}
			byKey[k] = append(byKey[k], listed{ref: ref, age: age})
		}
	}
	if len(errs) == 0 {
		for text := range s.seen {
			if !seen[text] {
				delete(s.seen, text)
			}
		}
	}
	return byKey, errors.Join(errs...)
}

// Status reads the sink's progress and instances, and lists its prepared
// branches with what restore would do with each (as seen by a newcomer:
// no checkpoint of it is in flight). It checks the identities first, as a
// restore does (Verify), and returns their error, matching
// xa.ErrIdentity, instead of a status read from the wrong stores.
func (s *Sink) Status(ctx context.Context) (Status, error) {
	if err := s.check(); err != nil {
		return Status{}, err
	}
	removed, err := s.verify(ctx)
	if err != nil {
		return Status{Sink: s.cfg.Name}, err
	}
	st, err := s.books.status(ctx, s.cfg.Name)
	if err != nil {
		return st, err
	}
	st.Removed = removed
	orphans, err := s.list(ctx)
	if err != nil {
		return st, err
	}
	keys := slices.Collect(maps.Keys(orphans))
	rows, err := s.books.lookup(ctx, s.cfg.Name, keys)
	if err != nil {
		return st, err
	}
	owners := map[uint64]bool{}
	for _, p := range st.Partitions {
		owners[p.Owner] = true
	}
	v := View{Owns: func(inc uint64) bool { return owners[inc] }, Grace: s.cfg.RestoreGrace}
	for k, bs := range orphans {
		for _, b := range bs {
			o := Orphan{Ref: b.ref, Decision: decisionOf(rows, k), Age: b.age}
			act, why := Classify(o, v)
			st.Branches = append(st.Branches, BranchStatus{Ref: b.ref, Age: b.age, Decision: o.Decision, Action: act, Why: why})
		}
	}
	slices.SortFunc(st.Branches, func(a, b BranchStatus) int {
		return cmp.Or(cmp.Compare(a.Ref.Incarnation, b.Ref.Incarnation), cmp.Compare(a.Ref.Checkpoint, b.Ref.Checkpoint),
			cmp.Compare(a.Ref.Target, b.Ref.Target))
	})
	return st, nil
}

// Sweep resolves the sink's orphaned branches now, as a newcomer would
// (no checkpoint of this process is in flight): decided ones are committed,
// fenced ones rolled back, undecided ones of incarnations that own no
// partition, or older than the restore grace, are fenced and rolled back.
// Errors name the branches left (a MySQL branch whose preparing session
// is still connected stays until it is gone).
func (s *Sink) Sweep(ctx context.Context) error {
	in := &instance{s: s, live: map[uint64]*checkpoint{}, epochs: map[string]int64{}, log: s.log}
	return in.Sweep(ctx)
}

// forgetInterval is how often restore forgets old decisions.
const forgetInterval = time.Hour

// forgetDue reports whether old decisions are to be forgotten now (at
// most once per forgetInterval per Sink).
func (s *Sink) forgetDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lastForget.IsZero() && time.Since(s.lastForget) < forgetInterval {
		return false
	}
	s.lastForget = time.Now()
	return true
}

// hiddenPrepared says why old decision rows must be kept: a target holds
// prepared transactions it does not list (or cannot tell). "" when none
// does.
func (s *Sink) hiddenPrepared(ctx context.Context) string {
	for _, name := range s.names {
		gc, ok := s.targets[name].rm.(xa.GhostCounter)
		if !ok {
			continue
		}
		switch n, err := gc.UnlistedPrepared(ctx); {
		case err != nil:
			return fmt.Sprintf("target %s could not tell whether it holds prepared transactions it does not list: %v", name, err)
		case n > 0:
			return fmt.Sprintf("target %s holds %d prepared transactions it does not list (fact 7): restart it so that they show", name, n)
		}
	}
	return ""
}
