package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

type resolveJSON struct {
	Participant   string `json:"participant"`
	XID           string `json:"xid"`
	Action        string `json:"action"`
	Forced        bool   `json:"forced"`
	LoggedCommit  bool   `json:"logged_commit"`
	Fenced        bool   `json:"fenced"`
	Contradiction string `json:"contradiction"`
}

type dumpJSON struct {
	Records []struct {
		Type     string            `json:"type"`
		GlobalID string            `json:"global_id"`
		XID      string            `json:"xid"`
		Branches []string          `json:"branches"`
		Detail   map[string]string `json:"detail"`
		Live     bool              `json:"live"`
		Offset   int64             `json:"offset"`
	} `json:"records"`
	Error string `json:"error"`
}

// TestResolve: xactl commit and rollback act without --force when they
// agree with the decision log, refuse (exit 1, saying why and naming
// --force) and change nothing when they contradict it, act with --force
// and record a heuristic outcome that log dump and list show; and they
// reject XIDs that are malformed, not prepared anywhere, foreign, or
// asked for on a participant that is not configured.
func TestResolve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logged := e.prepare(1) // commit logged
	orphan := e.prepare(2) // no record, past the grace period
	mixed := e.prepare(3)  // no record, past the grace period
	prepared := time.Now() //
	young := e.prepare(4)  // no record, inside the grace period
	e.logCommit(logged.record())
	f := e.foreignBranches()
	e.waitDetached(logged, orphan, mixed, young)
	ageBeyond(prepared, time.Second)
	// Branches older than 1 s are past the grace period; young is not
	// under the 10 s one.
	cfg := e.logGraceConfig()
	cfgYoung := e.graceConfig("10s")

	refused := func(r result, why string) {
		t.Helper()
		r.want(t, 1)
		r.stderrHas(t, "refusing", why, "--force")
	}

	// Consistent with the log: no --force needed, nothing recorded.
	r := e.runWith(cfg, "commit", logged.pg.String(), "-o", "json").want(t, 0)
	var res resolveJSON
	r.json(t, &res)
	if res.Participant != pgName || res.XID != logged.pg.String() || res.Action != "commit" || res.Forced || !res.LoggedCommit {
		t.Errorf("commit of a logged branch: %+v", res)
	}
	e.wantPrepared(logged, true, false)
	if !e.pgRow(1) {
		t.Error("PostgreSQL row 1 not committed")
	}
	// A rollback of an undecided branch of ours past the grace period is a
	// presumed abort by hand: the abort is recorded first (the fence).
	r = e.runWith(cfg, "rollback", orphan.my.String()).want(t, 0)
	r.stdoutHas(t, "rolled back", orphan.my.String(), myName, "abort is recorded first")
	if strings.Contains(r.stdout, "forced") {
		t.Errorf("a consistent rollback says forced: %s", r)
	}
	e.wantPrepared(orphan, false, true)
	if a := e.aborts(); len(a) != 1 || a[0].GlobalID != orphan.id.String() {
		t.Errorf("abort records after a rollback by hand: %+v, want the one of %s", a, orphan.id)
	}

	// Contradicting the log: refused, nothing changes.
	refused(e.runWith(cfg, "rollback", logged.my.String()), "a commit is logged")
	refused(e.runWith(cfg, "commit", orphan.pg.String()), "an abort is recorded")
	refused(e.runWith(cfg, "commit", mixed.pg.String()), "no commit is logged")
	refused(e.runWith(cfgYoung, "rollback", young.pg.String()), "grace period")
	refused(e.runWith(cfg, "commit", f.my.String()), "not a branch of this transaction manager")
	refused(e.runWith(cfg, "commit", f.myTwin.String()), "not a branch of this transaction manager")
	// The near misses have the same XID text on both databases.
	e.runWith(cfg, "rollback", f.pgNear).want(t, 2).stderrHas(t, "prepared on maria and pg", "--participant")
	refused(e.runWith(cfg, "rollback", f.pgNear, "--participant", pgName), "not a branch of this transaction manager")
	e.wantPrepared(logged, true, false)
	e.wantPrepared(orphan, false, true)
	e.wantPrepared(young, true, true)
	e.wantRows(1, false, true)
	e.wantRows(2, false, false)
	f.stillPrepared(e)
	if heur := e.heuristics(); len(heur) != 0 {
		t.Errorf("refusals recorded heuristic outcomes: %v", heur)
	}

	// Forced: done, and recorded as a heuristic outcome with the reason.
	r = e.runWith(cfg, "rollback", logged.my.String(), "--force", "--reason", "ticket 42", "-o", "json").want(t, 0)
	res = resolveJSON{}
	r.json(t, &res)
	if !res.Forced || res.Action != "rollback" || res.Participant != myName || !res.LoggedCommit {
		t.Errorf("forced rollback: %+v", res)
	}
	e.wantPrepared(logged, false, false)
	e.wantRows(1, false, true) // a heuristic mixed outcome, by the operator's will

	// A forced commit of one branch of a transaction without a record; the
	// other branch may then not be rolled back by hand without --force:
	// the outcome would be mixed.
	e.runWith(cfg, "commit", mixed.my.String(), "--force", "--reason", "customer paid").want(t, 0).stdoutHas(t, "forced", "heuristic")
	refused(e.runWith(cfg, "rollback", mixed.pg.String()), "mixed")
	e.wantPrepared(mixed, false, true)
	e.wantRows(3, true, false)

	// The heuristic outcomes are in log dump and in list.
	heur := e.heuristics()
	if len(heur) != 2 {
		t.Fatalf("log dump shows %d live heuristic records, want 2: %+v", len(heur), heur)
	}
	if h := heur[logged.my.String()]; h["participant"] != myName || h["action"] != "rollback" || h["forced"] != "true" || h["reason"] != "ticket 42" {
		t.Errorf("heuristic record of the forced rollback: %v", h)
	}
	if h := heur[mixed.my.String()]; h["action"] != "commit" || h["forced"] != "true" || h["reason"] != "customer paid" {
		t.Errorf("heuristic record of the forced commit: %v", h)
	}
	e.runWith(cfg, "log", "dump").want(t, 0).stdoutHas(t, "heuristic", logged.my.String(), "ticket 42")
	r = e.runWith(cfg, "list", "-o", "json").want(t, 3)
	var l listJSON
	r.json(t, &l)
	found := map[string]heuristicJSON{}
	for _, h := range l.Heuristics {
		found[h.XID] = h
	}
	if h := found[logged.my.String()]; h.Action != "rollback" || !h.Forced || h.Participant != myName || h.Reason != "ticket 42" {
		t.Errorf("list heuristics: %+v, want the forced rollback of %s", l.Heuristics, logged.my)
	}
	if h := found[mixed.my.String()]; h.Action != "commit" || !h.Forced {
		t.Errorf("list heuristics: %+v, want the forced commit of %s", l.Heuristics, mixed.my)
	}
	e.runWith(cfg, "list").want(t, 3).stdoutHas(t, "Heuristic outcomes", "ticket 42")

	// Bad XIDs.
	gone, err := xa.NewGlobalID(e.node, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r = e.runWith(cfg, "commit", e.xid(gone, 0).String()).want(t, 1)
	r.stderrHas(t, "not prepared on any participant")
	e.runWith(cfg, "rollback", orphan.my.String()).want(t, 1).stderrHas(t, "not prepared") // already rolled back
	for _, bad := range []string{"not-an-xid", "1:abc", "01:abc:0", "-1:abc:0", "1:~!!:0", "1:" + strings.Repeat("g", 65) + ":0"} {
		r := e.runWith(cfg, "commit", "--", bad).want(t, 2)
		r.stderrHas(t, "formatID:gtrid:bqual")
	}
	e.runWith(cfg, "commit").want(t, 2)
	e.runWith(cfg, "commit", logged.pg.String(), orphan.pg.String()).want(t, 2)
	e.runWith(cfg, "commit", young.pg.String(), "--participant", "nosuch").want(t, 2).stderrHas(t, `"nosuch" is not configured`)
	// --participant that does not hold the branch.
	e.runWith(cfg, "commit", young.pg.String(), "--participant", myName).want(t, 1).stderrHas(t, "not prepared")
	e.wantPrepared(young, true, true)

	// A foreign branch is only touched with --force, and that is recorded.
	e.runWith(cfg, "rollback", f.my.String(), "--force", "--reason", "their owner is gone").want(t, 0)
	if e.myPrepared(f.my) {
		t.Error("forced rollback left the foreign branch prepared")
	}
	if h := e.heuristics()[f.my.String()]; h["action"] != "rollback" || h["forced"] != "true" {
		t.Errorf("forced rollback of a foreign branch recorded as %v", h)
	}
}

