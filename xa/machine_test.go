package xa

import (
	"errors"
	"fmt"

	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestMachine replays the protocol scripts in testdata/machine. Each
// command feeds the machine one event and prints the actions it asks for.
// Regenerate expected output with: go test ./xa -run TestMachine -rewrite
//
//	new branches=a,b [tries=N]     a transaction with these branches
//	commit [idle=a] [onephase=a] [last=a]  the application commits
//	rollback | timeout             the application rolls back | the timeout fires
//	vote <rm> prepared|readonly|abort|unknown
//	logged [error|unknown|abort-recorded|too-late]  the decision log answered
//	lookup <rm> none|aborted|error the log's answer: is an abort recorded?
//	phase2 <rm> ok|retryable|unknown|unknownxid|rolledback|too-late|error
//	state                          the phase and each branch's state
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		var m *machine
		index := func(d *datadriven.TestData, name string) int {
			for i, b := range m.branches {
				if b.rm == name {
					return i
				}
			}
			d.Fatalf(t, "no branch %q", name)
			return -1
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && m == nil {
				d.Fatalf(t, "new first")
			}
			var acts []action
			switch d.Cmd {
			case "new":
				var names string
				d.ScanArgs(t, "branches", &names)
				tries := 3
				if d.HasArg("tries") {
					d.ScanArgs(t, "tries", &tries)
				}
				m = newMachine(GlobalID{Node: "n1", Begun: time.UnixMilli(0)}, tries)
				for _, n := range strings.FieldsFunc(names, func(r rune) bool { return r == ',' }) {
					if _, err := m.enlist(n); err != nil {
						d.Fatalf(t, "%v", err)
					}
				}
				return ""
			case "commit":
				ev := evCommit{idle: make([]bool, len(m.branches)), onePhase: make([]bool, len(m.branches)), last: make([]bool, len(m.branches))}
				for _, arg := range d.CmdArgs {
					for _, v := range arg.Vals {
						i := index(d, v)
						switch arg.Key {
						case "idle":
							ev.idle[i] = true
						case "onephase":
							ev.onePhase[i] = true
						case "last":
							ev.last[i] = true
						}
					}
				}
				acts = m.step(ev)
			case "rollback":
				acts = m.step(evRollback{})
			case "timeout":
				acts = m.step(evTimeout{})
			case "vote":
				i := index(d, d.CmdArgs[0].Key)
				ev := evVote{i: i}
				switch d.CmdArgs[1].Key {
				case "prepared":
					ev.vote = VotePrepared
				case "readonly":
					ev.vote = VoteReadOnly
				case "abort":
					ev.vote, ev.err = VoteAbort, &Error{Op: "prepare", Kind: ErrRolledBack, Err: errors.New("deadlock")}
				case "unknown":
					ev.vote, ev.err = VoteAbort, &Error{Op: "prepare", Kind: ErrOutcomeUnknown, Err: errors.New("connection lost")}
				default:
					d.Fatalf(t, "vote %q", d.CmdArgs[1].Key)
				}
				acts = m.step(ev)
			case "logged":
				var err error
				if len(d.CmdArgs) > 0 {
					switch d.CmdArgs[0].Key {
					case "abort-recorded":
						err = fmt.Errorf("filelog: commit: %w", ErrAbortRecorded)
					case "too-late":
						err = fmt.Errorf("filelog: commit: %w", ErrDecisionTooLate)
					case "unknown":
						err = &Error{Op: "log", Kind: ErrOutcomeUnknown, Err: errors.New("fsync failed")}
					default:
						err = errors.New(d.CmdArgs[0].Key)
					}
				}
				acts = m.step(evLogged{err: err})
			case "lookup":
				// lookup <rm> none|aborted|error: the log's answer about an
				// abort record, after <rm>'s commit answered unknown XID.
				i := index(d, d.CmdArgs[0].Key)
				ev := evLookedUp{i: i}
				switch d.CmdArgs[1].Key {
				case "none":
				case "aborted":
					ev.aborted = true
				case "error":
					ev.err = errors.New("log closed")
				default:
					d.Fatalf(t, "lookup %q", d.CmdArgs[1].Key)
				}
				acts = m.step(ev)
			case "phase2":
				i := index(d, d.CmdArgs[0].Key)
				acts = m.step(evPhase2{i: i, err: phase2Err(t, d)})
			case "state":
				var b strings.Builder
				fmt.Fprintf(&b, "phase=%s", m.phase)
				for _, br := range m.branches {
					fmt.Fprintf(&b, " %s=%s", br.rm, br.state)
				}
				return b.String()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return formatActions(m, acts)
		})
	})
}

