package filelog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/xa"
)

// Errors. Test with errors.Is.
var (
	// ErrCorrupt is wrapped (by a *CorruptError naming the file and byte
	// offset) when the log is damaged beyond a torn tail.
	ErrCorrupt = errors.New("filelog: corrupt log")

	// ErrLocked: another Log, in this process or another, has the
	// directory open.
	ErrLocked = errors.New("filelog: log is in use")

	// ErrClosed: the Log has been closed.
	ErrClosed = errors.New("filelog: log closed")

	// ErrFailed: a write or sync failed earlier and the log has stopped
	// (fail-stop). Every later call fails; reopen the log to recover.
	ErrFailed = errors.New("filelog: log failed")
)

// DefaultSegmentSize is the segment size used when Options.SegmentSize is
// zero.
const DefaultSegmentSize = 4 << 20

// Options configure Open. The zero value is the production setting.
type Options struct {
	// SegmentSize is the size beyond which the active segment is closed
	// and a new one started (default DefaultSegmentSize). Records are
	// never split: a segment may exceed it by one group.
	SegmentSize int64

	// NoSync skips every fsync. For tests only: nothing is durable.
	NoSync bool

	// OnSync, if set, is called on the writer goroutine after each group
	// of appended records has been written and synced, with the group's
	// record count, byte count and the time the write and sync took. It
	// is not called for groups of forget records only, which are written
	// without a sync of their own, nor for the copies compaction writes.
	// It must return quickly and must not call the Log.
	OnSync func(records int, bytes int, d time.Duration)

	// Logger receives warnings (a torn tail cut off, a failure) and
	// compaction notes. Nil discards them.
	Logger *slog.Logger

	// fs replaces the file system, for fault injection in tests.
	fs fileSystem
}

// Log is an open decision log. Its methods are safe for concurrent use.
type Log struct {
	dir    string
	opts   Options
	logger *slog.Logger
	fs     fileSystem
	lock   *os.File

	kick    chan struct{} // wakes the writer; capacity 1
	stopped chan struct{} // closed when the writer has returned

	mu      sync.Mutex
	st      state
	first   uint64 // oldest segment on disk
	queue   []*op  // appended, not yet written
	waiting *group // the callers of the durable records in queue, if any
	failed  error  // set once, wraps ErrFailed
	closed  bool

	// Owned by the writer goroutine once it runs.
	active     file
	activeNum  uint64
	activeSize int64 // end of the records in the active segment
	allocated  int64 // size of the active segment file (preallocated)
	dirty      bool  // the active segment holds unsynced (forget) records
	buf        []byte
	spare      []*op

	syncs atomic.Int64
}

// op is one record on its way to disk.
type op struct {
	t     RecordType
	d     decoded
	frame []byte
}

// group is the callers waiting for one group of records to be durable. The
// writer sets err, then closes done.
type group struct {
	done chan struct{}
	err  error
}

func (g *group) finish(err error) {
	if g != nil {
		g.err = err
		close(g.done)
	}
}

var _ xa.DecisionLog = (*Log)(nil)

// Open opens the log in dir, creating dir if it is missing, and replays it.
//
// It takes an exclusive lock on dir/LOCK for as long as the Log is open; a
// second Open of the same directory, from this process or another, fails
// with an error wrapping ErrLocked.
//
// Replay reads every segment in order. A torn tail (an incomplete, zeroed
// or bad-checksum record at the end of the last segment with no valid
// record after it: a write that was cut short and never acknowledged, or
// unused preallocated space) is cut off, with a message on the logger.
// Anything else that is bad (a bad record followed by a valid one, a bad
// record in any segment but the last, a bad segment header, a missing
// segment) is corruption: Open returns an error wrapping ErrCorrupt that
// names the file and offset, and modifies no file but the lock file.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	l := &Log{
		dir:     dir,
		opts:    opts,
		logger:  opts.Logger,
		fs:      opts.fs,
		kick:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		st:      newState(),
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if l.fs == nil {
		l.fs = osFS{}
	}
	if err := l.makeDir(); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	if err := l.recover(); err != nil {
		lock.Close()
		return nil, err
	}
	recordHolder(lock)
	go l.run()
	return l, nil
}

func (l *Log) makeDir() error {
	if _, err := os.Stat(l.dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("filelog: creating %s: %w", l.dir, err)
	}
	if l.opts.NoSync {
		return nil
	}
	if err := l.fs.SyncDir(filepath.Dir(filepath.Clean(l.dir))); err != nil {
		return fmt.Errorf("filelog: syncing parent of %s: %w", l.dir, err)
	}
	return nil
}

