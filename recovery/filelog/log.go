package filelog

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/xa"
)

// Errors. Test with errors.Is.
var (
	// ErrCorrupt is wrapped (by a *CorruptError naming the file and byte
	// offset) when the log is damaged beyond a torn tail, including a
	// missing or damaged IDENTITY in a directory that holds segments.
	ErrCorrupt = errors.New("filelog: corrupt log")

	// ErrLocked: another Log, in this process or another, has the
	// directory open.
	ErrLocked = errors.New("filelog: log is in use")

	// ErrClosed: the Log has been closed.
	ErrClosed = errors.New("filelog: log closed")

	// ErrFailed: a write or sync failed earlier and the log has stopped
	// (fail-stop). Every later call fails; reopen the log to recover.
	ErrFailed = errors.New("filelog: log failed")

	// ErrNoLog: the directory holds no log (no IDENTITY and no segment),
	// or does not exist (the error then wraps fs.ErrNotExist too). Open
	// never creates a log; Create does.
	ErrNoLog = errors.New("filelog: no decision log")

	// ErrExist: Create was given a directory that holds a log already.
	ErrExist = errors.New("filelog: a decision log exists already")

	// ErrRetained: ForgetAbort was refused because the abort record is
	// younger than xa.AbortRetention by the log's clock. The record stays.
	ErrRetained = errors.New("filelog: abort record still within its retention")

	// ErrReadOnly: a write to a Snapshot.
	ErrReadOnly = errors.New("filelog: read-only snapshot of the decision log")
)

// DefaultSegmentSize is the segment size used when Options.SegmentSize is
// zero.
const DefaultSegmentSize = 4 << 20

// Options configure Create and Open. The zero value is the production
// setting.
type Options struct {
	// SegmentSize is the size beyond which the active segment is closed
	// and a new one started (default DefaultSegmentSize). Records are
	// never split: a segment may exceed it by one group.
	SegmentSize int64

	// NoSync skips every fsync. For tests only: nothing is durable, and the
	// sync marks say that what was written was synced.
	NoSync bool

	// Now is the log's clock (default time.Now). LogCommit refuses a
	// decision past its transaction's Begin + Timeout by it, LogAbort and
	// LogDelegation stamp their records with it, and ForgetAbort measures
	// retention with it. The coordinator runs in the process that has the
	// log open, so this is the coordinator's clock. Tests may set it.
	Now func() time.Time

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

	// gatherQuiet and gatherMax replace gatherQuietDefault and the
	// half of the last sync (see gathering), noGather turns the
	// gathering off: for tests.
	gatherQuiet, gatherMax time.Duration
	noGather               bool
}

// Log is an open decision log. Its methods are safe for concurrent use.
type Log struct {
	dir    string
	opts   Options
	ident  xa.LogIdentity
	now    func() time.Time
	logger *slog.Logger
	fs     fileSystem
	lock   *os.File

	kick    chan struct{} // wakes the writer; capacity 1
	stopped chan struct{} // closed when the writer has returned

	// identMu serialises LogParticipant and LogDelegation (see there).
	identMu sync.Mutex
	mu      sync.Mutex
	st      state
	first   uint64 // oldest segment on disk
	head    Head   // what HEAD says; written by Create, Open and the writer
	queue   []*op  // appended, not yet written
	// pending counts the commit and abort records by global id that are
	// queued or being written: not yet applied to st. The fence checks
	// them together with st.
	pending map[string]pend
	// queuedDurable counts the records in queue that must be durable.
	queuedDurable int
	waiting       *group // the callers of the durable records in queue, if any
	failed        error  // set once, wraps ErrFailed
	closed        bool

	// Owned by the writer goroutine once it runs.
	active file
	// slotFiles are the active segment again, one descriptor for each
	// sync slot but the first, which syncs through active (see run).
	slotFiles  [maxSyncs - 1]file
	activeNum  uint64
	activeSize int64  // end of the records in the active segment
	allocated  int64  // size of the active segment file (preallocated)
	writes     uint64 // writes to the active segment so far
	// syncedWrites is how many of them a sync that succeeded covered:
	// fewer than writes when forget records were written since.
	syncedWrites uint64
	// activeVersion is the active segment's format version: sync marks
	// are written to segments of formatVersion only.
	activeVersion uint32
	// durable is the end of what the syncs that succeeded made durable
	// in the active segment; marked is the offset the last sync mark
	// written to it gives. A batch written when durable > marked starts
	// with a sync mark for durable.
	durable, marked int64
	buf             []byte
	spares          [][]*op        // queue slices to reuse
	written         []*batch       // written and not acknowledged, in order
	busy            [maxSyncs]bool // sync slots with a sync in flight
	synced          chan syncResult
	rotating        bool // the active segment is full: rotate once written is empty
	gather          gathering

	syncs atomic.Int64
}

