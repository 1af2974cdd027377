package filelog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// gid returns a distinct, valid global id for i.
func gid(i int) xa.GlobalID {
	return xa.GlobalID{Node: "node-1", Begun: time.UnixMilli(1_700_000_000_000 + int64(i)), Rand: uint64(i)*0x9e3779b97f4a7c15 + 1}
}

// commitRec returns a realistic commit record for id with n branches.
func commitRec(id xa.GlobalID, n int) xa.CommitRecord {
	rec := xa.CommitRecord{ID: id, Logged: time.Unix(0, id.Begun.UnixNano()+int64(n)*1000+7)}
	for b := 0; b < n; b++ {
		rec.Branches = append(rec.Branches, xa.BranchRecord{
			RM:     fmt.Sprintf("db-%d", b),
			XID:    id.Branch(b),
			Origin: xa.Origin{Session: uint64(1000 + b), Prepared: time.Unix(0, id.Begun.UnixNano()+int64(b))},
		})
	}
	return rec
}

func heurRec(i int, action xa.Outcome) xa.HeuristicRecord { return heurRecOn("db-0", i, action) }

// heurRecOn is heurRec on participant rm.
func heurRecOn(rm string, i int, action xa.Outcome) xa.HeuristicRecord {
	return xa.HeuristicRecord{
		RM:     rm,
		XID:    gid(i).Branch(0),
		Action: action,
		Forced: i%2 == 0,
		Time:   time.Unix(0, int64(1_700_000_000_000_000_000)+int64(i)*1e6),
		Reason: fmt.Sprintf("operator note %d", i),
	}
}

// tb is what the helpers need of testing.TB and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func enc(t tb, v interface{ MarshalBinary() ([]byte, error) }) string {
	t.Helper()
	b, err := v.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// commitSet returns the encoded records, sorted, for comparison.
func commitSet(t tb, recs []xa.CommitRecord) []string {
	t.Helper()
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, enc(t, r))
	}
	sort.Strings(out)
	return out
}

func heurSet(t tb, recs []xa.HeuristicRecord) []string {
	t.Helper()
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, enc(t, r))
	}
	sort.Strings(out)
	return out
}

// testStart is the time of the tests' clock: gid(i) begins at or after it,
// so that no commit record of the tests is ever too late.
var testStart = time.UnixMilli(1_700_000_000_000)

// testIdent is the identity of the tests' logs.
var testIdent = xa.LogIdentity{ID: 0x5eed0f10ca1106, Node: "node-1", Created: time.Unix(0, testStart.Add(-time.Hour).UnixNano()),
	Timeout: 30 * time.Second, Grace: 10 * time.Minute}

// withClock sets a clock that stays at testStart, unless opts has one.
func withClock(opts Options) Options {
	if opts.Now == nil {
		opts.Now = func() time.Time { return testStart }
	}
	return opts
}