// aborts returns the abort records list shows.
func (e *env) aborts() []abortJSON {
	e.t.Helper()
	var out listJSON
	e.run("list", "-o", "json").json(e.t, &out)
	return out.Aborts
}

// heuristics returns the live heuristic records of log dump --output json,
// by XID.
func (e *env) heuristics() map[string]map[string]string {
	e.t.Helper()
	r := e.run("log", "dump", "--live", "-o", "json").want(e.t, 0)
	var d dumpJSON
	r.json(e.t, &d)
	out := map[string]map[string]string{}
	for _, rec := range d.Records {
		if rec.Type == "heuristic" {
			if !rec.Live {
				e.t.Errorf("log dump --live shows a record that is not live: %+v", rec)
			}
			out[rec.XID] = rec.Detail
		}
	}
	return out
}

// TestResolveAmbiguous: an XID prepared on two participants (other
// applications may reuse an XID on two databases) is resolved only on the
// one --participant names; without it xactl refuses to guess.
func TestResolveAmbiguous(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	x := xa.XID{FormatID: 1, Gtrid: []byte("amb." + e.node + "."), Bqual: []byte("1")}
	e.myRawPrepare(x.Gtrid, x.Bqual, 1, 201)
	e.pgForeign(x.String(), 201)
	e.logCommit()

	r := e.run("rollback", x.String(), "--force").want(t, 2)
	r.stderrHas(t, myName, pgName, "--participant")
	if !e.myPrepared(x) || !e.pgPrepared(x.String()) {
		t.Fatal("an ambiguous rollback touched a branch")
	}
	e.run("rollback", x.String(), "--force", "--participant", pgName).want(t, 0)
	if !e.myPrepared(x) || e.pgPrepared(x.String()) {
		t.Fatalf("rollback --participant %s: MariaDB prepared %v (want true), PostgreSQL prepared %v (want false)", pgName, e.myPrepared(x), e.pgPrepared(x.String()))
	}
	// Now only MariaDB holds it: no --participant needed.
	e.run("rollback", x.String(), "--force").want(t, 0)
	if e.myPrepared(x) {
		t.Fatal("MariaDB branch still prepared")
	}
}
