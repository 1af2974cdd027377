package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/sink"
)

// The tests run against kfake, an in-process Kafka cluster, with a fake
// sink: a "world" holding a progress table (positions and epochs per
// partition, as docs/sink.md has them) and members, each a Source and a
// Handler, that read records, keep them in flight, and commit them under
// the epoch they took the partition with, as the sink does.

const topic = "events"

func newCluster(t *testing.T) []string {
	t.Helper()
	return newClusterC(t).ListenAddrs()
}

func newClusterC(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(4, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produce writes n records to each of partitions; a record's value is
// "<partition>@<offset>" for the offset it is expected at (each partition
// is written by one producer in the tests).
func produce(t *testing.T, addrs []string, n int, partitions ...int32) {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := endOffsets(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, p := range partitions {
		for i := range n {
			off := ends[p] + int64(i)
			recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%s/%d@%d", topic, p, off)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func endOffsets(ctx context.Context, cl *kgo.Client) (map[int32]int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

var all4 = []string{"events/0", "events/1", "events/2", "events/3"}

type event struct {
	who, kind string
	parts     []string
}

func (e event) String() string { return e.who + " " + e.kind + " " + strings.Join(e.parts, ",") }

// world is the fake sink's shared state: its progress table and what it
// committed.
type world struct {
	mu       sync.Mutex
	events   []event
	progress map[string]string // partition -> position
	epoch    map[string]int    // partition -> epoch
	// committed holds the offsets committed per partition, in commit
	// order: exactly once means 0, 1, 2, ... with nothing twice.
	committed map[string][]int64
	// fenced counts records whose commit failed on the epoch (a zombie's).
	fenced     int
	violations []string
}

func newWorld() *world {
	return &world{progress: map[string]string{}, epoch: map[string]int{}, committed: map[string][]int64{}}
}

func (w *world) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

func (w *world) log(who, kind string, parts []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, event{who, kind, slices.Clone(parts)})
}

func (w *world) eventsOf(who string) []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []event
	for _, e := range w.events {
		if who == "" || e.who == who {
			out = append(out, e)
		}
	}
	return out
}

// index returns the position in the event log of the first event matching
// who, kind and holding partition p, from index from on; -1 if none.
func (w *world) index(from int, who, kind, p string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := from; i < len(w.events); i++ {
		e := w.events[i]
		if e.who == who && e.kind == kind && slices.Contains(e.parts, p) {
			return i
		}
	}
	return -1
}

// checkExactlyOnce checks that each partition's committed offsets are 0..n-1.
func (w *world) checkExactlyOnce(t *testing.T, n map[string]int64) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range all4 {
		got := w.committed[p]
		ok := int64(len(got)) == n[p]
		for i, off := range got {
			if off != int64(i) {
				ok = false
			}
		}
		if !ok {
			t.Errorf("%s: committed offsets %v, want 0..%d once each", p, got, n[p]-1)
		}
	}
}

func (w *world) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.committed {
		n += len(c)
	}
	return n
}

// dump logs the world's state (for a failed test).
func (w *world) dump(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("events: %v", w.events)
	for _, p := range all4 {
		c := w.committed[p]
		var odd []string
		for i, off := range c {
			if off != int64(i) {
				odd = append(odd, fmt.Sprintf("[%d]=%d", i, off))
			}
		}
		if len(odd) > 5 {
			odd = append(odd[:5], "...")
		}
		t.Logf("%s: progress %s epoch %d, %d committed, out of place: %v", p, w.progress[p], w.epoch[p], len(c), odd)
	}
	v := w.violations
	if len(v) > 5 {
		v = append(v[:5:5], fmt.Sprintf("... %d more", len(w.violations)-5))
	}
	t.Logf("fenced %d, violations %q", w.fenced, v)
}

func (w *world) checkNoViolations(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, v := range w.violations {
		if i == 5 {
			t.Errorf("... and %d more violations", len(w.violations)-5)
			break
		}
		t.Error(v)
	}
}

// member is one instance of the fake sink: a Source and its Handler.
type member struct {
	name string
	w    *world
	src  *Source
	// inPoll is set while the member's goroutine is inside Poll: the
	// handler must only run then.
	inPoll atomic.Bool

	mu        sync.Mutex
	owned     map[string]int // partition -> the epoch taken
	inflight  []sink.Record  // read, not committed
	last      map[string]int64
	positions map[string]string // if set, Assigned returns these instead of the progress table's
	failNext  error             // if set, the next Assigned fails with it
	noCommit  bool              // keep records in flight (a stalled sink)
	// commitEvery: commit after every that many polls (a checkpoint
	// interval; 0 or 1: every poll).
	commitEvery int
	polls       int
	// revokeDelay: Revoked takes that long (committing a checkpoint).
	revokeDelay time.Duration
	// kafkaCommit: commits also go to the group's offsets (Committed), and
	// Assigned returns no positions: the group's offsets are the progress.
	kafkaCommit bool
}

type plainHandler struct{ m *member }

func (h plainHandler) Assigned(ctx context.Context, parts []string) (map[string]string, error) {
	return h.m.assigned(ctx, parts)
}
func (h plainHandler) Revoked(ctx context.Context, parts []string) error {
	return h.m.revoked(parts, "revoked")
}

type lostHandler struct{ plainHandler }

func (h lostHandler) Lost(ctx context.Context, parts []string) error {
	return h.m.revoked(parts, "lost")
}

type memberOpts struct {
	cfg  func(*Config)
	lost bool // the handler implements LostHandler
}

func startMember(t *testing.T, w *world, addrs []string, name, group string, o memberOpts) *member {
	t.Helper()
	m := &member{name: name, w: w, owned: map[string]int{}, last: map[string]int64{}}
	cfg := Config{
		Brokers:           addrs,
		Group:             group,
		Topics:            []string{topic},
		ClientID:          name,
		SessionTimeout:    3 * time.Second,
		RebalanceTimeout:  3 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		// A fetch that finds nothing new waits at most this long (kgo's
		// default is 5 s).
		Options: []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond)},
	}
	if os.Getenv("KAFKASOURCE_DEBUG") != "" {
		cfg.Options = append(cfg.Options, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string { return name + " " })))
		cfg.Logf = t.Logf
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h sink.Handler = plainHandler{m}
	if o.lost {
		h = lostHandler{plainHandler{m}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := src.Start(ctx, h); err != nil {
		t.Fatal(err)
	}
	m.src = src
	t.Cleanup(func() { src.Close() })
	return m
}

func (m *member) checkInPoll(what string) {
	if !m.inPoll.Load() {
		m.w.violate("%s: %s called outside Poll", m.name, what)
	}
}

func (m *member) assigned(_ context.Context, parts []string) (map[string]string, error) {
	m.checkInPoll("Assigned")
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		m.w.log(m.name, "assign-failed", parts)
		return nil, err
	}
	w := m.w
	w.mu.Lock()
	pos := map[string]string{}
	for _, p := range parts {
		w.epoch[p]++
		m.owned[p] = w.epoch[p]
		delete(m.last, p)
		if m.kafkaCommit {
			continue
		}
		if m.positions != nil {
			if v, ok := m.positions[p]; ok {
				pos[p] = v
			}
		} else if v, ok := w.progress[p]; ok {
			pos[p] = v
		}
	}
	w.events = append(w.events, event{m.name, "assigned", slices.Clone(parts)})
	w.mu.Unlock()
	return pos, nil
}

