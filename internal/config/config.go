// Package config reads xactl's configuration: the node id, the decision
// log, the participants, the recovery settings and the exactly-once sinks
// (sinks.go), from a YAML file,
// overridden by XACTL_* environment variables and then by flags.
//
// The file format is shown by Example (example.yaml in this directory, the
// one copy: xactl --help prints it and a test parses and validates it).
//
// The global transaction timeout and the presumed-abort grace period are not
// configuration: they are part of the decision log's identity
// (xa.LogIdentity), fixed when the log is created, so that the coordinator,
// its recovery and xactl apply the same values. recovery.grace may only
// lengthen the log's grace.
package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xadb/xa/drivers"
	"github.com/xadb/xa/xa"
)

// Example is an annotated configuration file with every setting.
//
//go:embed example.yaml
var Example string

// Config is the whole configuration.
type Config struct {
	// Node is the transaction manager's node id. Optional: it defaults to
	// the decision log's node, and must be the log's node when given.
	Node         string        `yaml:"node"`
	Log          Log           `yaml:"log"`
	Participants []Participant `yaml:"participants"`
	Recovery     Recovery      `yaml:"recovery"`
	// Sinks are the exactly-once sinks (package sink) that xactl sink
	// runs and inspects.
	Sinks []Sink `yaml:"sinks"`
}

// Log kinds.
const (
	// LogFile is the embedded decision log (recovery/filelog) in Log.Dir.
	LogFile = "file"
	// LogPostgres is the shared decision log (recovery/sqllog) in a
	// PostgreSQL database, Log.DSN: every node keeps its log there, and a
	// live node takes a dead one's over.
	LogPostgres = "postgres"
	// LogMySQL is the shared decision log in a MySQL 8 or MariaDB 10.6+
	// database.
	LogMySQL = "mysql"
	// LogSQL was reserved for a decision log in a database before there
	// was one; it names none of them.
	LogSQL = "sql"
)

// Log locates the decision log.
type Log struct {
	// Kind is the log's backend: "file" (the default), "postgres" (also
	// "postgresql") or "mysql" (also "mariadb").
	Kind string `yaml:"kind"`
	// Dir is the file log's directory.
	Dir string `yaml:"dir"`
	// DSN is the log database's (postgres, mysql); ${VAR} is expanded
	// from the environment.
	DSN string `yaml:"dsn"`
	// LeaseTTL is the time to live of the leases xactl takes (recover
	// --takeover); the nodes' are set where they run. Default 10s.
	LeaseTTL Duration `yaml:"lease_ttl"`

	// unsetVars are the variables of DSN that expanded to nothing.
	unsetVars []string
}

// IsSQL reports whether the log is in a database (recovery/sqllog).
func (l Log) IsSQL() bool { return l.Kind == LogPostgres || l.Kind == LogMySQL }

// Where names the log for messages: its directory, or its database.
func (l Log) Where() string {
	if l.IsSQL() {
		return "the " + l.Kind + " log database"
	}
	return l.Dir
}

// Participant is one database.
type Participant struct {
	Name string `yaml:"name"`
	// Driver is "mysql" (also for MariaDB) or "postgres".
	Driver string `yaml:"driver"`
	// DSN is the driver's DSN; ${VAR} is expanded from the environment.
	DSN      string `yaml:"dsn"`
	MaxConns int    `yaml:"max_conns"`
	// DecisionTable (postgres only): the table where this participant,
	// as the last resource, stores commit decisions; recovery reads it.
	DecisionTable string `yaml:"decision_table"`
	// IdentityTable (postgres only): the table holding the participant's
	// identity (default xa_participant, found through the role's
	// search_path); schema-qualified when roles differ in theirs.
	IdentityTable string `yaml:"identity_table"`

	// unsetVars are the variables of DSN that expanded to nothing.
	unsetVars []string
}

// Recovery configures the recovery scanner.
type Recovery struct {
	// Nodes whose branches xactl resolves; default: the log's node.
	Nodes []string `yaml:"nodes"`
	// Grace, when set, is a minimum presumed-abort grace period: it
	// lengthens the decision log's grace (xa.LogIdentity.Grace), and is
	// ignored when shorter. Default: the log's grace.
	Grace Duration `yaml:"grace"`
	// Interval between scans in watch mode; default 10s.
	Interval Duration `yaml:"interval"`
}

// Duration is a time.Duration written as "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration such as 30s or 2m: %w", n.Line, s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as text.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("invalid configuration")

