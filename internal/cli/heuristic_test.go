package cli_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

type heuristicsJSON struct {
	Heuristics []heuristicJSON `json:"heuristics"`
}

type clearJSON struct {
	Participant string          `json:"participant"`
	XID         string          `json:"xid"`
	Cleared     []heuristicJSON `json:"cleared"`
	Remaining   []heuristicJSON `json:"remaining"`
}

// TestHeuristicClear: heuristic records are kept by participant and XID
// (two forced resolutions of one XID on two participants are two records,
// in list, log dump and heuristic list) until xactl heuristic clear
// --participant P XID clears the one of P; list and log show what remains.
func TestHeuristicClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Another application's XID, prepared on both databases.
	x := xa.XID{FormatID: 1, Gtrid: []byte("heur." + e.node + "."), Bqual: []byte("1")}
	e.myRawPrepare(x.Gtrid, x.Bqual, 1, 301)
	e.pgForeign(x.String(), 301)
	e.run("rollback", x.String(), "--force", "--participant", myName, "--reason", "owner gone").want(t, 0)
	e.run("rollback", x.String(), "--force", "--participant", pgName, "--reason", "owner gone too").want(t, 0)

	byRM := func(hs []heuristicJSON) map[string]heuristicJSON {
		out := map[string]heuristicJSON{}
		for _, h := range hs {
			if h.XID == x.String() {
				out[h.Participant] = h
			}
		}
		return out
	}
	var l listJSON
	e.run("list", "-o", "json").want(t, 0).json(t, &l)
	if got := byRM(l.Heuristics); len(got) != 2 || got[myName].Reason != "owner gone" || got[pgName].Reason != "owner gone too" {
		t.Fatalf("list's heuristic records of %s: %+v, want one on each participant", x, l.Heuristics)
	}
	var hl heuristicsJSON
	e.run("heuristic", "list", "-o", "json").want(t, 0).json(t, &hl)
	if got := byRM(hl.Heuristics); len(got) != 2 {
		t.Fatalf("heuristic list: %+v, want two records of %s", hl.Heuristics, x)
	}
	e.run("heuristic", "list").want(t, 0).stdoutHas(t, "PARTICIPANT", "owner gone too")
	if n := strings.Count(e.run("list").want(t, 0).stdout, x.String()); n != 2 {
		t.Errorf("list's table shows %s %d times, want twice (a line per participant)", x, n)
	}
	if n := len(e.heuristicEntries(x.String())); n != 2 {
		t.Errorf("log dump --live shows %d heuristic records of %s, want 2", n, x)
	}

	// Usage: the participant is required; a record that is not there is
	// an error that says where there are.
	e.run("heuristic", "clear", x.String()).want(t, 2).stderrHas(t, "--participant")
	e.run("heuristic", "clear", "--participant", myName, "nonsense").want(t, 2)
	other := xa.XID{FormatID: 1, Gtrid: []byte("none." + e.node), Bqual: []byte("1")}
	e.run("heuristic", "clear", "--participant", myName, other.String()).want(t, 1).stderrHas(t, "no heuristic record")
	e.run("heuristic", "clear", "--participant", "oracle", x.String()).want(t, 1).stderrHas(t, "no heuristic record", myName, pgName)

	// Clear maria's: pg's remains, everywhere.
	r := e.run("heuristic", "clear", "--participant", myName, x.String(), "-o", "json").want(t, 0)
	var c clearJSON
	r.json(t, &c)
	if len(c.Cleared) != 1 || c.Cleared[0].Participant != myName || len(byRM(c.Remaining)) != 1 || byRM(c.Remaining)[pgName].XID == "" {
		t.Errorf("heuristic clear: %+v, want maria's cleared and pg's remaining", c)
	}
	l = listJSON{}
	e.run("list", "-o", "json").want(t, 0).json(t, &l)
	if got := byRM(l.Heuristics); len(got) != 1 || got[pgName].XID == "" {
		t.Errorf("list after clearing maria's record: %+v, want pg's only", l.Heuristics)
	}
	if hs := e.heuristicEntries(x.String()); len(hs) != 1 || hs[0]["participant"] != pgName {
		t.Errorf("log dump --live after clearing maria's record: %v, want pg's only", hs)
	}
	var d dumpJSON
	e.run("log", "dump", "-o", "json").want(t, 0).json(t, &d)
	cleared := false
	for _, rec := range d.Records {
		if rec.Type == "clear" && rec.XID == x.String() && rec.Detail["participant"] == myName && !rec.Live {
			cleared = true
		}
	}
	if !cleared {
		t.Errorf("log dump shows no clear record of %s on %s: %+v", x, myName, d.Records)
	}
	// Cleared once: a second clear finds nothing.
	e.run("heuristic", "clear", "--participant", myName, x.String()).want(t, 1).stderrHas(t, "no heuristic record")
	e.run("heuristic", "clear", "--participant", pgName, x.String()).want(t, 0).stdoutHas(t, "cleared 1 heuristic record")
	if hs := e.heuristicEntries(x.String()); len(hs) != 0 {
		t.Errorf("heuristic records left: %v", hs)
	}
	e.run("heuristic", "list").want(t, 0).stdoutHas(t, "No heuristic records.")

	// A transaction manager holds the log: clear refuses and says so.
	release := e.holdLog()
	defer release()
	e.run("heuristic", "clear", "--participant", pgName, x.String()).want(t, 1).stderrHas(t, "in use")
}

