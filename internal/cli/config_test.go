package cli_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// TestConfigErrors: a configuration that is wrong is a usage error (exit
// 2) whose message names the problem, for every command that reads it, and
// no database is contacted.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	good := func(extra string) string {
		return fmt.Sprintf("node: n1\nlog:\n  dir: %s\n%sparticipants:\n  - name: maria\n    driver: mysql\n    dsn: u@tcp(127.0.0.1:1)/db\n", logDir, extra)
	}
	cases := []struct {
		name, text string
		want       []string
	}{
		{"unknown key", good("colour: blue\n"), []string{"colour"}},
		{"unknown participant key", "node: n1\nlog:\n  dir: /x\nparticipants:\n  - name: maria\n    driver: mysql\n    dns: u@tcp(127.0.0.1:1)/db\n", []string{"dns"}},
		{"missing log dir", "node: n1\nparticipants:\n  - name: maria\n    driver: mysql\n    dsn: u@tcp(127.0.0.1:1)/db\n", []string{"log.dir", "XACTL_LOG_DIR"}},
		{"bad node", strings.Replace(good(""), "node: n1", "node: n1/x", 1), []string{"n1/x"}},
		{"duplicate participant names", good("") + "  - name: maria\n    driver: postgres\n    dsn: postgres://u@127.0.0.1:1/db\n", []string{`"maria" used twice`}},
		{"unknown driver", good("") + "  - name: ora\n    driver: oracle\n    dsn: scott/tiger\n", []string{`"ora"`, `"oracle"`}},
		{"no participants", "node: n1\nlog:\n  dir: /x\n", []string{"no participants"}},
		{"empty dsn", good("") + "  - name: pg\n    driver: postgres\n", []string{`"pg"`, "dsn is empty"}},
		{"bad duration", good("recovery:\n  interval: soon\n"), []string{"soon", "duration"}},
		// The timeout is the log's now: an old file is told so.
		{"timeout", good("timeout: 30s\n"), []string{"timeout is no longer read", "xactl log init --timeout"}},
		// sql names no database: postgres or mysql do, with a DSN; others
		// are unknown.
		{"sql log", strings.Replace(good(""), "log:\n", "log:\n  kind: sql\n", 1), []string{"sql names no database: use postgres or mysql"}},
		{"postgres log without a dsn", strings.Replace(good(""), "log:\n", "log:\n  kind: postgres\n", 1), []string{"log.dsn is not set"}},
		{"unknown log kind", strings.Replace(good(""), "log:\n", "log:\n  kind: pebble\n", 1), []string{`"pebble" is not a kind of decision log`}},
		{"not yaml", "node: [\n", []string{"invalid configuration"}},
	}
	for i, c := range cases {
		path := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range [][]string{{"list"}, {"recover"}, {"recover", "--dry-run"}, {"commit", "1:a:b"}, {"rollback", "1:a:b"}, {"doctor"}} {
			if cmd[0] == "doctor" && (c.name == "missing log dir" || c.name == "postgres log without a dsn") {
				continue // doctor checks the participants without a log, and says what is missing
			}
			r := xactl(t, append([]string{"--config", path}, cmd...)...)
			if r.code != 2 {
				t.Errorf("%s: want exit 2, got %s", c.name, r)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%s: stderr lacks %q: %s", c.name, w, r)
				}
			}
		}
	}
	// An explicit configuration file that does not exist.
	xactl(t, "--config", filepath.Join(dir, "nope.yaml"), "list").want(t, 2).stderrHas(t, "nope.yaml")
	// An unknown command and an unknown flag.
	xactl(t, "frobnicate").want(t, 2)
	xactl(t, "list", "--frobnicate").want(t, 2)
	if _, err := os.Stat(logDir); err == nil {
		t.Errorf("a bad configuration created the log directory %s", logDir)
	}
}