// removed are settings that are no longer read, and why: an old file must
// not silently keep a setting that no longer has any effect.
var removed = map[string]string{
	"timeout": "the global transaction timeout is the decision log's, fixed when the log is created " +
		"(xactl log init --timeout); remove timeout: from the configuration (xactl log verify shows the log's)",
}

// Load reads the file at path. Unknown keys are errors (a typo must not
// silently drop a setting).
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return Parse(b, path)
}

// Parse parses configuration text; name is used in messages.
func Parse(b []byte, name string) (*Config, error) {
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(b, &top); err == nil {
		for key, why := range removed {
			if n, ok := top[key]; ok {
				return nil, fmt.Errorf("%w: %s: line %d: %s is no longer read: %s", ErrInvalid, name, n.Line, key, why)
			}
		}
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // empty input: empty configuration
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	c.Log.DSN = os.Expand(c.Log.DSN, func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			c.Log.unsetVars = append(c.Log.unsetVars, name)
		}
		return v
	})
	for i := range c.Participants {
		p := &c.Participants[i]
		p.DSN = os.Expand(p.DSN, func(name string) string {
			v := os.Getenv(name)
			if v == "" {
				p.unsetVars = append(p.unsetVars, name)
			}
			return v
		})
	}
	return &c, nil
}

// ApplyEnv overrides settings with XACTL_NODE, XACTL_LOG_DIR and
// XACTL_LOG_DSN when they are set. XACTL_TIMEOUT, which set a setting that
// is now the log's, is refused.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	if v := getenv("XACTL_NODE"); v != "" {
		c.Node = v
	}
	if v := getenv("XACTL_LOG_DIR"); v != "" {
		c.Log.Dir = v
	}
	if v := getenv("XACTL_LOG_DSN"); v != "" {
		c.Log.DSN, c.Log.unsetVars = v, nil
	}
	if v := getenv("XACTL_TIMEOUT"); v != "" {
		return fmt.Errorf("%w: XACTL_TIMEOUT=%q is no longer read: %s", ErrInvalid, v, removed["timeout"])
	}
	return nil
}

// Defaults fills in what was left out.
func (c *Config) Defaults() {
	if c.Log.Kind == "" {
		c.Log.Kind = LogFile
	}
	c.Log.Kind = strings.ToLower(c.Log.Kind)
	switch c.Log.Kind {
	case "postgresql":
		c.Log.Kind = LogPostgres
	case "mariadb":
		c.Log.Kind = LogMySQL
	}
	if c.Recovery.Interval == 0 {
		c.Recovery.Interval = Duration(10 * time.Second)
	}
	for i := range c.Participants {
		if k, ok := drivers.Lookup(c.Participants[i].Driver); ok {
			c.Participants[i].Driver = k.Name // aliases become the kind's name
		}
	}
	for i := range c.Sinks {
		c.Sinks[i].sinkDefaults()
	}
}

// Need says what the command at hand requires of the configuration.
type Need struct {
	// Log: the decision log's location.
	Log bool
	// Node: a node id (xactl log init names the node of the log it
	// creates; other commands take it from the log).
	Node bool
	// Participants: at least one participant, each with its DSN. Without
	// it (the log's commands), an empty DSN is not an error.
	Participants bool
}

