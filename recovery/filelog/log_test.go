package filelog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

func TestCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "log")
	l := mustCreate(t, dir, Options{})
	defer mustClose(t, l)
	b, err := os.ReadFile(filepath.Join(dir, "00000000000000000001.wal"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != headerSize || checkHeader(b, 1) != "" {
		t.Fatalf("segment 1 = %q, want a bare valid header", b)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(dir, identityName))
	if err != nil {
		t.Fatal(err)
	}
	if id, bad := parseIdentity(b); bad != "" || id != l.Identity() {
		t.Fatalf("IDENTITY holds %+v (%s), the log says %+v", id, bad, l.Identity())
	}
	if !sameIdentity(l.Identity(), testIdent) {
		t.Fatalf("Identity() = %+v, want %+v", l.Identity(), testIdent)
	}
}

func sameIdentity(a, b xa.LogIdentity) bool {
	return a.ID == b.ID && a.Node == b.Node && a.Created.Equal(b.Created) && a.Timeout == b.Timeout && a.Grace == b.Grace
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true})
	_, err := Open(dir, Options{NoSync: true})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if _, err := Create(dir, testIdent, Options{NoSync: true}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Create of an open log: %v, want ErrLocked", err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, Options{NoSync: true}) // released by Close
	mustClose(t, l)
}

// step is one operation in a table test.
type step struct {
	op  string // commit, forget, heuristic, clear, abort, forget-abort, delegation
	i   int    // record index
	n   int    // branches (commit)
	act xa.Outcome
	rm  string // heuristic, clear, delegation; "" is db-0
}

func (s step) participant() string {
	if s.rm == "" {
		return "db-0"
	}
	return s.rm
}

func apply(t *testing.T, ctx context.Context, l *Log, s step) {
	t.Helper()
	var err error
	switch s.op {
	case "commit":
		err = l.LogCommit(ctx, commitRec(gid(s.i), s.n))
	case "forget":
		err = l.Forget(ctx, gid(s.i))
	case "heuristic":
		err = l.LogHeuristic(ctx, heurRecOn(s.participant(), s.i, s.act))
	case "clear":
		err = l.ClearHeuristic(ctx, s.participant(), gid(s.i).Branch(0))
	case "abort":
		err = l.LogAbort(ctx, abortRec(s.i))
	case "forget-abort":
		err = l.ForgetAbort(ctx, gid(s.i))
	case "delegation":
		err = l.LogDelegation(ctx, xa.Delegation{Participant: s.participant()})
	default:
		t.Fatalf("bad op %q", s.op)
	}
	if err != nil {
		t.Fatalf("%s %d: %v", s.op, s.i, err)
	}
}

