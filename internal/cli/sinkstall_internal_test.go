package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/sqlsink"
)

// TestStallWatch: a stall needs no commit for stall_after and waiting
// partitions seen for confirm; a commit or no partition waiting ends it;
// stall_exit is counted from the last commit.
func TestStallWatch(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	w := stallWatch{after: 10 * time.Second, exit: time.Minute, confirm: 2 * time.Second, started: t0}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	waiting := []string{"t/0"}
	for _, step := range []struct {
		now         time.Duration
		last        time.Time
		waiting     []string
		stalled     bool
		exit        bool
		description string
	}{
		{5 * time.Second, time.Time{}, waiting, false, false, "younger than stall_after"},
		{11 * time.Second, time.Time{}, waiting, false, false, "seen once: not confirmed yet"},
		{12 * time.Second, time.Time{}, waiting, false, false, "seen for 1s of confirm's 2s"},
		{13 * time.Second, time.Time{}, waiting, true, false, "confirmed: stalled since the start"},
		{14 * time.Second, time.Time{}, nil, false, false, "nothing waits"},
		{15 * time.Second, time.Time{}, waiting, false, false, "waits again: confirm starts over"},
		{17 * time.Second, time.Time{}, waiting, true, false, "confirmed again"},
		{18 * time.Second, at(16 * time.Second), waiting, false, false, "a commit"},
		{27 * time.Second, at(16 * time.Second), waiting, false, false, "stall_after since the commit: confirm starts"},
		{29 * time.Second, at(16 * time.Second), waiting, true, false, "confirmed: stalled since the commit"},
		{76 * time.Second, at(16 * time.Second), waiting, true, true, "stall_exit since the commit"},
	} {
		s := w.check(at(step.now), step.last, step.waiting)
		if s.Stalled != step.stalled || s.Exit != step.exit {
			t.Fatalf("at %s (%s): stalled %v exit %v, want %v %v", step.now, step.description, s.Stalled, s.Exit, step.stalled, step.exit)
		}
		if s.Stalled {
			want := step.last
			if want.IsZero() {
				want = t0
			}
			if !s.Since.Equal(want) {
				t.Errorf("at %s: since %s, want %s", step.now, s.Since, want)
			}
		}
	}
}

// TestWaitingPartitions: a partition waits when it has a lag and its
// position has not moved for after, or it is not in the progress table.
func TestWaitingPartitions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := sqlsink.Status{Partitions: []sqlsink.PartitionStatus{
		{Partition: "t/0", Position: "10", Updated: now.Add(-time.Minute)}, // lag, old: waits
		{Partition: "t/1", Position: "10", Updated: now.Add(-time.Second)}, // lag, moved lately
		{Partition: "t/2", Position: "20", Updated: now.Add(-time.Hour)},   // no lag
	}}
	ends := []partitionEnd{{Partition: "t/0", End: 20}, {Partition: "t/1", End: 20}, {Partition: "t/2", End: 20}, {Partition: "t/3", End: 5}, {Partition: "t/4"}}
	got := waitingPartitions(now, st, ends, 10*time.Second)
	if len(got) != 2 || got[0] != "t/0" || got[1] != "t/3" {
		t.Errorf("waiting %v, want [t/0 t/3]", got)
	}
}

// TestSinkRunEnd: a signal is a clean stop only when nothing was left
// unresolved while draining; an unresolved decision at shutdown is said
// and exits non-zero (before, sink run returned nil and printed nothing).
func TestSinkRunEnd(t *testing.T) {
	unresolved := errors.Join(context.Canceled, fmt.Errorf("checkpoint 7: %w", sink.ErrUnresolved))
	for _, c := range []struct {
		name        string
		interrupted bool
		stalled     error
		runErr      error
		want        string // "" for nil; else a part of the error
	}{
		{"signal, clean", true, nil, context.Canceled, ""},
		{"signal, nothing", true, nil, nil, ""},
		{"signal, unresolved", true, nil, unresolved, "decision unresolved"},
		{"source ended", false, nil, nil, ""},
		{"error", false, nil, unresolved, "stopped: "},
		{"stall", false, errStalled, context.Canceled, "supervisor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := sinkRunEnd("s1", c.interrupted, c.stalled, c.runErr)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("sinkRunEnd = %v; want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("sinkRunEnd = %v; want an error with %q", err, c.want)
			case c.want == "decision unresolved" && !errors.Is(err, sink.ErrUnresolved):
				t.Fatalf("sinkRunEnd = %v; want it to match sink.ErrUnresolved", err)
			}
		})
	}
}
