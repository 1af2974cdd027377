package sinke2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/sink/sqlsink"
)

// TestRescale: while a producer keeps producing, the sink runs as one
// process, then three (two join the group: cooperative rebalancing moves
// partitions, each revoked partition's checkpoints are finished before it
// moves), then two (one stops with SIGTERM: it finishes its checkpoints and
// leaves the group). Each stage runs 4 s (XA_SINK_RESCALE_SECONDS) once the
// partitions are shared among its instances, then until the sink has
// caught up with what was produced by then. At the end, exactly once; the
// bookkeeping is in PostgreSQL.
func TestRescale(t *testing.T) {
	dwell := time.Duration(envInt(t, "XA_SINK_RESCALE_SECONDS", 4)) * time.Second
	r := newRig(t, rigOpts{progress: tgPg})
	ctx := ctxFor(t, 5*time.Minute)
	prod := r.startProducer(100, 80*time.Millisecond)
	var log []string
	stage := func(what string, procs []*proc) {
		t.Helper()
		begun := time.Now()
		incs := r.waitOwners(ctx, procs)
		rebalanced := time.Since(begun)
		n0, c0 := r.next.Load(), committedCkpts(procs)
		for end := time.Now().Add(dwell); time.Now().Before(end); {
			for _, p := range procs {
				if !p.alive() {
					t.Fatalf("%s ended: %s\n%s", p.name, p.exitLine(), p.tail(30))
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		ends := r.endOffsets(ctx)
		waitFor(t, time.Minute, "the sink catching up under "+what, func() bool {
			for _, p := range procs {
				if !p.alive() {
					t.Fatalf("%s ended: %s\n%s", p.name, p.exitLine(), p.tail(30))
				}
			}
			return r.caughtUp(ctx, ends)
		})
		_, st, err := r.positions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owned := map[uint64][]string{}
		for _, p := range st.Partitions {
			owned[p.Owner] = append(owned[p.Owner], strings.TrimPrefix(p.Partition, topic+"/"))
		}
		var parts []string
		for _, inc := range slices.Sorted(maps.Keys(owned)) {
			parts = append(parts, fmt.Sprintf("incarnation %d: %s", inc, strings.Join(owned[inc], ",")))
		}
		log = append(log, fmt.Sprintf("%s: every partition owned by the %d live instances %v after %v; %d records produced and %d checkpoints committed during the stage; caught up with %d records after %v; partitions: %s",
			what, len(procs), incs, rebalanced.Round(time.Millisecond), sum(ends)-n0, committedCkpts(procs)-c0, sum(ends),
			time.Since(begun).Round(time.Millisecond), strings.Join(parts, "; ")))
	}
	// Instances leave cleanly here: a long session timeout keeps a busy
	// machine from throwing a live one out of the group.
	spec := r.spec
	spec.SessionTimeout, spec.HeartbeatInterval = 6*time.Second, 500*time.Millisecond
	w1 := r.start(spec)
	stage("1 instance", []*proc{w1})
	w2, w3 := r.start(spec), r.start(spec)
	stage("1 -> 3 instances", []*proc{w1, w2, w3})
	w3.stop()
	if l := w3.exitLine(); !strings.HasPrefix(l, "exit stopped") {
		t.Fatalf("the third instance did not stop cleanly: %s\n%s", l, w3.tail(30))
	}
	stage("3 -> 2 instances", []*proc{w1, w2})
	m := r.halt(prod)
	r.drain(time.Minute)
	w1.stop()
	w2.stop()
	r.checkExactlyOnce(m)
	for _, l := range log {
		t.Log(l)
	}
	for _, p := range []*proc{w1, w2, w3} {
		var committed, aborted int
		var reasons []string
		for _, l := range p.grep("ckpt ") {
			if strings.Contains(l, "committed=true") {
				committed++
			} else {
				aborted++
				if _, e, ok := strings.Cut(l, "err="); ok {
					reasons = append(reasons, e)
				}
			}
		}
		t.Logf("%s: %d checkpoints committed, %d aborted %q; source: %s", p.name, committed, aborted, reasons, p.exitLine())
	}
}

// waitOwners waits until every partition is owned by an instance of one of
// procs, each of which owns some, and returns their incarnations.
func (r *rig) waitOwners(ctx context.Context, procs []*proc) []uint64 {
	r.t.Helper()
	var incs []uint64
	waitFor(r.t, time.Minute, fmt.Sprintf("%d instances sharing the partitions", len(procs)), func() bool {
		incs = incs[:0]
		for _, p := range procs {
			if !p.alive() {
				r.t.Fatalf("%s ended: %s\n%s", p.name, p.exitLine(), p.tail(30))
			}
			inc := r.incarnationOf(ctx, p)
			if inc == 0 {
				return false
			}
			incs = append(incs, inc)
		}
		_, st, err := r.positions(ctx)
		if err != nil || len(st.Partitions) != nParts {
			return false
		}
		owners := map[uint64]bool{}
		for _, p := range st.Partitions {
			if !slices.Contains(incs, p.Owner) {
				return false
			}
			owners[p.Owner] = true
		}
		return len(owners) == len(procs)
	})
	return incs
}

// committedCkpts counts the checkpoints procs committed so far.
func committedCkpts(procs []*proc) int {
	n := 0
	for _, p := range procs {
		for _, l := range p.grep("ckpt ") {
			if strings.Contains(l, "committed=true") {
				n++
			}
		}
	}
	return n
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

var _ sqlsink.Status
