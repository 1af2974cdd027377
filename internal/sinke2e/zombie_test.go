package sinke2e

import (
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xadb/xa/sink/sqlsink"
)

// TestZombie: worker A is stopped with SIGSTOP in the middle of a
// checkpoint — after PostgreSQL prepared its branch (the reply held: A
// does not know yet; restore's abort marker and the epochs stop it), or
// while it writes rows to MariaDB (nothing prepared: only the epochs stop
// it). Worker B joins; the group throws A out after its session timeout
// (1 s) and B takes every partition, raises their epochs, fences A's
// prepared checkpoint, and writes everything produced meanwhile. Then A
// gets SIGCONT: its checkpoint must be refused (its log says so), A decides
// nothing more (its decision rows), the tables do not change, and A stops
// fenced or rejoins as a normal member; at the end, exactly once.
//
// With its Kafka connections frozen as well (from before SIGSTOP until it
// ends), A cannot learn from the group that it lost its partitions: only
// the sink's own fences (the epochs, restore's abort marker) stop it, and
// it must stop with ErrFenced.
func TestZombie(t *testing.T) {
	prepared := hookRule{Name: "pg prepared, its reply held", Target: tgPg, Match: "PREPARE TRANSACTION", Reply: true, N: 3}
	writing := hookRule{Name: "rows going to maria", Target: tgMy, Match: myRowsWrite, N: 5}
	for _, v := range []struct {
		name   string
		rule   hookRule
		freeze bool
	}{
		{"after-prepare", prepared, false},
		{"after-prepare-kafka-frozen", prepared, true},
		{"while-writing-kafka-frozen", writing, true},
	} {
		t.Run(v.name, func(t *testing.T) { zombie(t, v.rule, v.freeze) })
	}
}