func TestLiveSet(t *testing.T) {
	tests := []struct {
		name       string
		steps      []step
		commits    []xa.CommitRecord // in Commits order
		heuristics []xa.HeuristicRecord
	}{
		{name: "empty"},
		{
			name:    "commit",
			steps:   []step{{op: "commit", i: 1, n: 2}},
			commits: []xa.CommitRecord{commitRec(gid(1), 2)},
		},
		{
			name:  "commit then forget",
			steps: []step{{op: "commit", i: 1, n: 2}, {op: "forget", i: 1}},
		},
		{
			name:  "forget of an unknown id",
			steps: []step{{op: "forget", i: 9}},
		},
		{
			name:    "logging an id again replaces its record",
			steps:   []step{{op: "commit", i: 1, n: 2}, {op: "commit", i: 1, n: 3}},
			commits: []xa.CommitRecord{commitRec(gid(1), 3)},
		},
		{
			name:    "oldest first, by Logged",
			steps:   []step{{op: "commit", i: 3, n: 1}, {op: "commit", i: 1, n: 1}, {op: "commit", i: 2, n: 1}, {op: "forget", i: 2}},
			commits: []xa.CommitRecord{commitRec(gid(1), 1), commitRec(gid(3), 1)},
		},
		{
			name:       "heuristic kept",
			steps:      []step{{op: "heuristic", i: 4, act: xa.OutcomeRollback}, {op: "commit", i: 4, n: 1}, {op: "forget", i: 4}},
			heuristics: []xa.HeuristicRecord{heurRec(4, xa.OutcomeRollback)},
		},
		{
			name: "clear drops every heuristic of the xid and no other",
			steps: []step{
				{op: "heuristic", i: 5, act: xa.OutcomeCommit}, {op: "heuristic", i: 6, act: xa.OutcomeCommit},
				{op: "heuristic", i: 5, act: xa.OutcomeRollback}, {op: "clear", i: 5},
			},
			heuristics: []xa.HeuristicRecord{heurRec(6, xa.OutcomeCommit)},
		},
		{
			name:  "clear of an unknown xid",
			steps: []step{{op: "clear", i: 7}},
		},
		{
			name: "one xid on two participants: two records, clear drops one participant's",
			steps: []step{
				{op: "heuristic", i: 5, act: xa.OutcomeRollback, rm: "maria"}, {op: "heuristic", i: 5, act: xa.OutcomeCommit, rm: "pg"},
				{op: "heuristic", i: 5, act: xa.OutcomeCommit, rm: "maria"}, {op: "clear", i: 5, rm: "maria"},
			},
			heuristics: []xa.HeuristicRecord{heurRecOn("pg", 5, xa.OutcomeCommit)},
		},
		{
			name: "the same heuristic record logged twice is kept once",
			steps: []step{
				{op: "heuristic", i: 5, act: xa.OutcomeRollback}, {op: "heuristic", i: 5, act: xa.OutcomeRollback},
			},
			heuristics: []xa.HeuristicRecord{heurRec(5, xa.OutcomeRollback)},
		},
		{
			name:    "aborts and delegations leave commits alone",
			steps:   []step{{op: "abort", i: 1}, {op: "commit", i: 2, n: 1}, {op: "delegation", rm: "maria"}, {op: "forget-abort", i: 3}},
			commits: []xa.CommitRecord{commitRec(gid(2), 1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			l := mustCreate(t, dir, Options{NoSync: true})
			for _, s := range tt.steps {
				apply(t, ctx, l, s)
			}
			check := func(when string) {
				t.Helper()
				got, err := l.Commits(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := encList(t, got), encList(t, tt.commits); !slices.Equal(g, w) {
					t.Errorf("%s: Commits = %d records %q, want %d %q", when, len(got), g, len(tt.commits), w)
				}
				for _, c := range tt.commits {
					r, ok, err := l.Lookup(ctx, c.ID)
					if err != nil || !ok || enc(t, r) != enc(t, c) {
						t.Errorf("%s: Lookup(%v) = %v, %v, %v", when, c.ID, r, ok, err)
					}
				}
				h, err := l.Heuristics(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := heurSet(t, h), heurSet(t, tt.heuristics); !slices.Equal(g, w) {
					t.Errorf("%s: Heuristics = %q, want %q", when, g, w)
				}
			}
			check("before reopen")
			mustClose(t, l)
			l = mustOpen(t, dir, Options{NoSync: true})
			check("after reopen")
			mustClose(t, l)
		})
	}
}

func encList[T interface{ MarshalBinary() ([]byte, error) }](t tb, recs []T) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, enc(t, r))
	}
	return out
}

func TestLookupMissing(t *testing.T) {
	l := mustCreate(t, t.TempDir(), Options{NoSync: true})
	defer mustClose(t, l)
	if _, ok, err := l.Lookup(context.Background(), gid(1)); ok || err != nil {
		t.Fatalf("Lookup of an id never logged: %v, %v", ok, err)
	}
}