// Validate checks the configuration for a command that needs what need
// says. Call Defaults first.
func (c *Config) Validate(need Need) error {
	var errs []error
	switch {
	case c.Node != "":
		if err := xa.ValidateNode(c.Node); err != nil {
			errs = append(errs, fmt.Errorf("node: %v", err))
		}
	case need.Node:
		errs = append(errs, errors.New("node is not set (the node id of the log to create: node: in the config, XACTL_NODE or --node)"))
	}
	switch c.Log.Kind {
	case LogFile, "":
		if need.Log && c.Log.Dir == "" {
			errs = append(errs, errors.New("log.dir is not set (the decision log's directory; XACTL_LOG_DIR or --log-dir)"))
		}
	case LogPostgres, LogMySQL:
		switch {
		case need.Log && c.Log.DSN == "":
			errs = append(errs, fmt.Errorf("log.dsn is not set (the %s database of the decision logs; XACTL_LOG_DSN)%s", c.Log.Kind, unsetText(c.Log.unsetVars)))
		case need.Log && len(c.Log.unsetVars) > 0:
			// A DSN with a hole may still name a database: another one.
			errs = append(errs, fmt.Errorf("log.dsn%s", unsetText(c.Log.unsetVars)))
		}
		if c.Log.LeaseTTL < 0 || c.Log.LeaseTTL > 0 && c.Log.LeaseTTL < Duration(time.Second) {
			errs = append(errs, fmt.Errorf("log.lease_ttl %v: at least 1s", time.Duration(c.Log.LeaseTTL)))
		}
	case LogSQL:
		errs = append(errs, errors.New("log.kind: sql names no database: use postgres or mysql (also for MariaDB), with log.dsn"))
	default:
		errs = append(errs, fmt.Errorf("log.kind: %q is not a kind of decision log; want file, postgres or mysql", c.Log.Kind))
	}
	if need.Participants && len(c.Participants) == 0 {
		errs = append(errs, errors.New("no participants configured"))
	}
	seen := map[string]bool{}
	for i, p := range c.Participants {
		switch {
		case p.Name == "":
			errs = append(errs, fmt.Errorf("participants[%d]: name is empty", i))
		case seen[p.Name]:
			errs = append(errs, fmt.Errorf("participants[%d]: name %q used twice", i, p.Name))
		}
		seen[p.Name] = true
		k, ok := drivers.Lookup(p.Driver)
		if !ok {
			errs = append(errs, fmt.Errorf("participant %q: driver %q: want one of %s", p.Name, p.Driver, kindList()))
		}
		if p.DSN == "" && need.Participants {
			errs = append(errs, fmt.Errorf("participant %q: dsn is empty%s", p.Name, unsetText(p.unsetVars)))
		}
		if ok && p.DecisionTable != "" && !k.DecisionTables {
			errs = append(errs, fmt.Errorf("participant %q: decision_table: a %s participant cannot hold one (%s)", p.Name, k.Name, tableKinds()))
		}
		if ok && p.IdentityTable != "" && !k.DecisionTables {
			errs = append(errs, fmt.Errorf("participant %q: identity_table: a %s participant keeps its identity in table xa_participant of its database", p.Name, k.Name))
		}
	}
	for _, n := range c.Recovery.Nodes {
		if err := xa.ValidateNode(n); err != nil {
			errs = append(errs, fmt.Errorf("recovery.nodes: %v", err))
		}
	}
	if c.Recovery.Grace < 0 || c.Recovery.Interval < 0 {
		errs = append(errs, errors.New("recovery: grace and interval must not be negative"))
	}
	errs = append(errs, c.validateSinks()...)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// CheckIdentity checks the configuration against the identity of the
// decision log it opened, and fills in the node when it was left out: the
// log's node is the node. A configured node that differs is refused: its
// transactions' decisions are not in this log.
func (c *Config) CheckIdentity(ident xa.LogIdentity) error {
	if c.Node == "" {
		c.Node = ident.Node
		return nil
	}
	if c.Node != ident.Node {
		return fmt.Errorf("%w: node is %q (config, XACTL_NODE or --node), but the decision log in %s is node %q's (log %s): "+
			"the decisions of node %q are not in this log. Point log.dir at node %q's log, or drop node: to use the log's",
			ErrInvalid, c.Node, c.Log.Where(), ident.Node, ident.ID, c.Node, c.Node)
	}
	return nil
}

// unsetText says which variables a DSN named that the environment does not
// set, if any.
func unsetText(vars []string) string {
	if len(vars) == 0 {
		return ""
	}
	names := make([]string, len(vars))
	for i, v := range vars {
		names[i] = "${" + v + "}"
	}
	verb := "is"
	if len(vars) > 1 {
		verb = "are"
	}
	return fmt.Sprintf(": %s %s not set in the environment", strings.Join(names, ", "), verb)
}

// Participant returns the participant named name.
func (c *Config) Participant(name string) (Participant, bool) {
	for _, p := range c.Participants {
		if p.Name == name {
			return p, true
		}
	}
	return Participant{}, false
}

// Marshal writes the configuration as YAML.
func (c *Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }

// kindList names the participant kinds, with their aliases.
func kindList() string {
	var out []string
	for _, k := range drivers.Kinds() {
		s := k.Name
		if len(k.Aliases) > 0 {
			s += " (also " + strings.Join(k.Aliases, ", ") + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// tableKinds says which kinds can hold a decision table.
func tableKinds() string {
	var out []string
	for _, k := range drivers.Kinds() {
		if k.DecisionTables {
			out = append(out, k.Name)
		}
	}
	return "only " + strings.Join(out, ", ") + " can"
}
