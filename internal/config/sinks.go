package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/sqlsink"
)

// Sink is one exactly-once sink (package sink): a source, the participants
// it writes to, and how records become rows. xactl sink setup, run and
// status work on it; list, doctor, commit and rollback know its branches.
type Sink struct {
	// Name is the sink's name (1-24 of A-Z a-z 0-9 _ -): it is in every
	// XID of the sink and keys its bookkeeping rows. Two sinks must not
	// share one.
	Name   string     `yaml:"name"`
	Source SinkSource `yaml:"source"`
	// Targets name participants (from participants:): the sink writes to
	// them with their driver and DSN. The participant's name is the
	// branch qualifier of the sink's XIDs.
	Targets []string `yaml:"targets"`
	// Progress is the target holding the bookkeeping tables
	// (xa_sink_progress, xa_sink_decisions, xa_sink_instances; xactl
	// sink setup creates them); default: the first target.
	Progress string      `yaml:"progress"`
	Tables   []SinkTable `yaml:"tables"`
	// Checkpoint says when a checkpoint is committed.
	Checkpoint Checkpoint `yaml:"checkpoint"`
	// Instances is how many instances of the sink run at once (xactl
	// doctor counts the prepared-transaction slots they need); default 1.
	Instances int `yaml:"instances"`
	// RestoreGrace: an instance's restore fences an undecided branch of
	// another live instance once it is this old; default 30s, at least a
	// few checkpoint intervals.
	RestoreGrace Duration `yaml:"restore_grace"`
	// OnError says what a bad record does: stop (default: its checkpoint
	// aborts, and the run stops after the aborts in a row) or
	// dead_letter (it goes to the dead-letter table in the progress
	// target, in the same checkpoint, and the others land); see
	// docs/sink.md, "Bad records".
	OnError string `yaml:"on_error"`
	// MaxDeadLetters bounds the bad records of one checkpoint with
	// on_error: dead_letter (default 100): more is a systematic failure,
	// and the checkpoint aborts.
	MaxDeadLetters int `yaml:"max_dead_letters"`
	// Format is what the records' values are: json (default: a JSON
	// document each; a null value, a tombstone, deletes its key's row
	// from upsert tables keyed by the record's key) or debezium (Debezium
	// change events: create, read and update upsert the row, delete
	// deletes it; every table is mode upsert, and the columns' JSON paths
	// read the row image). See docs/sink.md, "Tombstones and change data
	// capture".
	Format string `yaml:"format"`
	// StallAfter: an instance that has committed no checkpoint for this
	// long while partitions of the sink have records waiting whose
	// positions have not moved for as long reports a stall (a warning,
	// the metric xa_sink_stalled, "stalled since" in xactl sink status);
	// default 2m. See docs/sink.md, "Liveness".
	StallAfter Duration `yaml:"stall_after"`
	// StallExit: an instance stalled this long exits non-zero, for its
	// supervisor to restart it (a new group session); default 10m, at
	// least stall_after.
	StallExit Duration `yaml:"stall_exit"`
	// ShutdownTimeout bounds how long xactl sink run takes to end after
	// SIGINT or SIGTERM whatever the group and the databases do: past it
	// the process exits 1, leaving what it holds to the group's session
	// timeout and the next instance's restore; default 45s (the 30 s
	// drain of prepared checkpoints, and some).
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// Source kinds of a sink.
const (
	SourceKafka     = "kafka"
	SourceGenerator = "generator"
	SourceFile      = "file"
)

// Kafka start settings: where a partition that has no progress yet is
// read from.
const (
	// StartEarliest: the start of the partition.
	StartEarliest = "earliest"
	// StartCommitted: the consumer group's committed offset, else the
	// start of the partition.
	StartCommitted = "committed"
	// StartLatest is not supported by the Kafka source yet.
	StartLatest = "latest"
)

// SinkSource is where a sink's records come from. Kind picks the source;
// each kind reads only its own settings.
type SinkSource struct {
	// Kind is kafka, generator or file.
	Kind string `yaml:"kind"`

	// Kafka: the seed brokers, the consumer group (every instance of the
	// sink uses the same; no other sink of the configuration may use it),
	// the topics read whole, and where a partition
	// without progress starts: earliest (default) or committed.
	Brokers []string `yaml:"brokers"`
	Group   string   `yaml:"group"`
	Topics  []string `yaml:"topics"`
	Start   string   `yaml:"start"`
	// SessionTimeout: how long the group waits for a member that went
	// silent (a killed or paused instance) before it gives its partitions
	// to the others; default the Kafka client's (45 s).
	SessionTimeout Duration `yaml:"session_timeout"`
	// RebalanceTimeout: how long the group waits, in a rebalance, for
	// every member to rejoin before it drops those that have not; default
	// the Kafka client's (60 s).
	RebalanceTimeout Duration `yaml:"rebalance_timeout"`

	// Generator (tests and demos): Records records with unique ids over
	// Partitions partitions, deterministic and replayable; each value is
	// {"id":..,"p":..,"seq":..,"v":"<Payload x's>"}.
	Records    int `yaml:"records"`
	Partitions int `yaml:"partitions"`
	Payload    int `yaml:"payload"`

	// File: files of newline-delimited JSON, one partition each, read to
	// their end.
	Paths []string `yaml:"paths"`
}

// SinkTable is one table a sink writes, on one of its targets: every
// record gives it one row.
type SinkTable struct {
	// Target is the participant holding the table; default: the sink's
	// only target.
	Target string `yaml:"target"`
	// Name is "table" or "schema.table".
	Name string `yaml:"name"`
	// Columns maps each column to where its value comes from (sqlsink.Column
	// From): key, partition, position, time, $ (the whole value as JSON
	// text), or a JSON path into the value ($.a.b[0].c).
	Columns map[string]string `yaml:"columns"`
	// Mode is insert (default: a duplicate key aborts the checkpoint) or
	// upsert (insert, or update the row with the same key).
	Mode string `yaml:"mode"`
	// Key lists the columns of the unique key an upsert matches on.
	Key []string `yaml:"key"`
	// Required lists columns whose JSON path must be in every record's
	// value: a record without it is a bad record, not a NULL (a misspelt
	// path, $.meta.regoin, would otherwise land NULL in every row).
	Required []string `yaml:"required"`
}

// Table modes.
const (
	ModeInsert = "insert"
	ModeUpsert = "upsert"
)

// Checkpoint says when a sink commits: once a checkpoint holds Records
// records or Interval has passed since its first record, whichever comes
// first; at most MaxPending checkpoints are prepared and waiting for their
// decision while the next is written.
type Checkpoint struct {
	Records    int      `yaml:"records"`
	Interval   Duration `yaml:"interval"`
	MaxPending int      `yaml:"max_pending"`
}

// Defaults of a sink's settings (the sink package's own).
const (
	DefaultCheckpointRecords  = 10000
	DefaultCheckpointInterval = time.Second
	DefaultMaxPending         = 2
	DefaultRestoreGrace       = 30 * time.Second
	DefaultStallAfter         = 2 * time.Minute
	DefaultStallExit          = 10 * time.Minute
	DefaultShutdownTimeout    = 45 * time.Second
)

// sinkDefaults fills in what a sink left out.
func (s *Sink) sinkDefaults() {
	s.Source.Kind = strings.ToLower(s.Source.Kind)
	if s.Source.Kind == SourceKafka && s.Source.Start == "" {
		s.Source.Start = StartEarliest
	}
	s.Source.Start = strings.ToLower(s.Source.Start)
	if s.Progress == "" && len(s.Targets) > 0 {
		s.Progress = s.Targets[0]
	}
	for i := range s.Tables {
		t := &s.Tables[i]
		if t.Target == "" && len(s.Targets) == 1 {
			t.Target = s.Targets[0]
		}
		if t.Mode == "" {
			t.Mode = ModeInsert
		}
		t.Mode = strings.ToLower(t.Mode)
	}
	if s.Checkpoint.Records == 0 {
		s.Checkpoint.Records = DefaultCheckpointRecords
	}
	if s.Checkpoint.Interval == 0 {
		s.Checkpoint.Interval = Duration(DefaultCheckpointInterval)
	}
	if s.Checkpoint.MaxPending == 0 {
		s.Checkpoint.MaxPending = DefaultMaxPending
	}
	if s.Instances == 0 {
		s.Instances = 1
	}
	if s.RestoreGrace == 0 {
		s.RestoreGrace = Duration(DefaultRestoreGrace)
	}
	s.OnError = strings.ToLower(s.OnError)
	if s.OnError == "" {
		s.OnError = string(sqlsink.OnErrorStop)
	}
	if s.MaxDeadLetters == 0 {
		s.MaxDeadLetters = sqlsink.DefaultMaxDeadLetters
	}
	if s.StallAfter == 0 {
		s.StallAfter = Duration(DefaultStallAfter)
	}
	if s.StallExit == 0 {
		s.StallExit = Duration(max(DefaultStallExit, time.Duration(s.StallAfter)))
	}
	if s.ShutdownTimeout == 0 {
		s.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	}
	s.Format = strings.ToLower(s.Format)
	if s.Format == "" {
		s.Format = sqlsink.FormatJSON
	}
}

// validateSinks checks the sinks: names, sources, targets against the
// participants, tables and their column mappings.
func (c *Config) validateSinks() []error {
	var errs []error
	seen := map[string]bool{}
	groups := map[string]string{} // Kafka group -> the first sink using it
	for i, s := range c.Sinks {
		where := fmt.Sprintf("sinks[%d]", i)
		switch err := sqlsink.ValidateName(s.Name); {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("%s: name is empty", where))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: name %q: 1 to %d characters from A-Z a-z 0-9 _ - (it goes into the sink's XIDs)", where, s.Name, sqlsink.MaxNameLen))
		case seen[s.Name]:
			errs = append(errs, fmt.Errorf("%s: name %q used twice", where, s.Name))
		}
		seen[s.Name] = true
		if s.Name != "" {
			where = fmt.Sprintf("sink %q", s.Name)
		}
		errs = append(errs, s.Source.validate(where)...)
		if s.Source.Kind == SourceKafka && s.Source.Group != "" {
			// One group splits the topics' partitions between its members:
			// two sinks in one group would each write only the partitions
			// it happens to get, and start from the other's offsets.
			if first, ok := groups[s.Source.Group]; ok {
				errs = append(errs, fmt.Errorf("%s: source.group %q is the group of sink %q too: each sink needs a consumer group of its own (the group would split the partitions between the two sinks, each writing only part of the stream)", where, s.Source.Group, first))
			} else {
				groups[s.Source.Group] = s.Name
			}
		}
		errs = append(errs, c.validateSinkTargets(where, s)...)
		errs = append(errs, validateSinkTables(where, s)...)
		switch {
		case s.Checkpoint.Records < 0:
			errs = append(errs, fmt.Errorf("%s: checkpoint.records must not be negative", where))
		case s.Checkpoint.Interval < 0:
			errs = append(errs, fmt.Errorf("%s: checkpoint.interval must not be negative", where))
		case s.Checkpoint.MaxPending < 0:
			errs = append(errs, fmt.Errorf("%s: checkpoint.max_pending must not be negative", where))
		}
		if s.Instances < 0 {
			errs = append(errs, fmt.Errorf("%s: instances must not be negative", where))
		}
		if s.RestoreGrace < 0 {
			errs = append(errs, fmt.Errorf("%s: restore_grace must not be negative", where))
		}
		switch sqlsink.OnError(s.OnError) {
		case "", sqlsink.OnErrorStop, sqlsink.OnErrorDeadLetter:
		default:
			errs = append(errs, fmt.Errorf("%s: on_error %q: want stop or dead_letter", where, s.OnError))
		}
		if s.MaxDeadLetters < 0 {
			errs = append(errs, fmt.Errorf("%s: max_dead_letters must not be negative", where))
		}
		switch {
		case s.StallAfter < 0:
			errs = append(errs, fmt.Errorf("%s: stall_after must not be negative", where))
		case s.StallExit < 0:
			errs = append(errs, fmt.Errorf("%s: stall_exit must not be negative", where))
		case s.StallExit > 0 && s.StallAfter > 0 && s.StallExit < s.StallAfter:
			errs = append(errs, fmt.Errorf("%s: stall_exit %s is shorter than stall_after %s: an instance reports a stall before it exits on it", where,
				time.Duration(s.StallExit), time.Duration(s.StallAfter)))
		}
		if s.ShutdownTimeout < 0 {
			errs = append(errs, fmt.Errorf("%s: shutdown_timeout must not be negative", where))
		}
		switch s.Format {
		case "", sqlsink.FormatJSON:
		case sqlsink.FormatDebezium:
			for i, t := range s.Tables {
				if t.Mode != ModeUpsert {
					name := t.Name
					if name == "" {
						name = fmt.Sprintf("tables[%d]", i)
					}
					errs = append(errs, fmt.Errorf("%s: table %q: format debezium needs mode: upsert (and key): a change event updates and deletes rows by key", where, name))
				}
			}
		default:
			errs = append(errs, fmt.Errorf("%s: format %q: want json or debezium", where, s.Format))
		}
	}
	return errs
}

// validate checks a source: its kind, its kind's settings, and no setting
// of another kind.
func (src SinkSource) validate(where string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: source.%s", where, fmt.Sprintf(format, args...)))
	}
	// Settings of the other kinds are refused: they would be ignored.
	type setting struct {
		kind, key string
		set       bool
	}
	settings := []setting{
		{SourceKafka, "brokers", len(src.Brokers) > 0},
		{SourceKafka, "group", src.Group != ""},
		{SourceKafka, "topics", len(src.Topics) > 0},
		{SourceKafka, "start", src.Start != ""},
		{SourceKafka, "session_timeout", src.SessionTimeout != 0},
		{SourceKafka, "rebalance_timeout", src.RebalanceTimeout != 0},
		{SourceGenerator, "records", src.Records != 0},
		{SourceGenerator, "partitions", src.Partitions != 0},
		{SourceGenerator, "payload", src.Payload != 0},
		{SourceFile, "paths", len(src.Paths) > 0},
	}
	switch src.Kind {
	case SourceKafka:
		if len(src.Brokers) == 0 {
			bad("brokers: none (the seed brokers, host:port)")
		}
		for _, b := range src.Brokers {
			if b == "" || strings.ContainsAny(b, " /") {
				bad("brokers: %q is not host:port", b)
			}
		}
		if src.SessionTimeout < 0 {
			bad("session_timeout: must not be negative")
		}
		if src.RebalanceTimeout < 0 {
			bad("rebalance_timeout: must not be negative")
		}
		if src.Group == "" {
			bad("group is empty (the consumer group every instance of the sink joins)")
		}
		if len(src.Topics) == 0 {
			bad("topics: none")
		}
		for _, t := range src.Topics {
			if t == "" || strings.Contains(t, "/") {
				bad("topics: %q is not a topic name", t)
			}
		}
		switch src.Start {
		case StartEarliest, StartCommitted:
		case StartLatest:
			bad("start: latest is not supported by the Kafka source yet; use earliest (the start of each partition) or committed (the group's committed offsets, else the start)")
		default:
			bad("start: %q: want earliest or committed", src.Start)
		}
	case SourceGenerator:
		if src.Records <= 0 {
			bad("records must be above 0 (how many records the generator makes)")
		}
		if src.Partitions < 0 || src.Payload < 0 {
			bad("partitions and payload must not be negative")
		}
	case SourceFile:
		if len(src.Paths) == 0 {
			bad("paths: none (files of newline-delimited JSON)")
		}
		for _, p := range src.Paths {
			if p == "" {
				bad("paths: an empty path")
			}
		}
		if len(src.Paths) != len(uniq(src.Paths)) {
			bad("paths: a path twice")
		}
	case "":
		bad("kind is empty: want kafka, generator or file")
		return errs
	default:
		bad("kind %q: want kafka, generator or file", src.Kind)
		return errs
	}
	for _, st := range settings {
		if st.set && st.kind != src.Kind {
			bad("%s is a setting of kind %s, not of kind %s", st.key, st.kind, src.Kind)
		}
	}
	return errs
}