// revoked commits (kind "revoked") or aborts (kind "lost") the in-flight
// records of parts, then lets them go.
func (m *member) revoked(parts []string, kind string) error {
	m.checkInPoll(kind)
	m.mu.Lock()
	defer m.mu.Unlock()
	if kind == "revoked" {
		time.Sleep(m.revokeDelay)
		m.commitLocked(parts)
	}
	var keep []sink.Record
	for _, r := range m.inflight {
		if !slices.Contains(parts, r.Partition) {
			keep = append(keep, r)
		}
	}
	m.inflight = keep
	for _, p := range parts {
		delete(m.owned, p)
	}
	m.w.log(m.name, kind, parts)
	return nil
}

// commitLocked commits the in-flight records of parts (all if nil) under
// the epochs the member took them with: a partition whose epoch moved on
// is not committed (its records are counted as fenced).
func (m *member) commitLocked(parts []string) {
	w := m.w
	w.mu.Lock()
	defer w.mu.Unlock()
	var keep []sink.Record
	for _, r := range m.inflight {
		if parts != nil && !slices.Contains(parts, r.Partition) {
			keep = append(keep, r)
			continue
		}
		e, ok := m.owned[r.Partition]
		if !ok || e != w.epoch[r.Partition] {
			w.fenced++
			continue
		}
		next, _ := strconv.ParseInt(r.Next, 10, 64)
		w.committed[r.Partition] = append(w.committed[r.Partition], next-1)
		w.progress[r.Partition] = r.Next
	}
	m.inflight = keep
}