func TestInvalidRecordsRejected(t *testing.T) {
	ctx := context.Background()
	l := mustCreate(t, t.TempDir(), Options{NoSync: true})
	defer func() { mustClose(t, l) }()
	if err := l.LogCommit(ctx, xa.CommitRecord{}); err == nil {
		t.Error("LogCommit of a record without id succeeded")
	}
	if err := l.Forget(ctx, xa.GlobalID{}); err == nil {
		t.Error("Forget of the zero id succeeded")
	}
	if err := l.LogHeuristic(ctx, xa.HeuristicRecord{XID: gid(1).Branch(0)}); err == nil {
		t.Error("LogHeuristic without action succeeded")
	}
	if err := l.ClearHeuristic(ctx, "db-0", xa.XID{}); err == nil {
		t.Error("ClearHeuristic of the zero XID succeeded")
	}
	if err := l.ClearHeuristic(ctx, strings.Repeat("r", 2000), gid(1).Branch(0)); err == nil {
		t.Error("ClearHeuristic with a participant name of 2000 bytes succeeded")
	}
	if err := l.LogAbort(ctx, xa.AbortRecord{}); err == nil {
		t.Error("LogAbort without id succeeded")
	}
	if err := l.ForgetAbort(ctx, xa.GlobalID{}); err == nil {
		t.Error("ForgetAbort of the zero id succeeded")
	}
	if err := l.LogDelegation(ctx, xa.Delegation{Participant: ""}); err == nil {
		t.Error("LogDelegation without a participant succeeded")
	}
	if err := l.LogDelegation(ctx, xa.Delegation{Participant: strings.Repeat("p", 2000)}); err == nil {
		t.Error("LogDelegation with a participant name of 2000 bytes succeeded")
	}

	// Records that would not decode must be refused (by the codec or by
	// the log), or they would make the log unreadable.
	longRM := commitRec(gid(1), 1)
	longRM.Branches[0].RM = strings.Repeat("r", 2000)
	badNode := commitRec(gid(2), 1)
	badNode.ID.Node = "no.dots"
	longReason := heurRec(3, xa.OutcomeCommit)
	longReason.Reason = strings.Repeat("x", 70_000)
	for _, rec := range []xa.CommitRecord{longRM, badNode} {
		if err := l.LogCommit(ctx, rec); err == nil {
			t.Errorf("LogCommit of a record that does not decode succeeded")
		}
	}
	if err := l.LogHeuristic(ctx, longReason); err == nil {
		t.Error("LogHeuristic of a record that does not decode succeeded")
	}
	if err := l.LogCommit(ctx, commitRec(gid(4), 2)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if _, err := Verify(l.dir); err != nil {
		t.Fatalf("log unreadable after refused records: %v", err)
	}
	l = mustOpen(t, l.dir, Options{NoSync: true})
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	l := mustCreate(t, t.TempDir(), Options{NoSync: true})
	mustClose(t, l)
	if err := l.LogCommit(ctx, commitRec(gid(1), 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("LogCommit after Close: %v", err)
	}
	if err := l.Forget(ctx, gid(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Forget after Close: %v", err)
	}
	if _, err := l.Commits(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Commits after Close: %v", err)
	}
	if err := l.LogAbort(ctx, abortRec(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("LogAbort after Close: %v", err)
	}
	if err := l.ForgetAbort(ctx, gid(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("ForgetAbort after Close: %v", err)
	}
	if err := l.LogDelegation(ctx, xa.Delegation{Participant: "maria"}); !errors.Is(err, ErrClosed) {
		t.Errorf("LogDelegation after Close: %v", err)
	}
	if _, _, err := l.LookupAbort(ctx, gid(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("LookupAbort after Close: %v", err)
	}
	if _, err := l.Aborts(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Aborts after Close: %v", err)
	}
	if _, err := l.Delegations(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Delegations after Close: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func TestCloseWritesQueuedForgets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true})
	for i := range 100 {
		apply(t, ctx, l, step{op: "commit", i: i, n: 2})
	}
	for i := range 100 {
		if err := l.Forget(ctx, gid(i)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	l = mustOpen(t, dir, Options{NoSync: true})
	defer mustClose(t, l)
	if c, _ := l.Commits(ctx); len(c) != 0 {
		t.Fatalf("%d commits after reopen, want 0: forgets queued at Close were lost", len(c))
	}
}

// TestGroupCommit: concurrent writers share fsyncs (real ones).
func TestGroupCommit(t *testing.T) {
	const writers, each = 64, 20
	var syncs, synced atomic.Int64
	l := mustCreate(t, t.TempDir(), Options{OnSync: func(records, bytes int, d time.Duration) {
		syncs.Add(1)
		synced.Add(int64(records))
	}})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := l.LogCommit(ctx, commitRec(gid(w*each+i), 2)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mustClose(t, l)
	total := int64(writers * each)
	if synced.Load() != total {
		t.Fatalf("OnSync saw %d records, want %d", synced.Load(), total)
	}
	t.Logf("%d records in %d syncs: %.1f per group", total, syncs.Load(), float64(total)/float64(syncs.Load()))
	if syncs.Load()*4 > total {
		t.Fatalf("%d syncs for %d records: concurrent commits do not share syncs", syncs.Load(), total)
	}
}

// TestPipelinedGroupCommit: while one group syncs, the next (of overlapMin
// records) is written and its sync started, through another descriptor of
// the segment; a group whose sync returns first is still acknowledged only
// after the group written before it.
func TestPipelinedGroupCommit(t *testing.T) {
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h})
	defer l.closeOnce(t)
	entered := make(chan int, 2)
	gates := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var n atomic.Int32
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "sync" {
			if i := n.Add(1) - 1; i < 2 {
				entered <- int(i)
				<-gates[i]
			}
		}
		return nil
	})
	defer func() {
		for _, g := range gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	}()
	ctx := context.Background()
	errs := [2]chan error{make(chan error, 1), make(chan error, overlapMin)}
	go func() { errs[0] <- l.LogCommit(ctx, commitRec(gid(1), 2)) }()
	<-entered // the first group is in its sync
	for i := range overlapMin {
		go func() { errs[1] <- l.LogCommit(ctx, commitRec(gid(2+i), 2)) }()
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second group's sync did not start while the first group's ran: the commit is not pipelined")
	}
	h.mu.Lock()
	same := h.syncers[0] == h.syncers[1]
	h.mu.Unlock()
	if same {
		t.Error("the two syncs in flight went through one descriptor; each must have its own")
	}
	close(gates[1]) // the second sync returns first
	select {
	case err := <-errs[1]:
		t.Fatalf("the second group was answered (%v) before the first group's sync returned", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, ok, _ := l.Lookup(ctx, gid(2)); ok {
		t.Fatal("the second group's record is visible before the first group's sync returned")
	}
	close(gates[0])
	if err := <-errs[0]; err != nil {
		t.Fatalf("LogCommit 1: %v", err)
	}
	for range overlapMin {
		if err := <-errs[1]; err != nil {
			t.Fatalf("LogCommit of the second group: %v", err)
		}
	}
	for i := range 1 + overlapMin {
		if _, ok, _ := l.Lookup(ctx, gid(1+i)); !ok {
			t.Fatalf("record %d not visible after its sync", 1+i)
		}
	}
}

// TestSmallGroupWaitsForTheSync: fewer than overlapMin records wait for the
// sync in flight instead of paying for a second one.
func TestSmallGroupWaitsForTheSync(t *testing.T) {
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h})
	defer l.closeOnce(t)
	entered, release := blockingSync(h)
	defer release()
	ctx := context.Background()
	errs := make(chan error, overlapMin)
	go func() { errs <- l.LogCommit(ctx, commitRec(gid(1), 2)) }()
	<-entered
	for i := range overlapMin - 1 {
		go func() { errs <- l.LogCommit(ctx, commitRec(gid(2+i), 2)) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-entered:
			t.Fatalf("a second sync started for fewer than %d records", overlapMin)
		default:
		}
		l.mu.Lock()
		n := len(l.queue)
		l.mu.Unlock()
		if n == overlapMin-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records queued after 10 s, want %d", n, overlapMin-1)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-entered:
		t.Fatalf("a second sync started for %d records", overlapMin-1)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	for range overlapMin {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// blockingSync makes every segment sync wait until release is closed; it
// reports each waiting sync on entered.
func blockingSync(h *hookFS) (entered chan struct{}, release func()) {
	entered = make(chan struct{}, 100)
	gate := make(chan struct{})
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "sync" {
			entered <- struct{}{}
			<-gate
		}
		return nil
	})
	return entered, sync.OnceFunc(func() { close(gate) })
}

// TestContextEndsBeforeDurable: the caller gets an outcome-unknown error,
// and the record may still become durable.
func TestContextEndsBeforeDurable(t *testing.T) {
	h := &hookFS{}
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{fs: h})
	entered, release := blockingSync(h)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := l.LogCommit(ctx, commitRec(gid(1), 2))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, xa.ErrOutcomeUnknown) {
		t.Fatalf("LogCommit with an expiring ctx: %v, want DeadlineExceeded and ErrOutcomeUnknown", err)
	}
	<-entered
	if _, ok, _ := l.Lookup(context.Background(), gid(1)); ok {
		t.Fatal("record visible before it is durable")
	}
	release()
	mustClose(t, l)
	l = mustOpen(t, dir, Options{})
	defer mustClose(t, l)
	if _, ok, _ := l.Lookup(context.Background(), gid(1)); !ok {
		t.Fatal("the record whose caller gave up was not written after all; this test expects it to be")
	}

	// A ctx done on entry writes nothing.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := l.LogCommit(done, commitRec(gid(2), 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("LogCommit with a done ctx: %v", err)
	}
	if _, ok, _ := l.Lookup(context.Background(), gid(2)); ok {
		t.Fatal("LogCommit with a done ctx logged the record")
	}
}

// TestForgetDoesNotWaitForSync: Forget returns while a sync is stuck.
func TestForgetDoesNotWaitForSync(t *testing.T) {
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h})
	ctx := context.Background()
	if err := l.LogCommit(ctx, commitRec(gid(1), 2)); err != nil {
		t.Fatal(err)
	}
	entered, release := blockingSync(h)
	errc := make(chan error, 1)
	go func() { errc <- l.LogCommit(ctx, commitRec(gid(2), 2)) }()
	<-entered // the writer is inside a sync now
	start := time.Now()
	if err := l.Forget(ctx, gid(1)); err != nil {
		t.Fatal(err)
	}
	// The sync stays stuck until the test ends: a Forget that waited for
	// it would not return at all. The bound only keeps a slow machine
	// from failing the test.
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Forget took %v behind a stuck sync", d)
	}
	if _, ok, _ := l.Lookup(ctx, gid(1)); ok {
		t.Fatal("Lookup shows a forgotten record")
	}
	release()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
}