func zombie(t *testing.T, rule hookRule, freeze bool) {
	r := newRig(t, rigOpts{progress: tgMy})
	ctx := ctxFor(t, 5*time.Minute)
	prod := r.startProducer(100, 50*time.Millisecond)
	spec := r.spec
	spec.Rule = &rule
	a := r.start(spec)
	waitHook(t, r, a, 30*time.Second)
	if freeze {
		a.send("freeze")
		waitFor(t, 10*time.Second, "A's Kafka frozen", func() bool { return a.has("kafka frozen") })
	}
	a.signal(syscall.SIGSTOP)
	stopped := time.Now()
	incA := r.incarnationOf(ctx, a)
	st, err := r.s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var prepared []string
	for _, b := range st.Branches {
		if b.Ref.Incarnation == incA {
			prepared = append(prepared, b.Ref.String()+" ("+b.Decision.String()+")")
		}
	}
	commitsA, _, lastA, err := r.decisions(ctx, incA)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A (incarnation %d) stopped at %q; its prepared branches: %v; %d checkpoints decided commit, the last %d",
		incA, rule.Name, prepared, commitsA, lastA)
	if rule.Reply && len(prepared) == 0 {
		t.Fatalf("A was to be stopped with a prepared branch")
	}

	b := r.start(r.spec)
	b.ready()
	var incB uint64
	waitFor(t, 30*time.Second, "B owning every partition", func() bool {
		incB = r.incarnationOf(ctx, b)
		_, st, err := r.positions(ctx)
		if err != nil || incB == 0 || len(st.Partitions) != nParts {
			return false
		}
		return !slices.ContainsFunc(st.Partitions, func(p sqlsink.PartitionStatus) bool { return p.Owner != incB })
	})
	t.Logf("B (incarnation %d) owned every partition %v after A stopped", incB, time.Since(stopped).Round(time.Millisecond))
	m := r.halt(prod)
	ends := r.endOffsets(ctx)
	// The positions commit with the progress target's branch; the other
	// targets' branches of the same checkpoint may still be in phase 2
	// then. B has written everything once every record is in both
	// databases too: the tables before A resumes are counted then.
	var before, beforePg tableCount
	waitFor(t, time.Minute, "B writing everything produced", func() bool {
		if !r.caughtUp(ctx, ends) {
			return false
		}
		var err error
		if before, err = r.countMy(ctx, false); err != nil {
			return false
		}
		if beforePg, err = r.countPg(ctx, false); err != nil {
			return false
		}
		return before.keys >= m && beforePg.keys >= m
	})
	t.Logf("B wrote everything (%d records): %s %v, %s %v", m, tgMy, before, tgPg, beforePg)

	mark := len(a.output())
	a.signal(syscall.SIGCONT)
	a.release()
	// A's held checkpoint ends (refused), then A stops fenced, or rejoins.
	// A checkpoint A had decided before it was stopped (lastA: the
	// decision rows say so) may be reported only now: its outcome is
	// collected by A's loop between two checkpoints, and the loop was in
	// the held one's pre-commit. Its line is neither the held checkpoint's
	// outcome nor a commit after the takeover (the decision rows, checked
	// below, are the proof of that).
	var outcome []string
	decidedBefore := func(l string) bool {
		n, ok := ckptNumber(l)
		return ok && int64(n) <= lastA && strings.Contains(l, "committed=true")
	}
	ended := func() bool {
		outcome = a.output()[mark:]
		return slices.ContainsFunc(outcome, func(l string) bool { return strings.HasPrefix(l, "ckpt ") && !decidedBefore(l) })
	}
	waitFor(t, 45*time.Second, "A's held checkpoint to end", func() bool { return !a.alive() || ended() })
	// Then A stops, or rejoins (unless it cannot hear from Kafka).
	deadline := time.Now().Add(20 * time.Second)
	for a.alive() && time.Now().Before(deadline) {
		ended()
		if !freeze && slices.ContainsFunc(outcome, func(l string) bool { return strings.Contains(l, "kafkasource: group "+r.group+": assigned") }) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	ended()
	var refused []string
	for _, l := range outcome {
		if strings.HasPrefix(l, "ckpt ") {
			if decidedBefore(l) {
				t.Logf("A reported a checkpoint it had decided before it was stopped: %s", l)
				continue
			}
			if strings.Contains(l, "committed=true") {
				t.Errorf("A committed a checkpoint after B's takeover: %s", l)
			}
			refused = append(refused, l)
		}
	}
	if len(refused) == 0 && a.alive() {
		t.Errorf("A's log shows no outcome of its held checkpoint:\n%s", strings.Join(outcome, "\n"))
	}
	// How each was stopped: at its decision (the epochs moved), by
	// restore's abort marker, or undecided because the group told A its
	// partitions were lost (the Runner then aborts every checkpoint in
	// flight; a queued one carries the reason "an earlier checkpoint did
	// not commit").
	// A checkpoint queued behind a refused one is aborted with "an earlier
	// checkpoint did not commit".
	toldLost := slices.ContainsFunc(outcome, func(l string) bool { return strings.Contains(l, "kafkasource: group "+r.group+": lost") })
	var how []string
	fenced := false
	for _, l := range refused {
		switch {
		case strings.Contains(l, "epoch or owner moved on"):
			how = append(how, "refused at its decision: the epochs moved on")
			fenced = true
		case strings.Contains(l, "abort marker"):
			how = append(how, "refused: restore's abort marker")
			fenced = true
		case strings.Contains(l, "an earlier checkpoint did not commit"):
			how = append(how, "aborted undecided: queued behind a refused checkpoint, or after the partitions were lost")
		case !freeze && strings.Contains(l, "were lost"):
			how = append(how, "aborted undecided: the group told A its partitions were lost")
		default:
			t.Errorf("A's checkpoint ended without a fence (epochs, abort marker, lost partitions): %s", l)
		}
	}
	switch {
	case freeze && !fenced:
		t.Errorf("A, cut off from Kafka, was not stopped by the sink's fences (epochs, abort marker): %q", refused)
	case !freeze && !fenced && !toldLost:
		t.Errorf("A's checkpoints were neither refused nor aborted after a loss: %q", refused)
	}
	t.Logf("A after SIGCONT: %q", filterLines(outcome, "ckpt ", "exit ", "kafka "))
	commitsA2, abortsA2, lastA2, err := r.decisions(ctx, incA)
	if err != nil {
		t.Fatal(err)
	}
	if commitsA2 != commitsA || lastA2 != lastA {
		t.Errorf("A decided checkpoints after B's takeover: %d commit decisions (the last %d) before SIGCONT, %d (the last %d) after",
			commitsA, lastA, commitsA2, lastA2)
	}
	after, err := r.countMy(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	afterPg, err := r.countPg(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if after.String() != before.String() || afterPg.String() != beforePg.String() {
		t.Errorf("A's resumption changed the tables: %s %v then %v; %s %v then %v", tgMy, before, after, tgPg, beforePg, afterPg)
	}
	if freeze && a.alive() {
		t.Errorf("A, cut off from Kafka, did not stop after its checkpoint ended")
	}
	role := "stopped: " + a.exitLine()
	if a.alive() {
		role = "rejoined the group as a normal member"
	} else if !strings.HasPrefix(a.exitLine(), "exit fenced") {
		t.Errorf("A ended otherwise than fenced: %s", a.exitLine())
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("A's checkpoints after SIGCONT: %q", how)
	t.Logf("A %s; its decisions: %d commits (unchanged), %d abort markers; the tables unchanged by A", role, commitsA2, abortsA2)

	// More records: A (if it rejoined) and B share them.
	if _, err := r.produce(ctx, 4000); err != nil {
		t.Fatal(err)
	}
	m = r.next.Load()
	r.drain(time.Minute)
	if a.alive() {
		a.stop()
	}
	b.stop()
	r.checkExactlyOnce(m)
	if a.alive() || strings.HasPrefix(a.exitLine(), "exit stopped") {
		t.Logf("A's share after it rejoined: %d checkpoints committed", len(filterLines(a.output()[mark:], "ckpt ")))
	}
}

// waitHook waits for p's HOOK line.
func waitHook(t *testing.T, r *rig, p *proc, d time.Duration) {
	t.Helper()
	waitFor(t, d, p.name+" reaching its hook", func() bool {
		if !p.alive() {
			t.Fatalf("%s ended before its hook: %s\n%s", p.name, p.exitLine(), p.tail(30))
		}
		return p.has("HOOK ")
	})
}

// filterLines returns the lines starting with one of prefixes.
func filterLines(lines []string, prefixes ...string) []string {
	var out []string
	for _, l := range lines {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// ckptNumber returns the checkpoint number of a worker's "ckpt N ..." line.
func ckptNumber(l string) (uint64, bool) {
	f := strings.Fields(l)
	if len(f) < 2 || f[0] != "ckpt" {
		return 0, false
	}
	n, err := strconv.ParseUint(f[1], 10, 64)
	return n, err == nil
}
