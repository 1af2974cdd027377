package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestMachine replays the checkpoint protocol's scripts in
// testdata/machine. Each command feeds the machine one event and prints
// the actions it asks for (the committer's prefixed "committer:", the
// Observer's "observe"). Regenerate expected output with:
// go test ./sink -run TestMachine -rewrite
//
//	new [records=N] [pending=N] [aborts=N] [backoff=D]   a Run begins
//	collect                       the reader is at the top of its loop
//	poll [p0=1-3 p1=4] [eof] [err=timeout|broken|canceled]
//	                              Poll returned records of p0 at offsets
//	                              1..3 (each one's Next is offset+1)
//	written N [err=E] [begin-err=E]   actWrite of checkpoint N returned
//	due                           the open checkpoint is CheckpointInterval old
//	precommitted N [err=E]        actPreCommit returned
//	committed N [err=E]           the committer's actCommit returned
//	aborted N [err=E]             an actAbort or actAbortQueued returned
//	paused [err=canceled]         actPause ended
//	rewound [p0=3 ...] [lost=p1,p2] [err=E] [canceled]
//	sought [err=E] [canceled]
//	assigned p0,p1 | taken p0,p1 [err=E] | revoked p1 | lost p1 | released
//	shutdown | drain-timeout
//	state                         the machine's state
//
// An event the machine does not accept in its state prints "ignored".
// E is one of: aborted, takenover, unresolved, closed, fenced, down.
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		var m *machine
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && m == nil {
				d.Fatalf(t, "new first")
			}
			var acts []action
			ignored := 0
			if m != nil {
				ignored = m.ignored
			}
			switch d.Cmd {
			case "new":
				o := RunOptions{CheckpointRecords: 3, MaxPending: 2, MaxAborts: 4}
				scanInt(t, d, "records", &o.CheckpointRecords)
				scanInt(t, d, "pending", &o.MaxPending)
				scanInt(t, d, "aborts", &o.MaxAborts)
				if d.HasArg("backoff") {
					var s string
					d.ScanArgs(t, "backoff", &s)
					b, err := time.ParseDuration(s)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					o.AbortBackoff = b
				}
				m = newMachine(o.withDefaults())
				return ""
			case "collect":
				acts = m.step(evCollect{})
			case "poll":
				ev := evPolled{}
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "eof":
						ev.eof = true
					case "err":
						switch a.Vals[0] {
						case "timeout":
							ev.err = context.DeadlineExceeded
						case "canceled":
							ev.err, ev.canceled = context.Canceled, context.Canceled
						default:
							ev.err = errors.New(a.Vals[0])
						}
					default:
						ev.records = append(ev.records, records(t, d, a.Key, a.Vals)...)
					}
				}
				acts = m.step(ev)
			case "written":
				ev := evWritten{n: number(t, d)}
				ev.err = scanErrOf(t, d, "err", ev.n)
				ev.beginErr = scanErr(t, d, "begin-err")
				acts = m.step(ev)
			case "due":
				acts = m.step(evDue{})
			case "precommitted":
				n := number(t, d)
				acts = m.step(evPreCommitted{n: n, err: scanErrOf(t, d, "err", n)})
			case "committed":
				n := number(t, d)
				acts = m.step(evCommitted{n: n, err: scanErrOf(t, d, "err", n)})
			case "aborted":
				acts = m.step(evAborted{n: number(t, d), err: scanErr(t, d, "err")})
			case "paused":
				acts = m.step(evPaused{err: scanErr(t, d, "err")})
			case "rewound":
				ev := evRewound{positions: map[string]string{}, err: scanErr(t, d, "err"), canceled: d.HasArg("canceled")}
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "err", "canceled":
					case "lost":
						ev.lost = a.Vals
					default:
						ev.positions[a.Key] = a.Vals[0]
					}
				}
				acts = m.step(ev)
			case "sought":
				acts = m.step(evSought{err: scanErr(t, d, "err"), canceled: d.HasArg("canceled")})
			case "assigned":
				acts = m.step(evAssigned{parts: parts(d)})
			case "taken":
				acts = m.step(evTaken{parts: parts(d), err: scanErr(t, d, "err")})
			case "revoked":
				acts = m.step(evRevoked{parts: parts(d)})
			case "lost":
				acts = m.step(evLost{parts: parts(d)})
			case "released":
				acts = m.step(evReleased{})
			case "shutdown":
				acts = m.step(evShutdown{})
			case "drain-timeout":
				acts = m.step(evDrainTimeout{})
			case "state":
				return m.String() + "\n"
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			if m.ignored > ignored {
				return "ignored: not due in this state\n"
			}
			return formatActions(acts)
		})
	})
}

