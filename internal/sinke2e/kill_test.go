package sinke2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/sink/sqlsink"
)

// killRules are the protocol points a worker may be held at before the
// test kills it (see hookRule). The targets are phase two's order (maria,
// then pg: sorted by name); the bookkeeping is in maria (the decision is
// the round trip updating xa_sink_progress).
var killRules = []hookRule{
	{Name: "write: rows going to maria", Target: tgMy, Match: myRowsWrite},
	{Name: "write: rows going to pg", Target: tgPg, Match: pgRowsWrite},
	{Name: "pre-commit: XA PREPARE going to maria", Target: tgMy, Match: "XA PREPARE"},
	{Name: "pre-commit: pg prepared, its reply held", Target: tgPg, Match: "PREPARE TRANSACTION", Reply: true},
	{Name: "decide: decision going to maria", Target: tgMy, Match: "UPDATE xa_sink_progress SET position"},
	{Name: "decided: the decision's reply held", Target: tgMy, Match: "UPDATE xa_sink_progress SET position", Reply: true},
	{Name: "phase 2: XA COMMIT going to maria", Target: tgMy, Match: "XA COMMIT"},
	{Name: "phase 2: maria committed, COMMIT PREPARED going to pg", Target: tgPg, Match: "COMMIT PREPARED"},
	{Name: "committed: COMMIT PREPARED's reply held (Kafka not told)", Target: tgPg, Match: "COMMIT PREPARED", Reply: true},
}

// stage is where a killed instance's checkpoints were, read from the
// databases right after the kill: its prepared branches (XA RECOVER,
// pg_prepared_xacts) and their decision rows.
func (r *rig) stage(ctx context.Context, inc uint64) string {
	if inc == 0 {
		return "starting (no incarnation yet)"
	}
	st, err := r.s.Status(ctx)
	if err != nil {
		return "unknown: " + err.Error()
	}
	type ck struct {
		n   int
		dec sqlsink.Decision
	}
	cks := map[uint64]*ck{}
	for _, b := range st.Branches {
		if b.Ref.Incarnation != inc {
			continue
		}
		c := cks[b.Ref.Checkpoint]
		if c == nil {
			c = &ck{dec: b.Decision}
			cks[b.Ref.Checkpoint] = c
		}
		c.n++
	}
	rank, best := 0, "no branch prepared: writing, between checkpoints, or idle"
	for _, c := range cks {
		var r int
		var s string
		switch {
		case c.dec == sqlsink.DecidedAbort:
			r, s = 1, "aborting: abort marker, branches not yet rolled back"
		case c.dec == sqlsink.NoDecision && c.n == 1:
			r, s = 2, "pre-commit: one branch prepared, undecided"
		case c.dec == sqlsink.NoDecision:
			r, s = 3, "pre-commit: both branches prepared, undecided"
		case c.n == 2:
			r, s = 4, "decided: decision durable, no branch committed"
		default:
			r, s = 5, "phase 2: decision durable, one branch committed"
		}
		if r > rank {
			rank, best = r, s
		}
	}
	if len(cks) > 1 {
		best += fmt.Sprintf(" (%d checkpoints in flight)", len(cks))
	}
	return best
}