func uniq(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}

// validateSinkTargets checks that the targets are participants the sink
// can write to.
func (c *Config) validateSinkTargets(where string, s Sink) []error {
	var errs []error
	if len(s.Targets) == 0 {
		errs = append(errs, fmt.Errorf("%s: targets: none (participants the sink writes to)", where))
	}
	seen := map[string]bool{}
	for _, t := range s.Targets {
		p, ok := c.Participant(t)
		switch {
		case seen[t]:
			errs = append(errs, fmt.Errorf("%s: targets: %q twice", where, t))
		case !ok:
			errs = append(errs, fmt.Errorf("%s: targets: %q is not a configured participant (participants: %s)", where, t, c.participantNames()))
		case sqlsink.ValidateTarget(t) != nil:
			errs = append(errs, fmt.Errorf("%s: targets: participant name %q cannot name a sink's target: 1 to %d characters from A-Z a-z 0-9 _ - . (it is the branch qualifier of the sink's XIDs)", where, t, sqlsink.MaxTargetLen))
		default:
			if !sinkDriver(p.Driver) {
				errs = append(errs, fmt.Errorf("%s: targets: participant %q is a %s participant; a sink writes to %s and %s", where, t, p.Driver, sqlsink.DriverMySQL, sqlsink.DriverPostgres))
			}
		}
		seen[t] = true
	}
	if s.Progress != "" && !seen[s.Progress] {
		errs = append(errs, fmt.Errorf("%s: progress: %q is not among the sink's targets (%s)", where, s.Progress, strings.Join(s.Targets, ", ")))
	}
	return errs
}

