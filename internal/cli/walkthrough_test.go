package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
	"github.com/xadb/xa/xa"
)

// Findings of a fresh user's walkthrough of xactl, one test each.

// TestDoctorPlanUnlisted: doctor's "branches of ours" never says ok about
// participants it could not list: it names them, and fails.
func TestDoctorPlanUnlisted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	port := closedPort(t)
	pgDown := fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=5", port)
	myDown := fmt.Sprintf("u:p@tcp(127.0.0.1:%d)/db?timeout=5s", port)
	for _, c := range []struct {
		name, my, pg string
		listed       []string
		missing      []string
	}{
		{"pg down", e.my.DSN(), pgDown, []string{"none prepared on " + myName}, []string{pgName}},
		{"both down", myDown, pgDown, nil, []string{myName, pgName}},
	} {
		cfg := e.writeConfig(strings.ReplaceAll(c.name, " ", "-")+".yaml", e.configWith(c.my, c.pg))
		var out doctorJSON
		e.runWith(cfg, "doctor", "-o", "json").want(t, 1).json(t, &out)
		f, ok := doctorFindings(out, "recovery")["branches of ours"]
		if !ok {
			t.Fatalf("%s: no \"branches of ours\" finding: %+v", c.name, out)
		}
		if f.Severity != "FAIL" || f.Fix == "" {
			t.Errorf("%s: branches of ours = %q %s, want FAIL with a fix", c.name, f.Value, f.Severity)
		}
		for _, s := range append(c.listed, c.missing...) {
			if !strings.Contains(f.Value, s) {
				t.Errorf("%s: branches of ours = %q, lacks %q", c.name, f.Value, s)
			}
		}
		if c.listed == nil && strings.Contains(f.Value, "none prepared") {
			t.Errorf("%s: branches of ours = %q: says none where nothing was listed", c.name, f.Value)
		}
		e.runWith(cfg, "doctor").want(t, 1).stdoutHas(t, "not known: ")
	}
}

// testSinkDecidedCommit: a sink checkpoint decided commit whose branches
// stay prepared (a crash between the decision and phase two). recover
// shows its branches as list does (the decision, what the sink's restore
// would do, the XID in the table); commit refuses without --force, saying
// that committing is what the sink's restore does itself, not that it
// goes against the sink's decision; rollback says it would.
func testSinkDecidedCommit(t *testing.T) {
	e := newSinkEnv(t)
	g := gensource.Config{Records: 400, Partitions: 2}
	cfg := e.sinkConfig("sink.yaml", "kind: generator\nrecords: 400\npartitions: 2", "    progress: "+myName+"\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	my, pg := e.abandon(g)
	// The decision, as the crashed instance wrote it before phase two
	// (without moving the positions: no instance runs here).
	if err := e.my.Server.Exec(e.ctx, e.my.Name, fmt.Sprintf(
		"INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted, decided, origins) VALUES ('%s', 1, 1, FALSE, NOW(6), '')", e.name)); err != nil {
		t.Fatal(err)
	}

	var out listSinkJSON
	e.runWith(cfg, "recover", "--dry-run", "-o", "json").want(t, 0).json(t, &out)
	for _, c := range []struct {
		participant string
		ref         sqlsink.Ref
	}{{myName, my}, {pgName, pg}} {
		if b := findSinkBranch(t, out, c.participant, c.ref); b.Decision != "decided commit" || b.Restore != "commit" {
			t.Errorf("recover shows %s as %+v, want decided commit, restore: commit", c.ref, b)
		}
	}
	for _, args := range [][]string{{"recover", "--dry-run"}, {"list"}} {
		r := e.runWith(cfg, args...).want(t, 0)
		section := r.stdout[strings.Index(r.stdout, "Branches of exactly-once sinks"):]
		if !strings.Contains(section, "XID") || !strings.Contains(section, pg.XID().String()) ||
			!strings.Contains(section, "decided commit") || !strings.Contains(section, "commit: its checkpoint is decided") {
			t.Errorf("%s: the sink branch table lacks the XID or the decision:\n%s", args[0], r.stdout)
		}
	}

	r := e.runWith(cfg, "commit", pg.XID().String()).want(t, 1)
	r.stderrHas(t, "the sink's restore would commit it", "Committing it is what the sink's restore does itself", "--force commits it now")
	if strings.Contains(r.stderr, "against") {
		t.Errorf("commit of a branch whose checkpoint is decided commit is called against the sink's decision: %s", r)
	}
	r = e.runWith(cfg, "rollback", pg.XID().String()).want(t, 1)
	r.stderrHas(t, "--force rolls it back anyway", "against what the sink's restore would do")
	if strings.Contains(r.stderr, "rollbacks") {
		t.Errorf("rollback's refusal: %s", r)
	}
	if !e.myPrepared(my.XID()) || !e.pgPrepared(pg.XID().String()) {
		t.Fatal("a refused commit or rollback resolved a sink branch")
	}
}

// TestUnknownSubcommand: an unknown subcommand of a group is a usage error
// (exit 2) that names it, as at the top level; the group alone still
// prints its help.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"sink", "bogus"}, {"sink", "doctor", "gen"}, {"log", "bogus"}, {"heuristic", "bogus"}} {
		r := xactl(t, args...).want(t, 2)
		r.stderrHas(t, fmt.Sprintf("unknown command %q for %q", args[1], "xactl "+args[0]))
		if r.stdout != "" {
			t.Errorf("%v printed the help on stdout: %s", args, r)
		}
	}
	xactl(t, "log", "verif").want(t, 2).stderrHas(t, "Did you mean this?", "verify")
	xactl(t, "log").want(t, 0).stdoutHas(t, "xactl log [command]", "verify")
	xactl(t, "sink", "--help").want(t, 0).stdoutHas(t, "xactl sink [command]")
}