// TestKillSinkProcesses: three sink processes read the topic (8
// partitions) in one group into MariaDB and PostgreSQL while a producer
// keeps producing; one of them is killed with SIGKILL at a random moment or
// at a protocol point (killRules), and restarted, again and again
// (XA_SINK_KILLS, default 20). Then the producer stops, a last process
// drains the topic, and: each target holds every key once, per partition
// the offsets 0..end-1 once each, the progress rows equal Kafka's end
// offsets. A checker reads both databases and the progress table all along
// (relaxed rules: see consistency_test.go).
func TestKillSinkProcesses(t *testing.T) {
	kills := envInt(t, "XA_SINK_KILLS", 20)
	r := newRig(t, rigOpts{progress: tgMy})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	ctx := ctxFor(t, time.Hour)
	prod := r.startProducer(100, 80*time.Millisecond)
	chk := r.startChecker(false)

	// Two workers in three are held at a protocol point, the points taken
	// in turn (shuffled), at its 1st to 6th occurrence; the third is
	// killed at a random moment.
	order := rng.Perm(len(killRules))
	started := 0
	spec := func() workerSpec {
		s := r.spec
		started++
		if started%3 != 0 {
			rule := killRules[order[(started-started/3-1)%len(order)]]
			rule.N = 1 + rng.IntN(6)
			s.Rule = &rule
		}
		return s
	}
	const width = 3
	slots := make([]*proc, width)
	for i := range slots {
		slots[i] = r.start(spec())
	}
	landed := map[string]int{}  // stage -> kills
	byPoint := map[string]int{} // hook point (or "random moment") -> kills
	matrix := map[string]int{}  // point | stage -> kills
	fenced, restarts, slow := 0, 0, 0
	start := time.Now()
	// After a kill the test waits for the sink to recover (two
	// checkpoints committed since, every worker holding partitions; at
	// most 15 s), then kills again at its next hook, or at a random moment
	// 0.2 to 1.5 s later.
	lastKill, base := time.Now(), r.committed.Load()
	var armed time.Time
	kill := func(i int, point string) {
		p := slots[i]
		p.kill()
		inc := r.incarnationOf(ctx, p)
		s := r.stage(ctx, inc)
		landed[s]++
		byPoint[point]++
		matrix[point+" | "+s]++
		slots[i] = r.start(spec())
		restarts++
		lastKill, base, armed = time.Now(), r.committed.Load(), time.Time{}
	}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	done := 0
	for done < kills {
		select {
		case ev := <-r.events:
			i := slices.Index(slots, ev.p)
			if i < 0 || ev.p.signalled.Load() {
				break // an old process
			}
			switch ev.kind {
			case "hook":
				kill(i, "hook: "+ev.text)
				done++
			case "exit":
				if strings.HasPrefix(ev.text, "exit fenced") {
					fenced++
					slots[i] = r.start(spec())
					break
				}
				t.Fatalf("%s exited on its own: %q\n%s", ev.p.name, ev.text, ev.p.tail(40))
			}
		case <-tick.C:
		}
		if err := chk.err(); err != nil {
			t.Fatalf("after %d kills: %v", done, err)
		}
		if armed.IsZero() {
			recovered := r.committed.Load() >= base+2 && !slices.ContainsFunc(slots, func(p *proc) bool { return p.assigned() == 0 })
			if recovered || time.Since(lastKill) > 15*time.Second {
				if !recovered {
					slow++
				}
				armed = time.Now().Add(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
			}
			continue
		}
		if time.Now().Before(armed) {
			continue
		}
		// A random moment, for a worker without a rule, or whose point
		// has not come 5 s after it got partitions.
		var live []int
		for i, p := range slots {
			if a := p.assigned(); p.alive() && a != 0 && (p.spec.Rule == nil || time.Since(time.Unix(0, a)) > 5*time.Second) {
				live = append(live, i)
			}
		}
		if len(live) > 0 {
			kill(live[rng.IntN(len(live))], "random moment")
			done++
		}
	}
	killing := time.Since(start)
	m := r.halt(prod)
	// The last ones: stop the workers, one clean worker drains.
	for _, p := range slots {
		if p.alive() {
			p.kill()
		}
	}
	last := r.start(r.spec)
	r.drain(2 * time.Minute)
	checks := chk.stop()
	last.stop()
	if strings.HasPrefix(last.exitLine(), "exit error") {
		t.Fatalf("the last worker: %s", last.exitLine())
	}
	r.checkExactlyOnce(m)
	t.Logf("%d kills with SIGKILL in %v (%d restarts, %d workers stopped fenced and restarted, %d times the sink had not recovered 15 s after a kill), %d records produced meanwhile",
		done, killing.Round(time.Millisecond), restarts, fenced, slow, m)
	t.Logf("where the kills landed (the killed instance's branches and decisions, read from the databases after the kill):")
	for _, k := range slices.Sorted(maps.Keys(landed)) {
		t.Logf("  %4d  %s", landed[k], k)
	}
	t.Logf("where they were aimed:")
	for _, k := range slices.Sorted(maps.Keys(byPoint)) {
		t.Logf("  %4d  %s", byPoint[k], k)
	}
	t.Logf("aimed | landed:")
	for _, k := range slices.Sorted(maps.Keys(matrix)) {
		t.Logf("  %4d  %s", matrix[k], k)
	}
	t.Logf("checker: %s", checks)
	restores := r.restoreLines()
	t.Logf("restore actions logged by the workers: %s", restores)
}

// restoreLines counts the workers' "sink: restore" log lines by action.
func (r *rig) restoreLines() string {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	n := map[string]int{}
	for _, p := range procs {
		for _, l := range p.grep("msg=\"sink: restore\"") {
			n[logValue(l, "action")+" ("+logValue(l, "why")+")"]++
		}
	}
	if len(n) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
	}
	return strings.Join(parts, "; ")
}

// logValue returns the value of key in a slog text line.
func logValue(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, "\"") {
		if s, err := strconv.QuotedPrefix(v); err == nil {
			u, _ := strconv.Unquote(s)
			return u
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}