func (m *member) commit() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commitLocked(nil)
	if m.kafkaCommit {
		m.w.mu.Lock()
		pos := map[string]string{}
		for p := range m.owned {
			if v, ok := m.w.progress[p]; ok {
				pos[p] = v
			}
		}
		m.w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.src.Committed(ctx, pos); err != nil {
			m.w.violate("%s: Committed: %v", m.name, err)
		}
	}
}

// poll polls once for at most d, checks what came, keeps it in flight and
// commits it (unless noCommit). It returns the records and Poll's error.
func (m *member) poll(d time.Duration) ([]sink.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m.inPoll.Store(true)
	recs, err := m.src.Poll(ctx)
	m.inPoll.Store(false)
	m.mu.Lock()
	for _, r := range recs {
		next, perr := strconv.ParseInt(r.Next, 10, 64)
		if perr != nil {
			m.w.violate("%s: bad Next %q", m.name, r.Next)
			continue
		}
		off := next - 1
		if _, ok := m.owned[r.Partition]; !ok {
			m.w.violate("%s: record %s@%d of a partition the handler does not own", m.name, r.Partition, off)
		}
		if want := fmt.Sprintf("%s@%d", r.Partition, off); string(r.Value) != want {
			m.w.violate("%s: record value %q, want %q", m.name, r.Value, want)
		}
		if last, ok := m.last[r.Partition]; ok && off != last+1 {
			m.w.violate("%s: %s: offset %d after %d", m.name, r.Partition, off, last)
		}
		m.last[r.Partition] = off
		m.inflight = append(m.inflight, r)
	}
	m.polls++
	noCommit := m.noCommit || m.commitEvery > 1 && m.polls%m.commitEvery != 0
	m.mu.Unlock()
	if !noCommit {
		m.commit()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return recs, err
	}
	return recs, nil
}

func (m *member) ownedParts() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.owned {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// pollUntil polls until cond holds, failing the test after timeout. Poll
// errors fail the test.
func (m *member) pollUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out waiting for %s (owns %v)", m.name, what, m.ownedParts())
		}
		if _, err := m.poll(50 * time.Millisecond); err != nil {
			t.Fatalf("%s: Poll: %v", m.name, err)
		}
	}
}

// loop polls in a goroutine until stop is called; stop returns the first
// Poll error.
func (m *member) loop() (stop func() error) {
	done := make(chan struct{})
	var err error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, perr := m.poll(50 * time.Millisecond); perr != nil && err == nil {
				err = perr
			}
		}
	}()
	return func() error {
		close(done)
		<-finished
		return err
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func owns(m *member, parts ...string) func() bool {
	return func() bool { return slices.Equal(m.ownedParts(), parts) }
}

func ownsN(m *member, n int) func() bool {
	return func() bool { return len(m.ownedParts()) == n }
}
