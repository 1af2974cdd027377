package sqlsink

import (
	"testing"
	"time"
)

// TestClassify is restore's decision table, row by row.
func TestClassify(t *testing.T) {
	self := func(inc, cp uint64) Ref { return Ref{Sink: "s", Incarnation: inc, Checkpoint: cp, Target: "t"} }
	ext := func(member, gen uint32, cp uint64) Ref {
		return Ref{Sink: "s", Incarnation: ExternalIncarnation(member, gen), Checkpoint: cp, Target: "t"}
	}
	owns := map[uint64]bool{5: true, 6: true}
	sv := View{Incarnation: 5, InFlight: func(cp uint64) bool { return cp == 9 }, Owns: func(i uint64) bool { return owns[i] },
		Grace: time.Minute}
	ev := View{External: true, Generation: 3, Restored: 20}
	for _, tc := range []struct {
		name string
		o    Orphan
		v    View
		want Action
	}{
		{"decided", Orphan{Ref: self(6, 1), Decision: DecidedCommit}, sv, ActCommit},
		{"decided, own in flight", Orphan{Ref: self(5, 9), Decision: DecidedCommit}, sv, ActLeave},
		{"marker, own in flight", Orphan{Ref: self(5, 9), Decision: DecidedAbort}, sv, ActLeave},
		{"marker", Orphan{Ref: self(6, 1), Decision: DecidedAbort}, sv, ActRollback},
		{"own, in flight", Orphan{Ref: self(5, 9)}, sv, ActLeave},
		{"own, not in flight", Orphan{Ref: self(5, 8)}, sv, ActFence},
		{"owner owns nothing", Orphan{Ref: self(4, 1)}, sv, ActFence},
		{"live owner, young", Orphan{Ref: self(6, 1), Age: 59 * time.Second}, sv, ActLeave},
		{"live owner, past the grace", Orphan{Ref: self(6, 1), Age: time.Minute}, sv, ActFence},
		{"external, in a self-driven sweep", Orphan{Ref: ext(0, 1, 1), Age: time.Hour}, sv, ActLeave},
		{"external decided", Orphan{Ref: ext(0, 1, 30), Decision: DecidedCommit}, ev, ActCommit},
		{"external marker", Orphan{Ref: ext(0, 1, 30), Decision: DecidedAbort}, ev, ActRollback},
		{"earlier generation, after the restored checkpoint", Orphan{Ref: ext(7, 2, 21)}, ev, ActFence},
		{"earlier generation, at the restored checkpoint", Orphan{Ref: ext(0, 2, 20)}, ev, ActLeave},
		{"this generation", Orphan{Ref: ext(1, 3, 25)}, ev, ActLeave},
		{"later generation", Orphan{Ref: ext(1, 4, 25)}, ev, ActLeave},
		{"self-driven, in an external restore", Orphan{Ref: self(1, 99), Age: time.Hour}, ev, ActLeave},
		{"external, never by age", Orphan{Ref: ext(0, 3, 99), Age: 1000 * time.Hour}, ev, ActLeave},
	} {
		got, why := Classify(tc.o, tc.v)
		if got != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, got, why, tc.want)
		}
	}
}