func phase2Err(t *testing.T, d *datadriven.TestData) error {
	switch d.CmdArgs[1].Key {
	case "ok":
		return nil
	case "retryable":
		return &Error{Op: "commit", Kind: ErrRetryable, Err: errors.New("lock wait timeout")}
	case "unknown":
		return &Error{Op: "commit", Kind: ErrOutcomeUnknown, Err: errors.New("connection lost")}
	case "unknownxid":
		return &Error{Op: "commit", Kind: ErrUnknownXID, Err: errors.New("XAER_NOTA")}
	case "rolledback":
		return &Error{Op: "commit", Kind: ErrRolledBack, Err: errors.New("XA_RBROLLBACK")}
	case "too-late":
		return ErrDecisionTooLate
	case "error":
		return errors.New("some error")
	}
	d.Fatalf(t, "phase2 result %q", d.CmdArgs[1].Key)
	return nil
}

// formatActions renders actions for traces and golden files.
func formatActions(m *machine, acts []action) string {
	var b strings.Builder
	for _, a := range acts {
		switch a := a.(type) {
		case actPrepare:
			fmt.Fprintf(&b, "prepare %s\n", m.branches[a.i].rm)
		case actOnePhase:
			fmt.Fprintf(&b, "commit-one-phase %s\n", m.branches[a.i].rm)
		case actLog:
			fmt.Fprintf(&b, "log-commit %s\n", m.names(a.branches))
		case actCommitLast:
			fmt.Fprintf(&b, "commit-last %s deciding for %s\n", m.branches[a.i].rm, m.names(a.branches))
		case actCommit:
			fmt.Fprintf(&b, "commit %s attempt=%d%s\n", m.branches[a.i].rm, a.attempt, via(a.viaRM))
		case actRollback:
			fmt.Fprintf(&b, "rollback %s attempt=%d%s\n", m.branches[a.i].rm, a.attempt, via(a.viaRM))
		case actRelease:
			fmt.Fprintf(&b, "release %s\n", m.branches[a.i].rm)
		case actForget:
			b.WriteString("forget\n")
		case actLookupAbort:
			fmt.Fprintf(&b, "lookup-abort for %s\n", m.branches[a.i].rm)
		case actLogHeuristic:
			fmt.Fprintf(&b, "log-heuristic %s\n", m.branches[a.i].rm)
		case actFinish:
			fmt.Fprintf(&b, "finish %s\n", formatOutcome(m, a.res))
		}
	}
	return b.String()
}

func (m *machine) names(is []int) string {
	names := make([]string, len(is))
	for j, i := range is {
		names[j] = m.branches[i].rm
	}
	return strings.Join(names, ",")
}

func via(rm bool) string {
	if rm {
		return " via=rm"
	}
	return ""
}

func formatOutcome(m *machine, o outcome) string {
	var b strings.Builder
	var ae *AbortError
	var he *HeuristicError
	switch {
	case o.committed:
		b.WriteString("committed")
	case errors.As(o.err, &ae):
		b.WriteString("aborted")
	case errors.As(o.err, &he):
		fmt.Fprintf(&b, "heuristic rolled-back=%s", strings.Join(he.RolledBack, ","))
	case OutcomeUnknown(o.err):
		b.WriteString("outcome-unknown")
	default:
		b.WriteString("error")
	}
	if o.onePhase {
		b.WriteString(" one-phase")
	}
	if o.logged {
		b.WriteString(" logged")
	}
	if len(o.pending) > 0 {
		names := make([]string, len(o.pending))
		for j, i := range o.pending {
			names[j] = m.branches[i].rm
		}
		fmt.Fprintf(&b, " pending=%s", strings.Join(names, ","))
	}
	if ae != nil {
		if ae.RM != "" {
			fmt.Fprintf(&b, " by=%s", ae.RM)
		}
		fmt.Fprintf(&b, " reason=%q", ae.Reason.Error())
	}
	return b.String()
}
