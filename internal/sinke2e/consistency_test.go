package sinke2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/sink/sqlsink"
)

// The checker reads, while the sink runs, the progress table and the rows
// of both databases, and checks that they agree: one checkpoint spans both
// databases, so neither may hold a checkpoint's rows without the other,
// except for the window of phase two (the decision is durable, one branch
// is committed, the other not yet).
//
// There is no snapshot spanning two servers, so one check is three reads,
// in this order:
//
//  1. Status: the progress rows (the committed positions P1 and, per
//     partition, the incarnation and checkpoint that last moved them),
//     then the prepared branches listed on each target (XA RECOVER,
//     pg_prepared_xacts) with their decisions;
//  2. the rows of each target, per partition: count, distinct offsets,
//     lowest and highest offset (one statement each: one snapshot each);
//  3. the progress rows again (P2).
//
// Rows commit only after their checkpoint's decision, which moves the
// positions; so every row seen in 2 was decided before 3:
//
//   - no target holds a row at or beyond P2 (nothing lands undecided);
//   - no offset is held twice (nothing lands twice).
//
// A checkpoint decided before 1 whose branch on target X was not yet
// committed when 2 read X was prepared before 1 and so was listed in 1.
// A checkpoint is decided only after the previous one committed on every
// target, so per partition only the last checkpoint, the one the progress
// row names, can be in phase two:
//
//   - the rows of a partition in X are the offsets 0..n-1 (no hole);
//   - n >= P1, or X listed in 1 the branch of the checkpoint the progress
//     row names, decided commit (phase two's window, counted);
//   - n >= F, the position an earlier check saw in the partition's progress
//     row under another checkpoint: that checkpoint committed everywhere
//     before the one now named was decided, so its window is closed.
//
// That is the strict form (TestTwoDatabasesOneCheckpoint: no process is
// killed). Under kills (TestKillSinkProcesses) a dead instance's decided
// branch may wait for restore while the partition's next owner commits
// later checkpoints, so the relaxed form lets a hole or a lag in X pass
// when X lists any branch of the sink decided commit; the rules that
// nothing lands undecided or twice stay.
type checker struct {
	r      *rig
	strict bool
	stopc  chan struct{}
	done   chan struct{}

	mu         sync.Mutex
	checks     int
	readErrs   int
	windows    map[string]int // target -> partitions seen in phase two's window
	lagBranch  int            // (relaxed) lags explained by some decided branch
	moved      int            // partitions whose position moved between 1 and 3
	maxRows    int64
	violations []string
	// seen is each partition's progress row at the last check; floor the
	// position below which its rows must all be present (strict).
	seen  map[string]sqlsink.PartitionStatus
	floor map[string]int64
}

func (r *rig) startChecker(strict bool) *checker {
	c := &checker{r: r, strict: strict, stopc: make(chan struct{}), done: make(chan struct{}), windows: map[string]int{},
		seen: map[string]sqlsink.PartitionStatus{}, floor: map[string]int64{}}
	go c.loop()
	r.t.Cleanup(func() { c.stop() })
	return c
}

