package sink

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestExactlyOnceUnderFaults drives checkpoint machines, as Runners
// would (a reader and a committer each, the committer handed one
// checkpoint at a time, a waiting reader handed what the committer's
// outcomes ask of it), over an in-memory participant and progress store
// that behaves as the SQL sink's does: rows and positions land together
// at a checkpoint's decision and phase two; the decision is refused when
// a partition's epoch moved on (another instance took it) or when a
// restore put an abort marker on the checkpoint; a take restores the
// checkpoints of other instances that touch its partitions (decided:
// phase two; else an abort marker and a rollback).
//
// A random schedule interleaves the instances' steps with faults:
// crashes at any step, zombies (a partition given to another instance
// without its owner being told, then told Lost or never), rebalances
// (Revoked, Lost, Assigned), outages of the database (every operation
// fails for a while: Begin, Write, PreCommit, Commit unresolved, Abort,
// Rewind, Take), refused prepares and decisions, and lost replies of a
// decision (decided or not, then the abort marker could not be claimed:
// ErrUnresolved). Then every instance left dies, and a fresh one takes
// every partition and reads to the end without faults.
//
// Properties: at every moment, each partition's position in the progress
// store never runs ahead of its rows and no record has two rows; no
// position is acknowledged to the source ahead of the progress store; at
// the end, every record of the source has exactly one row.
func TestExactlyOnceUnderFaults(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		steps := rapid.IntRange(200, 2000).Draw(rt, "steps")
		for range steps {
			w.move()
			w.check("during the schedule")
			w.accepted()
		}
		// Whatever is left dies; a fresh instance reads to the end.
		w.faults = false
		for _, in := range w.insts {
			if !in.dead {
				w.crash(in)
			}
		}
		fresh := w.spawn(slices.Sorted(maps.Keys(w.source)))
		for i := 0; !fresh.dead; i++ {
			if i > 20000 {
				rt.Fatalf("the fresh instance did not finish: %s", fresh.m)
			}
			switch {
			case fresh.commit != nil && (i%2 == 0 || !w.runnable(fresh)):
				w.commitStep(fresh)
			case w.runnable(fresh):
				w.readerStep(fresh)
			default:
				rt.Fatalf("the fresh instance is stuck: %s", fresh.m)
			}
			w.check("in the fresh instance's run")
			w.accepted()
		}
		if fresh.stopErr != nil {
			rt.Fatalf("the fresh instance stopped with %v", fresh.stopErr)
		}
		for p, n := range w.source {
			for off := range n {
				if c := w.store.rows[p][off]; c != 1 {
					rt.Fatalf("partition %s record %d has %d rows (progress %d); trace:\n%s", p, off, c, w.store.progress[p], w.trace())
				}
			}
		}
	})
}

// simCkpt is one checkpoint's transaction in the store.
type simCkpt struct {
	inst      int
	n         uint64
	recs      []Record
	positions map[string]int
	epochs    map[string]int // each partition's epoch at its first write
	state     string         // open, prepared, decided, done, aborted
	marked    bool           // a restore's abort marker
}

// simStore is the participant and the progress store.
type simStore struct {
	rows     map[string]map[int]int // partition -> offset -> rows
	progress map[string]int
	epoch    map[string]int
	owner    map[string]int // partition -> the instance that took it last (0: none)
	ckpts    []*simCkpt
	down     int // operations left that fail (an outage)
}

// simInst is one instance: a machine, its reader and committer.
type simInst struct {
	id       int
	m        *machine
	todo     []action   // the reader's actions to perform, in order
	waiting  bool       // the reader performed actWait and waits
	inbox    [][]action // the committer's outcomes' reader actions
	commit   action     // the committer's action in hand
	stage    int        // the reader's loop: 0 collect, 1 poll, 2 due
	handlers []event    // handler calls the next Poll makes
	assigned map[string]bool
	cursor   map[string]int
	epochs   map[string]int // the epochs this instance took
	ckpts    map[uint64]*simCkpt
	shutting bool
	dead     bool
	stopErr  error
	zombieOf []string // partitions given away without telling it
}