// pend counts the records of one global id on their way to disk.
type pend struct{ commits, aborts int }

// op is one record on its way to disk. Commit, forget and forget-abort
// records, the ones of every decision, need only their key; the rare kinds
// carry their decoded form in d.
type op struct {
	t     RecordType
	key   string   // decoded.key
	d     *decoded // nil for commit, forget and forget-abort records
	frame []byte   // nil for forget and forget-abort records: the writer frames their key
}

// apply applies o to st, as written to segment seg.
func (o *op) apply(st *state, seg uint64) {
	if o.d != nil {
		st.apply(o.t, o.d, o.frame, seg)
		return
	}
	st.applyKeyed(o.t, o.key, o.frame, seg)
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

var _ xa.RecoveryLog = (*Log)(nil)

func newLog(dir string, opts Options) *Log {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	l := &Log{
		dir:     dir,
		opts:    opts,
		now:     opts.Now,
		logger:  opts.Logger,
		fs:      opts.fs,
		kick:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		synced:  make(chan syncResult, maxSyncs),
		gather:  gathering{timer: time.NewTimer(time.Hour)},
		st:      newState(),
		pending: make(map[string]pend),
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if l.fs == nil {
		l.fs = osFS{}
	}
	return l
}

// Create creates a new, empty log with identity ident in dir, creating dir
// if it is missing, and opens it. It fails with an error wrapping ErrExist
// when dir holds a log already (an IDENTITY or any segment file).
//
// The first segment is made durable first, then HEAD, then IDENTITY (each
// written to a temporary file, synced, renamed, directory synced): a log
// exists once its IDENTITY does. A Create interrupted before that leaves a
// single empty segment (and perhaps HEAD) and no IDENTITY; Open refuses
// that directory, and Create takes it over, since a segment without a
// single record holds no decision.
func Create(dir string, ident xa.LogIdentity, opts Options) (*Log, error) {
	idBytes, err := ident.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("filelog: create: %w", err)
	}
	// The identity as it reads back from disk, so that Identity() is the
	// same before and after a reopen.
	var stored xa.LogIdentity
	if err := stored.UnmarshalBinary(idBytes); err != nil {
		return nil, fmt.Errorf("filelog: create: the identity does not read back: %w", err)
	}
	l := newLog(dir, opts)
	if err := l.makeDir(); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Log, error) {
		lock.Close()
		return nil, err
	}
	if err := checkNoLog(dir); err != nil {
		return fail(err)
	}
	_, tmp, err := listSegments(dir)
	if err != nil {
		return fail(err)
	}
	for _, name := range tmp {
		if err := l.fs.Remove(filepath.Join(dir, name)); err != nil {
			return fail(fmt.Errorf("filelog: removing leftover %s: %w", name, err))
		}
	}
	f, err := l.createSegment(1, nil)
	if err != nil {
		return fail(err)
	}
	if err := l.writeHead(Head{Newest: 1, First: 1}); err != nil {
		f.Close()
		return fail(err)
	}
	if err := l.writeIdentity(idBytes); err != nil {
		f.Close()
		return fail(err)
	}
	l.ident = stored
	l.first, l.active, l.activeNum, l.activeSize, l.allocated = 1, f, 1, headerSize, headerSize
	l.activeVersion, l.durable, l.marked = formatVersion, headerSize, headerSize
	if err := l.openSlots(); err != nil {
		f.Close()
		return fail(err)
	}
	l.st.seg(1).size = headerSize
	l.lock = lock
	recordHolder(lock)
	l.logger.Info("decision log created", "dir", dir, "id", stored.ID, "node", stored.Node,
		"timeout", stored.Timeout, "grace", stored.Grace)
	go l.run()
	return l, nil
}

