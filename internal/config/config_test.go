package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// TestExample: the one example of the file format (printed by xactl
// --help) parses, validates, and sets every setting there is.
func TestExample(t *testing.T) {
	t.Setenv("PG_DSN", "postgres://u@127.0.0.1:5432/db")
	c, err := Parse([]byte(Example), "example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate(Need{Log: true, Node: true, Participants: true}); err != nil {
		t.Fatal(err)
	}
	if c.Node != "node1" || c.Log.Kind != LogFile || c.Log.Dir == "" || len(c.Participants) != 2 ||
		c.Participants[1].DSN != "postgres://u@127.0.0.1:5432/db" || c.Participants[1].DecisionTable == "" ||
		len(c.Recovery.Nodes) != 1 || c.Recovery.Interval != Duration(10*time.Second) {
		t.Errorf("example parsed as %+v", c)
	}
	// The sink.
	if len(c.Sinks) != 1 {
		t.Fatalf("example sinks: %+v", c.Sinks)
	}
	s := c.Sinks[0]
	if s.Name != "orders" || s.Source.Kind != SourceKafka || len(s.Source.Brokers) != 1 || s.Source.Group == "" || len(s.Source.Topics) != 1 ||
		s.Source.Start != StartEarliest || len(s.Targets) != 2 || s.Progress != "pg" || len(s.Tables) != 2 ||
		s.Tables[0].Mode != ModeInsert || s.Tables[1].Mode != ModeUpsert || len(s.Tables[1].Key) != 1 ||
		s.Checkpoint.Records != 10000 || s.Checkpoint.Interval != Duration(time.Second) || s.Checkpoint.MaxPending != 2 ||
		s.Instances != 2 || s.RestoreGrace != Duration(30*time.Second) {
		t.Errorf("example sink parsed as %+v", s)
	}
	sc := c.SinkConfig(s)
	if len(sc.Targets) != 2 || sc.Targets[1].DSN != "postgres://u@127.0.0.1:5432/db" || sc.Targets[1].Driver != "postgres" ||
		len(sc.Tables) != 2 || sc.Tables[0].ID != "maria/orders" || sc.Tables[1].Target != "pg" || !sc.Tables[1].Upsert ||
		len(sc.Tables[1].Columns) != 3 || sc.Tables[1].Columns[0].Name != "at" || sc.Tables[1].Columns[0].From != "time" {
		t.Errorf("example sink as the sink package's configuration: %+v", sc)
	}
	if s.PreparedSlots() != 6 {
		t.Errorf("PreparedSlots = %d, want 2 instances x (1 + 2)", s.PreparedSlots())
	}
	// Every key of Config appears in the example (commented out or not).
	for _, key := range []string{"node:", "log:", "kind:", "dir:", "participants:", "name:", "driver:", "dsn:", "decision_table:", "recovery:", "nodes:", "interval:", "grace:",
		"sinks:", "source:", "brokers:", "group:", "topics:", "start:", "records:", "partitions:", "payload:", "paths:", "targets:", "progress:",
		"tables:", "target:", "columns:", "mode:", "key:", "checkpoint:", "max_pending:", "instances:", "restore_grace:"} {
		if !strings.Contains(Example, key) {
			t.Errorf("the example lacks %s", key)
		}
	}
	// max_conns is the one setting the example leaves out; it parses.
	if _, err := Parse([]byte("participants:\n  - name: a\n    max_conns: 4\n"), "x"); err != nil {
		t.Error(err)
	}
}