type world struct {
	rt     *rapid.T
	store  *simStore
	source map[string]int // partition -> its records' count
	insts  []*simInst
	group  map[string]int // partition -> the instance the group gives it to; 0: none; -1: being revoked
	faults bool
	log    []string
}

func newWorld(rt *rapid.T) *world {
	w := &world{rt: rt, source: map[string]int{}, group: map[string]int{}, faults: true,
		store: &simStore{rows: map[string]map[int]int{}, progress: map[string]int{}, epoch: map[string]int{}, owner: map[string]int{}}}
	parts := rapid.IntRange(1, 3).Draw(rt, "partitions")
	for i := range parts {
		p := "p" + strconv.Itoa(i)
		w.source[p] = rapid.IntRange(1, 12).Draw(rt, "records"+p)
		w.store.rows[p] = map[int]int{}
	}
	w.spawn(slices.Sorted(maps.Keys(w.source)))
	return w
}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *world) trace() string {
	from := max(0, len(w.log)-60)
	var s string
	for _, l := range w.log[from:] {
		s += l + "\n"
	}
	return s
}

// spawn starts an instance the group assigns parts to.
func (w *world) spawn(parts []string) *simInst {
	o := RunOptions{CheckpointRecords: rapid.IntRange(1, 4).Draw(w.rt, "checkpointRecords"),
		MaxPending: rapid.IntRange(1, 3).Draw(w.rt, "maxPending"), MaxAborts: 4}
	in := &simInst{id: len(w.insts) + 1, m: newMachine(o.withDefaults()), assigned: map[string]bool{}, cursor: map[string]int{},
		epochs: map[string]int{}, ckpts: map[uint64]*simCkpt{}}
	w.insts = append(w.insts, in)
	w.assign(in, parts)
	w.logf("i%d starts", in.id)
	return in
}

// assign makes the group give parts to in: its next Poll calls Assigned.
func (w *world) assign(in *simInst, parts []string) {
	for _, p := range parts {
		w.group[p] = in.id
	}
	in.handlers = append(in.handlers, evAssigned{parts: parts})
}

func (w *world) live() []*simInst {
	var l []*simInst
	for _, in := range w.insts {
		if !in.dead && !in.shutting {
			l = append(l, in)
		}
	}
	return l
}

// runnable: the reader has something to do.
func (w *world) runnable(in *simInst) bool {
	if in.dead {
		return false
	}
	if in.waiting {
		return len(in.inbox) > 0
	}
	return len(in.todo) > 0 || !in.shutting
}

// moves are the schedule's moves: a fault for each k below 25 (see
// move), a step of an instance's reader or committer for the others.
// Rapid draws small indexes more often: the steps come first.
var moves = func() []int {
	var m []int
	for range 150 {
		m = append(m, 99)
	}
	for k := range 25 {
		m = append(m, k)
	}
	return m
}()