// TestForgetsAreNotSyncedOnTheirOwn: one writer doing commit then forget
// costs one sync per decision, not two; Close makes the forgets durable.
func TestForgetsAreNotSyncedOnTheirOwn(t *testing.T) {
	ctx := context.Background()
	h := &hookFS{}
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{fs: h})
	var syncs atomic.Int64
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "sync" {
			syncs.Add(1)
		}
		return nil
	})
	const n = 50
	for i := range n {
		apply(t, ctx, l, step{op: "commit", i: i, n: 2})
		apply(t, ctx, l, step{op: "forget", i: i})
	}
	mustClose(t, l)
	// n commit groups, plus at most one sync of trailing forgets at Close
	// and one of the sync mark Close writes after it.
	if s := syncs.Load(); s > n+2 {
		t.Fatalf("%d syncs for %d decisions: forgets are synced on their own", s, n)
	}
	if from, to := h.unsynced(segFiles(t, dir)[0]); to > from {
		t.Fatalf("Close left bytes %d to %d unsynced", from, to)
	}
}

// TestOverlapWaitsForAGroupAsLarge: while a group syncs, the next group
// starts a sync of its own only once it holds as many records as the group
// syncing; a smaller one waits for that sync and grows meanwhile.
func TestOverlapWaitsForAGroupAsLarge(t *testing.T) {
	const big = 2 * overlapMin // the second group: larger than overlapMin
	h := &hookFS{}
	l := mustCreate(t, t.TempDir(), Options{fs: h})
	defer l.closeOnce(t)
	// Sync slot 0 syncs through l.active, slot 1 through another
	// descriptor: each has a gate.
	slot0 := l.active.(*hookFile)
	writeEntered, writeGate := make(chan struct{}), make(chan struct{})
	gate0, gate1 := make(chan struct{}), make(chan struct{})
	syncs := make(chan *hookFile, 10)
	var writes atomic.Int32
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "write" && strings.HasSuffix(name, ".wal") && writes.Add(1) == 1 {
			close(writeEntered) // the first group's write
			<-writeGate
		}
		return nil
	})
	h.mu.Lock()
	h.onSync = func(f *hookFile) {
		syncs <- f
		if f == slot0 {
			<-gate0
		} else {
			<-gate1
		}
	}
	h.mu.Unlock()
	var once sync.Once
	releaseAll := func() {
		once.Do(func() {
			for _, g := range []chan struct{}{writeGate, gate0, gate1} {
				select {
				case <-g:
				default:
					close(g)
				}
			}
		})
	}
	defer releaseAll()
	ctx := context.Background()
	errs := make(chan error, 1+2*big)
	commit := func(i int) { go func() { errs <- l.LogCommit(ctx, commitRec(gid(i), 2)) }() }
	queued := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			l.mu.Lock()
			q := len(l.queue)
			l.mu.Unlock()
			if q == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d records queued after 10 s, want %d", q, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	nextSync := func(what string) *hookFile {
		t.Helper()
		select {
		case f := <-syncs:
			return f
		case <-time.After(10 * time.Second):
			t.Fatalf("no sync started for %s", what)
			return nil
		}
	}
	// Group 1: one record, held in its write while big records queue.
	commit(1)
	<-writeEntered
	for i := range big {
		commit(2 + i)
	}
	queued(big)
	close(writeGate)
	// Group 1 syncs in slot 0; group 2, the big records, is written and
	// synced in slot 1 meanwhile (they are more than overlapMin and than
	// group 1's one record).
	a, b := nextSync("the first group"), nextSync("the second group, while the first one syncs")
	if a == b || a != slot0 && b != slot0 {
		t.Fatal("the two syncs in flight are not one in each slot")
	}
	close(gate0) // group 1 is durable; group 2 syncs on
	if err := <-errs; err != nil {
		t.Fatalf("the first group: %v", err)
	}
	// Group 3: fewer records than group 2 holds wait for its sync...
	for i := range big - 1 {
		commit(100 + i)
	}
	queued(big - 1)
	select {
	case <-syncs:
		t.Fatalf("a sync started for %d records while a sync of %d ran", big-1, big)
	case <-time.After(100 * time.Millisecond):
	}
	// ... and as many start their own.
	commit(100 + big - 1)
	nextSync(fmt.Sprintf("%d records while a sync of %d ran", big, big))
	releaseAll()
	for range 2 * big {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSyncMarksClaimOnlySynced: every sync mark the log writes claims only
// bytes that a sync had made durable when the mark was written, with eight
// writers (pipelined syncs through two descriptors, returning out of
// order: each sync is delayed at random), forgets written without a sync,
// rotations with compaction, and Close. The test file system knows what
// each sync covered.
func TestSyncMarksClaimOnlySynced(t *testing.T) {
	dir := t.TempDir()
	h := &hookFS{}
	var mu sync.Mutex
	var bad []string
	marks := 0
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op != "write" || !strings.HasSuffix(name, ".wal") {
			return nil
		}
		synced, _ := h.unsynced(filepath.Join(dir, name))
		for o := 0; o < len(p); {
			typ, payload, end, why := parseFrame(p, o)
			if why != "" {
				break // preallocated zeros
			}
			if typ == RecordSynced {
				upto, err := decodeSynced(payload)
				mu.Lock()
				marks++
				if err != nil || upto > synced {
					bad = append(bad, fmt.Sprintf("%s: mark at offset %d claims %d, synced %d (%v)", name, off+int64(o), upto, synced, err))
				}
				mu.Unlock()
			}
			o = end
		}
		return nil
	})
	var seed atomic.Uint64
	h.mu.Lock()
	h.onSync = func(*hookFile) {
		if d := seed.Add(0x9e3779b97f4a7c15) >> 61; d > 0 {
			time.Sleep(time.Duration(d) * 300 * time.Microsecond)
		}
	}
	h.mu.Unlock()
	l := mustCreate(t, dir, Options{fs: h, SegmentSize: 16 << 10})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 60 {
				rec := commitRec(gid(w*1000+i), 1+i%3)
				if err := l.LogCommit(ctx, rec); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					if err := l.Forget(ctx, rec.ID); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	mustClose(t, l)
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	if len(segFiles(t, dir)) < 2 || marks < 10 {
		t.Fatalf("%d segments, %d sync marks: the test does not exercise rotation and marks", len(segFiles(t, dir)), marks)
	}
	t.Logf("%d sync marks checked", marks)
}

// TestOpenSyncsWhatItReplayed: a record a crashed process wrote and never
// synced is in the page cache only; Open replays it, so it must make it
// durable before anything acts on it or a sync mark claims it.
func TestOpenSyncsWhatItReplayed(t *testing.T) {
	dir := t.TempDir()
	h := &hookFS{}
	l := mustCreate(t, dir, Options{fs: h})
	ctx := context.Background()
	if err := l.LogCommit(ctx, commitRec(gid(1), 2)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	seg := segFiles(t, dir)[0]
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	// What the crashed process left: a record written, not synced.
	f, err := h.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(appendFrame(nil, RecordCommit, mustMarshal(t, commitRec(gid(2), 2))), st.Size()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if from, to := h.unsynced(seg); to <= from {
		t.Fatal("the test file system does not see the write as unsynced")
	}
	l = mustOpen(t, dir, Options{fs: h})
	defer mustClose(t, l)
	if _, ok, err := l.Lookup(ctx, gid(2)); err != nil || !ok {
		t.Fatalf("Lookup of the replayed record: %v, %v", ok, err)
	}
	if from, to := h.unsynced(seg); to > from {
		t.Fatalf("Open left bytes %d to %d it replayed unsynced", from, to)
	}
}