// recover replays the segments, repairs a torn tail and opens the active
// segment.
func (l *Log) recover() error {
	res, err := scanLog(l.dir, func(seg uint64, _ string, _ int64, t RecordType, d decoded, frame []byte) error {
		if t == RecordCommit || t == RecordHeuristic {
			frame = slices.Clone(frame)
		}
		l.st.apply(t, &d, frame, seg)
		return nil
	})
	if err != nil {
		return err
	}
	if err := res.firstCorruption(); err != nil {
		return err
	}
	// The log is sound. From here on files may change.
	for _, name := range res.tmpFiles {
		if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
			return fmt.Errorf("filelog: removing leftover %s: %w", name, err)
		}
	}
	if len(res.segments) == 0 {
		f, err := l.createSegment(1)
		if err != nil {
			return err
		}
		l.first, l.active, l.activeNum, l.activeSize, l.allocated = 1, f, 1, headerSize, headerSize
		l.st.seg(1).size = headerSize
		return nil
	}
	for _, s := range res.segments {
		l.st.seg(s.num).size = s.end
	}
	last := res.segments[len(res.segments)-1]
	f, err := l.fs.OpenFile(filepath.Join(l.dir, last.name), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("filelog: opening active segment: %w", err)
	}
	if t := res.torn; t != nil {
		if t.Reason == reasonZeroTail {
			// Space preallocated and not written when the process
			// stopped without Close.
			l.logger.Info("decision log: trimming unused preallocated space", "file", t.File, "offset", t.Offset, "bytes", t.Bytes)
		} else {
			l.logger.Warn("decision log: cutting off torn tail", "file", t.File, "offset", t.Offset, "bytes", t.Bytes, "reason", t.Reason)
		}
		err := f.Truncate(t.Offset)
		if err == nil && !l.opts.NoSync {
			err = f.Sync() // fdatasync covers a new size
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("filelog: cutting torn tail of %s at offset %d: %w", t.File, t.Offset, err)
		}
	}
	l.first = res.segments[0].num
	l.active, l.activeNum, l.activeSize, l.allocated = f, last.num, last.end, last.end
	l.logger.Debug("decision log opened", "dir", l.dir, "segments", len(res.segments),
		"commits", len(l.st.commits), "heuristics", len(l.st.heuristics))
	return nil
}

// createSegment creates segment n durably: header written and synced under
// a temporary name, renamed, directory synced.
func (l *Log) createSegment(n uint64) (file, error) {
	final := filepath.Join(l.dir, segmentName(n))
	tmp := final + ".tmp"
	f, err := l.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filelog: creating segment: %w", err)
	}
	fail := func(err error) (file, error) {
		f.Close()
		l.fs.Remove(tmp)
		return nil, fmt.Errorf("filelog: creating segment %s: %w", segmentName(n), err)
	}
	if _, err := f.WriteAt(appendHeader(nil, n), 0); err != nil {
		return fail(err)
	}
	if !l.opts.NoSync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := l.fs.Rename(tmp, final); err != nil {
		return fail(err)
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(l.dir); err != nil {
			// The rename may or may not be durable: stop.
			f.Close()
			return nil, fmt.Errorf("filelog: syncing directory after creating %s: %w", segmentName(n), err)
		}
	}
	return f, nil
}

// LogCommit appends rec and returns nil once it is durable: written and
// fdatasync'ed together with whatever other records were pending (group
// commit). Until then it is invisible to Lookup and Commits. Logging an ID
// again replaces its record.
//
// If ctx ends first, LogCommit returns an error wrapping ctx.Err() and
// xa.ErrOutcomeUnknown: the record was queued and may still become
// durable. The same holds for every other error once the record was queued
// (a failed write or sync stops the log, see ErrFailed). Only when ctx is
// already done on entry, or the record does not survive an encode and
// decode round trip, is it known not to be logged.
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
	return l.appendDurable(ctx, RecordCommit, payload, decoded{id: check.ID, key: commitKey(payload, check.ID)})
}

// LogHeuristic appends h and returns once it is durable, like LogCommit.
// The record is kept, across compaction and restarts, until ClearHeuristic
// names its XID.
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
	return l.appendDurable(ctx, RecordHeuristic, payload, d)
}