// TestConfigEnv: XACTL_NODE and XACTL_LOG_DIR override the file,
// XACTL_CONFIG names it, XACTL_OUTPUT picks the format, and flags override
// the environment; a node that is not the decision log's is refused.
// (Not parallel: it sets environment variables.)
func TestConfigEnv(t *testing.T) {
	e := newEnv(t)
	logged := e.prepare(1)
	e.logCommit(logged.record())
	// The file names another node and another log directory.
	text := strings.Replace(e.configText(""), "node: "+e.node, "node: somebody", 1)
	text = strings.Replace(text, e.logDir, filepath.Join(e.dir, "elsewhere"), 1)
	cfg := e.writeConfig("env.yaml", text)

	// As the file says: the branches belong to another node; the log there
	// does not exist.
	e.runWith(cfg, "list").want(t, 1).stderrHas(t, "elsewhere")

	t.Setenv("XACTL_CONFIG", cfg)
	t.Setenv("XACTL_NODE", e.node)
	t.Setenv("XACTL_LOG_DIR", e.logDir)
	t.Setenv("XACTL_OUTPUT", "json")
	r := xactl(t, "list").want(t, 3)
	var out listJSON
	r.json(t, &out)
	for _, b := range []branchJSON{findBranch(t, out.Branches, myName, logged.my.String()), findBranch(t, out.Branches, pgName, logged.pg.String())} {
		if b.Decision != "commit" || b.Action != "commit" {
			t.Errorf("with XACTL_NODE and XACTL_LOG_DIR: %+v, want the logged commit (decision commit, action commit)", b)
		}
	}

	// Flags win over the environment, and a node that is not the log's is
	// refused, naming both: its decisions are not in this log.
	r = xactl(t, "list", "--node", "somebody-else").want(t, 2)
	r.stderrHas(t, `node is "somebody-else"`, `node "`+e.node+`"'s`, e.logID.String())
	if len(r.stdout) != 0 {
		t.Errorf("a refused node printed a listing: %s", r)
	}
	xactl(t, "list", "--log-dir", filepath.Join(e.dir, "nowhere")).want(t, 1).stderrHas(t, "nowhere")
	xactl(t, "list", "--output", "table").want(t, 3).stdoutHas(t, "PARTICIPANT")

	// The timeout is the log's: XACTL_TIMEOUT is refused, not ignored.
	t.Setenv("XACTL_TIMEOUT", "30s")
	xactl(t, "list").want(t, 2).stderrHas(t, "XACTL_TIMEOUT", "no longer read", "log init --timeout")
	t.Setenv("XACTL_TIMEOUT", "")
	t.Setenv("XACTL_OUTPUT", "xml")
	xactl(t, "list").want(t, 2).stderrHas(t, "xml")

	// Without any node, the log's node is the node: its branches are
	// ours, and resolved from its decisions.
	t.Setenv("XACTL_OUTPUT", "")
	t.Setenv("XACTL_NODE", "")
	nonode := e.writeConfig("nonode.yaml", strings.Replace(e.configText(""), "node: "+e.node+"\n", "", 1))
	r = e.runWith(nonode, "list", "-o", "json").want(t, 3)
	out = listJSON{}
	r.json(t, &out)
	if b := findBranch(t, out.Branches, pgName, logged.pg.String()); b.Action != "commit" || b.Node != e.node {
		t.Errorf("without node: %+v, want the log's node's logged commit", b)
	}
	e.wantPrepared(logged, true, true)
}

