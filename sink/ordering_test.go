package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestPending(t *testing.T) {
	var p Pending[string]
	for _, id := range []uint64{3, 5, 9} {
		if err := p.Add(id, fmt.Sprint("h", id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Add(9, "again"); !errors.Is(err, ErrConfig) {
		t.Fatalf("Add of a non-increasing id: %v", err)
	}
	for _, tc := range []struct {
		through uint64
		want    []uint64
	}{{2, nil}, {3, []uint64{3}}, {4, []uint64{3}}, {8, []uint64{3, 5}}, {9, []uint64{3, 5, 9}}, {^uint64(0), []uint64{3, 5, 9}}} {
		ids, hs := p.Through(tc.through)
		if !slices.Equal(ids, tc.want) || len(hs) != len(ids) {
			t.Errorf("Through(%d) = %v %v, want %v", tc.through, ids, hs, tc.want)
		}
		for i := range hs {
			if hs[i] != fmt.Sprint("h", ids[i]) {
				t.Errorf("Through(%d): handle %s for %d", tc.through, hs[i], ids[i])
			}
		}
	}
	if !p.Remove(5) || p.Remove(5) || p.Len() != 2 || p.Last() != 9 {
		t.Fatalf("after Remove(5): %v", p.ids)
	}
}

// fake is a Committer[uint64] and an Owner over memory: committed records
// per partition, in commit order, and a log of the calls.
type fake struct {
	mu        sync.Mutex
	open      map[uint64][]Record
	prepared  map[uint64]bool
	committed map[string][]string // partition -> positions of committed records, in order
	positions map[string]string
	order     []uint64 // checkpoints in commit order
	aborted   []uint64
	abortOnce map[uint64]bool // Commit of these aborts, once
	// gate, when set, makes Commit of checkpoint 1 wait until PreCommit
	// of checkpoint 2 has run (proof that the next checkpoint is written
	// while the previous one commits).
	gate     chan struct{}
	gateOnce sync.Once
	lost     map[string]bool
}

func newFake() *fake {
	return &fake{open: map[uint64][]Record{}, prepared: map[uint64]bool{}, committed: map[string][]string{},
		positions: map[string]string{}, abortOnce: map[uint64]bool{}, lost: map[string]bool{}}
}

func (f *fake) Begin(ctx context.Context, n uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[n] = nil
	return n, nil
}

func (f *fake) Write(ctx context.Context, h uint64, recs []Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[h] = append(f.open[h], recs...)
	return nil
}

func (f *fake) PreCommit(ctx context.Context, h uint64, cp uint64) (uint64, error) {
	f.mu.Lock()
	f.prepared[h] = true
	f.mu.Unlock()
	if h == 2 && f.gate != nil {
		f.gateOnce.Do(func() { close(f.gate) })
	}
	return h, nil
}

func (f *fake) Commit(ctx context.Context, h uint64) error {
	if h == 1 && f.gate != nil {
		select {
		case <-f.gate:
		case <-time.After(5 * time.Second):
			return errors.New("checkpoint 2 was not written while checkpoint 1 committed")
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.abortOnce[h] {
		delete(f.abortOnce, h)
		delete(f.open, h)
		f.aborted = append(f.aborted, h)
		return &AbortError{Checkpoint: h, Reason: errors.New("refused")}
	}
	for _, r := range f.open[h] {
		if f.lost[r.Partition] {
			delete(f.open, h)
			f.aborted = append(f.aborted, h)
			return &AbortError{Checkpoint: h, Reason: ErrTakenOver}
		}
	}
	for _, r := range f.open[h] {
		f.committed[r.Partition] = append(f.committed[r.Partition], r.Next)
		f.positions[r.Partition] = r.Next
	}
	delete(f.open, h)
	f.order = append(f.order, h)
	return nil
}

func (f *fake) Abort(ctx context.Context, h uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.open, h)
	f.aborted = append(f.aborted, h)
	return nil
}

func (f *fake) Take(ctx context.Context, parts []string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.positions), nil
}

func (f *fake) Release(ctx context.Context, parts []string) error { return nil }

func (f *fake) Rewind(ctx context.Context, parts []string) (map[string]string, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pos := map[string]string{}
	var lost []string
	for _, p := range parts {
		if f.lost[p] {
			lost = append(lost, p)
			continue
		}
		pos[p] = f.positions[p]
	}
	return pos, lost, nil
}

func (f *fake) Sweep(ctx context.Context) error { return nil }

// memSource is a bounded Source: partitions p0..pK-1 of n records each;
// the position after record i is i+1.
type memSource struct {
	h     Handler
	k, n  int
	next  []int
	batch int
	taken bool
}

func (s *memSource) Start(ctx context.Context, h Handler) error {
	s.h, s.next = h, make([]int, s.k)
	return nil
}

func (s *memSource) Poll(ctx context.Context) ([]Record, error) {
	if !s.taken {
		var parts []string
		for p := range s.k {
			parts = append(parts, "p"+strconv.Itoa(p))
		}
		pos, err := s.h.Assigned(ctx, parts)
		if err != nil {
			return nil, err
		}
		s.taken = true
		if err := s.Seek(ctx, pos); err != nil {
			return nil, err
		}
	}
	var out []Record
	for p := range s.k {
		for i := 0; i < s.batch && s.next[p] < s.n; i++ {
			s.next[p]++
			out = append(out, Record{Partition: "p" + strconv.Itoa(p), Next: strconv.Itoa(s.next[p])})
		}
	}
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

func (s *memSource) Seek(ctx context.Context, pos map[string]string) error {
	for name, v := range pos {
		p, _ := strconv.Atoi(name[1:])
		n := 0
		if v != "" {
			n, _ = strconv.Atoi(v)
		}
		s.next[p] = n
	}
	return nil
}

func (s *memSource) Committed(ctx context.Context, pos map[string]string) error { return nil }
func (s *memSource) Close() error                                               { return nil }

// exactlyOnce checks that every partition committed 1..n once, in order.
func (f *fake) exactlyOnce(t *testing.T, k, n int) {
	t.Helper()
	for p := range k {
		got := f.committed["p"+strconv.Itoa(p)]
		if len(got) != n {
			t.Fatalf("partition p%d: %d records committed, want %d: %v", p, len(got), n, got)
		}
		for i, pos := range got {
			if pos != strconv.Itoa(i+1) {
				t.Fatalf("partition p%d: record %d committed at position %s: %v", p, i, pos, got)
			}
		}
	}
}

func fastOpts() RunOptions {
	return RunOptions{CheckpointRecords: 10, CheckpointInterval: time.Hour, MaxPending: 2, SweepInterval: -1, AbortBackoff: time.Millisecond}
}

// TestRunnerOrder: checkpoints commit in order, the next one is written
// while the previous one commits, and every record is committed once.
func TestRunnerOrder(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{})
	src := &memSource{k: 2, n: 50, batch: 3}
	if err := NewRunner[uint64](f, f, fastOpts()).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	f.exactlyOnce(t, 2, 50)
	if !slices.IsSorted(f.order) || len(f.order) < 5 || len(f.aborted) != 0 {
		t.Fatalf("commit order %v, aborted %v", f.order, f.aborted)
	}
}

// TestRunnerAbortCascades: when checkpoint 3 aborts, the checkpoints
// prepared after it are aborted, not decided; the records are read again
// from the committed positions and land once.
func TestRunnerAbortCascades(t *testing.T) {
	f := newFake()
	f.abortOnce[3] = true
	// Checkpoint 4 is prepared before 3's outcome is known.
	f.gate = nil
	src := &memSource{k: 2, n: 60, batch: 3}
	opts := fastOpts()
	opts.MaxPending = 3
	block := make(chan struct{})
	c := &slowCommit{fake: f, hold: 3, until: block}
	go func() { time.Sleep(100 * time.Millisecond); close(block) }()
	if err := NewRunner[uint64](c, f, opts).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	f.exactlyOnce(t, 2, 60)
	if !slices.IsSorted(f.order) {
		t.Fatalf("commit order %v", f.order)
	}
	if !slices.Contains(f.aborted, 3) || !slices.Contains(f.aborted, 4) || slices.Contains(f.order, 4) {
		t.Fatalf("aborted %v, committed %v: 3 and the checkpoint prepared after it were to be aborted", f.aborted, f.order)
	}
}

// slowCommit holds Commit of checkpoint hold until until is closed.
type slowCommit struct {
	*fake
	hold  uint64
	until chan struct{}
}

func (s *slowCommit) Commit(ctx context.Context, h uint64) error {
	if h == s.hold {
		<-s.until
	}
	return s.fake.Commit(ctx, h)
}

// TestRunnerFenced: a checkpoint refused because its partitions were taken
// over makes the runner drop them, and stop with ErrFenced when it owns
// none.
func TestRunnerFenced(t *testing.T) {
	f := newFake()
	f.lost["p0"], f.lost["p1"] = true, true
	err := NewRunner[uint64](f, f, fastOpts()).Run(context.Background(), &memSource{k: 2, n: 50, batch: 3})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Run: %v, want ErrFenced", err)
	}
	// One partition lost: the other goes on to the end.
	f = newFake()
	f.lost["p0"] = true
	if err := NewRunner[uint64](f, f, fastOpts()).Run(context.Background(), &memSource{k: 2, n: 50, batch: 3}); err != nil {
		t.Fatal(err)
	}
	if len(f.committed["p0"]) != 0 || len(f.committed["p1"]) != 50 {
		t.Fatalf("committed: p0 %d, p1 %d", len(f.committed["p0"]), len(f.committed["p1"]))
	}
}

// TestRunnerMaxAborts: a checkpoint that always aborts stops the runner
// after MaxAborts attempts.
func TestRunnerMaxAborts(t *testing.T) {
	f := newFake()
	a := &alwaysAbort{fake: f}
	opts := fastOpts()
	opts.MaxAborts = 3
	err := NewRunner[uint64](a, f, opts).Run(context.Background(), &memSource{k: 1, n: 50, batch: 5})
	if !errors.Is(err, ErrAborted) || a.n != 3 {
		t.Fatalf("Run: %v after %d aborts, want ErrAborted after 3", err, a.n)
	}
}

// TestRunnerAbortBackoff: aborts in a row pause, doubling, so that a short
// outage is ridden out instead of used up in quick failures.
func TestRunnerAbortBackoff(t *testing.T) {
	f := newFake()
	a := &alwaysAbort{fake: f}
	opts := fastOpts()
	opts.MaxAborts = 4
	opts.AbortBackoff = 30 * time.Millisecond
	start := time.Now()
	err := NewRunner[uint64](a, f, opts).Run(context.Background(), &memSource{k: 1, n: 50, batch: 5})
	took := time.Since(start)
	if !errors.Is(err, ErrAborted) || a.n != 4 {
		t.Fatalf("Run: %v after %d aborts, want ErrAborted after 4", err, a.n)
	}
	if want := (30 + 60 + 120) * time.Millisecond; took < want {
		t.Fatalf("4 aborts in a row took %v, want at least %v of pauses", took, want)
	}
}

type alwaysAbort struct {
	*fake
	n int
}

func (a *alwaysAbort) PreCommit(ctx context.Context, h uint64, cp uint64) (uint64, error) {
	a.n++
	return 0, errors.New("prepare refused")
}

// TestExternalOrder: Commit of a handle commits the earlier pending ones
// first, in order; Restore commits handles in order.
func TestExternalOrder(t *testing.T) {
	f := &extFake{}
	x := NewExternal[extHandle](f, f)
	ctx := context.Background()
	var hs []extHandle
	for _, cp := range []uint64{4, 7, 9} {
		if err := x.Write(ctx, []Record{{Partition: "p"}}); err != nil {
			t.Fatal(err)
		}
		h, err := x.PreCommit(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if _, err := x.PreCommit(ctx, 9); !errors.Is(err, ErrConfig) {
		t.Fatalf("PreCommit of an old id: %v", err)
	}
	if err := x.Commit(ctx, hs[1]); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{4, 7}; !slices.Equal(f.committed, want) {
		t.Fatalf("committed %v, want %v", f.committed, want)
	}
	if err := x.Commit(ctx, hs[2]); err != nil {
		t.Fatal(err)
	}
	// Transaction numbers: one more than the last checkpoint id.
	if want := []uint64{1, 5, 8}; !slices.Equal(f.txns, want) {
		t.Fatalf("transactions numbered %v, want %v", f.txns, want)
	}
	y := NewExternal[extHandle](f, f)
	f.committed = nil
	if err := y.Restore(ctx, []extHandle{{12, 0}, {10, 0}, {11, 0}}, 12); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{10, 11, 12}; !slices.Equal(f.committed, want) || f.lingering != 12 {
		t.Fatalf("restore committed %v and fenced above %d, want %v and 12", f.committed, f.lingering, want)
	}
	if err := y.Restore(ctx, nil, 0); !errors.Is(err, ErrConfig) {
		t.Fatalf("second Restore: %v", err)
	}
	if err := y.Write(ctx, nil); err != nil || f.txns[len(f.txns)-1] != 13 {
		t.Fatalf("after restoring 12 the next transaction is %d (%v), want 13", f.txns[len(f.txns)-1], err)
	}
}

type extHandle struct{ cp, txn uint64 }

func (h extHandle) CheckpointID() uint64 { return h.cp }

func (h extHandle) TransactionKey() string { return fmt.Sprint(h.txn) }

type extFake struct {
	committed []uint64
	txns      []uint64
	lingering uint64
}

func (f *extFake) Begin(ctx context.Context, n uint64) (extHandle, error) {
	f.txns = append(f.txns, n)
	return extHandle{txn: n}, nil
}
func (f *extFake) Write(ctx context.Context, h extHandle, recs []Record) error { return nil }
func (f *extFake) PreCommit(ctx context.Context, h extHandle, cp uint64) (extHandle, error) {
	h.cp = cp
	return h, nil
}
func (f *extFake) Commit(ctx context.Context, h extHandle) error {
	f.committed = append(f.committed, h.cp)
	return nil
}
func (f *extFake) Abort(ctx context.Context, h extHandle) error { return nil }
func (f *extFake) AbortLingering(ctx context.Context, restored uint64) error {
	f.lingering = restored
	return nil
}

// revokingSource revokes partition p1 at its fifth Poll, and checks that
// when Revoked returns every record of p1 read so far is committed (none
// is left in an open or pending checkpoint); it then reads p0 only.
type revokingSource struct {
	memSource
	f        *fake
	polls    int
	revoked  bool
	errAfter error
}

func (s *revokingSource) Poll(ctx context.Context) ([]Record, error) {
	s.polls++
	if s.polls == 5 {
		if err := s.h.Revoked(ctx, []string{"p1"}); err != nil {
			return nil, err
		}
		s.revoked = true
		s.f.mu.Lock()
		got := len(s.f.committed["p1"])
		s.f.mu.Unlock()
		if got != s.next[1] {
			s.errAfter = fmt.Errorf("Revoked returned with %d records of p1 committed, %d read", got, s.next[1])
		}
		s.next[1] = s.n // read no more of it
	}
	return s.memSource.Poll(ctx)
}

// TestRunnerRevoked: a revoked partition's checkpoints are committed before
// Revoked returns; the other partition reads on to the end.
func TestRunnerRevoked(t *testing.T) {
	f := newFake()
	src := &revokingSource{memSource: memSource{k: 2, n: 60, batch: 4}, f: f}
	opts := fastOpts()
	opts.CheckpointRecords = 20
	if err := NewRunner[uint64](f, f, opts).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if src.errAfter != nil {
		t.Fatal(src.errAfter)
	}
	if !src.revoked || len(f.committed["p0"]) != 60 || len(f.committed["p1"]) != 16 {
		t.Fatalf("revoked %v; committed: p0 %d, p1 %d (want 60 and the 16 read before the revocation)",
			src.revoked, len(f.committed["p0"]), len(f.committed["p1"]))
	}
}

// losingSource tells partition p1 lost at its fifth Poll, then reads p0
// only.
type losingSource struct {
	memSource
	f         *fake
	polls     int
	atLoss    int // records of p1 committed when Lost returned
	committed int
}

func (s *losingSource) Poll(ctx context.Context) ([]Record, error) {
	s.polls++
	if s.polls == 5 {
		if err := s.h.(LostHandler).Lost(ctx, []string{"p1"}); err != nil {
			return nil, err
		}
		s.f.mu.Lock()
		s.atLoss = len(s.f.committed["p1"])
		s.f.mu.Unlock()
		s.next[1] = s.n
	}
	return s.memSource.Poll(ctx)
}

// TestRunnerLost: checkpoints holding records of a lost partition are
// aborted, not committed (not even the ones already prepared); the other
// partition is read again from its committed position and lands once.
func TestRunnerLost(t *testing.T) {
	f := newFake()
	src := &losingSource{memSource: memSource{k: 2, n: 60, batch: 4}, f: f}
	opts := fastOpts()
	opts.CheckpointRecords = 8
	opts.MaxPending = 4
	block := make(chan struct{})
	c := &slowCommit{fake: f, hold: 2, until: block}
	go func() { time.Sleep(50 * time.Millisecond); close(block) }()
	if err := NewRunner[uint64](c, f, opts).Run(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	f.exactlyOnce(t, 1, 60)
	p1 := f.committed["p1"]
	if len(p1) != src.atLoss || len(p1) >= 16 || len(f.aborted) == 0 {
		t.Fatalf("p1: %d records committed (%d when Lost returned, 16 read); aborted %v", len(p1), src.atLoss, f.aborted)
	}
	for i, pos := range p1 {
		if pos != strconv.Itoa(i+1) {
			t.Fatalf("p1 committed with a gap: %v", p1)
		}
	}
	t.Logf("p1: %d of 16 records committed before the loss; checkpoints aborted: %v", len(p1), f.aborted)
}