// sinkDriver reports whether a participant's driver is one a sink writes
// to.
func sinkDriver(driver string) bool {
	return driver == sqlsink.DriverMySQL || driver == sqlsink.DriverPostgres
}

// validateSinkTables checks the tables and their column mappings.
func validateSinkTables(where string, s Sink) []error {
	var errs []error
	if len(s.Tables) == 0 {
		errs = append(errs, fmt.Errorf("%s: tables: none (the tables every record is written to)", where))
	}
	type key struct{ target, name string }
	seen := map[key]bool{}
	for i, t := range s.Tables {
		tw := fmt.Sprintf("%s: tables[%d]", where, i)
		if t.Name != "" {
			tw = fmt.Sprintf("%s: table %q", where, t.Name)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", tw, fmt.Sprintf(format, args...)))
		}
		parts := strings.Split(t.Name, ".")
		switch {
		case t.Name == "":
			bad("name is empty")
		case len(parts) > 2 || slices.Contains(parts, ""):
			bad("name: want table or schema.table")
		}
		switch {
		case t.Target == "" && len(s.Targets) > 1:
			bad("target is empty: name one of the sink's targets (%s)", strings.Join(s.Targets, ", "))
		case t.Target != "" && !slices.Contains(s.Targets, t.Target):
			bad("target %q is not among the sink's targets (%s)", t.Target, strings.Join(s.Targets, ", "))
		case seen[key{t.Target, t.Name}]:
			bad("twice on target %s", t.Target)
		}
		seen[key{t.Target, t.Name}] = true
		if len(t.Columns) == 0 {
			bad("columns: none (column: where its value comes from)")
		}
		for _, col := range sqlsink.ColumnsFromMap(t.Columns) {
			if col.Name == "" {
				bad("columns: a column without a name")
				continue
			}
			if _, err := sqlsink.JSONMapping([]sqlsink.Table{{Name: t.Name, Columns: []sqlsink.Column{col}}}); err != nil {
				bad("column %s: from %q: %v (want key, partition, position, time, $ or a JSON path such as $.a.b[0])", col.Name, col.From, unwrapConfig(err, col.Name))
			}
		}
		switch t.Mode {
		case ModeInsert:
			if len(t.Key) > 0 {
				bad("key is only used by mode: upsert")
			}
		case ModeUpsert:
			if len(t.Key) == 0 {
				bad("mode upsert needs key: the columns of the unique key it matches on")
			}
		default:
			bad("mode %q: want insert or upsert", t.Mode)
		}
		for _, k := range t.Key {
			if _, ok := t.Columns[k]; !ok {
				bad("key column %q is not among its columns", k)
			}
		}
		if len(t.Key) != len(uniq(t.Key)) {
			bad("key: a column twice")
		}
		for _, r := range t.Required {
			from, ok := t.Columns[r]
			switch {
			case !ok:
				bad("required column %q is not among its columns", r)
			case !strings.HasPrefix(from, "$") || from == "$":
				bad("required column %q takes %q: required is for a JSON path ($.field)", r, from)
			}
		}
		if len(t.Required) != len(uniq(t.Required)) {
			bad("required: a column twice")
		}
	}
	return errs
}