// move performs one step of the schedule.
func (w *world) move() {
	rt := w.rt
	var ready []*simInst
	for _, in := range w.insts {
		if w.runnable(in) || in.commit != nil {
			ready = append(ready, in)
		}
	}
	live := w.live()
	switch k := moves[rapid.IntRange(0, len(moves)-1).Draw(rt, "move")]; {
	case k < 6 && len(live) > 0:
		w.crash(rapid.SampledFrom(live).Draw(rt, "crash"))
	case k < 10 && len(live) > 0:
		// A zombie: one of its partitions goes to another instance
		// (maybe a new one) without its being told.
		from := rapid.SampledFrom(live).Draw(rt, "zombie")
		p, ok := w.groupPart(from)
		if !ok {
			return
		}
		to := w.target(from)
		w.logf("zombie: %s of i%d goes to i%d", p, from.id, to.id)
		from.zombieOf = append(from.zombieOf, p)
		w.assign(to, []string{p})
	case k < 13 && len(live) > 0:
		// A zombie is told (Lost) what it lost.
		in := rapid.SampledFrom(live).Draw(rt, "tellLost")
		if len(in.zombieOf) > 0 {
			in.handlers = append(in.handlers, evLost{parts: in.zombieOf})
			w.logf("i%d will be told Lost %v", in.id, in.zombieOf)
			in.zombieOf = nil
		}
	case k < 17 && len(live) > 0:
		// A rebalance: Revoked, or Lost (a session that expired); the
		// partition goes to another instance once released.
		in := rapid.SampledFrom(live).Draw(rt, "revoke")
		p, ok := w.groupPart(in)
		if !ok {
			return
		}
		w.group[p] = -1
		if rapid.Bool().Draw(rt, "lostNotRevoked") {
			in.handlers = append(in.handlers, evLost{parts: []string{p}})
		} else {
			in.handlers = append(in.handlers, evRevoked{parts: []string{p}})
		}
		w.logf("i%d will be told %T %s", in.id, in.handlers[len(in.handlers)-1], p)
	case k < 20 && w.faults && w.store.down == 0:
		w.store.down = rapid.IntRange(1, 8).Draw(rt, "outage")
		w.logf("the database is down for %d operations", w.store.down)
	case k < 22:
		for _, in := range w.insts {
			if in.shutting && in.waiting && !in.dead {
				w.logf("i%d drain timeout", in.id)
				in.waiting = false
				w.feed(in, in.m.step(evDrainTimeout{}))
				return
			}
		}
	case k < 25:
		// Partitions nobody reads go to a live instance or a new one.
		var free []string
		for _, p := range slices.Sorted(maps.Keys(w.source)) {
			if w.group[p] == 0 {
				free = append(free, p)
			}
		}
		if len(free) == 0 {
			return
		}
		if len(live) > 0 && (len(w.insts) >= 4 || rapid.Bool().Draw(rt, "toLive")) {
			w.assign(rapid.SampledFrom(live).Draw(rt, "assignTo"), free)
		} else {
			w.spawn(free)
		}
	default:
		if len(ready) == 0 {
			return
		}
		in := rapid.SampledFrom(ready).Draw(rt, "who")
		if in.commit != nil && (!w.runnable(in) || rapid.Bool().Draw(rt, "committer")) {
			w.commitStep(in)
		} else if w.runnable(in) {
			w.readerStep(in)
		}
	}
}