// ClearHeuristic drops every heuristic record of x and returns once that is
// durable, like LogCommit.
func (l *Log) ClearHeuristic(ctx context.Context, x xa.XID) error {
	if err := x.Validate(); err != nil {
		return fmt.Errorf("filelog: clear heuristic: %w", err)
	}
	k := x.String()
	return l.appendDurable(ctx, RecordClear, []byte(k), decoded{xid: x, key: k})
}

// appendDurable queues a record (payload, and what the state needs of it in
// d) and waits until it is durable or ctx ends.
func (l *Log) appendDurable(ctx context.Context, t RecordType, payload []byte, d decoded) error {
	if len(payload) > maxPayload {
		return fmt.Errorf("filelog: %v %s: record of %d bytes exceeds the limit of %d", t, d.key, len(payload), maxPayload)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filelog: %v %s not logged: %w", t, d.key, err)
	}
	o := &op{t: t, d: d, frame: appendFrame(nil, t, payload)}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, o)
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
			return fmt.Errorf("filelog: %v %s: %w", t, d.key, g.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("filelog: %v %s: %w (the record may still become durable): %w", t, d.key, xa.ErrOutcomeUnknown, ctx.Err())
	}
}

// Forget drops the commit record of id. It queues a forget record and
// returns without waiting for it to be written; the writer writes it with
// the next group, without a sync of its own, and the next sync (of a later
// group, a rotation or Close) makes it durable. Lookup and Commits stop
// showing id at once. After a crash a forgotten record may come back
// (presumed abort allows this: recovery resolves and forgets it again).
func (l *Log) Forget(ctx context.Context, id xa.GlobalID) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("filelog: forget %v: %w", id, err)
	}
	if id.IsZero() {
		return errors.New("filelog: forget: zero global id")
	}
	k := id.String()
	o := &op{t: RecordForget, d: decoded{id: id, key: k}, frame: appendFrame(nil, RecordForget, []byte(k))}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.st.forget(k)
	l.queue = append(l.queue, o)
	l.mu.Unlock()
	l.wake()
	return nil
}

// Lookup returns the live commit record of id, if there is one.
func (l *Log) Lookup(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return xa.CommitRecord{}, false, err
	}
	k := id.String()
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return xa.CommitRecord{}, false, err
	}
	r := l.st.commits[k]
	l.mu.Unlock()
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return nil, err
	}
	live := l.st.liveCommits()
	l.mu.Unlock()
	return commitList(live) // frames never change: decode without the lock
}

// Heuristics returns the heuristic records not cleared, oldest first:
// ordered by Time, then XID, then RM.
func (l *Log) Heuristics(ctx context.Context) ([]xa.HeuristicRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return nil, err
	}
	return l.st.heuristicList(), nil
}

// SyncCount returns how many groups the log has written and synced since
// Open (with NoSync: would have synced).
func (l *Log) SyncCount() int64 { return l.syncs.Load() }

// Close writes what is queued (forget records included), stops the writer
// goroutine, closes the files and releases the lock. It returns the error
// that stopped the log, if one did. Calls after Close fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	l.wake()
	<-l.stopped
	var errs []error
	l.mu.Lock()
	if l.failed != nil {
		errs = append(errs, l.failed)
	}
	l.mu.Unlock()
	if l.active != nil {
		if err := l.active.Close(); err != nil {
			errs = append(errs, fmt.Errorf("filelog: closing active segment: %w", err))
		}
	}
	if err := l.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("filelog: releasing lock: %w", err))
	}
	return errors.Join(errs...)
}

// usable returns why the log takes no more calls; l.mu is held.
func (l *Log) usable() error {
	if l.failed != nil {
		return l.failed
	}
	if l.closed {
		return ErrClosed
	}
	return nil
}

func (l *Log) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run is the writer goroutine: it takes every queued record, writes them
// with one write and one sync, makes them visible, wakes their callers, and
// rotates and compacts segments. It returns on Close, once the queue is
// empty, or when a write or sync fails.
func (l *Log) run() {
	defer close(l.stopped)
	for range l.kick {
		for {
			l.mu.Lock()
			batch, g := l.queue, l.waiting
			l.queue, l.waiting = l.spare[:0], nil
			closing := l.closed
			l.mu.Unlock()
			if len(batch) == 0 {
				l.spare = batch
				if closing {
					l.syncAtClose()
					return
				}
				break
			}
			if err := l.writeGroup(batch, g); err != nil {
				l.fail(err, g)
				return
			}
			clear(batch)
			l.spare = batch[:0]
			if l.activeSize > l.opts.SegmentSize {
				if err := l.rotate(); err != nil {
					l.fail(err, nil)
					return
				}
			}
		}
	}
}