func TestParseValid(t *testing.T) {
	t.Setenv("PG_TEST_DSN", "postgres://u@127.0.0.1:5432/db")
	c, err := Parse([]byte(`
log:
  dir: /tmp/x
participants:
  - name: maria
    driver: MariaDB
    dsn: root@tcp(127.0.0.1:3306)/bank
  - name: pg
    driver: postgres
    dsn: ${PG_TEST_DSN}
recovery:
  grace: 5m
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate(Need{Log: true, Participants: true}); err != nil {
		t.Fatal(err)
	}
	if c.Participants[0].Driver != "mysql" || c.Participants[1].DSN != "postgres://u@127.0.0.1:5432/db" {
		t.Fatalf("participants = %+v", c.Participants)
	}
	// No node, no nodes, no grace default: they are the log's.
	if c.Node != "" || len(c.Recovery.Nodes) != 0 || c.Log.Kind != LogFile || time.Duration(c.Recovery.Grace) != 5*time.Minute {
		t.Fatalf("defaults: node %q nodes %v kind %q grace %v", c.Node, c.Recovery.Nodes, c.Log.Kind, c.Recovery.Grace)
	}
	// A node is needed only to create a log.
	if err := c.Validate(Need{Log: true, Node: true}); err == nil || !strings.Contains(err.Error(), "node is not set") {
		t.Errorf("Validate(Node) without a node = %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", "node: n1\nparticipantz: []\n", "participantz"},
		{"bad duration", "recovery:\n  interval: fast\n", "not a duration"},
		{"not yaml", "node: [\n", "invalid configuration"},
		// timeout: is the log's now: an old file says so instead of
		// keeping a setting that has no effect.
		{"timeout", "node: n1\ntimeout: 30s\n", "timeout is no longer read"},
	} {
		_, err := Parse([]byte(tc.text), "x.yaml")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalid mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	c := &Config{Node: "bad node!", Participants: []Participant{
		{Name: "a", Driver: "oracle", DSN: "x"},
		{Name: "a", Driver: "mysql"},
	}}
	c.Defaults()
	err := c.Validate(Need{Log: true, Participants: true})
	for _, want := range []string{"node id", "log.dir", `driver "oracle"`, `"a" used twice`, "dsn is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to mention %q", err, want)
		}
	}
}

// TestLogKind: kind defaults to file; postgres and mysql (and their
// aliases) need log.dsn; sql names no database; anything else is an
// unknown kind.
func TestLogKind(t *testing.T) {
	for _, tc := range []struct{ kind, dsn, want, is string }{
		{"", "", "", LogFile}, {"file", "", "", LogFile}, {"FILE", "", "", LogFile},
		{"postgres", "postgres://db/logs", "", LogPostgres}, {"PostgreSQL", "postgres://db/logs", "", LogPostgres},
		{"mysql", "u@tcp(db)/logs", "", LogMySQL}, {"mariadb", "u@tcp(db)/logs", "", LogMySQL},
		{"postgres", "", "log.dsn is not set", ""},
		{"sql", "", "sql names no database: use postgres or mysql", ""},
		{"pebble", "", `"pebble" is not a kind of decision log`, ""},
	} {
		c := &Config{Log: Log{Kind: tc.kind, Dir: "/d", DSN: tc.dsn}}
		c.Defaults()
		err := c.Validate(Need{Log: true})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("kind %q: %v", tc.kind, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("kind %q: %v; want %q", tc.kind, err, tc.want)
		}
		if tc.want == "" && c.Log.Kind != tc.is {
			t.Errorf("kind %q became %q, want %q", tc.kind, c.Log.Kind, tc.is)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	c := &Config{Node: "a"}
	env := map[string]string{"XACTL_NODE": "b", "XACTL_LOG_DIR": "/d"}
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Node != "b" || c.Log.Dir != "/d" {
		t.Fatalf("%+v", c)
	}
	env["XACTL_TIMEOUT"] = "7s"
	if err := c.ApplyEnv(func(k string) string { return env[k] }); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "log init --timeout") {
		t.Fatalf("XACTL_TIMEOUT: %v; want it refused, pointing at xactl log init --timeout", err)
	}
}

// TestCheckIdentity: the node defaults to the log's; a different one is
// refused, naming both.
func TestCheckIdentity(t *testing.T) {
	ident, err := xa.NewLogIdentity("n1", 0, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &Config{Log: Log{Dir: "/d"}}
	if err := c.CheckIdentity(ident); err != nil || c.Node != "n1" {
		t.Fatalf("CheckIdentity without a node: %v, node %q", err, c.Node)
	}
	if err := c.CheckIdentity(ident); err != nil {
		t.Fatal(err)
	}
	c.Node = "n2"
	err = c.CheckIdentity(ident)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"n2"`) || !strings.Contains(err.Error(), `"n1"`) || !strings.Contains(err.Error(), ident.ID.String()) {
		t.Fatalf("CheckIdentity with another node: %v", err)
	}
}

// TestLogDSNUnsetVariable: a log DSN naming a variable the environment does
// not set is refused, even when what is left still reads as a DSN (it
// would name another database).
func TestLogDSNUnsetVariable(t *testing.T) {
	t.Setenv("XA_TEST_LOG_HOST", "")
	c, err := Parse([]byte("log:\n  kind: postgres\n  dsn: postgres://u@${XA_TEST_LOG_HOST}/logs\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate(Need{Log: true}); err == nil || !strings.Contains(err.Error(), "${XA_TEST_LOG_HOST} is not set") {
		t.Fatalf("Validate: %v; want the unset variable named", err)
	}
	t.Setenv("XA_TEST_LOG_HOST", "db1")
	c, _ = Parse([]byte("log:\n  kind: postgres\n  dsn: postgres://u@${XA_TEST_LOG_HOST}/logs\n"), "t.yaml")
	c.Defaults()
	if err := c.Validate(Need{Log: true}); err != nil || c.Log.DSN != "postgres://u@db1/logs" {
		t.Fatalf("Validate: %v, dsn %q", err, c.Log.DSN)
	}
}
