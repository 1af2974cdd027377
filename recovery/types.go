package recovery

import (
	"log/slog"
	"time"

	"github.com/xadb/xa/xa"
)

// The optional capabilities of participants the scanner uses are declared
// in package xa, beside the others (xa/rm.go); these aliases keep their
// old names.
type (
	// DecisionStore: see xa.DecisionStore.
	DecisionStore = xa.DecisionStore
	// SharedServer: see xa.SharedServer.
	SharedServer = xa.SharedServer
	// GhostCounter: see xa.GhostCounter.
	GhostCounter = xa.GhostCounter
)

// Config configures a Scanner.
type Config struct {
	// Participants are the databases to scan, by their stable names.
	Participants []xa.ResourceManager
	// Log holds the commit decisions, and takes the abort records of
	// presumed aborts. A read-only log (filelog.Snapshot) serves Plan.
	Log xa.RecoveryLog
	// Nodes are the transaction-manager nodes whose branches this scanner
	// resolves; default: the log's node. Branches of other nodes are
	// reported, never touched.
	Nodes []string
	// Grace: a branch with no decision is presumed aborted only once it is
	// older than this. The log's grace (LogIdentity.Grace) is the default
	// and the minimum: a shorter value is ignored.
	Grace time.Duration
	// Unreachable names participants that are configured but could not be
	// opened, with why: reports say so instead of "not configured".
	Unreachable map[string]error
	// Logger receives a line per action; nil discards.
	Logger *slog.Logger
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// Tracer, if set, records a span per scan (SpanScan; package otelxa
	// for OpenTelemetry). nil: none.
	Tracer xa.Tracer
}

// Verdict is what recovery does (or would do) with a branch.
type Verdict int

const (
	// Commit: a commit decision exists; the branch is committed.
	Commit Verdict = 1 + iota
	// Rollback: presumed abort (or an abort is recorded): the branch is
	// rolled back.
	Rollback
	// Wait: no decision yet, younger than the grace period: its
	// coordinator may still be deciding.
	Wait
	// Foreign: not ours (another application or transaction manager).
	Foreign
	// OtherNode: ours, but owned by a node this scanner does not serve.
	OtherNode
	// Anomaly: a record exists but does not list this branch: reported,
	// not touched.
	Anomaly
	// OtherLog: ours, with no decision here, and its XID names another
	// decision log (or none): its decision may be there. Left alone.
	OtherLog
	// Predates: ours, no decision, but it began before this log was
	// created: its decision may be in a log that no longer exists here.
	// Left alone.
	Predates
	// Blocked: presumed abort is due, but a participant this log delegated
	// decisions to is not configured or did not answer: the decision may
	// be there. Left alone until it answers.
	Blocked
)

var verdictNames = [...]string{"", "commit", "rollback", "wait", "foreign", "other-node", "anomaly", "other-log", "predates-log", "blocked"}

func (v Verdict) String() string {
	if v <= 0 || int(v) >= len(verdictNames) {
		return "Verdict(invalid)"
	}
	return verdictNames[v]
}

// Branch is one prepared branch found by a scan and what became of it.
type Branch struct {
	Participant string
	Prepared    xa.PreparedBranch
	ID          xa.GlobalID // zero for foreign branches
	Log         xa.LogID    // the decision log the XID names; zero if none
	Age         time.Duration
	AgeKnown    bool
	Logged      bool // a commit decision exists
	AbortLogged bool // an abort record exists
	Verdict     Verdict
	// Reason says why a branch is left alone (Wait, OtherLog, Predates,
	// Blocked, Anomaly), for operators.
	Reason string
	// Done: the action was carried out (false in a dry run, for Wait,
	// Foreign, OtherNode and Anomaly, and when Err is set).
	Done bool
	// Err: the action failed; a retryable error means "later".
	Err error
}

// Report is the outcome of one scan.
type Report struct {
	// Participants that could be listed.
	Participants []string
	// Unlisted: configured participants that could not be listed, and
	// why. Nothing is known about their branches.
	Unlisted map[string]error
	// Mismatched: configured participants, or their decision tables, that
	// answered as another store than the one the decision log recorded
	// under their name, or as none (an *xa.IdentityError says which was
	// expected, which answered, and the fix). Nothing on them was acted
	// on, no record naming them was forgotten, and presumed abort waits
	// for a decision table that is not the recorded one. An anomaly for
	// the operator: xactl exits 3.
	Mismatched map[string]error
	Branches   []Branch
	// Forgotten records: every branch of them is resolved.
	Forgotten []xa.GlobalID
	// Kept records that could have been forgotten but for a reason
	// (ghost prepared transactions, a participant that did not answer).
	Kept []KeptRecord
	// Aborted: transactions whose abort this scan recorded (presumed
	// abort) and whose branches it then rolled back. A transaction that
	// turned out to have finished between the listing and the abort record
	// is not counted: its abort record is inert (nothing of it is left to
	// decide) and is forgotten after its retention.
	Aborted []xa.GlobalID
	// ForgottenAborts: abort records dropped (no branch left, retention
	// passed).
	ForgottenAborts []xa.GlobalID
	// Errors that stopped part of the scan (a participant that could not
	// be listed, a log that could not be read).
	Errors []error
}

// KeptRecord is a commit record left in the log, and why.
type KeptRecord struct {
	ID     xa.GlobalID
	Reason string
	// Unseen: some branch of the record is on a participant this scan
	// could not see (not configured, or not listed), so it may still be
	// in doubt there. False when the only reason is MariaDB's count of
	// prepared transactions it does not list, which errs on the side of
	// keeping (its snapshot can be stale).
	Unseen bool
}

// InDoubt counts the branches of ours left unresolved after the scan
// (waiting, failed, blocked or anomalous). Branches of other logs and
// older than the log count too: they are in doubt, only not for this
// scanner to resolve.
func (r Report) InDoubt() int {
	n := 0
	for _, b := range r.Branches {
		switch b.Verdict {
		case Commit, Rollback:
			if !b.Done {
				n++
			}
		case Wait, Anomaly, OtherLog, Predates, Blocked:
			n++
		}
	}
	return n
}