// TestUnknownParticipantRecord: a commit record naming a participant that
// is not configured is kept, with the reason, however often recover runs;
// its branches on the configured participants are committed.
func TestUnknownParticipantRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tx := e.prepare(1)
	rec := tx.record()
	rec.Branches = append(rec.Branches, xa.BranchRecord{RM: "oracle1", XID: e.xid(tx.id, 2)})
	e.logCommit(rec)
	e.waitDetached(tx)

	// The first run commits the branches on the configured participants
	// and keeps the record, saying why (every reason is reported;
	// MariaDB's count of prepared transactions XA RECOVER does not list
	// (fact 7) can be off for a moment while other tests finish branches
	// on the shared server, and may be among them). The record is never
	// forgotten, and recover exits 3: branches may be in doubt on the
	// participant it does not know.
	r := e.run("recover", "-o", "json").want(t, 3)
	var out recoverJSON
	r.json(t, &out)
	for _, b := range []branchJSON{findBranch(t, out.Branches, myName, tx.my.String()), findBranch(t, out.Branches, pgName, tx.pg.String())} {
		if b.Action != "commit" || !b.Done {
			t.Errorf("branch of the record on a configured participant: %+v, want committed", b)
		}
	}
	if slices.Contains(out.Forgotten, tx.id.String()) {
		t.Fatalf("recover forgot a record naming an unconfigured participant: %s", r)
	}
	reported := 0
	deadline := time.Now().Add(20 * time.Second)
	for reported < 2 {
		r := e.run("recover", "-o", "json").want(t, 3)
		var out recoverJSON
		r.json(t, &out)
		if slices.Contains(out.Forgotten, tx.id.String()) {
			t.Fatalf("recover forgot a record naming an unconfigured participant: %s", r)
		}
		var reason string
		for _, k := range out.Kept {
			if k.GlobalID == tx.id.String() {
				reason = k.Reason
			}
		}
		switch {
		case strings.Contains(reason, `participant "oracle1" is not configured`):
			reported++
		case strings.Contains(reason, "does not list"):
		default:
			t.Fatalf("record %s kept for reason %q, want participant \"oracle1\" is not configured: %s", tx.id, reason, r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("recover never reported the unconfigured participant: %s\nMariaDB:\n%s", r, e.innodbTrx())
		}
		// MariaDB refreshes INNODB_TRX, which the count of unlisted
		// prepared transactions reads, only when nobody has read it for
		// 0.1 s: polling faster keeps a stale snapshot forever.
		time.Sleep(300 * time.Millisecond)
	}
	for {
		r := e.run("recover").want(t, 3)
		if strings.Contains(r.stdout, "kept record "+tx.id.String()+`: participant "oracle1" is not configured`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recover's table does not report the kept record: %s", r)
		}
		time.Sleep(300 * time.Millisecond)
	}
	e.wantRows(1, true, true)
	e.wantPrepared(tx, false, false)
	if live := e.liveRecords(); len(live) != 1 || live[0] != tx.id.String() {
		t.Errorf("live records = %v, want [%s]", live, tx.id)
	}
}

type doctorJSON struct {
	OK      *bool         `json:"ok"`
	Log     *identityJSON `json:"log"`
	Results []struct {
		Subject  string `json:"subject"`
		Findings []struct {
			Check    string `json:"check"`
			Value    string `json:"value"`
			Severity string `json:"severity"`
			Fix      string `json:"fix"`
		} `json:"findings"`
	} `json:"results"`
}

// TestDoctor: on the test servers every check passes (warnings allowed),
// with findings for each participant and the decision log.
func TestDoctor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.logCommit()
	r := e.run("doctor", "-o", "json").want(t, 0)
	var out doctorJSON
	r.json(t, &out)
	if out.OK == nil || !*out.OK {
		t.Errorf("doctor: ok = %v, want true: %s", out.OK, r.stdout)
	}
	subjects := map[string]int{}
	for _, res := range out.Results {
		subjects[res.Subject] = len(res.Findings)
		for _, f := range res.Findings {
			if f.Severity == "FAIL" {
				t.Errorf("%s: %s = %s FAIL (%s)", res.Subject, f.Check, f.Value, f.Fix)
			}
			if f.Severity == "warn" && f.Fix == "" {
				t.Errorf("%s: warning %s = %s without a fix", res.Subject, f.Check, f.Value)
			}
		}
	}
	for _, s := range []string{"participant " + myName, "participant " + pgName, "decision log"} {
		if subjects[s] == 0 {
			t.Errorf("doctor has no findings for %s: %v", s, subjects)
		}
	}
	// The log's identity: in the JSON, and as a finding.
	if out.Log == nil || out.Log.ID != e.logID.String() || out.Log.Node != e.node || out.Log.Timeout != logTimeout.String() || out.Log.Grace != logGrace.String() {
		t.Errorf("doctor's log identity: %+v, want id %s node %s timeout %v grace %v", out.Log, e.logID, e.node, logTimeout, logGrace)
	}
	e.run("doctor").want(t, 0).stdoutHas(t, "participant "+myName, "participant "+pgName, "decision log", "CHECK",
		"identity", "id "+e.logID.String(), "node "+e.node, "timeout "+logTimeout.String(), "grace "+logGrace.String())
}

