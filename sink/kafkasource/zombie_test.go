package kafkasource

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A member whose sink stops polling with records in flight (a stalled
// sink: kgo keeps heartbeating, so it is the rebalance that throws it out)
// does not take part when B joins, and is thrown out of the group after the
// rebalance timeout, past its session timeout; B takes every partition and
// reads the in-flight records again. When A polls again, its handler is
// told the partitions are lost (before any other handler call, and A
// returns no record of them afterwards), A's in-flight records can no
// longer be committed (the epochs moved on), and A rejoins: the partitions
// that come back to it are revoked from B first. Every record is committed
// exactly once.
func TestZombieNotPolled(t *testing.T) {
	addrs := newCluster(t)
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	fast := memberOpts{lost: true, cfg: func(c *Config) {
		c.SessionTimeout = 500 * time.Millisecond
		c.RebalanceTimeout = time.Second
	}}
	a := startMember(t, w, addrs, "A", "g", fast)
	produce(t, addrs, 10, 0, 1, 2, 3)
	a.noCommit = true
	a.pollUntil(t, 10*time.Second, "A holding every record in flight", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.inflight) == 40
	})
	// A stops polling here.
	stalled := time.Now()
	b := startMember(t, w, addrs, "B", "g", fast)
	stopB := b.loop()
	waitFor(t, 10*time.Second, "B owning every partition", owns(b, all4...))
	t.Logf("B owned every partition %v after A stalled", time.Since(stalled))
	waitFor(t, 10*time.Second, "B committing every record", func() bool { return w.total() == 40 })
	mark := len(w.eventsOf(""))

	// A wakes up and first finishes its checkpoint, as a stopped process
	// does: the commit fails on every partition's epoch.
	a.commit()
	w.mu.Lock()
	fenced := w.fenced
	w.mu.Unlock()
	if fenced != 40 {
		t.Errorf("%d of A's 40 in-flight records fenced", fenced)
	}
	// Then A polls again.
	a.mu.Lock()
	a.noCommit = false
	a.mu.Unlock()
	a.pollUntil(t, 10*time.Second, "A's handler told of the loss", func() bool {
		return w.index(mark, "A", "lost", "events/0") >= 0
	})
	produce(t, addrs, 10, 0, 1, 2, 3)
	stopA := a.loop()
	waitFor(t, 10*time.Second, "A and B owning 2 each", func() bool {
		return len(a.ownedParts()) == 2 && len(b.ownedParts()) == 2
	})
	waitFor(t, 10*time.Second, "every record committed", func() bool { return w.total() == 80 })
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}

	var after []string
	for _, e := range w.eventsOf("")[mark:] {
		after = append(after, e.String())
	}
	t.Logf("handler calls after A polled again: %q", after)
	// A's handler is told every partition is lost (in one call, or two when
	// kgo kept some of them across A's new membership), before A takes any.
	var lost []string
	aAfter := w.eventsOf("A")[1:]
	for len(aAfter) > 0 && aAfter[0].kind == "lost" {
		lost = append(lost, aAfter[0].parts...)
		aAfter = aAfter[1:]
	}
	slices.Sort(lost)
	if !slices.Equal(lost, all4) || len(aAfter) == 0 || aAfter[0].kind != "assigned" {
		t.Fatalf("A's handler calls after its first assignment: %v; want lost %v, then assigned", w.eventsOf("A")[1:], all4)
	}
	for _, p := range a.ownedParts() {
		r, as := w.index(mark, "B", "revoked", p), w.index(mark, "A", "assigned", p)
		if r < 0 || as < 0 || r > as {
			t.Errorf("%s: B's Revoked at %d, A's Assigned at %d", p, r, as)
		}
	}
	st := a.src.Stats()
	if st.Lost < 1 {
		t.Errorf("A's Stats: Lost %d, want at least 1", st.Lost)
	}
	w.checkExactlyOnce(t, map[string]int64{"events/0": 20, "events/1": 20, "events/2": 20, "events/3": 20})
	w.checkNoViolations(t)
}

// A member thrown out of the group while its partitions' new owner then
// leaves: when it polls again, it rejoins under a new member ID as the only
// member and gets the same partitions back. kgo, comparing with the
// assignment it held under its old ID, neither revokes nor assigns them,
// and would read on from its old position; the source tells the handler
// they were lost, has it take them again, and reads from its positions (B
// committed past A's old position): every record once.
//
// kgo takes this path when the heartbeats of the thrown-out member said
// REBALANCE_IN_PROGRESS until then (it rejoins; the join finds its member
// ID unknown); when a heartbeat says UNKNOWN_MEMBER_ID instead, kgo itself
// reports the partitions lost and assigns them anew. The cluster answers
// A's heartbeats with REBALANCE_IN_PROGRESS once A stalls, to take the
// first path every time.
func TestZombieKeptPartitions(t *testing.T) {
	c := newClusterC(t)
	addrs := c.ListenAddrs()
	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	fast := memberOpts{lost: true, cfg: func(c *Config) {
		c.SessionTimeout = 500 * time.Millisecond
		c.RebalanceTimeout = time.Second
	}}
	a := startMember(t, w, addrs, "A", "g", fast)
	produce(t, addrs, 10, 0, 1, 2, 3)
	a.noCommit = true
	a.pollUntil(t, 10*time.Second, "A holding every record in flight", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.inflight) == 40
	})
	stalled := a.src.Stats().MemberID
	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		hb := req.(*kmsg.HeartbeatRequest)
		if hb.MemberID != stalled {
			return nil, nil, false
		}
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true
	})
	b := startMember(t, w, addrs, "B", "g", fast)
	stopB := b.loop()
	waitFor(t, 10*time.Second, "B owning every partition", owns(b, all4...))
	produce(t, addrs, 10, 0, 1, 2, 3)
	waitFor(t, 10*time.Second, "B committing every record", func() bool { return w.total() == 80 })
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	b.src.Close()
	mark := len(w.eventsOf(""))

	a.mu.Lock()
	a.noCommit = false
	a.inflight = nil // A's checkpoint aborts (its epochs moved on)
	a.mu.Unlock()
	produce(t, addrs, 10, 0, 1, 2, 3)
	a.pollUntil(t, 10*time.Second, "A committing the new records", func() bool { return w.total() == 120 })
	var calls []string
	for _, e := range w.eventsOf("")[mark:] {
		calls = append(calls, e.String())
	}
	t.Logf("handler calls after A polled again: %q", calls)
	want := []string{"A lost " + strings.Join(all4, ","), "A assigned " + strings.Join(all4, ",")}
	if !slices.Equal(calls, want) {
		t.Errorf("handler calls %q, want %q", calls, want)
	}
	w.checkExactlyOnce(t, map[string]int64{"events/0": 30, "events/1": 30, "events/2": 30, "events/3": 30})
	w.checkNoViolations(t)
}