// checkNoLog returns an error wrapping ErrExist when dir holds a log: an
// IDENTITY, or any segment but the single empty first segment that an
// interrupted Create leaves.
func checkNoLog(dir string) error {
	if _, err := os.Lstat(filepath.Join(dir, identityName)); err == nil {
		return fmt.Errorf("%w: %s holds %s", ErrExist, dir, identityName)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("filelog: %w", err)
	}
	nums, _, err := listSegments(dir)
	if err != nil {
		return err
	}
	if len(nums) == 1 && nums[0] == 1 {
		b, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
		if err == nil && len(b) == headerSize && checkHeader(b, 1) == "" {
			return nil // left by an interrupted Create: no record in it
		}
	}
	if len(nums) > 0 {
		return fmt.Errorf("%w: %s holds %d segment files but no %s (a damaged log, or one from before identities); "+
			"it is not replaced", ErrExist, dir, len(nums), identityName)
	}
	return nil
}

// writeIdentity writes IDENTITY durably.
func (l *Log) writeIdentity(id []byte) error {
	return l.replaceFile(identityName, appendIdentity(nil, id))
}

// writeHead writes HEAD durably, and remembers what it says.
func (l *Log) writeHead(h Head) error {
	if err := l.replaceFile(headName, appendHead(nil, h)); err != nil {
		return err
	}
	l.mu.Lock()
	l.head = h
	l.mu.Unlock()
	return nil
}

// replaceFile writes the file name in the log directory durably, replacing
// it whole: to a temporary file, synced, renamed, directory synced.
func (l *Log) replaceFile(name string, content []byte) error {
	final := filepath.Join(l.dir, name)
	tmp := final + ".tmp"
	f, err := l.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("filelog: creating %s: %w", name, err)
	}
	_, err = f.WriteAt(content, 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, final)
	}
	if err != nil {
		l.fs.Remove(tmp)
		return fmt.Errorf("filelog: writing %s: %w", name, err)
	}
	if !l.opts.NoSync {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("filelog: syncing directory after writing %s: %w", name, err)
		}
	}
	return nil
}

// Open opens the log in dir and replays it. It creates nothing: a missing
// directory, or one without IDENTITY and segments, fails with an error
// wrapping ErrNoLog (and fs.ErrNotExist when dir is missing); a directory
// with segments but no IDENTITY, or with a damaged one, fails with
// ErrCorrupt. Create makes a log.
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
// segment, a segment shorter or longer than the link record of the next
// one says, a newest segment older than HEAD names) is corruption: Open
// returns an error wrapping ErrCorrupt that names the file and offset, and
// modifies no file but the lock file.
//
// A sound log whose HEAD lags behind its newest segment (a crash between
// starting a segment and writing HEAD), or that has no HEAD (a log of
// segment format version 2), gets an up-to-date HEAD.
func Open(dir string, opts Options) (*Log, error) {
	if err := statLogDir(dir); err != nil {
		return nil, err
	}
	// Refuse a directory without a log before the lock file is made.
	if _, err := os.Lstat(filepath.Join(dir, identityName)); errors.Is(err, fs.ErrNotExist) {
		rp, err := replayLog(dir, nil)
		if err == nil {
			err = rp.res.firstCorruption()
		}
		if err == nil { // not reached: replayLog reports the missing identity
			err = noLogError(dir, nil)
		}
		return nil, err
	}
	l := newLog(dir, opts)
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
	rp, err := replayLog(l.dir, nil)
	if err != nil {
		return err
	}
	if err := rp.res.firstCorruption(); err != nil {
		return err
	}
	// The log is sound (an identity, at least one segment). From here on
	// files may change.
	res := rp.res
	l.ident, l.st = rp.ident, rp.st
	for _, name := range res.tmpFiles {
		if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
			return fmt.Errorf("filelog: removing leftover %s: %w", name, err)
		}
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
	} else if !l.opts.NoSync {
		// What replay read may be in the page cache only (a process
		// that died between a write and its sync): make it durable
		// before recovery acts on it, and before a sync mark says so.
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("filelog: syncing %s: %w", last.name, err)
		}
	}
	l.first = res.segments[0].num
	l.active, l.activeNum, l.activeSize, l.allocated = f, last.num, last.end, last.end
	// The first batch written says that all of it is durable, unless a
	// sync mark says so already (a log closed cleanly) or it holds only
	// what was synced before the segment got its name.
	start := int64(headerSize)
	if last.linked {
		start += frameHeader + linkPayload
	}
	l.activeVersion, l.durable, l.marked = last.version, last.end, max(last.marked, start)
	if err := l.openSlots(); err != nil {
		f.Close()
		return err
	}
	if rp.head != nil {
		l.head = *rp.head
	}
	if rp.head == nil || rp.head.Newest < last.num {
		h := Head{Newest: last.num, First: l.first}
		if rp.head != nil {
			h.First = rp.head.First
		}
		if err := l.writeHead(h); err != nil {
			f.Close()
			l.closeSlots()
			return err
		}
		l.logger.Info("decision log: HEAD brought up to date", "newest", h.Newest, "first", h.First, "had_head", rp.head != nil)
	}
	l.logger.Debug("decision log opened", "dir", l.dir, "id", l.ident.ID, "segments", len(res.segments),
		"commits", len(l.st.commits), "aborts", len(l.st.aborts), "heuristics", l.st.heuristicCount())
	return nil
}

