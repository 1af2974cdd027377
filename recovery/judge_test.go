package recovery_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// judgeFacts returns the facts of an undecided branch of this log, older
// than the grace period, with every delegated table ready: a presumed
// abort. Each row of TestJudge changes what leads to its verdict.
func judgeFacts(t *testing.T) recovery.Facts {
	t.Helper()
	this, err := xa.NewLogID()
	if err != nil {
		t.Fatal(err)
	}
	id, err := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return recovery.Facts{Ours: true, Served: true, Ref: xa.BranchRef{ID: id, Log: this}, Log: this,
		Created: time.Now().Add(-2 * time.Hour), Age: time.Hour, AgeKnown: true, Grace: time.Minute,
		Delegated: []recovery.Delegated{{Participant: "pg", Table: recovery.TableReady}}}
}

// TestJudge is recovery's judgement, row by row: each verdict with the
// facts that lead to it (docs/protocol.md, "Recovery scanner").
func TestJudge(t *testing.T) {
	hand := &xa.HeuristicRecord{RM: "maria", XID: xa.XID{FormatID: 1, Gtrid: []byte("g"), Bqual: []byte("b")}, Action: xa.OutcomeCommit}
	otherLog, _ := xa.NewLogID()
	idErr := &xa.IdentityError{Store: `participant "pg"`, Why: "another database answers"}
	for _, tc := range []struct {
		name   string
		change func(*recovery.Facts)
		want   recovery.Verdict
		rule   recovery.Rule
		reason string // in the reason, "" for none
	}{
		{"not ours", func(f *recovery.Facts) { *f = recovery.Facts{} }, recovery.Foreign, recovery.RuleForeign, ""},
		{"another node's", func(f *recovery.Facts) { f.Served = false; f.Committed, f.Lists = true, true }, recovery.OtherNode, recovery.RuleOtherNode, ""},
		{"listed by a participant not recorded", func(f *recovery.Facts) { f.Mismatched = idErr; f.Committed, f.Lists = true, true },
			recovery.Blocked, recovery.RuleMismatched, "not the store the decision log recorded"},
		{"committed", func(f *recovery.Facts) { f.Committed, f.Lists = true, true; f.Aborted = true; f.HandCommit = hand },
			recovery.Commit, recovery.RuleCommitted, ""},
		{"committed, young, other log", func(f *recovery.Facts) { f.Committed, f.Lists = true, true; f.Age = 0; f.Ref.Log = otherLog },
			recovery.Commit, recovery.RuleCommitted, ""},
		{"a record that does not list it", func(f *recovery.Facts) { f.Committed = true }, recovery.Anomaly, recovery.RuleUnlisted, "does not list this branch"},
		{"a sibling committed by hand", func(f *recovery.Facts) { f.HandCommit = hand; f.Aborted = true },
			recovery.Blocked, recovery.RuleHandCommit, "committed by hand"},
		{"abort recorded", func(f *recovery.Facts) {
			f.Aborted = true
			f.Age = 0
			f.Ref.Log = otherLog
			f.Delegated[0].Table = recovery.TableMissing
		},
			recovery.Rollback, recovery.RuleAbortRecorded, ""},
		{"no log in its XID", func(f *recovery.Facts) { f.Ref.Log = 0; f.Predates = true }, recovery.OtherLog, recovery.RuleNoLog, "names no decision log"},
		{"another log", func(f *recovery.Facts) { f.Ref.Log = otherLog; f.Predates = true }, recovery.OtherLog, recovery.RuleOtherLog, "belongs to decision log " + otherLog.String()},
		{"began before the log", func(f *recovery.Facts) { f.Predates = true; f.Age = 0 }, recovery.Predates, recovery.RulePredates, "before this log was created"},
		{"another holds the lease", func(f *recovery.Facts) { f.Presume, f.LeaseWhy = recovery.PresumeNever, "node n2 holds it" },
			recovery.Wait, recovery.RuleNotHolder, "node n2 holds it"},
		{"inside the grace", func(f *recovery.Facts) { f.Age = 30 * time.Second; f.Delegated[0].Table = recovery.TableMissing },
			recovery.Wait, recovery.RuleYoung, "once older than 1m0s"},
		{"at the grace", func(f *recovery.Facts) { f.Age = time.Minute }, recovery.Wait, recovery.RuleYoung, "once older than"},
		{"age unknown", func(f *recovery.Facts) { f.AgeKnown = false }, recovery.Wait, recovery.RuleYoung, "once older than"},
		{"lease held, inside the grace", func(f *recovery.Facts) { f.Presume = recovery.PresumeAfterGrace; f.Age = 0 }, recovery.Wait, recovery.RuleYoung, "once older than"},
		{"delegated table not configured", func(f *recovery.Facts) { f.Delegated[0].Table = recovery.TableMissing },
			recovery.Blocked, recovery.RuleDelegated, `"pg"'s decision table (the log delegated decisions to it), which is not configured`},
		{"delegated table not opened", func(f *recovery.Facts) {
			f.Delegated[0].Table, f.Delegated[0].Err = recovery.TableUnreachable, errors.New("connection refused")
		}, recovery.Blocked, recovery.RuleDelegated, "could not be opened: connection refused"},
		{"delegated table not the recorded one", func(f *recovery.Facts) {
			f.Delegated[0].Table, f.Delegated[0].Err = recovery.TableMismatched, idErr
		}, recovery.Blocked, recovery.RuleDelegated, "not the recorded one"},
		{"delegated table unread", func(f *recovery.Facts) { f.Delegated[0].Table = recovery.TableUnread }, recovery.Blocked, recovery.RuleDelegated, "could not be read"},
		{"taken over, young", func(f *recovery.Facts) { f.Presume = recovery.PresumeNow; f.Age, f.AgeKnown = 0, false },
			recovery.Rollback, recovery.RuleTakenOver, ""},
		{"taken over, a delegated table missing", func(f *recovery.Facts) { f.Presume = recovery.PresumeNow; f.Delegated[0].Table = recovery.TableMissing },
			recovery.Blocked, recovery.RuleDelegated, "not configured"},
		{"presumed abort", func(f *recovery.Facts) {}, recovery.Rollback, recovery.RulePresumedAbort, ""},
		{"presumed abort, no delegation", func(f *recovery.Facts) { f.Delegated = nil }, recovery.Rollback, recovery.RulePresumedAbort, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := judgeFacts(t)
			tc.change(&f)
			j := recovery.Judge(f)
			if j.Verdict != tc.want || j.Rule != tc.rule || !strings.Contains(j.Reason, tc.reason) || (tc.reason == "") != (j.Reason == "") {
				t.Errorf("Judge = %v by %v (%q); want %v by %v (%q)", j.Verdict, j.Rule, j.Reason, tc.want, tc.rule, tc.reason)
			}
		})
	}
}