// heuristicEntries returns the details of the live heuristic records of x
// in log dump.
func (e *env) heuristicEntries(x string) []map[string]string {
	e.t.Helper()
	var d dumpJSON
	e.run("log", "dump", "--live", "-o", "json").want(e.t, 0).json(e.t, &d)
	var out []map[string]string
	for _, rec := range d.Records {
		if rec.Type == "heuristic" && rec.XID == x {
			out = append(out, rec.Detail)
		}
	}
	return out
}

// TestResolveSharedServer: two participants on one MariaDB server list the
// same branches; a branch of ours there is resolved without --participant,
// through the participant its commit record names.
func TestResolveSharedServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, ok := any(e.myRM).(recovery.SharedServer); !ok {
		t.Skip("drivers/mysql does not implement recovery.SharedServer (ServerKey) yet: recovery cannot tell that two participants share a server")
	}
	// maria2: a second participant on the same server (another database).
	my2 := e.my.Server.CreateDB(t)
	text := e.configText("10m") + "  - name: maria2\n    driver: mysql\n    dsn: " + strconv.Quote(my2.DSN()) + "\n"
	// Keep participants together: the recovery section must come last.
	text = strings.Replace(text, "recovery:\n  grace: 10m\n", "", 1) + "recovery:\n  grace: 10m\n"
	cfg := e.writeConfig("shared.yaml", text)
	// maria2 is set up as an operator would: it gets its identity.
	e.runWith(cfg, "participant", "init", "maria2").want(t, 0)
	logged := e.prepare(1)
	e.logCommit(logged.record())
	e.waitDetached(logged)

	var out listJSON
	e.runWith(cfg, "list", "-o", "json").want(t, 3).json(t, &out)
	n := 0
	for _, b := range out.Branches {
		if b.XID == logged.my.String() {
			n++
			if b.Participant != myName {
				t.Errorf("the branch is attributed to %s, want %s (its record's)", b.Participant, myName)
			}
		}
	}
	if n != 1 {
		t.Errorf("list shows the branch %d times, want once: %+v", n, out.Branches)
	}
	r := e.runWith(cfg, "commit", logged.my.String(), "-o", "json").want(t, 0)
	var res resolveJSON
	r.json(t, &res)
	if res.Participant != myName || !res.LoggedCommit || res.Forced {
		t.Errorf("commit on a shared server: %+v, want done through %s, no force", res, myName)
	}
	e.wantPrepared(logged, false, true)
	e.wantRows(1, true, false)
}
