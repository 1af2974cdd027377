package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func adminClient(t *testing.T, addrs []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// commitGroup commits offsets for a group from outside it (as an earlier
// consumer of the group would have).
func commitGroup(t *testing.T, adm *kadm.Client, group string, offsets map[int32]int64) {
	t.Helper()
	var os kadm.Offsets
	for p, at := range offsets {
		os.AddOffset(topic, p, at, -1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// offsetsOf returns the offsets a member read per partition since the last
// reset, from the world's committed log.
func committedOf(w *world, p string) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.committed[p])
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// Assigned's positions are where reading starts: no record before them is
// returned, even where the group committed an offset below; a partition the
// handler returned no position for starts at the group's committed offset
// (StartCommitted) or at the start of the log (StartEarliest).
func TestAssignedPositions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start StartAt
		want3 int64 // where events/3 (no position from the handler) starts
	}{
		{"committed", StartCommitted, 5},
		{"earliest", StartEarliest, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := newCluster(t)
			adm := adminClient(t, addrs)
			produce(t, addrs, 10, 0, 1, 2, 3)
			group := "g"
			// The group's own offsets say 1 and 5; the handler says 3 for
			// events/0: the handler wins.
			commitGroup(t, adm, group, map[int32]int64{0: 1, 3: 5})
			w := newWorld()
			t.Cleanup(func() {
				if t.Failed() {
					w.dump(t)
				}
			})
			m := startMember(t, w, addrs, "A", group, memberOpts{cfg: func(c *Config) { c.Start = tc.start }})
			m.positions = map[string]string{"events/0": "3", "events/1": "7", "events/2": "10"}
			want := map[string][]int64{
				"events/0": seq(3, 10),
				"events/1": seq(7, 10),
				"events/2": nil,
				"events/3": seq(tc.want3, 10),
			}
			n := 0
			for _, v := range want {
				n += len(v)
			}
			m.pollUntil(t, 10*time.Second, "the records from the positions", func() bool { return w.total() >= n })
			// Anything more would be a record before a position.
			for range 5 {
				if _, err := m.poll(50 * time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			for p, offs := range want {
				if got := committedOf(w, p); !slices.Equal(got, offs) {
					t.Errorf("%s: read offsets %v, want %v", p, got, offs)
				}
			}
			// Reading goes on from there.
			w.mu.Lock()
			w.committed = map[string][]int64{}
			w.mu.Unlock()
			produce(t, addrs, 2, 0, 1, 2, 3)
			m.pollUntil(t, 10*time.Second, "the new records", func() bool { return w.total() >= 8 })
			for _, p := range all4 {
				if got := committedOf(w, p); !slices.Equal(got, seq(10, 12)) {
					t.Errorf("%s: then read %v, want [10 11]", p, got)
				}
			}
			w.checkNoViolations(t)
			// The seek is exact: Poll did not have to drop anything below
			// a position.
			if st := m.src.Stats(); st.Dropped != 0 {
				t.Errorf("Poll dropped %d records below the positions", st.Dropped)
			}
		})
	}
}

// Two members, one group: when B joins, only the partitions that move to B
// are revoked from A, A's Revoked returns before B's Assigned for each of
// them, A returns no record of them afterwards, and B starts where A's
// commits left them: every record is committed exactly once.
func TestCooperativeRevoke(t *testing.T) {
	addrs := newCluster(t)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	a := startMember(t, w, addrs, "A", "g", memberOpts{})
	// A commits every 5 polls and takes a while to commit in Revoked: the
	// partitions must not go to B before.
	a.commitEvery, a.revokeDelay = 5, 200*time.Millisecond
	produce(t, addrs, 50, 0, 1, 2, 3)
	a.pollUntil(t, 10*time.Second, "A owning all", owns(a, all4...))

	stopA := a.loop()
	// Records keep coming while the group rebalances.
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for range 10 {
			produce(t, addrs, 10, 0, 1, 2, 3)
			time.Sleep(30 * time.Millisecond)
		}
	}()
	b := startMember(t, w, addrs, "B", "g", memberOpts{})
	stopB := b.loop()
	waitFor(t, 10*time.Second, "A and B owning 2 each", func() bool {
		return len(a.ownedParts()) == 2 && len(b.ownedParts()) == 2
	})
	<-prodDone
	a.mu.Lock()
	a.commitEvery = 1 // commit what is left in flight
	a.mu.Unlock()
	waitFor(t, 10*time.Second, "every record committed", func() bool { return w.total() == 4*150 })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}

	moved := b.ownedParts()
	kept := a.ownedParts()
	if slices.ContainsFunc(kept, func(p string) bool { return slices.Contains(moved, p) }) {
		t.Fatalf("A owns %v, B owns %v", kept, moved)
	}
	// A: one assignment of all four, one revocation of exactly the moved.
	var aEvents []string
	for _, e := range w.eventsOf("A") {
		aEvents = append(aEvents, e.String())
	}
	wantA := []string{"A assigned " + strings.Join(all4, ","), "A revoked " + strings.Join(moved, ",")}
	if !slices.Equal(aEvents, wantA) {
		t.Errorf("A's handler calls: %q, want %q", aEvents, wantA)
	}
	for _, p := range moved {
		r, as := w.index(0, "A", "revoked", p), w.index(0, "B", "assigned", p)
		if r < 0 || as < 0 || r > as {
			t.Errorf("%s: A's Revoked at %d, B's Assigned at %d in %v", p, r, as, w.eventsOf(""))
		}
	}
	w.checkExactlyOnce(t, map[string]int64{"events/0": 150, "events/1": 150, "events/2": 150, "events/3": 150})
	w.checkNoViolations(t)
}

