package filelog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// copyDir copies the segment files (and leftovers) of src into a new
// directory under root, without the testing.T, for use off the test
// goroutine.
func copyDir(root, src string) (string, error) {
	dst, err := os.MkdirTemp(root, "snap")
	if err != nil {
		return "", err
	}
	des, err := os.ReadDir(src)
	if err != nil {
		return "", err
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
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// tracker remembers what the test asked of the log, and what the log
// acknowledged, to judge a crashed copy.
type tracker struct {
	mu         sync.Mutex
	submitted  map[string]string // id -> encoded record, every LogCommit ever called
	acked      map[string]bool   // LogCommit returned nil
	forgotten  map[string]bool   // Forget was called (or is about to be)
	hSubmit    map[string]bool   // encoded heuristic records
	hAcked     map[string]bool
	hCleared   map[hkey]bool   // participant and XID text whose clear was requested
	aSubmit    map[string]bool // ids of LogAbort calls
	aAcked     map[string]bool // LogAbort returned nil
	aForgotten map[string]bool // ForgetAbort was called (or is about to be)
	dSubmit    map[string]bool // participants of LogDelegation calls
	dAcked     map[string]bool // LogDelegation returned nil
}

func newTracker() *tracker {
	return &tracker{
		submitted: map[string]string{}, acked: map[string]bool{}, forgotten: map[string]bool{},
		hSubmit: map[string]bool{}, hAcked: map[string]bool{}, hCleared: map[hkey]bool{},
		aSubmit: map[string]bool{}, aAcked: map[string]bool{}, aForgotten: map[string]bool{},
		dSubmit: map[string]bool{}, dAcked: map[string]bool{},
	}
}

type snapshot struct {
	dir        string
	what       string
	acked      map[string]bool
	forgotten  map[string]bool
	hAcked     map[string]bool
	hCleared   map[hkey]bool
	aAcked     map[string]bool
	aForgotten map[string]bool
	dAcked     map[string]bool
}

// zeroRange overwrites bytes [from, to) of path (as far as it reaches) with
// zeros.
func zeroRange(path string, from, to int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	to = min(to, st.Size())
	if to <= from {
		return nil
	}
	_, err = f.WriteAt(make([]byte, to-from), from)
	return err
}

func (tr *tracker) snapshot(dir, what string) snapshot {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return snapshot{dir: dir, what: what, acked: maps.Clone(tr.acked), forgotten: maps.Clone(tr.forgotten),
		hAcked: maps.Clone(tr.hAcked), hCleared: maps.Clone(tr.hCleared),
		aAcked: maps.Clone(tr.aAcked), aForgotten: maps.Clone(tr.aForgotten), dAcked: maps.Clone(tr.dAcked)}
}

func (tr *tracker) commit(ctx context.Context, t testing.TB, l *Log, rec xa.CommitRecord) error {
	k := rec.ID.String()
	tr.mu.Lock()
	tr.submitted[k] = enc(t, rec)
	tr.mu.Unlock()
	err := l.LogCommit(ctx, rec)
	if err == nil {
		tr.mu.Lock()
		tr.acked[k] = true
		tr.mu.Unlock()
	}
	return err
}

func (tr *tracker) forget(ctx context.Context, l *Log, id xa.GlobalID) error {
	tr.mu.Lock()
	tr.forgotten[id.String()] = true
	tr.mu.Unlock()
	return l.Forget(ctx, id)
}

func (tr *tracker) heuristic(ctx context.Context, t testing.TB, l *Log, h xa.HeuristicRecord) error {
	e := enc(t, h)
	tr.mu.Lock()
	tr.hSubmit[e] = true
	tr.mu.Unlock()
	err := l.LogHeuristic(ctx, h)
	if err == nil {
		tr.mu.Lock()
		tr.hAcked[e] = true
		tr.mu.Unlock()
	}
	return err
}

func (tr *tracker) clear(ctx context.Context, l *Log, rm string, x xa.XID) error {
	tr.mu.Lock()
	tr.hCleared[hkey{rm, x.String()}] = true
	tr.mu.Unlock()
	return l.ClearHeuristic(ctx, rm, x)
}

func (tr *tracker) abort(ctx context.Context, l *Log, rec xa.AbortRecord) error {
	k := rec.ID.String()
	tr.mu.Lock()
	tr.aSubmit[k] = true
	tr.mu.Unlock()
	err := l.LogAbort(ctx, rec)
	if err == nil {
		tr.mu.Lock()
		tr.aAcked[k] = true
		tr.mu.Unlock()
	}
	return err
}

func (tr *tracker) forgetAbort(ctx context.Context, l *Log, id xa.GlobalID) error {
	tr.mu.Lock()
	tr.aForgotten[id.String()] = true
	tr.mu.Unlock()
	return l.ForgetAbort(ctx, id)
}

func (tr *tracker) delegation(ctx context.Context, l *Log, participant string) error {
	tr.mu.Lock()
	tr.dSubmit[participant] = true
	tr.mu.Unlock()
	err := l.LogDelegation(ctx, xa.Delegation{Participant: participant})
	if err == nil {
		tr.mu.Lock()
		tr.dAcked[participant] = true
		tr.mu.Unlock()
	}
	return err
}

// check opens the copy dir and checks it against what snapshot s says was
// acknowledged: every acknowledged record not (about to be) forgotten or
// cleared is there, nothing is there that was not written, and no id has
// both a commit and an abort record.
func (tr *tracker) check(t *testing.T, dir string, s snapshot) (map[string]string, map[string]bool) {
	t.Helper()
	l, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatalf("crash at %s: Open: %v", s.what, err)
	}
	defer mustClose(t, l)
	ctx := context.Background()
	commits, err := l.Commits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range commits {
		k := c.ID.String()
		got[k] = enc(t, c)
		if want, ok := tr.submitted[k]; !ok || want != got[k] {
			t.Fatalf("crash at %s: record %s was never written as recovered", s.what, k)
		}
	}
	for k := range s.acked {
		if !s.forgotten[k] && got[k] == "" {
			t.Fatalf("crash at %s: acknowledged record %s lost", s.what, k)
		}
	}
	hs, err := l.Heuristics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotH := map[string]bool{}
	for _, h := range hs {
		e := enc(t, h)
		gotH[e] = true
		if !tr.hSubmit[e] {
			t.Fatalf("crash at %s: heuristic record never written", s.what)
		}
	}
	for e := range s.hAcked {
		var h xa.HeuristicRecord
		if err := h.UnmarshalBinary([]byte(e)); err != nil {
			t.Fatal(err)
		}
		if !s.hCleared[hkey{h.RM, h.XID.String()}] && !gotH[e] {
			t.Fatalf("crash at %s: acknowledged heuristic of %v on %s lost", s.what, h.XID, h.RM)
		}
	}
	aborts, err := l.Aborts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotA := map[string]bool{}
	for _, a := range aborts {
		k := a.ID.String()
		gotA[k] = true
		if !tr.aSubmit[k] {
			t.Fatalf("crash at %s: abort record %s never written", s.what, k)
		}
		if got[k] != "" {
			t.Fatalf("crash at %s: %s has both a commit and an abort record", s.what, k)
		}
	}
	for k := range s.aAcked {
		if !s.aForgotten[k] && !gotA[k] {
			t.Fatalf("crash at %s: acknowledged abort record %s lost", s.what, k)
		}
	}
	ds, err := l.Delegations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotD := map[string]bool{}
	for _, d := range ds {
		gotD[d.Participant] = true
		if !tr.dSubmit[d.Participant] {
			t.Fatalf("crash at %s: delegation to %s never written", s.what, d.Participant)
		}
	}
	for p := range s.dAcked {
		if !gotD[p] {
			t.Fatalf("crash at %s: acknowledged delegation to %s lost", s.what, p)
		}
	}
	return got, gotA
}

// TestCrashTruncation copies the log while concurrent writers append, then
// cuts (or zeroes) the copy's last segment at arbitrary points past what was
// acknowledged before the copy: every acknowledged record is recovered, and
// exactly the records whose frames survive are.
func TestCrashTruncation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tr := newTracker()
	for _, r := range buildLog(t, dir, 40) { // earlier segments
		tr.submitted[r.ID.String()] = enc(t, r)
		tr.acked[r.ID.String()] = true
	}
	// Large enough not to rotate while copies are taken (a copy is not
	// atomic across files), small enough to copy quickly. Copies are
	// taken between writes (h.gate): a half-done write is what the cuts
	// below make, and TestCrashAtEveryStep the unsynced data lost.
	h := &hookFS{}
	l := mustOpen(t, dir, Options{SegmentSize: 256 << 10, fs: h})
	root := t.TempDir()
	var snaps []snapshot
	var snapErr error
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1+i%4) * time.Millisecond):
			}
			s := tr.snapshot("", fmt.Sprintf("copy %d", i))
			h.gate.Lock()
			cp, err := copyDir(root, dir)
			h.gate.Unlock()
			if err != nil {
				snapErr = err
				return
			}
			s.dir = cp
			snaps = append(snaps, s)
		}
	}()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 80 {
				rec := commitRec(gid(10_000+w*1000+i), 1+i%3)
				if err := tr.commit(ctx, t, l, rec); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := tr.forget(ctx, l, rec.ID); err != nil {
						t.Error(err)
						return
					}
				}
				if i%4 == 0 {
					if err := tr.abort(ctx, l, abortRec(50_000+w*1000+i)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-done
	mustClose(t, l)
	if snapErr != nil {
		t.Fatal(snapErr)
	}
	final := tr.snapshot(dir, "end")
	final.dir, _ = copyDir(root, dir)
	snaps = append(snaps, final)
	if len(snaps) < 3 {
		t.Fatalf("only %d copies taken", len(snaps))
	}
	if len(snaps) > 10 { // keep the test fast
		snaps = append(snaps[:9:9], snaps[len(snaps)-1])
	}

	rng := rand.New(rand.NewPCG(1, 2))
	opened := 0
	for _, s := range snaps {
		// Where each valid record of the copy is.
		type frame struct {
			file     string
			off, end int64
			t        RecordType
			id       string
			rec      string
		}
		var fr []frame
		if err := Dump(s.dir, func(e Entry) error {
			f := frame{file: e.File, off: e.Offset, end: e.Offset + int64(e.Size), t: e.Type, id: e.ID.String()}
			if e.Type == RecordCommit {
				f.rec = enc(t, e.Commit)
			}
			fr = append(fr, f)
			return nil
		}); err != nil {
			t.Fatalf("%s: Dump: %v", s.what, err)
		}
		segs := segFiles(t, s.dir)
		last := segs[len(segs)-1]
		lastName := filepath.Base(last)
		b, err := os.ReadFile(last)
		if err != nil {
			t.Fatal(err)
		}
		// Acknowledged records end at or before synced: a crash keeps at
		// least that much. So does the link record, synced with the
		// header before the segment got its name.
		synced := int64(headerSize)
		for _, f := range fr {
			if f.file == lastName && (f.t == RecordCommit && s.acked[f.id] || f.t == RecordAbort && s.aAcked[f.id] || f.t == RecordLink) {
				synced = max(synced, f.end)
			}
		}
		// Past the records there may be part of a write, then
		// preallocated zeros: cut anywhere up to the last non-zero byte,
		// and at the end of the file.
		end := int64(len(b))
		for end > synced && b[end-1] == 0 {
			end--
		}
		// A longer run of zeros means the same; keep the copies small.
		b = b[:min(int64(len(b)), end+4096)]
		points := []int64{synced, int64(len(b))}
		for _, f := range fr {
			if f.file == lastName && f.off > synced {
				points = append(points, f.off, f.off+1, f.end-1)
			}
		}
		rng.Shuffle(len(points)-2, func(i, j int) { points[i+2], points[j+2] = points[j+2], points[i+2] })
		points = points[:min(len(points), 12)]
		for range 8 {
			points = append(points, synced+rng.Int64N(end-synced+1))
		}
		for _, cut := range points {
			for _, zero := range []bool{false, true} {
				cp, err := copyDir(root, s.dir)
				if err != nil {
					t.Fatal(err)
				}
				tail := slices.Clone(b)
				if zero {
					clear(tail[cut:])
				} else {
					tail = tail[:cut]
				}
				if err := os.WriteFile(filepath.Join(cp, lastName), tail, 0o644); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("%s, last segment cut at %d of %d (zeroed %v)", s.what, cut, len(b), zero)
				got, gotA := tr.check(t, cp, snapshot{what: what, acked: s.acked, forgotten: s.forgotten, aAcked: s.aAcked})
				opened++
				// Exactly the records whose frames survive.
				model, modelA := map[string]string{}, map[string]bool{}
				for _, f := range fr {
					if f.file == lastName && f.end > cut {
						continue
					}
					switch f.t {
					case RecordCommit:
						model[f.id] = f.rec
					case RecordForget:
						delete(model, f.id)
					case RecordAbort:
						modelA[f.id] = true
					}
				}
				if !maps.Equal(got, model) || !maps.Equal(gotA, modelA) {
					t.Fatalf("%s: recovered %d commit and %d abort records, the surviving frames hold %d and %d",
						what, len(got), len(gotA), len(model), len(modelA))
				}
				os.RemoveAll(cp)
			}
		}
	}
	t.Logf("%d copies, %d crash states opened", len(snaps), opened)
}

// TestCrashAtEveryStep snapshots the directory before every file operation
// (and after half of every write) while records are logged, forgotten,
// segments rotated and compacted, and checks that each snapshot opens
// cleanly with every acknowledged record.
func TestCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	root := t.TempDir()
	h := &hookFS{}
	clock := newManualClock()
	l := mustCreate(t, dir, Options{fs: h, SegmentSize: 2048, Now: clock.now})
	tr := newTracker()
	var snaps []snapshot
	var hookErr error
	h.setHook(func(op, name string, p []byte, off int64) error {
		what := fmt.Sprintf("before %s %s (#%d)", op, name, len(snaps))
		s := tr.snapshot("", what)
		cp, err := copyDir(root, dir)
		if err != nil {
			hookErr = err
			return nil
		}
		s.dir = cp
		snaps = append(snaps, s)
		// The same, with what was written since each file's last sync
		// lost (zeros, as in preallocated space), and with half of it lost.
		// And with the first half of it lost but the second half on
		// disk: the kernel writes dirty pages back in any order, so an
		// unsynced record may reach the disk before one written ahead of
		// it (pipelined syncs leave two batches unsynced at once).
		ps := tr.snapshot("", what+", unsynced data lost")
		hs := tr.snapshot("", what+", half the unsynced data lost")
		fs := tr.snapshot("", what+", the first half of the unsynced data lost")
		if ps.dir, err = copyDir(root, dir); err != nil {
			hookErr = err
			return nil
		}
		if hs.dir, err = copyDir(root, dir); err != nil {
			hookErr = err
			return nil
		}
		if fs.dir, err = copyDir(root, dir); err != nil {
			hookErr = err
			return nil
		}
		des, _ := os.ReadDir(ps.dir)
		for _, de := range des {
			from, to := h.unsynced(filepath.Join(dir, de.Name()))
			if to <= from {
				continue
			}
			if err := zeroRange(filepath.Join(ps.dir, de.Name()), from, to); err != nil {
				hookErr = err
				return nil
			}
			if err := zeroRange(filepath.Join(hs.dir, de.Name()), from+(to-from)/2, to); err != nil {
				hookErr = err
				return nil
			}
			if err := zeroRange(filepath.Join(fs.dir, de.Name()), from, from+(to-from)/2); err != nil {
				hookErr = err
				return nil
			}
		}
		snaps = append(snaps, ps, hs, fs)
		if op == "write" && len(p) > 1 {
			// The same, with half of this write on disk.
			s := tr.snapshot("", fmt.Sprintf("half way through write %s (#%d)", name, len(snaps)))
			cp, err := copyDir(root, dir)
			if err != nil {
				hookErr = err
				return nil
			}
			f, err := os.OpenFile(filepath.Join(cp, name), os.O_WRONLY, 0)
			if err != nil {
				hookErr = err
				return nil
			}
			f.WriteAt(p[:len(p)/2], off)
			f.Close()
			s.dir = cp
			snaps = append(snaps, s)
		}
		return nil
	})
	for i := range 3 {
		if err := tr.commit(ctx, t, l, commitRec(gid(500+i), 3)); err != nil {
			t.Fatal(err)
		}
	}
	// Heuristics of one XID on two participants, and one of another XID.
	for _, h := range []xa.HeuristicRecord{heurRecOn("maria", 0, xa.OutcomeCommit), heurRecOn("pg", 0, xa.OutcomeRollback), heurRec(1, xa.OutcomeCommit)} {
		if err := tr.heuristic(ctx, t, l, h); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := tr.abort(ctx, l, abortRec(600+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.delegation(ctx, l, "maria"); err != nil {
		t.Fatal(err)
	}
	for i := range 120 {
		rec := commitRec(gid(i), 2)
		if err := tr.commit(ctx, t, l, rec); err != nil {
			t.Fatal(err)
		}
		if err := tr.forget(ctx, l, rec.ID); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 30:
			if err := tr.delegation(ctx, l, "pg"); err != nil {
				t.Fatal(err)
			}
		case 40:
			if err := tr.forget(ctx, l, gid(500)); err != nil {
				t.Fatal(err)
			}
		case 50:
			// A day after its commit deadline by the log's clock,
			// abort 600 may go; then back, so that the commits that
			// follow are in time.
			clock.advance(xa.AbortRetention + testIdent.Timeout + time.Second)
			if err := tr.forgetAbort(ctx, l, gid(600)); err != nil {
				t.Fatal(err)
			}
			clock.advance(-xa.AbortRetention - testIdent.Timeout - time.Second)
			if err := tr.abort(ctx, l, abortRec(700)); err != nil {
				t.Fatal(err)
			}
		case 60:
			if err := tr.clear(ctx, l, "maria", gid(0).Branch(0)); err != nil {
				t.Fatal(err)
			}
		case 70:
			if err := tr.forgetAbort(ctx, l, gid(700)); !errors.Is(err, ErrRetained) {
				t.Fatalf("ForgetAbort of a fresh abort record: %v, want ErrRetained", err)
			}
		}
	}
	h.setHook(nil)
	mustClose(t, l)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	rotations, headWrites, headLags := 0, 0, 0
	for _, s := range snaps {
		// A segment started that HEAD does not name yet (Open brings
		// HEAD up to date, so look first).
		segs := segFiles(t, s.dir)
		newest, _ := parseSegmentName(filepath.Base(segs[len(segs)-1]))
		if b, err := os.ReadFile(filepath.Join(s.dir, headName)); err == nil {
			if h, bad := parseHead(b); bad == "" && h.Newest < newest {
				headLags++
			}
		}
		tr.check(t, s.dir, s)
		if strings.HasPrefix(s.what, "before remove") {
			rotations++
		}
		if strings.Contains(s.what, " "+headName) {
			headWrites++
		}
	}
	t.Logf("%d crash states, %d segment removals, %d around writing HEAD, %d with HEAD behind the newest segment",
		len(snaps), rotations, headWrites, headLags)
	if rotations < 3 {
		t.Fatalf("only %d segment removals happened; the test does not exercise compaction", rotations)
	}
	if headWrites < 10 || headLags < 10 {
		t.Fatalf("only %d crash states around writing HEAD and %d with HEAD behind the newest segment; "+
			"the test does not exercise the steps of starting a segment", headWrites, headLags)
	}
}

// TestCompactedCopiesAreMarked: the live records compaction copies
// forward are covered by a sync mark before their originals are removed.
// In a crash right after, damage to a copy (now the only copy of an
// acknowledged record) is corruption, not a torn tail that Open would cut
// off together with the records.
func TestCompactedCopiesAreMarked(t *testing.T) {
	ctx := context.Background()
	dir, root := t.TempDir(), t.TempDir()
	h := &hookFS{}
	l := mustCreate(t, dir, Options{fs: h, SegmentSize: 2048})
	var snap string
	var hookErr error
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "remove" && snap == "" && strings.HasSuffix(name, ".wal") {
			snap, hookErr = copyDir(root, dir)
		}
		return nil
	})
	var kept []string
	for i := range 3 {
		rec := commitRec(gid(500+i), 3)
		if err := l.LogCommit(ctx, rec); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, rec.ID.String())
	}
	for i := 0; snap == "" && i < 1000; i++ {
		if err := l.LogCommit(ctx, commitRec(gid(i), 2)); err != nil {
			t.Fatal(err)
		}
		if err := l.Forget(ctx, gid(i)); err != nil {
			t.Fatal(err)
		}
	}
	h.setHook(nil)
	mustClose(t, l)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if snap == "" {
		t.Fatal("no segment was retired")
	}
	segs := segFiles(t, snap)
	last := segs[len(segs)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	copyAt := -1
	for off := headerSize; off < len(b); {
		typ, p, end, bad := parseFrame(b, off)
		if bad != "" {
			break
		}
		if d, err := decodePayload(typ, p); err == nil && typ == RecordCommit && slices.Contains(kept, d.id.String()) {
			copyAt = off
			break
		}
		off = end
	}
	if copyAt < 0 {
		t.Fatalf("no copy of %v in %s before the originals' removal", kept, filepath.Base(last))
	}
	// Sound, the crash state keeps every record.
	sound := copyLog(t, snap)
	l2 := mustOpen(t, sound, Options{NoSync: true})
	for _, k := range kept {
		id, _ := xa.ParseGlobalIDString(k)
		if _, ok, err := l2.Lookup(ctx, id); err != nil || !ok {
			t.Errorf("crash after compaction: %s lost (%v)", k, err)
		}
	}
	mustClose(t, l2)
	// Damaged, it is corrupt.
	rewrite(t, last, func(b []byte) []byte { b[copyAt+frameHeader+3] ^= 0x40; return b })
	l3, err := Open(snap, Options{NoSync: true})
	if err == nil {
		got, _ := l3.Commits(ctx)
		mustClose(t, l3)
		t.Fatalf("Open of a log whose compacted copy is damaged succeeded with %d live commit records; want ErrCorrupt", len(got))
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "acknowledged") {
		t.Fatalf("Open of a log whose compacted copy is damaged: %v; want ErrCorrupt naming lost acknowledged data", err)
	}
}
