package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseValid(t *testing.T) {
	t.Setenv("PG_TEST_DSN", "postgres://u@127.0.0.1:5432/db")
	c, err := Parse([]byte(`
node: n1
timeout: 5s
log:
  dir: /tmp/x
participants:
  - name: maria
    driver: MariaDB
    dsn: root@tcp(127.0.0.1:3306)/bank
  - name: pg
    driver: postgres
    dsn: ${PG_TEST_DSN}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate(true); err != nil {
		t.Fatal(err)
	}
	if c.Participants[0].Driver != "mysql" || c.Participants[1].DSN != "postgres://u@127.0.0.1:5432/db" {
		t.Fatalf("participants = %+v", c.Participants)
	}
	if time.Duration(c.Timeout) != 5*time.Second || time.Duration(c.Recovery.Grace) != 65*time.Second || c.Recovery.Nodes[0] != "n1" {
		t.Fatalf("defaults: timeout %v grace %v nodes %v", c.Timeout, c.Recovery.Grace, c.Recovery.Nodes)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", "node: n1\nparticipantz: []\n", "participantz"},
		{"bad duration", "timeout: fast\n", "not a duration"},
		{"not yaml", "node: [\n", "invalid configuration"},
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
	err := c.Validate(true)
	for _, want := range []string{"node id", "log.dir", `driver "oracle"`, `"a" used twice`, "dsn is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to mention %q", err, want)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	c := &Config{Node: "a"}
	env := map[string]string{"XACTL_NODE": "b", "XACTL_LOG_DIR": "/d", "XACTL_TIMEOUT": "7s"}
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Node != "b" || c.Log.Dir != "/d" || time.Duration(c.Timeout) != 7*time.Second {
		t.Fatalf("%+v", c)
	}
	env["XACTL_TIMEOUT"] = "soon"
	if err := c.ApplyEnv(func(k string) string { return env[k] }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad XACTL_TIMEOUT: %v", err)
	}
}