// TestDoctorDown: a participant whose DSN points to a closed port, and a
// decision log directory that does not exist, are FAIL findings with a
// fix; exit 1.
func TestDoctorDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "xactl.yaml")
	text := fmt.Sprintf("node: n1\nlog:\n  dir: %s\nparticipants:\n"+
		"  - name: maria\n    driver: mysql\n    dsn: u@tcp(127.0.0.1:%d)/db\n"+
		"  - name: pg\n    driver: postgres\n    dsn: postgres://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=5\n",
		filepath.Join(dir, "missing"), port, port)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := xactl(t, "--config", cfg, "doctor", "-o", "json").want(t, 1)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("doctor took %s against closed ports", d)
	}
	r.stderrHas(t, "FIX")
	var out doctorJSON
	r.json(t, &out)
	if out.OK == nil || *out.OK {
		t.Errorf("doctor: ok = %v, want false", out.OK)
	}
	failed := map[string]string{}
	for _, res := range out.Results {
		for _, f := range res.Findings {
			if f.Severity == "FAIL" {
				if f.Fix == "" {
					t.Errorf("%s: %s FAIL without a fix", res.Subject, f.Check)
				}
				failed[res.Subject] = f.Check + ": " + f.Value
			}
		}
	}
	for _, s := range []string{"participant maria", "participant pg", "decision log"} {
		if _, ok := failed[s]; !ok {
			t.Errorf("no FAIL finding for %s: %v", s, failed)
		}
	}
	if !strings.Contains(failed["participant maria"], fmt.Sprint(port)) && !strings.Contains(failed["participant maria"], "refused") {
		t.Errorf("maria's finding does not say what failed: %q", failed["participant maria"])
	}
	xactl(t, "--config", cfg, "doctor").want(t, 1).stdoutHas(t, "FAIL", "connect")
}

// TestWrongLogDir: a log.dir that holds no decision log (a typo, the
// parent directory) is an error, not an empty log: with it every in-doubt
// branch would look undecided, and recover would roll back branches whose
// commit is logged in the real log. Nothing is created and nothing is
// resolved.
func TestWrongLogDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tx := e.prepare(1)
	prepared := time.Now()
	e.logCommit(tx.record())
	e.waitDetached(tx)
	ageBeyond(prepared, time.Second)
	for _, wrong := range []string{filepath.Join(e.dir, "typo"), e.dir} {
		text := strings.Replace(e.configText("1s"), strconv.Quote(e.logDir), strconv.Quote(wrong), 1)
		cfg := e.writeConfig("wrong.yaml", text)
		for _, cmd := range [][]string{{"recover"}, {"recover", "--dry-run"}, {"list"}, {"rollback", tx.my.String()}, {"commit", tx.pg.String()}} {
			r := e.runWith(cfg, cmd...).want(t, 1)
			r.stderrHas(t, wrong, "log.dir")
		}
		e.wantPrepared(tx, true, true)
		if _, err := os.Stat(filepath.Join(e.dir, "typo")); err == nil {
			t.Fatalf("xactl created the decision log directory %s", filepath.Join(e.dir, "typo"))
		}
		if ents, _ := os.ReadDir(e.dir); len(ents) > 0 {
			for _, en := range ents {
				if en.Name() == "LOCK" || strings.HasSuffix(en.Name(), ".wal") {
					t.Fatalf("xactl created a decision log in %s: %s", e.dir, en.Name())
				}
			}
		}
	}
	// doctor warns about a directory without a log.
	cfg := e.writeConfig("nolog.yaml", strings.Replace(e.configText(""), strconv.Quote(e.logDir), strconv.Quote(e.dir), 1))
	r := e.runWith(cfg, "doctor", "-o", "json").want(t, 0)
	var d doctorJSON
	r.json(t, &d)
	warned := false
	for _, res := range d.Results {
		for _, f := range res.Findings {
			if res.Subject == "decision log" && f.Severity == "warn" && strings.Contains(f.Value, "no decision log") && strings.Contains(f.Fix, "log.dir") {
				warned = true
			}
		}
	}
	if !warned {
		t.Errorf("doctor does not warn about a log directory without a log: %s", r)
	}

	// With the right directory, the logged commit is carried out.
	e.run("recover").want(t, 0)
	e.wantRows(1, true, true)
}