// TestNoConfigFile: without ./xactl.yaml, a configuration that lacks what
// the command needs says that no file was read, which, and how to name
// one.
func TestNoConfigFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("XACTL_CONFIG", "")
	r := xactl(t, "--log-dir", filepath.Join(dir, "log"), "list").want(t, 2)
	r.stderrHas(t, "no participants configured", "No configuration file was read", filepath.Join(dir, "xactl.yaml")+" does not exist", "--config", "$XACTL_CONFIG")
}

// TestLogCommandsWithoutParticipants: the log's commands do not need the
// participants, so an unset DSN variable does not stop them; the commands
// that do need them say which variable is unset.
func TestLogCommandsWithoutParticipants(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "log")
	unset := "XACTL_TEST_UNSET_DSN_" + strconv.Itoa(os.Getpid())
	cfg := filepath.Join(base, "xactl.yaml")
	text := fmt.Sprintf("node: n1\nlog:\n  dir: %s\nparticipants:\n  - name: pg\n    driver: postgres\n    dsn: ${%s}\n", dir, unset)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	xactl(t, "--config", cfg, "log", "init").want(t, 0)
	for _, args := range [][]string{{"log", "verify"}, {"log", "dump"}, {"heuristic", "list"}} {
		xactl(t, append([]string{"--config", cfg}, args...)...).want(t, 0)
	}
	for _, args := range [][]string{{"list"}, {"doctor"}} {
		xactl(t, append([]string{"--config", cfg}, args...)...).want(t, 2).
			stderrHas(t, `participant "pg": dsn is empty: ${`+unset+`} is not set in the environment`)
	}
}

// TestLogInitExisting: log init where a log exists is an error (exit 1),
// not a usage error, with or without a node; the README's exit codes say
// so.
func TestLogInitExisting(t *testing.T) {
	t.Parallel()
	cfg, dir, _ := logOnly(t)
	xactl(t, "--config", cfg, "log", "init").want(t, 1).stderrHas(t, "exists already", "nothing was changed")
	noNode := filepath.Join(filepath.Dir(cfg), "nonode.yaml")
	if err := os.WriteFile(noNode, []byte("log:\n  dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	xactl(t, "--config", noNode, "log", "init").want(t, 1).stderrHas(t, "exists already", "nothing was changed")
	// Without a log there, the missing node is the usage error.
	xactl(t, "--config", noNode, "--log-dir", filepath.Join(filepath.Dir(cfg), "new"), "log", "init").want(t, 2).stderrHas(t, "node is not set")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), "Exit codes: 0 ok, 1 error") {
		t.Error("README's exit codes are not 0 ok, 1 error")
	}
}

// TestWalkthroughWording: the words of a few messages.
func TestWalkthroughWording(t *testing.T) {
	t.Parallel()
	cfg, dir, _ := logOnly(t)
	ctx := context.Background()

	// log verify's table counts the link records its JSON has.
	var v struct {
		Records map[string]int `json:"records"`
	}
	xactl(t, "--config", cfg, "log", "verify", "-o", "json").want(t, 0).json(t, &v)
	xactl(t, "--config", cfg, "log", "verify").want(t, 0).stdoutHas(t, fmt.Sprintf("%d link", v.Records["link"]))

	// One heuristic record left: "remains".
	l, err := filelog.Open(dir, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x1, x2 := xa.XID{FormatID: 1, Gtrid: []byte("g1"), Bqual: []byte("b")}, xa.XID{FormatID: 1, Gtrid: []byte("g2"), Bqual: []byte("b")}
	for _, x := range []xa.XID{x1, x2} {
		if err := l.LogHeuristic(ctx, xa.HeuristicRecord{RM: "maria", XID: x, Action: xa.OutcomeCommit, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// While another process has the log, a command that takes it says
	// who that may be.
	xactl(t, "--config", cfg, "heuristic", "clear", "--participant", "maria", x1.String()).want(t, 1).
		stderrHas(t, "Another process (a transaction manager or xactl recover --watch) has this decision log open")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := xactl(t, "--config", cfg, "heuristic", "clear", "--participant", "maria", x1.String()).want(t, 0)
	r.stdoutHas(t, "1 heuristic record remains:")

	// recover's help says what --watch -o json writes.
	xactl(t, "recover", "--help").want(t, 0).stdoutHas(t, "JSON Lines")

	// --op-timeout must leave time to work.
	for _, d := range []string{"-5s", "0s", "1ns"} {
		xactl(t, "--config", cfg, "--op-timeout", d, "log", "verify").want(t, 2).stderrHas(t, "--op-timeout "+d, "must be at least")
	}
}

// TestInvalidMySQLDSN: a MySQL DSN that does not parse is an error of
// xactl's configuration, not a database "misconfigured for two-phase
// commit".
func TestInvalidMySQLDSN(t *testing.T) {
	t.Parallel()
	cfg, dir, _ := logOnly(t)
	text := fmt.Sprintf("node: n1\nlog:\n  dir: %s\nparticipants:\n  - name: maria\n    driver: mysql\n    dsn: not a dsn\n", dir)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list"}, {"doctor"}} {
		r := xactl(t, append([]string{"--config", cfg}, args...)...).want(t, 1)
		if all := r.stdout + r.stderr; !strings.Contains(all, "invalid DSN") || strings.Contains(all, "misconfigured") {
			t.Errorf("an invalid DSN is not called one, or is called a misconfigured database: %s", r)
		}
	}
}