func scanInt(t *testing.T, d *datadriven.TestData, key string, v *int) {
	if d.HasArg(key) {
		d.ScanArgs(t, key, v)
	}
}

// number is a command's first argument: a checkpoint's number.
func number(t *testing.T, d *datadriven.TestData) uint64 {
	if len(d.CmdArgs) == 0 {
		d.Fatalf(t, "%s: which checkpoint?", d.Cmd)
	}
	n, err := strconv.ParseUint(d.CmdArgs[0].Key, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", d.Cmd, err)
	}
	return n
}

// parts are a command's partitions: p0,p1 (one argument, or several).
func parts(d *datadriven.TestData) []string {
	var ps []string
	for _, a := range d.CmdArgs {
		ps = append(ps, strings.Split(a.Key, ",")...)
	}
	return ps
}

// records are partition p's records at offsets lo-hi (or one offset).
func records(t *testing.T, d *datadriven.TestData, p string, vals []string) []Record {
	if len(vals) != 1 {
		d.Fatalf(t, "poll: %s wants one range", p)
	}
	lo, hi, _ := strings.Cut(vals[0], "-")
	if hi == "" {
		hi = lo
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err := errors.Join(err1, err2); err != nil || a > b {
		d.Fatalf(t, "poll: %s=%s: %v", p, vals[0], err)
	}
	var recs []Record
	for o := a; o <= b; o++ {
		recs = append(recs, Record{Partition: p, Key: []byte(strconv.Itoa(o)), Next: strconv.Itoa(o + 1)})
	}
	return recs
}

// scanErr is the error named by key, nil if the command has no such key.
func scanErr(t *testing.T, d *datadriven.TestData, key string) error {
	return scanErrOf(t, d, key, 0)
}

// scanErrOf is scanErr for checkpoint n: an abort names it.
func scanErrOf(t *testing.T, d *datadriven.TestData, key string, n uint64) error {
	if !d.HasArg(key) {
		return nil
	}
	var s string
	d.ScanArgs(t, key, &s)
	switch s {
	case "aborted":
		return &AbortError{Checkpoint: n, Reason: errors.New("deadlock")}
	case "takenover":
		return &AbortError{Checkpoint: n, Reason: ErrTakenOver}
	case "unresolved":
		return fmt.Errorf("the decision's reply was lost: %w", ErrUnresolved)
	case "closed":
		return ErrClosed
	case "fenced":
		return ErrFenced
	case "down":
		return errors.New("connection refused")
	case "canceled":
		return context.Canceled
	}
	d.Fatalf(t, "unknown error %q", s)
	return nil
}

// formatActions renders actions for the scripts, one a line.
func formatActions(acts []action) string {
	var b strings.Builder
	for _, a := range acts {
		switch a := a.(type) {
		case actWrite:
			begin := ""
			if a.begin {
				begin = " begin"
			}
			fmt.Fprintf(&b, "write %d%s %s\n", a.n, begin, formatRecords(a.records))
		case actPreCommit:
			fmt.Fprintf(&b, "precommit %d\n", a.n)
		case actAbort:
			fmt.Fprintf(&b, "abort %d: %s\n", a.n, formatErr(a.reason))
		case actWait:
			b.WriteString("wait\n")
		case actPause:
			fmt.Fprintf(&b, "pause %s\n", a.d)
		case actRewind:
			fmt.Fprintf(&b, "rewind %s\n", strings.Join(a.parts, ","))
		case actSeek:
			fmt.Fprintf(&b, "seek %s\n", formatPositions(a.positions))
		case actAck:
			fmt.Fprintf(&b, "ack %s\n", formatPositions(a.positions))
		case actTake:
			fmt.Fprintf(&b, "take %s\n", strings.Join(a.parts, ","))
		case actRelease:
			fmt.Fprintf(&b, "release %s\n", strings.Join(a.parts, ","))
		case actSweep:
			b.WriteString("sweep\n")
		case actWarn:
			fmt.Fprintf(&b, "warn %q", a.msg)
			for i := 0; i+1 < len(a.args); i += 2 {
				v := a.args[i+1]
				if err, ok := v.(error); ok {
					v = formatErr(err)
				}
				fmt.Fprintf(&b, " %v=%v", a.args[i], v)
			}
			b.WriteString("\n")
		case actStop:
			fmt.Fprintf(&b, "stop: %s\n", formatErr(a.err))
		case actStopped:
			if a.err != nil {
				fmt.Fprintf(&b, "stopped: %s\n", formatErr(a.err))
			} else {
				b.WriteString("stopped\n")
			}
		case actCommit:
			fmt.Fprintf(&b, "committer: commit %d\n", a.n)
		case actAbortQueued:
			fmt.Fprintf(&b, "committer: abort %d: %s\n", a.n, formatErr(a.reason))
		case actObserveRecords:
			fmt.Fprintf(&b, "observe records=%d\n", a.n)
		case actObservePending:
			fmt.Fprintf(&b, "observe pending=%d\n", a.n)
		case actObserveDone:
			if a.committed {
				fmt.Fprintf(&b, "observe done %d records=%d committed\n", a.n, a.records)
			} else {
				fmt.Fprintf(&b, "observe done %d records=%d %s\n", a.n, a.records, formatErr(a.err))
			}
		default:
			fmt.Fprintf(&b, "%T\n", a)
		}
	}
	return b.String()
}

// formatRecords renders records as runs: p0=1-3 p1=4.
func formatRecords(recs []Record) string {
	var runs []string
	for i := 0; i < len(recs); {
		j := i
		for j+1 < len(recs) && recs[j+1].Partition == recs[i].Partition {
			j++
		}
		r := recs[i].Partition + "=" + string(recs[i].Key)
		if j > i {
			r += "-" + string(recs[j].Key)
		}
		runs = append(runs, r)
		i = j + 1
	}
	return strings.Join(runs, " ")
}

func formatPositions(ps map[string]string) string {
	var s []string
	for _, p := range slices.Sorted(maps.Keys(ps)) {
		s = append(s, p+"="+ps[p])
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, " ")
}

// formatErr renders an error with the kinds it matches, so that a script
// shows what Run would decide on.
func formatErr(err error) string {
	if err == nil {
		return "nil"
	}
	var kinds []string
	for _, k := range []struct {
		name string
		err  error
	}{{"aborted", ErrAborted}, {"unresolved", ErrUnresolved}, {"fenced", ErrFenced}, {"closed", ErrClosed},
		{"takenover", ErrTakenOver}, {"lost", errLost}, {"canceled", context.Canceled}} {
		if errors.Is(err, k.err) {
			kinds = append(kinds, k.name)
		}
	}
	if len(kinds) == 0 {
		kinds = []string{"error"}
	}
	return fmt.Sprintf("[%s] %s", strings.Join(kinds, ","), strings.ReplaceAll(err.Error(), "\n", "; "))
}

// String renders the machine's state for the scripts' state command.
func (m *machine) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s flow=%s owned=%s next=%d", m.phase, m.flow, strings.Join(slices.Sorted(maps.Keys(ownedSet(m.owned))), ","), m.next)
	if m.open != nil {
		fmt.Fprintf(&b, " open=%d(%d)", m.open.n, m.open.records)
	}
	if len(m.queue) > 0 {
		var q []string
		for _, c := range m.queue {
			q = append(q, strconv.FormatUint(c.n, 10))
		}
		fmt.Fprintf(&b, " queue=%s", strings.Join(q, ","))
		if m.atCommitter {
			b.WriteString("(at committer)")
		}
	}
	fmt.Fprintf(&b, " aborts=%d", m.aborts)
	if m.failed != nil {
		fmt.Fprintf(&b, " failed=%s", formatErr(m.failed))
	}
	if m.interrupted != nil {
		fmt.Fprintf(&b, " interrupted=%s", formatErr(m.interrupted))
	}
	if m.lost {
		b.WriteString(" lost")
	}
	return b.String()
}

func ownedSet(owned map[string]bool) map[string]bool {
	s := map[string]bool{}
	for p, ok := range owned {
		if ok {
			s[p] = true
		}
	}
	return s
}