// Committed commits the group's offsets (kadm sees them), skips partitions
// the handler does not own, and Status reports the end offsets and the
// group's offsets for lag.
func TestCommittedAndStatus(t *testing.T) {
	addrs := newCluster(t)
	adm := adminClient(t, addrs)
	produce(t, addrs, 10, 0, 1, 2, 3)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	a := startMember(t, w, addrs, "A", "g", memberOpts{})
	a.pollUntil(t, 10*time.Second, "all records", func() bool { return w.total() == 40 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := a.src.Committed(ctx, map[string]string{"events/0": "5", "events/1": "10", "other/0": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.src.Committed(ctx, map[string]string{"events/2": "x"}); err == nil {
		t.Error("Committed took a bad position")
	}
	got, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int32]int64{0: 5, 1: 10, 2: -1, 3: -1} {
		o, ok := got.Lookup(topic, p)
		if want < 0 {
			if ok && o.At >= 0 {
				t.Errorf("events/%d: group offset %d, want none", p, o.At)
			}
			continue
		}
		if !ok || o.At != want {
			t.Errorf("events/%d: group offset %v (found %v), want %d", p, o.At, ok, want)
		}
	}
	if _, ok := got.Lookup("other", 0); ok {
		t.Error("a partition the handler does not own was committed")
	}

	st, err := Status(ctx, addrs, "g", []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, s := range st {
		lines = append(lines, fmt.Sprintf("%s start=%d end=%d stable=%d committed=%d", s.Partition, s.Start, s.End, s.Stable, s.Committed))
	}
	want := []string{
		"events/0 start=0 end=10 stable=10 committed=5",
		"events/1 start=0 end=10 stable=10 committed=10",
		"events/2 start=0 end=10 stable=10 committed=-1",
		"events/3 start=0 end=10 stable=10 committed=-1",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("Status:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if lag, err := st[0].Lag("5"); err != nil || lag != 5 {
		t.Errorf("Lag(5) = %d, %v; want 5", lag, err)
	}
	if lag, err := st[2].Lag(""); err != nil || lag != 10 {
		t.Errorf(`Lag("") = %d, %v; want 10`, lag, err)
	}
}

// Records come in order per partition, each once, over many polls of a
// few records while more are written.
func TestRecordsInOrder(t *testing.T) {
	addrs := newCluster(t)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	a := startMember(t, w, addrs, "A", "g", memberOpts{cfg: func(c *Config) { c.MaxPollRecords = 7 }})
	stop := a.loop()
	for range 6 {
		produce(t, addrs, 50, 0, 1, 2, 3)
	}
	waitFor(t, 10*time.Second, "every record", func() bool { return w.total() == 4*300 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	w.checkExactlyOnce(t, map[string]int64{"events/0": 300, "events/1": 300, "events/2": 300, "events/3": 300})
	w.checkNoViolations(t)
}

// Seek reads a partition again from a position (an aborted checkpoint), and
// nothing else of it before.
func TestSeek(t *testing.T) {
	addrs := newCluster(t)
	produce(t, addrs, 10, 0, 1, 2, 3)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	a := startMember(t, w, addrs, "A", "g", memberOpts{})
	a.noCommit = true
	a.pollUntil(t, 10*time.Second, "all records", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.inflight) == 40
	})
	ctx := context.Background()
	if err := a.src.Seek(ctx, map[string]string{"events/1": "x"}); err == nil {
		t.Error("Seek took a bad position")
	}
	// A partition the handler does not own is skipped.
	if err := a.src.Seek(ctx, map[string]string{"events/1": "4", "other/0": "1"}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.inflight = nil
	a.last = map[string]int64{}
	a.mu.Unlock()
	a.pollUntil(t, 10*time.Second, "events/1 again", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.inflight) >= 6
	})
	for range 5 {
		if _, err := a.poll(50 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	var got []string
	for _, r := range a.inflight {
		got = append(got, r.Partition+"<"+r.Next)
	}
	a.mu.Unlock()
	want := []string{"events/1<5", "events/1<6", "events/1<7", "events/1<8", "events/1<9", "events/1<10"}
	if !slices.Equal(got, want) {
		t.Errorf("after Seek(events/1, 4): %v, want %v", got, want)
	}
	// An empty position: from the source's start (no group offsets: 0).
	a.mu.Lock()
	a.inflight = nil
	a.last = map[string]int64{}
	a.mu.Unlock()
	if err := a.src.Seek(ctx, map[string]string{"events/2": ""}); err != nil {
		t.Fatal(err)
	}
	a.pollUntil(t, 10*time.Second, "events/2 from 0", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.inflight) >= 10
	})
	a.mu.Lock()
	first, n := a.inflight[0], len(a.inflight)
	a.mu.Unlock()
	if first.Partition != "events/2" || first.Next != "1" || n != 10 {
		t.Errorf("after Seek(events/2, \"\"): %d records from %s<%s, want 10 from events/2<1", n, first.Partition, first.Next)
	}
	w.checkNoViolations(t)
}

// A failed Assigned: Poll returns the handler's error, nothing of the
// partitions is read, the handler is told they are gone, and they are
// assigned again; reading starts at the position of the Assigned that
// succeeded, not at the group's committed offset.
func TestAssignedFails(t *testing.T) {
	addrs := newCluster(t)
	adm := adminClient(t, addrs)
	produce(t, addrs, 10, 0, 1, 2, 3)
	commitGroup(t, adm, "g", map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0})
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	a := startMember(t, w, addrs, "A", "g", memberOpts{lost: true})
	boom := errors.New("boom: the progress target is down")
	a.failNext = boom
	a.positions = map[string]string{"events/0": "6", "events/1": "6", "events/2": "6", "events/3": "6"}

	var pollErr error
	deadline := time.Now().Add(10 * time.Second)
	for pollErr == nil {
		if time.Now().After(deadline) {
			t.Fatal("no error from Poll after a failed Assigned")
		}
		recs, err := a.poll(50 * time.Millisecond)
		if len(recs) > 0 {
			t.Fatalf("records %v before the handler took the partitions", recs)
		}
		pollErr = err
	}
	if !errors.Is(pollErr, boom) {
		t.Fatalf("Poll: %v, want the handler's error", pollErr)
	}
	a.pollUntil(t, 10*time.Second, "the records from 6", func() bool { return w.total() == 16 })
	for _, p := range all4 {
		if got := committedOf(w, p); !slices.Equal(got, seq(6, 10)) {
			t.Errorf("%s: read %v, want 6..9", p, got)
		}
	}
	var kinds []string
	for _, e := range w.eventsOf("A") {
		kinds = append(kinds, e.kind)
	}
	if !slices.Equal(kinds, []string{"assign-failed", "lost", "assigned"}) {
		t.Errorf("A's handler calls: %v, want assign-failed, lost, assigned", kinds)
	}
	w.checkNoViolations(t)
}

// A position past the end of the log is an error of the partition, not a
// silent reset to somewhere else.
func TestPositionOutOfRange(t *testing.T) {
	addrs := newCluster(t)
	produce(t, addrs, 10, 0, 1, 2, 3)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	a := startMember(t, w, addrs, "A", "g", memberOpts{})
	a.positions = map[string]string{"events/0": "50", "events/1": "10", "events/2": "10", "events/3": "10"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no error for a position past the end of the log")
		}
		recs, err := a.poll(50 * time.Millisecond)
		if len(recs) > 0 {
			t.Fatalf("records %v", recs)
		}
		if err == nil {
			continue
		}
		var pe *PartitionError
		if !errors.As(err, &pe) || pe.Partition != "events/0" {
			t.Fatalf("Poll: %v, want a PartitionError of events/0", err)
		}
		t.Logf("Poll: %v", err)
		break
	}
	w.checkNoViolations(t)
}

// Close leaves the group: the other member gets the partitions at once, not
// after the session timeout.
func TestCloseLeavesGroup(t *testing.T) {
	addrs := newCluster(t)
	adm := adminClient(t, addrs)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	long := memberOpts{cfg: func(c *Config) { c.SessionTimeout = 20 * time.Second }}
	a := startMember(t, w, addrs, "A", "g", long)
	a.pollUntil(t, 10*time.Second, "A owning all", owns(a, all4...))
	stopA := a.loop()
	b := startMember(t, w, addrs, "B", "g", long)
	stopB := b.loop()
	waitFor(t, 10*time.Second, "A and B owning 2 each", func() bool {
		return len(a.ownedParts()) == 2 && len(b.ownedParts()) == 2
	})
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.src.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Since(start)
	waitFor(t, 5*time.Second, "B owning all", owns(b, all4...))
	took := time.Since(start)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v; B owned every partition %v after it", closed, took)
	if took > 5*time.Second {
		t.Errorf("B took %v to get A's partitions", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, err := adm.DescribeGroups(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(groups["g"].Members); n != 1 {
		t.Errorf("group has %d members after A's Close, want 1", n)
	}
	if _, err := a.src.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Poll after Close: %v, want ErrClosed", err)
	}
	w.checkNoViolations(t)
}
