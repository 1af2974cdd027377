package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// sinkBase is a valid configuration with one sink; the cases below change
// one thing each.
const sinkBase = `
participants:
  - name: maria
    driver: mariadb
    dsn: u@tcp(127.0.0.1:3306)/db
  - name: pg
    driver: postgres
    dsn: postgres://u@127.0.0.1:5432/db
sinks:
  - name: orders
    source:
      kind: kafka
      brokers: [k1:9092, k2:9092]
      group: orders-sink
      topics: [orders]
    targets: [maria, pg]
    tables:
      - target: maria
        name: orders
        columns: {id: $.id, body: $}
      - target: pg
        name: public.totals
        columns: {customer: $.customer.id, total: $.total}
        mode: upsert
        key: [customer]
`

func parseSinks(t *testing.T, text string) (*Config, error) {
	t.Helper()
	c, err := Parse([]byte(text), "x.yaml")
	if err != nil {
		return nil, err
	}
	c.Defaults()
	return c, c.Validate(Need{Participants: true})
}

// TestSinkDefaults: what a sink leaves out.
func TestSinkDefaults(t *testing.T) {
	c, err := parseSinks(t, sinkBase)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := c.Sink("orders")
	if !ok {
		t.Fatal("no sink orders")
	}
	if s.Progress != "maria" || s.Source.Start != StartEarliest || s.Tables[0].Mode != ModeInsert ||
		s.Checkpoint.Records != DefaultCheckpointRecords || time.Duration(s.Checkpoint.Interval) != DefaultCheckpointInterval ||
		s.Checkpoint.MaxPending != DefaultMaxPending || s.Instances != 1 || time.Duration(s.RestoreGrace) != DefaultRestoreGrace ||
		time.Duration(s.StallAfter) != DefaultStallAfter || time.Duration(s.StallExit) != DefaultStallExit || time.Duration(s.ShutdownTimeout) != DefaultShutdownTimeout {
		t.Errorf("defaults: %+v", s)
	}
	// The participant's alias became its kind's name, which the sink
	// takes.
	if tg := c.SinkTargets(s); tg[0].Driver != "mysql" || tg[0].DSN == "" || c.ProgressTarget(s).Name != "maria" {
		t.Errorf("targets: %+v", tg)
	}
	ro := s.RunOptions()
	if ro.CheckpointRecords != DefaultCheckpointRecords || ro.CheckpointInterval != DefaultCheckpointInterval || ro.MaxPending != DefaultMaxPending {
		t.Errorf("run options: %+v", ro)
	}
	if _, ok := c.Sink("nope"); ok {
		t.Error("Sink found a sink that is not configured")
	}
	// A table's target defaults to the sink's only target.
	one := strings.Replace(sinkBase, "targets: [maria, pg]", "targets: [pg]", 1)
	one = strings.Replace(one, "      - target: maria\n        name: orders\n        columns: {id: $.id, body: $}\n", "", 1)
	one = strings.Replace(one, "      - target: pg\n", "      - mode: upsert\n", 1)
	one = strings.Replace(one, "        mode: upsert\n        key:", "        key:", 1)
	c, err = parseSinks(t, one)
	if err != nil {
		t.Fatalf("%v\n%s", err, one)
	}
	if s := c.Sinks[0]; s.Tables[0].Target != "pg" || s.Progress != "pg" {
		t.Errorf("one target: %+v", s)
	}
}

