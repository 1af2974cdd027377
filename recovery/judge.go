package recovery

import (
	"fmt"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// Facts is everything recovery knows about one prepared branch when it
// judges it: what the XID names, the decisions read for its transaction,
// its age, the log's lease, the delegated decision tables, and the
// identity of the participant that lists it. Scan and Resolve read them
// (I/O); Judge decides from them alone (docs/protocol.md, "Recovery
// scanner").
type Facts struct {
	// Ours: the XID is this transaction manager's (xa.ParseOwned), and
	// Ref is what it names. A branch that is not ours has no other facts.
	Ours bool
	Ref  xa.BranchRef
	// Served: Ref's node is one this scanner resolves (Config.Nodes).
	Served bool
	// Mismatched: the participant that lists the branch is not the store
	// the decision log recorded under its name (*xa.IdentityError), or
	// nil. Scan and Resolve do not list such a participant at all; the
	// rule stands here so that nothing judged acts on one.
	Mismatched error

	// Committed: a commit decision exists for the transaction (in the
	// log, or a decision row in a participant); Lists: that decision
	// names this branch.
	Committed, Lists bool
	// Aborted: the log holds an abort record for the transaction (the
	// fence is taken).
	Aborted bool
	// HandCommit: a branch of the transaction was committed by hand (a
	// heuristic commit record), or nil.
	HandCommit *xa.HeuristicRecord

	// Log is this scanner's decision log and Created its creation (on
	// the log's clock); Predates: Ref began before it (translated to the
	// log's clock, NodeClock).
	Log      xa.LogID
	Created  time.Time
	Predates bool

	// Age is how long the branch has been prepared, if AgeKnown, against
	// the presumed-abort Grace.
	Age      time.Duration
	AgeKnown bool
	Grace    time.Duration
	// Presume is the log's lease (Leased): when presumed abort may
	// happen, and LeaseWhy says why. Zero: the log has no lease
	// (PresumeAfterGrace).
	Presume  Presumption
	LeaseWhy string

	// Delegated: the participants the log delegated decisions to, and
	// whether their decision tables can be trusted to say "no decision".
	Delegated []Delegated
}

// Delegated is a participant the decision log delegated decisions to, as
// recovery found its decision table.
type Delegated struct {
	Participant string
	Table       TableState
	// Err says why the table is not Ready (Mismatched, Unreachable,
	// Unread).
	Err error
}

// TableState is what recovery found of a delegated decision table.
type TableState int

const (
	// TableReady: configured, the recorded table (or the delegation
	// recorded no identity), and read.
	TableReady TableState = iota
	// TableMissing: no participant of that name with a decision table is
	// configured.
	TableMissing
	// TableUnreachable: configured, but it could not be opened.
	TableUnreachable
	// TableMismatched: the participant, or its decision table, is not the
	// store the log recorded.
	TableMismatched
	// TableUnread: its decisions could not be read in this scan.
	TableUnread
)

// why says why d's table may hold the decision and cannot be trusted to
// say there is none; "" when it can.
func (d Delegated) why() string {
	switch d.Table {
	case TableMismatched:
		return fmt.Sprintf("the decision may be in participant %q's decision table (the log delegated decisions to it), "+
			"but the store that answers under that name is not the recorded one: %v", d.Participant, d.Err)
	case TableUnreachable:
		return fmt.Sprintf("the decision may be in participant %q's decision table (the log delegated decisions to it), which could not be opened: %v", d.Participant, d.Err)
	case TableMissing:
		return fmt.Sprintf("the decision may be in participant %q's decision table (the log delegated decisions to it), which is not configured", d.Participant)
	case TableUnread:
		return fmt.Sprintf("the decision may be in participant %q's decision table, which could not be read", d.Participant)
	}
	return ""
}

// blockedBy says why no branch may be presumed aborted because of the
// delegated tables; "" when none blocks.
func blockedBy(ds []Delegated) string {
	var why []string
	for _, d := range ds {
		if w := d.why(); w != "" {
			why = append(why, w)
		}
	}
	return strings.Join(why, "; ")
}

// Rule names the rule of Judge that gave a verdict.
type Rule int

const (
	RuleForeign       Rule = 1 + iota // not ours: Foreign
	RuleOtherNode                     // ours, another node's: OtherNode
	RuleMismatched                    // listed by a participant that is not the recorded store: Blocked
	RuleCommitted                     // a commit decision names it: Commit
	RuleUnlisted                      // a commit decision that does not name it: Anomaly
	RuleHandCommit                    // a branch of it committed by hand: Blocked
	RuleAbortRecorded                 // the fence is taken: Rollback
	RuleNoLog                         // its XID names no log: OtherLog
	RuleOtherLog                      // its XID names another log: OtherLog
	RulePredates                      // began before this log: Predates
	RuleNotHolder                     // another process holds the log's lease: Wait
	RuleYoung                         // inside the grace period: Wait
	RuleDelegated                     // a delegated table cannot say "no decision": Blocked
	RuleTakenOver                     // the log was taken over (PresumeNow): Rollback
	RulePresumedAbort                 // older than the grace, nothing blocks: Rollback
)

var ruleNames = [...]string{"", "foreign", "other-node", "mismatched", "committed", "unlisted", "hand-commit", "abort-recorded",
	"no-log", "other-log", "predates", "not-holder", "young", "delegated", "taken-over", "presumed-abort"}

func (r Rule) String() string {
	if r <= 0 || int(r) >= len(ruleNames) {
		return "Rule(invalid)"
	}
	return ruleNames[r]
}

// Judgement is what recovery does with a branch, by which rule, and why
// (for operators; "" for Commit, Foreign, OtherNode and a rollback due).
type Judgement struct {
	Verdict Verdict
	Rule    Rule
	Reason  string
}

// Judge returns recovery's verdict on a branch with facts f. It is the
// one judgement Scan acts on and Resolve measures an operator's action
// against (docs/protocol.md, "Recovery scanner", "Identity", "Leases,
// epochs, takeover"), in this order:
//
//	not ours                                   -> Foreign
//	ours, of a node not served                 -> OtherNode
//	listed by a participant not the recorded   -> Blocked (nothing acted on)
//	a commit decision names it                 -> Commit
//	a commit decision that does not name it    -> Anomaly
//	a branch of it committed by hand           -> Blocked (abort would mix)
//	an abort record (the fence is taken)       -> Rollback
//	its XID names no log, or another log       -> OtherLog
//	began before this log was created          -> Predates
//	another process holds the log's lease      -> Wait
//	no takeover, inside the grace period       -> Wait
//	a delegated decision table cannot answer   -> Blocked
//	otherwise                                  -> Rollback (presumed abort, after the fence)
//
// A Rollback without Aborted is due only once the fence is taken; the
// fence, not the judgement, settles a race with a commit.
func Judge(f Facts) Judgement {
	switch {
	case !f.Ours:
		return Judgement{Verdict: Foreign, Rule: RuleForeign}
	case !f.Served:
		return Judgement{Verdict: OtherNode, Rule: RuleOtherNode}
	case f.Mismatched != nil:
		return Judgement{Verdict: Blocked, Rule: RuleMismatched,
			Reason: fmt.Sprintf("the participant that lists it is not the store the decision log recorded: %v", f.Mismatched)}
	case f.Committed && f.Lists:
		return Judgement{Verdict: Commit, Rule: RuleCommitted}
	case f.Committed:
		return Judgement{Verdict: Anomaly, Rule: RuleUnlisted, Reason: "its transaction's commit record does not list this branch"}
	case f.HandCommit != nil:
		return Judgement{Verdict: Blocked, Rule: RuleHandCommit, Reason: handCommitReason(*f.HandCommit)}
	case f.Aborted:
		// This log fenced the transaction: no commit can be recorded.
		return Judgement{Verdict: Rollback, Rule: RuleAbortRecorded}
	case f.Ref.Log == 0:
		return Judgement{Verdict: OtherLog, Rule: RuleNoLog,
			Reason: "its XID names no decision log (made before logs had identities, or by hand): only a commit record decides it"}
	case f.Ref.Log != f.Log:
		return Judgement{Verdict: OtherLog, Rule: RuleOtherLog,
			Reason: fmt.Sprintf("belongs to decision log %s; this is log %s: recover it with that log", f.Ref.Log, f.Log)}
	case f.Predates:
		return Judgement{Verdict: Predates, Rule: RulePredates,
			Reason: fmt.Sprintf("began %s, before this log was created (%s)", f.Ref.ID.Begun.UTC().Format(time.RFC3339), f.Created.UTC().Format(time.RFC3339))}
	}
	lv := leaseView{presume: f.Presume, why: f.LeaseWhy}
	young := !f.AgeKnown || f.Age <= f.Grace
	switch {
	case lv.wait(young) && f.Presume == PresumeNever:
		return Judgement{Verdict: Wait, Rule: RuleNotHolder, Reason: lv.waitReason(f.Grace)}
	case lv.wait(young):
		return Judgement{Verdict: Wait, Rule: RuleYoung, Reason: lv.waitReason(f.Grace)}
	}
	if why := blockedBy(f.Delegated); why != "" {
		return Judgement{Verdict: Blocked, Rule: RuleDelegated, Reason: why}
	}
	if f.Presume == PresumeNow {
		return Judgement{Verdict: Rollback, Rule: RuleTakenOver}
	}
	return Judgement{Verdict: Rollback, Rule: RulePresumedAbort}
}

// Contradiction says how resolving the branch of f by hand with action
// (xactl commit or rollback) goes against Judge's verdict on it; "" when
// it does not. byHand are the heuristic records of its transaction's
// other resolutions by hand: one with the other action is a contradiction
// too (the outcome would be mixed).
//
//	not ours                                -> always
//	listed by a participant not recorded    -> always
//	commit:   an abort record               -> contradiction
//	          Commit, Anomaly               -> none (a commit is logged)
//	          any other verdict             -> contradiction, saying that verdict
//	rollback: Commit, Anomaly               -> contradiction
//	          Rollback                      -> none (Resolve takes the fence first)
//	          a hand commit                 -> contradiction (mixed)
//	          any other verdict             -> contradiction, saying that verdict
func Contradiction(f Facts, action xa.Outcome, byHand []xa.HeuristicRecord) string {
	if !f.Ours {
		return "it is not a branch of this transaction manager (the decision log knows nothing of it)"
	}
	j := Judge(f)
	if c := contradiction(f, j, action); c != "" {
		return c
	}
	for _, hr := range byHand {
		if hr.Action != action {
			return fmt.Sprintf("branch %s on %s of the same transaction was resolved by hand with %s: the outcome would be mixed", hr.XID, hr.RM, hr.Action)
		}
	}
	return ""
}

func contradiction(f Facts, j Judgement, action xa.Outcome) string {
	if j.Rule == RuleMismatched {
		return j.Reason
	}
	if action == xa.OutcomeCommit {
		if f.Aborted {
			return "an abort is recorded for its transaction (presumed abort): its other branches are rolled back"
		}
		switch j.Rule {
		case RuleCommitted, RuleUnlisted:
			return ""
		case RuleNoLog, RuleOtherLog:
			return fmt.Sprintf("no commit is logged for it here: it belongs to decision log %s (node %s), not to this one (%s); "+
				"its decision, if any, is in that log: resolve it with that log", logName(f.Ref.Log), f.Ref.ID.Node, f.Log)
		case RulePredates:
			return "no commit is logged for it in this log, and it began before this log was created: its decision, if any, is in an earlier log"
		case RuleHandCommit:
			return fmt.Sprintf("no commit is logged for its transaction, but branch %s on %s of it was committed by hand: "+
				"committing this one too matches that (recovery leaves it prepared, blocked, until then)", f.HandCommit.XID, f.HandCommit.RM)
		case RuleYoung, RuleNotHolder:
			return fmt.Sprintf("no commit is logged for its transaction yet: it is %s old, inside the %v grace period, and its coordinator "+
				"may still decide either way (recovery waits; see xactl list)", ageText(f.Age, f.AgeKnown), f.Grace)
		case RuleDelegated:
			return "no commit is logged for its transaction: " + j.Reason
		}
		return "no commit is logged for its transaction: presumed abort says roll it back"
	}
	switch j.Rule {
	case RuleCommitted, RuleUnlisted:
		return "a commit is logged for its transaction: recovery will commit it"
	case RuleHandCommit:
		return fmt.Sprintf("branch %s on %s of the same transaction was resolved by hand with %s: the outcome would be mixed", f.HandCommit.XID, f.HandCommit.RM, f.HandCommit.Action)
	case RuleNoLog, RuleOtherLog:
		return fmt.Sprintf("it belongs to decision log %s, not to this one (%s): its commit may be logged there", logName(f.Ref.Log), f.Log)
	case RulePredates:
		return "it began before this decision log was created: its commit may be logged in an earlier log"
	case RuleYoung, RuleNotHolder:
		return fmt.Sprintf("it is %s old, inside the %v grace period: its coordinator may still commit it", ageText(f.Age, f.AgeKnown), f.Grace)
	case RuleDelegated:
		return j.Reason
	}
	// Rollback (an abort recorded, presumed abort due): what recovery
	// does; Resolve takes the fence first.
	return ""
}

// handCommitReason says why a branch whose sibling was committed by hand
// is left prepared.
func handCommitReason(hr xa.HeuristicRecord) string {
	return fmt.Sprintf("branch %s on %s of its transaction was committed by hand (heuristic record): presuming abort would mix the outcome; "+
		"commit this branch too (xactl commit --force), or clear that record (xactl heuristic clear) to let presumed abort go on", hr.XID, hr.RM)
}