// unwrapConfig returns why the sink package refused a column's source,
// without the table and column it names (the message names them already).
func unwrapConfig(err error, column string) string {
	s := err.Error()
	prefix := "column " + column + ": "
	if i := strings.Index(s, prefix); i >= 0 {
		return s[i+len(prefix):]
	}
	return s
}

func (c *Config) participantNames() string {
	if len(c.Participants) == 0 {
		return "none"
	}
	var names []string
	for _, p := range c.Participants {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// Sink returns the sink named name.
func (c *Config) Sink(name string) (Sink, bool) {
	for _, s := range c.Sinks {
		if s.Name == name {
			return s, true
		}
	}
	return Sink{}, false
}

// SinkNames returns the configured sinks' names.
func (c *Config) SinkNames() []string {
	var out []string
	for _, s := range c.Sinks {
		out = append(out, s.Name)
	}
	return out
}

// SinkTargets returns the sink's targets as the sink package takes them:
// each participant's name, driver, DSN and pool size.
func (c *Config) SinkTargets(s Sink) []sqlsink.TargetConfig {
	var out []sqlsink.TargetConfig
	for _, name := range s.Targets {
		p, _ := c.Participant(name)
		out = append(out, sqlsink.TargetConfig{Name: p.Name, Driver: p.Driver, DSN: p.DSN, MaxConns: p.MaxConns})
	}
	return out
}

// ProgressTarget returns the target holding the sink's bookkeeping
// tables.
func (c *Config) ProgressTarget(s Sink) sqlsink.TargetConfig {
	for _, t := range c.SinkTargets(s) {
		if t.Name == s.Progress {
			return t
		}
	}
	return sqlsink.TargetConfig{}
}

// SinkTables returns the sink's tables as the sink package takes them.
// Each table's ID is "target/name", so that tables of the same name on
// two targets stay apart.
func (s Sink) SinkTables() []sqlsink.Table {
	var out []sqlsink.Table
	for _, t := range s.Tables {
		out = append(out, sqlsink.Table{ID: t.Target + "/" + t.Name, Target: t.Target, Name: t.Name,
			Columns: sqlsink.ColumnsFromMap(t.Columns), Upsert: t.Mode == ModeUpsert, Key: slices.Clone(t.Key), Required: slices.Clone(t.Required)})
	}
	return out
}

// SinkConfig returns the sink package's configuration of s (Map nil: the
// tables' column mappings).
func (c *Config) SinkConfig(s Sink) sqlsink.Config {
	return sqlsink.Config{Name: s.Name, Targets: c.SinkTargets(s), Progress: s.Progress, Tables: s.SinkTables(),
		RestoreGrace: time.Duration(s.RestoreGrace), OnError: sqlsink.OnError(s.OnError), MaxDeadLetters: s.MaxDeadLetters,
		Format: s.Format}
}

// RunOptions returns the checkpoint settings of s as sink.RunOptions.
func (s Sink) RunOptions() sink.RunOptions {
	return sink.RunOptions{CheckpointRecords: s.Checkpoint.Records, CheckpointInterval: time.Duration(s.Checkpoint.Interval),
		MaxPending: s.Checkpoint.MaxPending}
}

// PreparedSlots is how many branches the sink's instances may hold
// prepared on one target at once: each instance prepares its open
// checkpoint while up to max_pending earlier ones wait for their decision.
func (s Sink) PreparedSlots() int {
	return s.Instances * (1 + s.Checkpoint.MaxPending)
}