// createSegment creates segment n durably: header and, unless n is the
// first segment, the link record to the previous one (lk) written and
// synced under a temporary name, renamed, directory synced.
func (l *Log) createSegment(n uint64, lk *Link) (file, error) {
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
	b := appendHeader(nil, n)
	if lk != nil {
		b = appendFrame(b, RecordLink, encodeLink(*lk))
	}
	if _, err := f.WriteAt(b, 0); err != nil {
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

// openSlots opens the active segment again for each sync slot but the
// first. On an error it closes those it opened.
func (l *Log) openSlots() error {
	for i := range l.slotFiles {
		f, err := l.fs.OpenFile(filepath.Join(l.dir, segmentName(l.activeNum)), os.O_WRONLY, 0)
		if err != nil {
			l.closeSlots()
			return fmt.Errorf("filelog: opening %s: %w", segmentName(l.activeNum), err)
		}
		l.slotFiles[i] = f
	}
	return nil
}

// closeSlots closes the descriptors of openSlots. They are only synced
// through: a close error loses nothing (the active descriptor's Close
// reports).
func (l *Log) closeSlots() {
	for i, f := range l.slotFiles {
		if f != nil {
			f.Close() //nolint:errcheck // see above
			l.slotFiles[i] = nil
		}
	}
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
	l.closeSlots()
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

// run is the writer goroutine. It takes the queued records as a batch,
// writes them after the active segment's records with one write, and
// starts the batch's sync on a goroutine of its own; while that sync runs
// it takes, writes and starts the sync of the next batch (once it holds
// overlapMin records and as many as the batch syncing: see overlapLeast),
// so that up to maxSyncs syncs are in flight (pipelined
// group commit: the callers woken by one sync find the next batch being
// written, not a sync to wait out).
// A batch is acknowledged (applied to the state, its callers woken) once
// its own sync and those of every batch written before it have succeeded,
// in the order they were written. A batch of forget records only is written
// without a sync of its own, and acknowledged in its turn. When a sync
// returns with no other in flight, the next batch waits briefly for the
// callers it woke (see gathering).
//
// Each sync slot syncs through a file descriptor of its own (see
// syncFile): Linux reports a writeback error once per open file, to the
// first fsync on it that looks, so of two concurrent syncs through one
// descriptor the one that did not cover the failed pages could report the
// error while the one that did reports success. With a descriptor each,
// every sync that waited for the failed pages reports the failure, and the
// log stops (fail-stop) before any batch it covers is acknowledged.
//
// run rotates and compacts segments once every batch written to the full
// segment is acknowledged. It returns on Close, once the queue is empty and
// every batch acknowledged, or when a write or sync fails (after the syncs
// in flight have returned).
func (l *Log) run() {
	defer close(l.stopped)
	defer l.gather.timer.Stop()
	for {
		closing := false
		for !l.rotating {
			slot := l.freeSlot()
			if slot < 0 {
				break
			}
			least := 0
			if l.syncing() {
				least = l.overlapLeast()
			} else if l.gather.want > 0 {
				least = gatherLeast
			}
			took, c, err := l.writeNext(slot, least)
			closing = c
			if err != nil {
				l.fail(err)
				return
			}
			if !took {
				break
			}
		}
		if l.rotating && len(l.written) == 0 {
			l.rotating = false
			if err := l.rotate(); err != nil {
				l.fail(err)
				return
			}
			continue
		}
		if closing && len(l.written) == 0 && !l.rotating {
			l.syncAtClose()
			return
		}
		var expired <-chan time.Time
		if l.gather.want > 0 && !l.syncing() && l.hasDurableQueued() {
			// Records that must be durable wait for the gathering to
			// end. (The first of them wakes the writer by itself;
			// forget records wake no one and wait for the next group,
			// as they would without a gathering.)
			l.gather.timer.Reset(time.Until(l.gather.until()))
			expired = l.gather.timer.C
		}
		select {
		case <-expired:
		case <-l.kick:
		case r := <-l.synced:
			if err := l.syncDone(r); err != nil {
				l.fail(err)
				return
			}
		}
	}
}

// hasDurableQueued reports whether records that must be durable are
// queued.
func (l *Log) hasDurableQueued() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queuedDurable > 0
}

// maxSyncs is how many batches may be syncing at once.
const maxSyncs = 2

// batch is records written together, waiting for their sync.
type batch struct {
	ops     []*op
	g       *group // their callers (nil for forget records only)
	bytes   int
	durable bool      // holds a record that must be synced
	records int       // how many of its records must be synced
	synced  bool      // its sync succeeded (or it needs none)
	start   time.Time // when its write began
}

// syncResult is the outcome of the sync of batch b in slot slot; covers is
// the count of writes it covers, upto the end of the bytes they wrote.
type syncResult struct {
	b      *batch
	slot   int
	covers uint64
	upto   int64
	err    error
	took   time.Duration
}

// gathering is the writer's wait, after a sync returned with no other in
// flight, for the callers that sync woke to queue their next records, so
// that they share the next sync instead of splitting into two groups that
// take turns. A sync costs about the same whatever it carries, and with
// none in flight the disk waits anyway: a group that every caller joins
// needs half the syncs. Without the wait, callers that come back at once
// find the first of them already syncing alone, and a steady stream of
// writers settles into two alternating groups of half its size (16
// writers: 8 records per sync; with the wait, about 14).
//
// The wait is short and ends early: as soon as the queue holds as many
// durable records as the sync acknowledged plus those queued when it
// returned (every caller back), when no record has arrived for the quiet
// time (gatherQuietDefault: callers that take longer to come back, such
// as a transaction manager's, which goes on to phase 2, are not waited
// for), or at half the duration of the sync that returned (at most
// gatherMaxCap). Groups of fewer than gatherFewest records start none:
// a lone writer never waits. Close does not wait.
type gathering struct {
	want  int       // durable records to wait for; 0: no wait
	begun time.Time // when the wait began
	last  time.Time // when the queue last grew during it
	seen  int       // the durable records queued then
	quiet time.Duration
	max   time.Duration
	timer *time.Timer // wakes the writer at until; owned by it
}

// gatherLeast, as writeNext's least, stands for what l.gather waits for.
const gatherLeast = -1

// gatherFewest is the smallest group (records acknowledged plus queued)
// after which the writer waits for its callers to come back.
const gatherFewest = 4

// gatherQuietDefault ends the wait when no record has arrived for this
// long; gatherMaxCap bounds the wait whatever the sync took.
const (
	gatherQuietDefault = 50 * time.Microsecond
	gatherMaxCap       = time.Millisecond
)

// start begins a wait after a sync that took took returned, acknowledging
// acked durable records, with queued durable records in the queue.
func (g *gathering) start(acked, queued int, now time.Time, took time.Duration, o *Options) {
	g.want = 0
	if o.noGather || acked+queued < gatherFewest {
		return
	}
	g.want, g.begun, g.last, g.seen = acked+queued, now, now, queued
	g.quiet, g.max = gatherQuietDefault, min(took/2, gatherMaxCap)
	if o.gatherQuiet > 0 {
		g.quiet = o.gatherQuiet
	}
	if o.gatherMax > 0 {
		g.max = o.gatherMax
	}
}

// least returns how many durable records the queue, holding queued now,
// must hold for the next batch to be written: 0 once the wait is over.
func (g *gathering) least(queued int, now time.Time) int {
	if g.want == 0 {
		return 0
	}
	// Over if the quiet time passed before this look, whatever arrived
	// since: an arrival after it does not start the wait again.
	if !now.Before(g.until()) {
		g.want = 0
		return 0
	}
	if queued > g.seen {
		g.seen, g.last = queued, now
	}
	if queued >= g.want {
		g.want = 0
	}
	return g.want
}

// until returns when the wait ends if no record arrives before.
func (g *gathering) until() time.Time {
	u := g.last.Add(g.quiet)
	if m := g.begun.Add(g.max); m.Before(u) {
		return m
	}
	return u
}

// overlapMin is the fewest records that must be durable the queue must
// hold to be written and synced while another batch syncs (see
// overlapLeast for the rule); fewer wait for that sync to end, and more
// records with them. A sync costs about the same whatever it carries (on
// the machine this was measured on, 150-190 µs of CPU in the kernel
// besides its wait), and two syncs of one file do not overlap on the
// device: the second waits for the first. A small batch synced beside
// another gains its callers little and delays every record queued behind
// it by a whole sync. Measured with BenchmarkLogCommit (internal/lab/
// logbench) on that machine, 64 writers did 25-52k decisions/s with 4
// here (8-11 records per sync), 57-80k with 16, 79-85k with 32 (30
// records per sync) and 57-87k with no overlap at all; at 16 writers,
// 14-29k with 4 and 21-36k with 16 or more. Pipelining pays only for a
// queue that grows faster than a sync returns.
const overlapMin = 32

// overlapLeast returns how many records that must be durable the queue
// must hold to be written and synced while a sync is in flight: overlapMin,
// and no fewer than the batches syncing hold. A sync costs the same CPU
// time whatever it carries, and on a busy machine that CPU time is the
// throughput: a small batch started next to a large one costs a whole sync
// for a few records, whose callers would have gained little by not waiting
// for the sync in flight, while the records that arrive meanwhile, queued
// behind it, wait a whole sync longer. Waiting until the queue holds as
// many records as the sync in flight splits the writers into batches of
// about equal size that take turns (with 64 writers on 2 cores, 31 records
// per sync instead of 17, and less CPU per decision); a queue that grows
// faster than a sync returns still gets its own sync at once.
func (l *Log) overlapLeast() int {
	n := 0
	for _, b := range l.written {
		if !b.synced {
			n += b.records
		}
	}
	return max(overlapMin, n)
}

// syncing reports whether a sync is in flight.
func (l *Log) syncing() bool {
	for _, b := range l.busy {
		if b {
			return true
		}
	}
	return false
}

// freeSlot returns a sync slot that has no sync in flight, -1 if none.
func (l *Log) freeSlot() int {
	for i, busy := range l.busy {
		if !busy {
			return i
		}
	}
	return -1
}

// writeNext takes the queued records, if any (took), writes them as one
// batch and, if one of them must be durable, starts its sync in slot.
// It takes none unless the queue holds least records that must be durable
// (gatherLeast: as many as l.gather waits for) or Close was called;
// closing reports that it was.
func (l *Log) writeNext(slot, least int) (took, closing bool, err error) {
	var spare []*op
	if n := len(l.spares); n > 0 {
		spare, l.spares = l.spares[n-1], l.spares[:n-1]
	}
	l.mu.Lock()
	closing = l.closed
	if least == gatherLeast {
		least = l.gather.least(l.queuedDurable, time.Now())
	}
	if l.queuedDurable < least && !closing {
		l.mu.Unlock()
		if spare != nil {
			l.spares = append(l.spares, spare)
		}
		return false, false, nil
	}
	l.gather.want = 0
	ops, g := l.queue, l.waiting
	l.queue, l.waiting = spare, nil
	l.queuedDurable = 0
	l.mu.Unlock()
	if len(ops) == 0 {
		l.spares = append(l.spares, ops)
		return false, closing, nil
	}
	b := &batch{ops: ops, g: g, start: time.Now()}
	l.written = append(l.written, b)
	l.buf = l.buf[:0]
	if l.activeVersion == formatVersion && l.durable > l.marked {
		l.buf = appendFrame(l.buf, RecordSynced, encodeSynced(l.durable))
		l.marked = l.durable
	}
	for _, o := range ops {
		if o.frame == nil { // a forget or forget-abort: its payload is its key
			l.buf = appendFrameString(l.buf, o.t, o.key)
		} else {
			l.buf = append(l.buf, o.frame...)
		}
		if o.t != RecordForget {
			b.records++
		}
	}
	b.bytes = len(l.buf)
	b.durable = b.records > 0
	if err := l.append(l.buf); err != nil {
		return true, closing, err
	}
	if cap(l.buf) > 1<<20 {
		l.buf = nil
	}
	if b.durable {
		l.startSync(slot, b)
	} else {
		b.synced = true // the next sync covers it
		l.ackReady()
	}
	if l.activeSize > l.opts.SegmentSize {
		l.rotating = true
	}
	return true, closing, nil
}

// startSync syncs the active segment for batch b on a goroutine, through
// slot's descriptor; the outcome arrives on l.synced.
func (l *Log) startSync(slot int, b *batch) {
	l.busy[slot] = true
	f, covers, upto := l.syncFile(slot), l.writes, l.activeSize
	go func() {
		var err error
		t0 := time.Now()
		if !l.opts.NoSync {
			err = f.Sync()
		}
		l.synced <- syncResult{b: b, slot: slot, covers: covers, upto: upto, err: err, took: time.Since(t0)}
	}()
}

// syncFile returns the descriptor of the active segment that sync slot
// slot syncs through.
func (l *Log) syncFile(slot int) file {
	if slot == 0 {
		return l.active
	}
	return l.slotFiles[slot-1]
}

// syncDone takes the outcome of a sync and acknowledges the batches it
// completes.
func (l *Log) syncDone(r syncResult) error {
	l.busy[r.slot] = false
	if r.err != nil {
		return fmt.Errorf("syncing %s: %w", segmentName(l.activeNum), r.err)
	}
	l.syncs.Add(1)
	l.syncedWrites = max(l.syncedWrites, r.covers)
	l.durable = max(l.durable, r.upto)
	r.b.synced = true
	// The queue is counted before ackReady wakes the callers: one that
	// queues its next record before the writer looks is one of the acked
	// callers the gathering waits for, not one more.
	gather, queued := !l.syncing(), 0
	if gather {
		l.mu.Lock()
		queued = l.queuedDurable
		l.mu.Unlock()
	}
	acked := l.ackReady()
	if gather {
		l.gather.start(acked, queued, time.Now(), r.took, &l.opts)
	}
	return nil
}

// ackReady acknowledges the batches at the head of l.written whose syncs
// succeeded, in the order they were written: it applies their records to
// the state and wakes their callers. It returns how many records that
// had to be durable it acknowledged.
func (l *Log) ackReady() (durable int) {
	for len(l.written) > 0 && l.written[0].synced {
		b := l.written[0]
		l.written[0] = nil
		l.written = l.written[1:]
		l.mu.Lock()
		for _, o := range b.ops {
			o.apply(&l.st, l.activeNum)
			l.unpend(o)
		}
		l.st.seg(l.activeNum).size += int64(b.bytes)
		l.mu.Unlock()
		b.g.finish(nil)
		durable += b.records
		if b.durable && l.opts.OnSync != nil {
			l.opts.OnSync(len(b.ops), b.bytes, time.Since(b.start))
		}
		clear(b.ops)
		l.spares = append(l.spares, b.ops[:0])
	}
	if len(l.written) == 0 {
		l.written = l.written[:0:0]
	}
	return durable
}

// append writes b after the records of the active segment, unsynced.
//
// Ahead of the records, the segment is filled with zeros a chunk at a time
// (preallocation). A sync after an overwrite of written blocks carries no
// metadata, where one after an append must also record the new size and the
// new blocks; on ext4 this makes group syncs markedly cheaper. Replay takes
// zeros after the last record for unused space.
func (l *Log) append(b []byte) error {
	off := l.activeSize
	end := off + int64(len(b))
	if _, err := l.active.WriteAt(b, off); err != nil {
		return fmt.Errorf("writing %s at offset %d: %w", segmentName(l.activeNum), off, err)
	}
	l.activeSize = end
	l.writes++
	if end > l.allocated {
		l.allocated = end
		if fill := min(zeroChunk, l.opts.SegmentSize-end); fill > 0 {
			if _, err := l.active.WriteAt(zeros()[:fill], end); err != nil {
				return fmt.Errorf("preallocating %s at offset %d: %w", segmentName(l.activeNum), end, err)
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
		if l.writes > l.syncedWrites {
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

// sync makes everything written to the active segment durable, when no
// other sync is in flight (rotation, compaction, Close). A failed sync
// leaves the page cache in an unknown state: the caller stops the log and
// the sync is never retried.
func (l *Log) sync() error {
	if !l.opts.NoSync {
		if err := l.active.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", segmentName(l.activeNum), err)
		}
	}
	l.syncedWrites = l.writes
	l.durable = l.activeSize
	return nil
}

// syncAtClose trims preallocated space and syncs forget records written
// since the last sync, so that a cleanly closed log comes back as it was,
// then writes and syncs a sync mark for all of it: damage to any record of
// the closed log is then reported as such, not cut off as a torn tail.
func (l *Log) syncAtClose() {
	err := l.trim()
	if err == nil && l.activeVersion == formatVersion && l.durable > l.marked {
		err = l.markAll()
	}
	if err != nil {
		l.mu.Lock()
		l.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		l.mu.Unlock()
	}
}

// markDurable writes a sync mark for what is durable in the active
// segment after its records, and syncs it (compaction, when no batch is in
// flight). It does nothing in a segment without marks.
func (l *Log) markDurable() error {
	if l.activeVersion != formatVersion || l.durable <= l.marked {
		return nil
	}
	b := appendFrame(nil, RecordSynced, encodeSynced(l.durable))
	if err := l.append(b); err != nil {
		return err
	}
	l.marked = l.durable
	l.mu.Lock()
	l.st.seg(l.activeNum).size += int64(len(b))
	l.mu.Unlock()
	return l.sync()
}

// markAll writes a sync mark for the whole active segment, which is
// durable and trimmed, after its last record (without preallocating),
// and syncs it.
func (l *Log) markAll() error {
	b := appendFrame(nil, RecordSynced, encodeSynced(l.durable))
	if _, err := l.active.WriteAt(b, l.activeSize); err != nil {
		return fmt.Errorf("writing %s at offset %d: %w", segmentName(l.activeNum), l.activeSize, err)
	}
	l.marked = l.durable
	l.activeSize += int64(len(b))
	l.allocated = l.activeSize
	l.writes++
	l.mu.Lock()
	l.st.seg(l.activeNum).size = l.activeSize
	l.mu.Unlock()
	return l.sync()
}

// fail stops the log after a failed write or sync: the callers of the
// batches written and not acknowledged (whose fate is unknown), those
// queued behind them, and every later call get an error. It returns once
// the syncs in flight have returned.
func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	failed := l.failed
	queued := l.waiting
	l.queue, l.waiting = nil, nil
	clear(l.pending)
	l.mu.Unlock()
	l.logger.Error("decision log failed; it refuses all further calls until reopened", "dir", l.dir, "err", err)
	unknown := fmt.Errorf("%w: %w", xa.ErrOutcomeUnknown, failed)
	for _, b := range l.written {
		b.g.finish(unknown)
	}
	l.written = nil
	queued.finish(failed)
	for i, busy := range l.busy {
		if busy {
			<-l.synced
			l.busy[i] = false
		}
	}
}
