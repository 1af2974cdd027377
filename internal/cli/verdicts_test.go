package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// TestListVerdicts: branches of ours that this log cannot decide are shown
// with recovery's verdict and its reason, counted in doubt (exit 3 though
// nothing else is), and left alone by recover: a branch of another
// decision log ("belongs to log X"), one whose XID names no log, one that
// began before this log was created ("older than this log"), and one that
// its transaction's commit record does not list (anomaly).
func TestListVerdicts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ours := e.logID
	other, err := xa.NewLogID()
	if err != nil {
		t.Fatal(err)
	}
	e.logID = other
	otherLog := e.prepare(1)
	e.logID = 0
	noLog := e.prepare(2)
	e.logID = ours
	old := e.prepareAt(3, time.Now().Add(-time.Hour))
	odd := e.prepare(4)
	rec := odd.record()
	rec.Branches = rec.Branches[:1] // names maria's branch only
	e.logCommit(rec)
	e.waitDetached(otherLog, noLog, old, odd)
	ageBeyond(time.Now(), logGrace) // past the log's grace: only the verdicts keep them
	cfg := e.logGraceConfig()

	r := e.runWith(cfg, "list", "-o", "json").want(t, 3)
	var out listJSON
	r.json(t, &out)
	check := func(tx txn, verdict, action, reason string) {
		t.Helper()
		for _, b := range []branchJSON{findBranch(t, out.Branches, myName, tx.my.String()), findBranch(t, out.Branches, pgName, tx.pg.String())} {
			if b.Verdict != verdict || !strings.HasPrefix(b.Action, action) || !strings.Contains(b.Reason, reason) || !b.InDoubt || b.Node != e.node {
				t.Errorf("branch %s: verdict %q action %q reason %q in doubt %v; want %q, %q…, a reason with %q, in doubt",
					b.XID, b.Verdict, b.Action, b.Reason, b.InDoubt, verdict, action, reason)
			}
		}
	}
	check(otherLog, "other-log", "none: belongs to log "+other.String(), other.String())
	check(noLog, "other-log", "none: its XID names no decision log", "names no decision log")
	check(old, "predates-log", "none: older than this log", "before this log was created")
	if b := findBranch(t, out.Branches, myName, odd.my.String()); b.Verdict != "commit" {
		t.Errorf("the branch its record lists: %+v, want commit", b)
	}
	if b := findBranch(t, out.Branches, pgName, odd.pg.String()); b.Verdict != "anomaly" || !strings.HasPrefix(b.Action, "anomaly: ") || !strings.Contains(b.Reason, "does not list this branch") || !b.InDoubt {
		t.Errorf("the branch its record does not list: %+v, want an anomaly", b)
	}
	if out.InDoubt == nil || *out.InDoubt != 8 {
		t.Errorf("in_doubt = %v, want 8 (every branch but the committable one)", out.InDoubt)
	}
	if b := findBranch(t, out.Branches, pgName, otherLog.pg.String()); b.Log != other.String() {
		t.Errorf("the log of a branch of another log: %q, want %s", b.Log, other)
	}
	// The table gives the same verdicts, and the reasons.
	e.runWith(cfg, "list").want(t, 3).stdoutHas(t, "none: belongs to log "+other.String(), "none: older than this log",
		"none: its XID names no decision log", "anomaly: not in its commit record", "recover it with that log", "8 branches of ours in doubt")

	// doctor says the same, by verdict, with a reason.
	var d doctorJSON
	e.runWith(cfg, "doctor", "-o", "json").json(t, &d)
	plan := doctorFindings(d, "recovery")
	for check, want := range map[string][]string{
		"branches: other-log":    {"4; e.g. ", "decision log"}, // another log's, or none
		"branches: predates-log": {"2; e.g. ", "before this log was created"},
		"branches: anomaly":      {"1; e.g. ", "does not list this branch"},
		"branches: commit":       {"1; e.g. "},
	} {
		f, ok := plan[check]
		if !ok || f.Severity != "warn" || f.Fix == "" {
			t.Errorf("doctor's %q: %+v, want a warning with a fix (all: %+v)", check, f, plan)
		}
		for _, w := range want {
			if !strings.Contains(f.Value, w) {
				t.Errorf("doctor's %q: %q lacks %q", check, f.Value, w)
			}
		}
	}

	// recover commits the one branch it may and leaves the others alone:
	// still exit 3.
	e.runWith(cfg, "recover").want(t, 3)
	for _, tx := range []txn{otherLog, noLog, old} {
		e.wantPrepared(tx, true, true)
	}
	e.wantPrepared(odd, false, true)
	if a := e.aborts(); len(a) != 0 {
		t.Errorf("recover recorded aborts of branches it may not decide: %+v", a)
	}
}

// TestBlocked: a log that delegated decisions to a participant that is not
// configured (a last resource's decision table) cannot presume abort: the
// branch past its grace is "blocked", with the reason, in doubt, and
// recover leaves it; doctor fails the delegation.
func TestBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l, err := filelog.Open(e.logDir, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogDelegation(e.ctx, xa.Delegation{Participant: "ledger"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	tx := e.prepare(1)
	e.waitDetached(tx)
	ageBeyond(time.Now(), logGrace)
	cfg := e.logGraceConfig()

	r := e.runWith(cfg, "list", "-o", "json").want(t, 3)
	var out listJSON
	r.json(t, &out)
	for _, b := range []branchJSON{findBranch(t, out.Branches, myName, tx.my.String()), findBranch(t, out.Branches, pgName, tx.pg.String())} {
		if b.Verdict != "blocked" || !strings.HasPrefix(b.Action, "blocked: ") || !strings.Contains(b.Action, `"ledger"`) || !strings.Contains(b.Action, "not configured") || !b.InDoubt {
			t.Errorf("branch of a log delegated to an unconfigured participant: %+v, want blocked, naming ledger", b)
		}
	}
	e.runWith(cfg, "list").want(t, 3).stdoutHas(t, "blocked: ", `"ledger"`)
	e.runWith(cfg, "recover").want(t, 3).stdoutHas(t, "blocked: ")
	e.wantPrepared(tx, true, true)
	if a := e.aborts(); len(a) != 0 {
		t.Errorf("a blocked recover recorded aborts: %+v", a)
	}
	var d doctorJSON
	e.runWith(cfg, "doctor", "-o", "json").want(t, 1).json(t, &d)
	failed := false
	for _, res := range d.Results {
		for _, f := range res.Findings {
			if res.Subject == "decision log" && f.Check == "delegation" && f.Severity == "FAIL" && strings.Contains(f.Value, "ledger") && strings.Contains(f.Fix, "blocked") {
				failed = true
			}
		}
	}
	if !failed {
		t.Errorf("doctor does not fail the delegation to an unconfigured participant: %+v", d.Results)
	}
	if f := doctorFindings(d, "recovery")["branches: blocked"]; !strings.HasPrefix(f.Value, "2; e.g. ") || !strings.Contains(f.Value, `"ledger"`) {
		t.Errorf("doctor's plan: %+v, want the two blocked branches, naming ledger", f)
	}
}

type findingJSON struct {
	Check    string `json:"check"`
	Value    string `json:"value"`
	Severity string `json:"severity"`
	Fix      string `json:"fix"`
}

// doctorFindings returns doctor's findings about subject, by check.
func doctorFindings(d doctorJSON, subject string) map[string]findingJSON {
	out := map[string]findingJSON{}
	for _, res := range d.Results {
		if res.Subject == subject {
			for _, f := range res.Findings {
				out[f.Check] = findingJSON(f)
			}
		}
	}
	return out
}