// TestContradiction is manual resolution against the judgement, row by
// row: which commits and rollbacks by hand are refused unless forced, and
// what the refusal says.
func TestContradiction(t *testing.T) {
	hand := &xa.HeuristicRecord{RM: "maria", XID: xa.XID{FormatID: 1, Gtrid: []byte("g"), Bqual: []byte("0")}, Action: xa.OutcomeCommit}
	handRollback := xa.HeuristicRecord{RM: "maria", XID: xa.XID{FormatID: 1, Gtrid: []byte("g"), Bqual: []byte("0")}, Action: xa.OutcomeRollback}
	otherLog, _ := xa.NewLogID()
	commit, rollback := xa.OutcomeCommit, xa.OutcomeRollback
	for _, tc := range []struct {
		name   string
		change func(*recovery.Facts)
		action xa.Outcome
		byHand []xa.HeuristicRecord
		want   string // "" for none
	}{
		{"not ours", func(f *recovery.Facts) { *f = recovery.Facts{} }, commit, nil, "not a branch of this transaction manager"},
		{"commit, committed", func(f *recovery.Facts) { f.Committed, f.Lists = true, true }, commit, nil, ""},
		{"commit, a record not listing it", func(f *recovery.Facts) { f.Committed = true }, commit, nil, ""},
		{"commit, aborted", func(f *recovery.Facts) { f.Aborted = true }, commit, nil, "an abort is recorded"},
		{"commit, aborted, a sibling by hand", func(f *recovery.Facts) { f.Aborted = true; f.HandCommit = hand }, commit, nil, "an abort is recorded"},
		{"commit, another log", func(f *recovery.Facts) { f.Ref.Log = otherLog }, commit, nil, "belongs to decision log " + otherLog.String()},
		{"commit, no log", func(f *recovery.Facts) { f.Ref.Log = 0 }, commit, nil, "belongs to decision log (none"},
		{"commit, predates", func(f *recovery.Facts) { f.Predates = true }, commit, nil, "earlier log"},
		{"commit, a sibling by hand", func(f *recovery.Facts) { f.HandCommit = hand }, commit, nil, "was committed by hand"},
		{"commit, young", func(f *recovery.Facts) { f.Age = 0 }, commit, nil, "grace period, and its coordinator may still decide"},
		{"commit, blocked", func(f *recovery.Facts) { f.Delegated[0].Table = recovery.TableMissing }, commit, nil, "no commit is logged for its transaction: the decision may be in"},
		{"commit, presumed abort", func(f *recovery.Facts) {}, commit, nil, "presumed abort says roll it back"},
		{"commit, a participant not recorded", func(f *recovery.Facts) { f.Mismatched = errors.New("id") }, commit, nil, "not the store the decision log recorded"},
		{"rollback, committed", func(f *recovery.Facts) { f.Committed, f.Lists = true, true }, rollback, nil, "a commit is logged"},
		{"rollback, a record not listing it", func(f *recovery.Facts) { f.Committed = true }, rollback, nil, "a commit is logged"},
		{"rollback, aborted", func(f *recovery.Facts) { f.Aborted = true; f.Age = 0 }, rollback, nil, ""},
		{"rollback, aborted, a sibling by hand", func(f *recovery.Facts) { f.Aborted = true; f.HandCommit = hand }, rollback, nil, "the outcome would be mixed"},
		{"rollback, another log", func(f *recovery.Facts) { f.Ref.Log = otherLog }, rollback, nil, "its commit may be logged there"},
		{"rollback, predates", func(f *recovery.Facts) { f.Predates = true }, rollback, nil, "began before this decision log"},
		{"rollback, young", func(f *recovery.Facts) { f.Age = 0 }, rollback, nil, "inside the 1m0s grace period"},
		{"rollback, blocked", func(f *recovery.Facts) { f.Delegated[0].Table = recovery.TableMissing }, rollback, nil, `"pg"'s decision table`},
		{"rollback, presumed abort", func(f *recovery.Facts) {}, rollback, nil, ""},
		{"rollback, itself committed by hand", func(f *recovery.Facts) {}, rollback, []xa.HeuristicRecord{*hand}, "the outcome would be mixed"},
		{"commit, a sibling rolled back by hand", func(f *recovery.Facts) { f.Committed, f.Lists = true, true }, commit, []xa.HeuristicRecord{handRollback}, "the outcome would be mixed"},
		{"rollback, a sibling rolled back by hand", func(f *recovery.Facts) {}, rollback, []xa.HeuristicRecord{handRollback}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := judgeFacts(t)
			tc.change(&f)
			got := recovery.Contradiction(f, tc.action, tc.byHand)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Contradiction(%v) = %q; want %q", tc.action, got, tc.want)
			}
		})
	}
}