// groupPart picks a partition the group gives in.
func (w *world) groupPart(in *simInst) (string, bool) {
	var ps []string
	for _, p := range slices.Sorted(maps.Keys(w.group)) {
		if w.group[p] == in.id {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return "", false
	}
	return rapid.SampledFrom(ps).Draw(w.rt, "part"), true
}

// target is another live instance, or a new one.
func (w *world) target(not *simInst) *simInst {
	var others []*simInst
	for _, in := range w.live() {
		if in != not {
			others = append(others, in)
		}
	}
	if len(others) > 0 && (len(w.insts) >= 4 || rapid.Bool().Draw(w.rt, "toOther")) {
		return rapid.SampledFrom(others).Draw(w.rt, "other")
	}
	return w.spawn(nil)
}

// crash kills in at once: what it prepared stays prepared.
func (w *world) crash(in *simInst) {
	w.logf("i%d crashes", in.id)
	in.dead, in.commit = true, nil
	w.orphan(in)
}

// orphan frees the partitions the group gave a dead instance.
func (w *world) orphan(in *simInst) {
	for p, id := range w.group {
		if id == in.id {
			w.group[p] = 0
		}
	}
	for _, ev := range in.handlers {
		if r, ok := ev.(evRevoked); ok {
			w.freeParts(r.parts)
		}
		if l, ok := ev.(evLost); ok {
			w.freeParts(l.parts)
		}
	}
	for _, p := range in.m.parts {
		if w.group[p] == -1 {
			w.group[p] = 0
		}
	}
}

func (w *world) freeParts(parts []string) {
	for _, p := range parts {
		if w.group[p] == -1 {
			w.group[p] = 0
		}
	}
}

// feed routes a step's actions: the committer's to it (one at a time),
// the Observer's nowhere, the reader's to its list.
func (w *world) feed(in *simInst, acts []action) {
	for _, a := range acts {
		switch {
		case forCommitter(a):
			if in.commit != nil {
				w.rt.Fatalf("i%d: the committer is handed %#v while it holds %#v", in.id, a, in.commit)
			}
			in.commit = a
		case forObserver(a):
		default:
			in.todo = append(in.todo, a)
		}
	}
}

// commitStep performs the committer's action and steps its outcome; the
// reader actions that follow go to the waiting reader's inbox.
func (w *world) commitStep(in *simInst) {
	a := in.commit
	in.commit = nil
	var ev event
	switch a := a.(type) {
	case actCommit:
		ev = evCommitted{n: a.n, err: w.storeCommit(in, a.n)}
	case actAbortQueued:
		ev = evAborted{n: a.n, err: w.storeAbort(in, a.n)}
	}
	w.logf("i%d committer: %#v -> %v", in.id, a, ev)
	var reader []action
	for _, x := range in.m.step(ev) {
		switch {
		case forCommitter(x):
			in.commit = x
		case forObserver(x):
		default:
			reader = append(reader, x)
		}
	}
	if len(reader) > 0 {
		if in.dead {
			return
		}
		if len(in.inbox) > 0 {
			w.rt.Fatalf("i%d: a second batch for a reader's inbox (the committer would block)", in.id)
		}
		in.inbox = append(in.inbox, reader)
	}
}

// readerStep performs the reader's next action, or the next step of its
// loop: collect, poll (the handler's calls first), due.
func (w *world) readerStep(in *simInst) {
	rt := w.rt
	if in.waiting {
		in.waiting = false
		in.todo = append(in.todo, in.inbox[0]...)
		in.inbox = in.inbox[1:]
		return
	}
	if len(in.todo) > 0 {
		a := in.todo[0]
		in.todo = in.todo[1:]
		switch a := a.(type) {
		case actWait:
			in.waiting = true
			if len(in.inbox) > 0 {
				w.readerStep(in)
			}
		case actStop:
			w.logf("i%d stops: %v", in.id, a.err)
			in.todo, in.shutting, in.stopErr = nil, true, a.err
			w.feed(in, in.m.step(evShutdown{}))
		case actStopped:
			w.logf("i%d stopped", in.id)
			in.dead, in.todo = true, nil
			w.orphan(in)
		default:
			if ev := w.perform(in, a); ev != nil {
				w.feed(in, in.m.step(ev))
			}
		}
		return
	}
	switch in.stage {
	case 0:
		w.feed(in, in.m.step(evCollect{}))
		in.stage = 1
	case 1:
		if len(in.handlers) > 0 {
			ev := in.handlers[0]
			in.handlers = in.handlers[1:]
			w.logf("i%d handler %#v", in.id, ev)
			switch ev := ev.(type) {
			case evRevoked:
				for _, p := range ev.parts {
					delete(in.assigned, p)
				}
			case evLost:
				for _, p := range ev.parts {
					delete(in.assigned, p)
				}
			}
			w.feed(in, in.m.step(ev))
			return
		}
		recs, eof := w.poll(in, rapid.IntRange(0, 3).Draw(rt, "batch"))
		w.logf("i%d polled %s eof=%v", in.id, formatRecords(recs), eof)
		w.feed(in, in.m.step(evPolled{records: recs, eof: eof}))
		in.stage = 2
	case 2:
		if in.m.open != nil && rapid.IntRange(0, 3).Draw(rt, "due") == 0 {
			w.feed(in, in.m.step(evDue{}))
		}
		in.stage = 0
	}
}

// poll returns up to n records of the partitions assigned to in; eof once
// every one of them is read to its end.
func (w *world) poll(in *simInst, n int) ([]Record, bool) {
	var recs []Record
	eof := true
	for _, p := range slices.Sorted(maps.Keys(in.assigned)) {
		for in.cursor[p] < w.source[p] && len(recs) < n {
			off := in.cursor[p]
			recs = append(recs, Record{Partition: p, Key: []byte(strconv.Itoa(off)), Next: strconv.Itoa(off + 1)})
			in.cursor[p]++
		}
		if in.cursor[p] < w.source[p] {
			eof = false
		}
	}
	if len(recs) > 0 {
		eof = false
	}
	return recs, eof
}

// down reports whether the database fails this operation.
func (w *world) down() bool {
	if w.store.down > 0 {
		w.store.down--
		return true
	}
	return false
}

// fault draws whether a participant refuses an operation (1 in 8).
func (w *world) fault(label string) bool {
	return w.faults && rapid.IntRange(0, 7).Draw(w.rt, label) == 7
}

var errDown = errors.New("connection refused")

// perform performs a reader action against the store and the source.
func (w *world) perform(in *simInst, a action) event {
	s := w.store
	switch a := a.(type) {
	case actWrite:
		if a.begin {
			if w.down() {
				return evWritten{n: a.n, beginErr: errDown}
			}
			c := &simCkpt{inst: in.id, n: a.n, positions: map[string]int{}, epochs: map[string]int{}, state: "open"}
			in.ckpts[a.n] = c
			s.ckpts = append(s.ckpts, c)
		}
		c := in.ckpts[a.n]
		if c.state != "open" && !c.marked {
			w.rt.Fatalf("i%d: write into checkpoint %d, %s", in.id, a.n, c.state)
		}
		if w.down() {
			return evWritten{n: a.n, err: errDown}
		}
		for _, r := range a.records {
			if _, ok := c.epochs[r.Partition]; !ok {
				c.epochs[r.Partition] = in.epochs[r.Partition]
			}
			c.recs = append(c.recs, r)
			next, _ := strconv.Atoi(r.Next)
			c.positions[r.Partition] = next
		}
		return evWritten{n: a.n}
	case actPreCommit:
		c := in.ckpts[a.n]
		if w.down() {
			return evPreCommitted{n: a.n, err: errDown}
		}
		if w.fault("refusePrepare") {
			c.state = "aborted"
			return evPreCommitted{n: a.n, err: &AbortError{Checkpoint: a.n, Reason: errors.New("prepare refused")}}
		}
		c.state = "prepared"
		return evPreCommitted{n: a.n}
	case actAbort:
		return evAborted{n: a.n, err: w.storeAbort(in, a.n)}
	case actPause:
		return evPaused{}
	case actAck:
		// An acknowledgement is a copy of the progress store: it never
		// runs ahead of the committed positions (and so of their rows).
		for _, p := range slices.Sorted(maps.Keys(a.positions)) {
			pos, err := strconv.Atoi(a.positions[p])
			if err != nil || pos > s.progress[p] {
				w.rt.Fatalf("i%d acknowledges %s at %q, its progress is %d; trace:\n%s", in.id, p, a.positions[p], s.progress[p], w.trace())
			}
		}
	case actRewind:
		if w.down() {
			return evRewound{err: errDown}
		}
		positions := map[string]string{}
		var lost []string
		for _, p := range a.parts {
			if s.owner[p] != in.id || s.epoch[p] != in.epochs[p] {
				lost = append(lost, p)
				continue
			}
			positions[p] = strconv.Itoa(s.progress[p])
		}
		return evRewound{positions: positions, lost: lost}
	case actSeek:
		for p, pos := range a.positions {
			in.cursor[p], _ = strconv.Atoi(pos)
		}
		return evSought{}
	case actTake:
		if w.down() {
			// The source has the handler take them again later.
			in.handlers = append(in.handlers, evAssigned{parts: a.parts})
			return evTaken{parts: a.parts, err: errDown}
		}
		for _, p := range a.parts {
			s.epoch[p]++
			s.owner[p] = in.id
			in.epochs[p] = s.epoch[p]
			w.restore(in.id, p)
			in.assigned[p] = true
			in.cursor[p] = s.progress[p]
		}
		return evTaken{parts: a.parts}
	case actRelease:
		for _, p := range a.parts {
			if s.owner[p] == in.id {
				s.owner[p] = 0
			}
			if w.group[p] == -1 {
				w.group[p] = 0
			}
		}
		return evReleased{}
	case actSweep:
		// Restore's sweep: the checkpoints of dead instances.
		for _, c := range s.ckpts {
			if w.insts[c.inst-1].dead {
				w.resolve(c)
			}
		}
	}
	return nil
}

// storeCommit decides checkpoint n and runs its phase two.
func (w *world) storeCommit(in *simInst, n uint64) error {
	c := in.ckpts[n]
	if w.down() {
		// Neither the decision nor the abort marker could be written.
		return fmt.Errorf("checkpoint %d: %w", n, ErrUnresolved)
	}
	if c.marked {
		c.state = "aborted"
		return &AbortError{Checkpoint: n, Reason: ErrAbortMarked}
	}
	if c.state != "prepared" {
		w.rt.Fatalf("i%d: commit of checkpoint %d, %s", in.id, n, c.state)
	}
	for p, e := range c.epochs {
		if w.store.epoch[p] != e {
			c.state = "aborted"
			return &AbortError{Checkpoint: n, Reason: ErrTakenOver}
		}
	}
	if w.fault("refuseDecision") {
		c.state = "aborted"
		return &AbortError{Checkpoint: n, Reason: errors.New("deadlock")}
	}
	c.state = "decided"
	if w.fault("loseReply") {
		// Decided, its reply lost, the marker refused (decided): the
		// sink could not tell; phase two is restore's.
		return fmt.Errorf("checkpoint %d: the reply was lost: %w", n, ErrUnresolved)
	}
	w.apply(c)
	return nil
}

// storeAbort rolls checkpoint n back.
func (w *world) storeAbort(in *simInst, n uint64) error {
	c := in.ckpts[n]
	switch c.state {
	case "decided", "done":
		w.rt.Fatalf("i%d: abort of checkpoint %d, %s", in.id, n, c.state)
	case "aborted":
		return nil
	}
	if w.down() {
		return errDown
	}
	c.state = "aborted"
	return nil
}

// restore resolves the checkpoints of other instances that touch p, as
// Take does.
func (w *world) restore(inst int, p string) {
	for _, c := range w.store.ckpts {
		if _, ok := c.positions[p]; ok && c.inst != inst {
			w.resolve(c)
		}
	}
}

// resolve: a decided checkpoint's phase two, or an abort marker (and a
// prepared one is rolled back; an open one is its session's, which the
// marker keeps from being decided).
func (w *world) resolve(c *simCkpt) {
	switch c.state {
	case "decided":
		w.apply(c)
	case "prepared":
		c.marked, c.state = true, "aborted"
	case "open":
		c.marked = true
	}
}

// apply is a checkpoint's phase two: its rows and its positions land
// together.
func (w *world) apply(c *simCkpt) {
	w.logf("i%d checkpoint %d lands %s", c.inst, c.n, formatRecords(c.recs))
	for _, r := range c.recs {
		off, _ := strconv.Atoi(string(r.Key))
		w.store.rows[r.Partition][off]++
	}
	maps.Copy(w.store.progress, c.positions)
	c.state = "done"
}

// accepted: every event the instances were fed was due (the Runner's
// loops send none out of turn).
func (w *world) accepted() {
	for _, in := range w.insts {
		if in.m.ignored > 0 {
			w.rt.Fatalf("i%d: %d events out of turn; trace:\n%s", in.id, in.m.ignored, w.trace())
		}
	}
}

// check: no record has two rows, and each partition's position is where
// its rows end.
func (w *world) check(when string) {
	for p, rows := range w.store.rows {
		pos := w.store.progress[p]
		for off := range w.source[p] {
			want := 0
			if off < pos {
				want = 1
			}
			if rows[off] != want {
				w.rt.Fatalf("%s: partition %s record %d has %d rows, its position is %d; trace:\n%s", when, p, off, rows[off], pos, w.trace())
			}
		}
	}
}
