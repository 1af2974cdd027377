package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

type initJSON struct {
	Dir      string        `json:"dir"`
	Identity *identityJSON `json:"identity"`
	Warnings []string      `json:"warnings"`
}

// TestLogInit: xactl log init creates the decision log with its identity
// (the node of the configuration, --timeout, --grace, and the defaults
// xa.DefaultTimeout and xa.GracePeriod), refuses where a log exists and
// changes nothing then; log verify shows the identity. No other command
// creates a log (TestWrongLogDir).
func TestLogInit(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "log")
	cfg := filepath.Join(base, "xactl.yaml")
	if err := os.WriteFile(cfg, []byte("node: n1\nlog:\n  dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := time.Now()

	// A node is needed to create a log.
	noNode := filepath.Join(base, "nonode.yaml")
	if err := os.WriteFile(noNode, []byte("log:\n  dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	xactl(t, "--config", noNode, "log", "init").want(t, 2).stderrHas(t, "node is not set")
	// The grace must exceed the timeout.
	xactl(t, "--config", cfg, "log", "init", "--timeout", "10s", "--grace", "5s").want(t, 2).stderrHas(t, "--grace")
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("a refused log init created %s", dir)
	}

	r := xactl(t, "--config", cfg, "log", "init", "--timeout", "2s", "--grace", "60s", "-o", "json").want(t, 0)
	var out initJSON
	r.json(t, &out)
	snap, err := filelog.ReadSnapshot(dir)
	if err != nil {
		t.Fatalf("log init made no log: %v", err)
	}
	id := snap.Identity()
	if id.Node != "n1" || id.Timeout != 2*time.Second || id.Grace != 60*time.Second || id.Created.Before(before.Truncate(time.Millisecond)) {
		t.Errorf("identity of the new log: %+v, want node n1, timeout 2s, grace 60s, created now", id)
	}
	if out.Identity == nil || out.Identity.ID != id.ID.String() || out.Identity.Node != "n1" || out.Identity.Timeout != "2s" || out.Identity.Grace != "1m0s" || out.Dir != dir {
		t.Errorf("log init's output: %+v (identity %+v), want the identity %+v", out, out.Identity, id)
	}
	// A grace of 60 s does not cover 2 s plus the default phase-2 budget
	// (8 attempts of 10 s): a Manager with the defaults would refuse the
	// log, and log init says so.
	if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], "phase-2") {
		t.Errorf("log init's warnings: %q, want one about the phase-2 budget", out.Warnings)
	}

	// A second init is refused and changes nothing.
	r = xactl(t, "--config", cfg, "log", "init").want(t, 1)
	r.stderrHas(t, "exists already", "nothing was changed")
	if snap2, err := filelog.ReadSnapshot(dir); err != nil || snap2.Identity() != id {
		t.Errorf("after a refused init: %v, identity %+v, want %+v", err, snap2.Identity(), id)
	}

	// log verify shows the identity, as text and as JSON.
	xactl(t, "--config", cfg, "log", "verify").want(t, 0).stdoutHas(t, "id "+id.ID.String(), "node n1", "timeout 2s", "grace 1m0s", "created ")
	var v verifyJSON
	xactl(t, "--config", cfg, "log", "verify", "-o", "json").want(t, 0).json(t, &v)
	if v.Identity == nil || v.Identity.ID != id.ID.String() || v.Identity.Grace != "1m0s" {
		t.Errorf("log verify's identity: %+v", v.Identity)
	}

	// The defaults: xa.DefaultTimeout and xa.GracePeriod of it; no
	// warning.
	dir2 := filepath.Join(base, "log2")
	r = xactl(t, "--config", cfg, "--log-dir", dir2, "--node", "n2", "log", "init", "-o", "json").want(t, 0)
	out = initJSON{}
	r.json(t, &out)
	if out.Identity == nil || out.Identity.Node != "n2" || out.Identity.Timeout != xa.DefaultTimeout.String() ||
		out.Identity.Grace != xa.GracePeriod(xa.DefaultTimeout).String() || len(out.Warnings) != 0 {
		t.Errorf("log init with the defaults: %+v (identity %+v)", out, out.Identity)
	}
	xactl(t, "--config", cfg, "--log-dir", dir2, "--node", "n2", "log", "init").want(t, 1).stderrHas(t, "exists already")
	// The table says the same to a human.
	dir3 := filepath.Join(base, "log3")
	xactl(t, "--config", cfg, "--log-dir", dir3, "log", "init").want(t, 0).stdoutHas(t, "created the decision log in "+dir3, "node", "n1", "grace")
}

// TestGraceFromLog: the grace xactl applies is the decision log's, not a
// setting of its own: a configured recovery.grace shorter than the log's
// is ignored (it may only lengthen it), so a branch older than it but
// younger than the log's grace waits. The log is made by xactl log init.
func TestGraceFromLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A second log of the test's node, with a long grace, made by xactl.
	long := filepath.Join(e.dir, "long")
	r := e.run("--log-dir", long, "log", "init", "--timeout", "1s", "--grace", "1h", "-o", "json").want(t, 0)
	var out initJSON
	r.json(t, &out)
	id, err := xa.ParseLogID(out.Identity.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.logID = id // the coordinator's XIDs name the new log
	time.Sleep(2 * time.Millisecond)
	tx := e.prepare(1)
	prepared := time.Now()
	ageBeyond(prepared, 2*time.Second)

	// recovery.grace: 1s, shorter than the log's hour.
	cfg := e.writeConfig("short.yaml", strings.Replace(e.configText("1s"), e.logDir, long, 1))
	r = e.runWith(cfg, "list", "-o", "json").want(t, 3)
	var l listJSON
	r.json(t, &l)
	if l.Grace != "1h0m0s" || l.Log == nil || l.Log.ID != id.String() || l.Log.Grace != "1h0m0s" {
		t.Errorf("list applies grace %q with log %+v, want the log's 1h0m0s", l.Grace, l.Log)
	}
	for _, b := range []branchJSON{findBranch(t, l.Branches, myName, tx.my.String()), findBranch(t, l.Branches, pgName, tx.pg.String())} {
		if b.Verdict != "wait" || !strings.HasPrefix(b.Action, "wait ") || !strings.Contains(b.Action, "1h0m0s") {
			t.Errorf("branch 2 s old under a log with a 1 h grace: %+v, want waiting for the log's grace", b)
		}
	}
	// recover (which takes the log) does not roll it back either.
	e.runWith(cfg, "recover").want(t, 3)
	e.wantPrepared(tx, true, true)
}