// mustCreate creates a log with testIdent in dir.
func mustCreate(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Create(dir, testIdent, withClock(opts))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return l
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, withClock(opts))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// closeOnce closes l unless it is closed already.
func (l *Log) closeOnce(t testing.TB) {
	t.Helper()
	if err := l.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

// manualClock is a settable clock for Options.Now.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock { return &manualClock{t: testStart} }

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// segFiles lists the segment files of dir.
func segFiles(t tb, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// dirHashes maps every file name in dir to a hash of its content. The lock
// file is left out: taking the lock may create it.
func dirHashes(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() == lockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[de.Name()] = sha256.Sum256(b)
	}
	return out
}

// abortRec returns an abort record for gid(i).
func abortRec(i int) xa.AbortRecord {
	return xa.AbortRecord{ID: gid(i), Reason: fmt.Sprintf("presumed abort %d", i)}
}

// copyLog copies the segment files of src into a new directory.
func copyLog(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() == lockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// partialWrite makes hookFS write only n bytes and then fail with err.
type partialWrite struct {
	n   int
	err error
}

func (p *partialWrite) Error() string {
	return fmt.Sprintf("partial write of %d bytes: %v", p.n, p.err)
}

// hookFS is the real file system with a hook before every mutating
// operation: op is "write" (p at off), "sync",
// "truncate" (to size off), "rename", "remove" or "syncdir". A non-nil error from the hook is returned instead of doing the
// operation (a *partialWrite does part of a write first).
type hookFS struct {
	osFS
	mu      sync.Mutex
	syncers []*hookFile // the descriptor of every sync, in the order they began
	hook    func(op, name string, p []byte, off int64) error
	// onSync, if set, is called first by every Sync, with its descriptor.
	onSync  func(f *hookFile)
	renamed map[string]string // old path -> new path, for open files' names
	extents map[string]*extent
	// gate is held shared by every write and truncate: a test that copies
	// the files while the log runs holds it to see no half-done write (a
	// copy read during a write can mix bytes from before the write with
	// bytes written after a later sync, which no crash leaves).
	gate sync.RWMutex
}

// extent tracks how far a file has been written, and how far that was
// synced. Space past the written end (preallocated) reads as zeros.
type extent struct{ written, synced int64 }

func (h *hookFS) ext(path string) *extent {
	if h.extents == nil {
		h.extents = map[string]*extent{}
	}
	e := h.extents[path]
	if e == nil {
		e = &extent{}
		h.extents[path] = e
	}
	return e
}

// unsynced returns the range of path written since its last sync.
func (h *hookFS) unsynced(path string) (from, to int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.ext(path)
	return e.synced, e.written
}

// current returns the path of a file opened as name.
func (h *hookFS) current(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.currentLocked(name)
}

func (h *hookFS) currentLocked(name string) string {
	for h.renamed[name] != "" {
		name = h.renamed[name]
	}
	return name
}

func (h *hookFS) call(op, name string, p []byte, off int64) error {
	h.mu.Lock()
	hook := h.hook
	h.mu.Unlock()
	if hook == nil {
		return nil
	}
	return hook(op, filepath.Base(name), p, off)
}

func (h *hookFS) setHook(f func(op, name string, p []byte, off int64) error) {
	h.mu.Lock()
	h.hook = f
	h.mu.Unlock()
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := h.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if flag&os.O_CREATE != 0 {
		// A new file under a name that an earlier file was renamed away
		// from (HEAD.tmp, each time HEAD is replaced): the rename was
		// the earlier file's.
		h.mu.Lock()
		delete(h.renamed, name)
		h.mu.Unlock()
	}
	return &hookFile{file: f, name: name, fs: h}, nil
}

func (h *hookFS) Rename(oldpath, newpath string) error {
	if err := h.call("rename", newpath, nil, 0); err != nil {
		return err
	}
	if err := h.osFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	h.mu.Lock()
	if h.renamed == nil {
		h.renamed = map[string]string{}
	}
	h.renamed[oldpath] = newpath
	if e, ok := h.extents[oldpath]; ok {
		h.extents[newpath] = e
		delete(h.extents, oldpath)
	}
	h.mu.Unlock()
	return nil
}

func (h *hookFS) Remove(name string) error {
	if err := h.call("remove", name, nil, 0); err != nil {
		return err
	}
	return h.osFS.Remove(name)
}

func (h *hookFS) SyncDir(dir string) error {
	if err := h.call("syncdir", dir, nil, 0); err != nil {
		return err
	}
	return h.osFS.SyncDir(dir)
}

type hookFile struct {
	file
	name string
	fs   *hookFS
}

func (f *hookFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.gate.RLock()
	defer f.fs.gate.RUnlock()
	if err := f.fs.call("write", f.fs.current(f.name), p, off); err != nil {
		var pw *partialWrite
		if errors.As(err, &pw) {
			n, werr := f.file.WriteAt(p[:pw.n], off)
			if werr != nil {
				return n, werr
			}
			return n, pw.err
		}
		return 0, err
	}
	n, err := f.file.WriteAt(p, off)
	f.fs.mu.Lock()
	e := f.fs.ext(f.fs.currentLocked(f.name))
	e.written = max(e.written, off+int64(n))
	f.fs.mu.Unlock()
	return n, err
}

func (f *hookFile) Sync() error {
	f.fs.mu.Lock()
	onSync := f.fs.onSync
	f.fs.mu.Unlock()
	if onSync != nil {
		onSync(f)
	}
	name := f.fs.current(f.name)
	// A sync covers what was written before it began, not what is written
	// while it runs (syncs of a pipelined commit overlap writes).
	f.fs.mu.Lock()
	f.fs.syncers = append(f.fs.syncers, f)
	covers := f.fs.ext(name).written
	f.fs.mu.Unlock()
	if err := f.fs.call("sync", name, nil, 0); err != nil {
		return err
	}
	if err := f.file.Sync(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	e := f.fs.ext(name)
	e.synced = max(e.synced, min(covers, e.written))
	f.fs.mu.Unlock()
	return nil
}

func (f *hookFile) Truncate(size int64) error {
	f.fs.gate.RLock()
	defer f.fs.gate.RUnlock()
	name := f.fs.current(f.name)
	if err := f.fs.call("truncate", name, nil, size); err != nil {
		return err
	}
	f.fs.mu.Lock()
	e := f.fs.ext(name)
	e.written, e.synced = min(e.written, size), min(e.synced, size)
	f.fs.mu.Unlock()
	return f.file.Truncate(size)
}

// frames returns the offsets of the records of a segment file, and the
// offset where they end.
func frames(t testing.TB, path string) (offs []int, end int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := headerSize
	for off < len(b) {
		_, _, next, bad := parseFrame(b, off)
		if bad != "" {
			t.Fatalf("%s: bad record at %d: %s", path, off, bad)
		}
		offs = append(offs, off)
		off = next
	}
	return offs, off
}

// mustMarshal returns rec's payload as a commit record holds it.
func mustMarshal(t testing.TB, rec xa.CommitRecord) []byte {
	t.Helper()
	b, err := rec.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