func (c *checker) loop() {
	defer close(c.done)
	for {
		select {
		case <-c.stopc:
			return
		case <-time.After(50 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.once(ctx)
		cancel()
		c.mu.Lock()
		if err != nil {
			c.readErrs++
		} else {
			c.checks++
		}
		c.mu.Unlock()
	}
}

// stop stops the checker and returns its summary.
func (c *checker) stop() string {
	select {
	case <-c.stopc:
	default:
		close(c.stopc)
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	mode := "relaxed"
	if c.strict {
		mode = "strict"
	}
	s := fmt.Sprintf("%d checks (%s; %d reads failed), up to %d rows per target; phase two's window seen %d times in %s, %d in %s; %d partition positions moved during a check",
		c.checks, mode, c.readErrs, c.maxRows, c.windows[tgMy], tgMy, c.windows[tgPg], tgPg, c.moved)
	if !c.strict {
		s += fmt.Sprintf("; %d lags or holes explained by a decided branch pending", c.lagBranch)
	}
	if len(c.violations) > 0 {
		s += fmt.Sprintf("; %d VIOLATIONS, the first: %s", len(c.violations), c.violations[0])
	}
	return s
}

// err returns the first violation found so far.
func (c *checker) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) == 0 {
		return nil
	}
	return fmt.Errorf("the databases disagree (%d violations): %s", len(c.violations), strings.Join(c.violations[:min(5, len(c.violations))], "; "))
}

func (c *checker) violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// once runs one check; an error is a failed read (a database down).
func (c *checker) once(ctx context.Context) error {
	r := c.r
	st1, err := r.s.Status(ctx)
	if err != nil {
		return err
	}
	my, err := r.countMy(ctx, true)
	if err != nil {
		return err
	}
	pg, err := r.countPg(ctx, true)
	if err != nil {
		return err
	}
	p2, _, err := r.positions(ctx)
	if err != nil {
		return err
	}
	p1 := positionsOf(st1)
	row := map[string]sqlsink.PartitionStatus{}
	for _, p := range st1.Partitions {
		row[p.Partition] = p
		if prev, ok := c.seen[p.Partition]; ok && (prev.Owner != p.Owner || prev.Checkpoint != p.Checkpoint) {
			c.floor[p.Partition] = max(c.floor[p.Partition], atoi64(prev.Position))
		}
		c.seen[p.Partition] = p
	}
	listed := func(target string, match func(sqlsink.Ref) bool) bool {
		return slices.ContainsFunc(st1.Branches, func(b sqlsink.BranchStatus) bool {
			return b.Ref.Target == target && b.Decision == sqlsink.DecidedCommit && match(b.Ref)
		})
	}
	var total [2]int64
	for _, p := range slices.Sorted(maps.Keys(union(p2, my.parts, pg.parts))) {
		if p1[p] != p2[p] {
			c.mu.Lock()
			c.moved++
			c.mu.Unlock()
		}
		for i, x := range []struct {
			name string
			c    partCount
		}{{tgMy, my.parts[p]}, {tgPg, pg.parts[p]}} {
			pc := x.c
			total[i] += pc.rows
			if pc.rows != pc.offsets {
				c.violate("%s holds %d rows of %s for %d distinct offsets: a record landed twice", x.name, pc.rows, p, pc.offsets)
			}
			n := int64(0)
			if pc.rows > 0 {
				n = pc.max + 1
			}
			if n > p2[p] {
				c.violate("%s holds offsets of %s up to %d, beyond the committed position %d (read after the rows): rows landed without their decision",
					x.name, p, pc.max, p2[p])
			}
			if c.strict && n < c.floor[p] {
				c.violate("%s holds %s up to offset %d, but a checkpoint that ended at %d was followed by another decided one: its phase two was not over",
					x.name, p, n-1, c.floor[p])
			}
			hole := pc.rows > 0 && (pc.min != 0 || pc.rows != n)
			lag := n < p1[p]
			if !hole && !lag {
				continue
			}
			pr := row[p]
			exact := listed(x.name, func(ref sqlsink.Ref) bool { return ref.Incarnation == pr.Owner && ref.Checkpoint == pr.Checkpoint })
			anyDecided := listed(x.name, func(sqlsink.Ref) bool { return true })
			switch {
			case c.strict && hole:
				c.violate("%s holds %d rows of %s with offsets %d..%d: a hole", x.name, pc.rows, p, pc.min, pc.max)
			case c.strict && !exact:
				c.violate("%s holds %s up to offset %d, the committed position is %d (read before), and %s listed no decided branch of the checkpoint that moved it (incarnation %d, checkpoint %d): one database without the other",
					x.name, p, n-1, p1[p], x.name, pr.Owner, pr.Checkpoint)
			case c.strict || exact:
				c.mu.Lock()
				c.windows[x.name]++
				c.mu.Unlock()
			case anyDecided:
				c.mu.Lock()
				c.lagBranch++
				c.mu.Unlock()
			default:
				c.violate("%s holds %d rows of %s (offsets %d..%d), the committed position is %d (read before), and %s listed no decided branch pending: one database without the other",
					x.name, pc.rows, p, pc.min, pc.max, p1[p], x.name)
			}
		}
	}
	c.mu.Lock()
	c.maxRows = max(c.maxRows, total[0], total[1])
	c.mu.Unlock()
	return nil
}

func union[V1, V2, V3 any](a map[string]V1, b map[string]V2, c map[string]V3) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	for k := range c {
		out[k] = true
	}
	return out
}

// TestTwoDatabasesOneCheckpoint: two sink processes write every record to
// MariaDB and PostgreSQL under one checkpoint each, the bookkeeping in
// MariaDB, while a producer produces; the steps after the prepare are
// slowed down so that the windows between them are wide (the decision is
// delayed up to 40 ms, each branch's commit up to 30 ms on MariaDB, 80 ms
// on PostgreSQL). The strict checker runs all along: no target ever holds
// rows undecided, twice, or without the other beyond phase two's window of
// the checkpoint the progress row names.
func TestTwoDatabasesOneCheckpoint(t *testing.T) {
	secs := envInt(t, "XA_SINK_CHECK_SECONDS", 12)
	r := newRig(t, rigOpts{progress: tgMy})
	spec := r.spec
	// No process is killed here: a long session timeout keeps a busy
	// machine from throwing a live worker out of the group (its partitions
	// would move while its checkpoint is in phase two).
	spec.SessionTimeout, spec.HeartbeatInterval = 6*time.Second, 500*time.Millisecond
	spec.Delays = []delayRule{
		{Target: tgMy, Match: "UPDATE xa_sink_progress SET position", Max: 40 * time.Millisecond},
		{Target: tgMy, Match: "XA COMMIT", Max: 30 * time.Millisecond},
		{Target: tgPg, Match: "COMMIT PREPARED", Max: 80 * time.Millisecond},
	}
	prod := r.startProducer(100, 40*time.Millisecond)
	a := r.start(spec)
	b := r.start(spec)
	a.ready()
	b.ready()
	chk := r.startChecker(true)
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(deadline) {
		if err := chk.err(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*proc{a, b} {
			if !p.alive() {
				t.Fatalf("%s ended: %s\n%s", p.name, p.exitLine(), p.tail(30))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := r.halt(prod)
	r.drain(time.Minute)
	summary := chk.stop()
	if err := chk.err(); err != nil {
		t.Fatal(err)
	}
	a.stop()
	b.stop()
	r.checkExactlyOnce(m)
	t.Logf("checker: %s", summary)
	chk.mu.Lock()
	defer chk.mu.Unlock()
	if chk.checks < 20 {
		t.Errorf("only %d checks ran", chk.checks)
	}
	if chk.windows[tgMy]+chk.windows[tgPg] == 0 {
		t.Errorf("no check saw phase two's window: the check did not exercise what it is for")
	}
}

var _ = errors.New