// writeGroup writes batch with one write and, unless it holds only forget
// records (which need not be durable; the next sync covers them), one sync;
// then it wakes g, the callers waiting for it.
func (l *Log) writeGroup(batch []*op, g *group) error {
	l.buf = l.buf[:0]
	durable := false
	for _, o := range batch {
		l.buf = append(l.buf, o.frame...)
		durable = durable || o.t != RecordForget
	}
	start := time.Now()
	if err := l.append(l.buf); err != nil {
		return err
	}
	if durable {
		if err := l.sync(); err != nil {
			return err
		}
		l.syncs.Add(1)
	}
	d := time.Since(start)
	l.mu.Lock()
	for _, o := range batch {
		l.st.apply(o.t, &o.d, o.frame, l.activeNum)
	}
	l.st.seg(l.activeNum).size += int64(len(l.buf))
	l.mu.Unlock()
	g.finish(nil)
	if durable && l.opts.OnSync != nil {
		l.opts.OnSync(len(batch), len(l.buf), d)
	}
	if cap(l.buf) > 1<<20 {
		l.buf = nil
	}
	return nil
}

// append writes b after the records of the active segment, unsynced.
//
// Ahead of the records, the segment is filled with zeros a chunk at a time
// (preallocation). A sync after an overwrite of written blocks carries no
// metadata, where one after an append must also record the new size and the
// new blocks; on ext4 this makes group syncs markedly cheaper. Replay takes
// zeros after the last record for unused space.
func (l *Log) append(b []byte) error {
	name := segmentName(l.activeNum)
	off := l.activeSize
	end := off + int64(len(b))
	if _, err := l.active.WriteAt(b, off); err != nil {
		return fmt.Errorf("writing %s at offset %d: %w", name, off, err)
	}
	l.activeSize = end
	l.dirty = true
	if end > l.allocated {
		l.allocated = end
		if fill := min(zeroChunk, l.opts.SegmentSize-end); fill > 0 {
			if _, err := l.active.WriteAt(zeros()[:fill], end); err != nil {
				return fmt.Errorf("preallocating %s at offset %d: %w", name, end, err)
			}
			l.allocated = end + fill
		}
	}
	return nil
}

// zeroChunk is how much of a segment is preallocated at a time.
const zeroChunk = 1 << 20

var zeros = sync.OnceValue(func() []byte { return make([]byte, zeroChunk) })

// trim cuts the active segment's unused preallocated space and makes the
// segment durable (fsync), so that a closed segment ends at its last
// record.
func (l *Log) trim() error {
	if l.allocated <= l.activeSize {
		if l.dirty {
			return l.sync()
		}
		return nil
	}
	if err := l.active.Truncate(l.activeSize); err != nil {
		return fmt.Errorf("trimming %s to %d bytes: %w", segmentName(l.activeNum), l.activeSize, err)
	}
	l.allocated = l.activeSize
	return l.sync() // fdatasync covers a new size
}

// sync makes everything written to the active segment durable. A failed
// sync leaves the page cache in an unknown state: the caller stops the log
// and the sync is never retried.
func (l *Log) sync() error {
	if !l.opts.NoSync {
		if err := l.active.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", segmentName(l.activeNum), err)
		}
	}
	l.dirty = false
	return nil
}

// syncAtClose trims preallocated space and syncs forget records written
// since the last sync, so that a cleanly closed log comes back as it was.
func (l *Log) syncAtClose() {
	if err := l.trim(); err != nil {
		l.mu.Lock()
		l.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		l.mu.Unlock()
	}
}

// fail stops the log after a failed write or sync: the callers of the
// group in flight (whose fate is unknown), those queued behind it, and every
// later call get an error.
func (l *Log) fail(err error, inFlight *group) {
	l.mu.Lock()
	l.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	failed := l.failed
	queued := l.waiting
	l.queue, l.waiting = nil, nil
	l.mu.Unlock()
	l.logger.Error("decision log failed; it refuses all further calls until reopened", "dir", l.dir, "err", err)
	inFlight.finish(fmt.Errorf("%w: %w", xa.ErrOutcomeUnknown, failed))
	queued.finish(failed)
}