// TestSinkValidate: each mistake is refused with a message that names the
// sink and the setting, and says what is wanted.
func TestSinkValidate(t *testing.T) {
	rep := func(old, new string) string {
		if !strings.Contains(sinkBase, old) {
			t.Fatalf("the base lacks %q", old)
		}
		return strings.Replace(sinkBase, old, new, 1)
	}
	src := func(lines string) string {
		return rep("      kind: kafka\n      brokers: [k1:9092, k2:9092]\n      group: orders-sink\n      topics: [orders]\n", lines)
	}
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"no name", rep("name: orders", "name: ''"), []string{"sinks[0]: name is empty"}},
		{"bad name", rep("name: orders", "name: orders.eu"), []string{`sinks[0]: name "orders.eu"`, "A-Z a-z 0-9 _ -"}},
		{"long name", rep("name: orders", "name: "+strings.Repeat("o", 25)), []string{"1 to 24 characters"}},
		{"two sinks of one name", sinkBase + sinkBase[strings.Index(sinkBase, "  - name: orders"):], []string{`sinks[1]: name "orders" used twice`}},
		{"unknown key", rep("    targets:", "    target: [maria]\n    targets:"), []string{"field target not found"}},
		{"no source kind", src("      topics: [orders]\n"), []string{`sink "orders": source.kind is empty: want kafka, generator or file`}},
		{"unknown source kind", src("      kind: kinesis\n"), []string{`source.kind "kinesis": want kafka, generator or file`}},
		{"kafka without brokers", src("      kind: kafka\n      group: g\n      topics: [t]\n"), []string{"source.brokers: none"}},
		{"kafka without group", src("      kind: kafka\n      brokers: [k:1]\n      topics: [t]\n"), []string{"source.group is empty"}},
		{"kafka without topics", src("      kind: kafka\n      brokers: [k:1]\n      group: g\n"), []string{"source.topics: none"}},
		{"kafka bad topic", src("      kind: kafka\n      brokers: [k:1]\n      group: g\n      topics: [a/b]\n"), []string{`source.topics: "a/b" is not a topic name`}},
		{"kafka start latest", src("      kind: kafka\n      brokers: [k:1]\n      group: g\n      topics: [t]\n      start: latest\n"), []string{"start: latest is not supported by the Kafka source yet", "earliest", "committed"}},
		{"kafka start unknown", src("      kind: kafka\n      brokers: [k:1]\n      group: g\n      topics: [t]\n      start: newest\n"), []string{`source.start: "newest": want earliest or committed`}},
		{"generator without records", src("      kind: generator\n      partitions: 4\n"), []string{"source.records must be above 0"}},
		{"generator negative", src("      kind: generator\n      records: 10\n      partitions: -1\n"), []string{"must not be negative"}},
		{"generator with kafka settings", src("      kind: generator\n      records: 10\n      topics: [t]\n"), []string{"source.topics is a setting of kind kafka, not of kind generator"}},
		{"file without paths", src("      kind: file\n"), []string{"source.paths: none"}},
		{"file with generator settings", src("      kind: file\n      paths: [/a]\n      records: 3\n"), []string{"source.records is a setting of kind generator, not of kind file"}},
		{"file path twice", src("      kind: file\n      paths: [/a, /a]\n"), []string{"source.paths: a path twice"}},
		{"no targets", rep("    targets: [maria, pg]\n", ""), []string{"targets: none", `target "maria" is not among the sink's targets`}},
		{"target not a participant", rep("targets: [maria, pg]", "targets: [maria, pg, oracle]"), []string{`targets: "oracle" is not a configured participant (participants: maria, pg)`}},
		{"target twice", rep("targets: [maria, pg]", "targets: [maria, pg, pg]"), []string{`targets: "pg" twice`}},
		{"progress not a target", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    progress: other\n"), []string{`progress: "other" is not among the sink's targets`}},
		{"target name unfit for a bqual", strings.ReplaceAll(sinkBase, "pg", "p g"), []string{`participant name "p g" cannot name a sink's target`}},
		{"no tables", sinkBase[:strings.Index(sinkBase, "    tables:")], []string{"tables: none"}},
		{"table without name", rep("        name: orders\n", ""), []string{"tables[0]: name is empty"}},
		{"table name with three parts", rep("        name: orders", "        name: a.b.c"), []string{`table "a.b.c": name: want table or schema.table`}},
		{"table without target of two", rep("      - target: maria\n        name: orders", "      - name: orders"), []string{`table "orders": target is empty: name one of the sink's targets`}},
		{"table target not a target", rep("      - target: maria", "      - target: mysql2"), []string{`table "orders": target "mysql2" is not among the sink's targets`}},
		{"table twice", rep("      - target: pg\n", "      - target: maria\n        name: orders\n        columns: {id: $.id}\n      - target: pg\n"), []string{`table "orders": twice on target maria`}},
		{"no columns", rep("        columns: {id: $.id, body: $}\n", ""), []string{`table "orders": columns: none`}},
		{"bad JSON path", rep("{id: $.id, body: $}", "{id: '$.a..b', body: $}"), []string{`table "orders": column id: from "$.a..b"`, "empty field name"}},
		{"bad JSON path bracket", rep("{id: $.id, body: $}", "{id: '$.a[x]', body: $}"), []string{"column id", "not a non-negative integer"}},
		{"empty from", rep("{id: $.id, body: $}", "{id: '', body: $}"), []string{"column id: from \"\"", "From is empty"}},
		{"unknown mode", rep("        mode: upsert\n", "        mode: merge\n"), []string{`table "public.totals": mode "merge": want insert or upsert`}},
		{"upsert without key", rep("        key: [customer]\n", ""), []string{"mode upsert needs key"}},
		{"key not a column", rep("key: [customer]", "key: [customer_id]"), []string{`key column "customer_id" is not among its columns`}},
		{"key on insert", rep("        columns: {id: $.id, body: $}\n", "        columns: {id: $.id, body: $}\n        key: [id]\n"), []string{"key is only used by mode: upsert"}},
		{"negative checkpoint", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    checkpoint: {records: -1}\n"), []string{"checkpoint.records must not be negative"}},
		{"negative interval", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    checkpoint: {interval: -1s}\n"), []string{"checkpoint.interval must not be negative"}},
		{"bad interval", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    checkpoint: {interval: often}\n"), []string{`"often" is not a duration`}},
		{"negative instances", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    instances: -2\n"), []string{"instances must not be negative"}},
		{"negative stall_after", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    stall_after: -5s\n"), []string{"stall_after must not be negative"}},
		{"stall_exit before stall_after", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    stall_after: 5m\n    stall_exit: 1m\n"), []string{"stall_exit 1m0s is shorter than stall_after 5m0s"}},
		{"negative shutdown_timeout", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    shutdown_timeout: -5s\n"), []string{"shutdown_timeout must not be negative"}},
		{"kafka negative rebalance_timeout", src("      kind: kafka\n      brokers: [k:1]\n      group: g\n      topics: [t]\n      rebalance_timeout: -1s\n"), []string{"source.rebalance_timeout: must not be negative"}},
		{"unknown format", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    format: avro\n"), []string{`sink "orders": format "avro": want json or debezium`}},
		{"debezium with an insert table", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    format: debezium\n"), []string{`sink "orders": table "orders": format debezium needs mode: upsert`}},
		{"negative grace", rep("    targets: [maria, pg]\n", "    targets: [maria, pg]\n    restore_grace: -5s\n"), []string{"restore_grace must not be negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSinks(t, tc.text)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("accepted (err %v):\n%s", err, tc.text)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestSinkValidateSharedGroup checks that two sinks reading with one Kafka
// consumer group are refused, naming the group: their instances would
// join one group, which splits the topics' partitions between the two
// sinks, so that each table holds part of the stream while each progress
// table says nothing is missing. Found by an adversarial review: the
// configuration was accepted ("two sinks sharing the Kafka group
// orders-sink (each would read only the partitions the group gives it)
// were accepted").
func TestSinkValidateSharedGroup(t *testing.T) {
	second := `
  - name: orders-copy
    source:
      kind: kafka
      brokers: [k1:9092]
      group: orders-sink
      topics: [orders]
      start: committed
    targets: [pg]
    tables:
      - name: orders_copy
        columns: {id: $.id}
`
	_, err := parseSinks(t, sinkBase+second)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("two sinks sharing the Kafka group orders-sink were accepted (err %v)", err)
	}
	if want := `sink "orders-copy": source.group "orders-sink" is the group of sink "orders" too`; !strings.Contains(err.Error(), want) {
		t.Fatalf("refused, but not for the shared group (want %q): %v", want, err)
	}
	if _, err := parseSinks(t, sinkBase+strings.Replace(second, "group: orders-sink", "group: orders-copy", 1)); err != nil {
		t.Fatalf("two sinks with groups of their own: %v", err)
	}
}

// TestSinkFormat: format defaults to json; format debezium with upsert
// tables reaches the sink's configuration.
func TestSinkFormat(t *testing.T) {
	c, err := parseSinks(t, sinkBase)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sinks[0]; s.Format != "json" || c.SinkConfig(s).Format != "json" {
		t.Errorf("default format: %q", s.Format)
	}
	text := strings.Replace(sinkBase, "    targets: [maria, pg]\n", "    targets: [maria, pg]\n    format: Debezium\n", 1)
	text = strings.Replace(text, "        columns: {id: $.id, body: $}\n", "        columns: {id: $.id, body: $}\n        mode: upsert\n        key: [id]\n", 1)
	c, err = parseSinks(t, text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if s := c.Sinks[0]; c.SinkConfig(s).Format != "debezium" {
		t.Errorf("format: %q", c.SinkConfig(s).Format)
	}
}
