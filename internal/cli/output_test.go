package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xadb/xa/internal/config"
)

// TestOutput: the output format is chosen once, for every command: an
// unknown one is refused (exit 2) before the command does anything; with
// --output json every command prints one JSON document and nothing else
// on stdout, with the table's facts.
func TestOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tx := e.prepare(1)
	e.logCommit(tx.record())
	newLog := filepath.Join(e.dir, "new")
	x := tx.pg.String()
	commands := [][]string{
		{"list"}, {"recover", "--dry-run"}, {"log", "dump"}, {"log", "verify"}, {"heuristic", "list"}, {"doctor"}, {"version"},
		{"--log-dir", newLog, "log", "init"},
		{"commit", x}, {"rollback", x}, {"recover"}, {"heuristic", "clear", "--participant", pgName, x},
	}
	for _, args := range append(commands, []string{"sink", "status", "s"}, []string{"sink", "run", "s"}, []string{"sink", "setup", "s"}) {
		r := e.run(append(args, "-o", "yaml")...).want(t, 2)
		r.stderrHas(t, `--output "yaml"`)
		if r.stdout != "" {
			t.Errorf("xactl %v -o yaml printed %q", args, r.stdout)
		}
	}
	if _, err := os.Stat(newLog); err == nil {
		t.Errorf("log init -o yaml created %s", newLog)
	}
	e.wantPrepared(tx, true, true)

	// JSON: one document each (the commands that change something last,
	// in an order where each succeeds).
	want := map[string][]string{
		"list":           {"branches", "heuristics", "aborts", "in_doubt", "errors", "log", "unlisted"},
		"recover":        {"dry_run", "branches", "aborted", "forgotten", "kept", "in_doubt", "errors", "log"},
		"log dump":       {"records"},
		"log verify":     {"identity", "records", "ok", "torn_tail"},
		"heuristic list": {"heuristics"},
		"doctor":         {"results", "ok", "log"},
		"log init":       {"dir", "identity", "warnings"},
		"commit":         {"participant", "xid", "action", "forced", "logged_commit", "fenced"},
	}
	for _, args := range [][]string{
		{"list"}, {"recover", "--dry-run"}, {"log", "dump"}, {"log", "verify"}, {"heuristic", "list"}, {"doctor"},
		{"--log-dir", newLog, "log", "init"}, {"commit", x},
	} {
		r := e.run(append(args, "-o", "json")...)
		var m map[string]json.RawMessage
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if err := dec.Decode(&m); err != nil {
			t.Errorf("xactl %v -o json: not JSON: %v\n%s", args, err, r)
			continue
		}
		if dec.More() {
			t.Errorf("xactl %v -o json printed more than one document:\n%s", args, r)
		}
		name := args[0]
		if name == "--log-dir" {
			name = "log init"
		} else if name == "log" || name == "heuristic" {
			name += " " + args[1]
		}
		for _, k := range want[name] {
			if _, ok := m[k]; !ok {
				t.Errorf("xactl %v -o json lacks %q:\n%s", args, k, r.stdout)
			}
		}
	}
	e.wantPrepared(tx, true, false)
}

// TestHelpShowsConfigExample: the one example of the configuration file
// (internal/config/example.yaml, which config's tests parse and validate)
// is what xactl --help shows.
func TestHelpShowsConfigExample(t *testing.T) {
	t.Parallel()
	r := xactl(t, "--help").want(t, 0)
	for _, line := range strings.Split(config.Example, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !strings.Contains(r.stdout, "  "+line+"\n") {
			t.Errorf("xactl --help lacks the example's line %q", line)
		}
	}
}

// TestOperatorCommandsOnly: xactl is the operator's tool; the demo, the
// benchmark and the demo's self-killing coordinator are xalab's. Its help
// does not mention them and it does not know them.
func TestOperatorCommandsOnly(t *testing.T) {
	t.Parallel()
	r := xactl(t, "--help").want(t, 0)
	for _, word := range []string{"demo", "bench", "worker"} {
		if strings.Contains(strings.ToLower(r.stdout), word) {
			t.Errorf("xactl --help mentions %q:\n%s", word, r.stdout)
		}
	}
	for _, cmd := range []string{"demo", "bench", "bank-worker"} {
		xactl(t, cmd).want(t, 2).stderrHas(t, "unknown command")
	}
}
