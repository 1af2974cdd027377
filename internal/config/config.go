// Package config reads xactl's configuration: the node id, the decision
// log, the participants and the recovery settings, from a YAML file,
// overridden by XACTL_* environment variables and then by flags.
//
//	node: node1
//	timeout: 30s
//	log:
//	  dir: /var/lib/xa/node1
//	participants:
//	  - name: maria
//	    driver: mysql
//	    dsn: xa:secret@tcp(127.0.0.1:3306)/bank
//	  - name: pg
//	    driver: postgres
//	    dsn: ${PG_DSN}
//	    decision_table: xa_decisions  # if pg is the last resource
//	recovery:
//	  nodes: [node1]
//	  interval: 10s
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xadb/xa/xa"
)

// Config is the whole configuration.
type Config struct {
	Node         string        `yaml:"node"`
	Timeout      Duration      `yaml:"timeout"`
	Log          Log           `yaml:"log"`
	Participants []Participant `yaml:"participants"`
	Recovery     Recovery      `yaml:"recovery"`
}

// Log locates the decision log.
type Log struct {
	// Dir is the embedded log's directory.
	Dir string `yaml:"dir"`
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
}

// Recovery configures the recovery scanner.
type Recovery struct {
	// Nodes whose branches this process resolves; default: Node.
	Nodes []string `yaml:"nodes"`
	// Grace before presumed abort; default xa.GracePeriod(Timeout).
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
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // empty input: empty configuration
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	for i := range c.Participants {
		c.Participants[i].DSN = os.ExpandEnv(c.Participants[i].DSN)
	}
	return &c, nil
}

// ApplyEnv overrides settings with XACTL_NODE, XACTL_LOG_DIR and
// XACTL_TIMEOUT when they are set.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	if v := getenv("XACTL_NODE"); v != "" {
		c.Node = v
	}
	if v := getenv("XACTL_LOG_DIR"); v != "" {
		c.Log.Dir = v
	}
	if v := getenv("XACTL_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%w: XACTL_TIMEOUT=%q: %v", ErrInvalid, v, err)
		}
		c.Timeout = Duration(d)
	}
	return nil
}

// Defaults fills in what was left out.
func (c *Config) Defaults() {
	if c.Timeout == 0 {
		c.Timeout = Duration(30 * time.Second)
	}
	if len(c.Recovery.Nodes) == 0 && c.Node != "" {
		c.Recovery.Nodes = []string{c.Node}
	}
	if c.Recovery.Grace == 0 {
		c.Recovery.Grace = Duration(xa.GracePeriod(time.Duration(c.Timeout)))
	}
	if c.Recovery.Interval == 0 {
		c.Recovery.Interval = Duration(10 * time.Second)
	}
	for i := range c.Participants {
		c.Participants[i].Driver = strings.ToLower(c.Participants[i].Driver)
		if c.Participants[i].Driver == "mariadb" {
			c.Participants[i].Driver = "mysql"
		}
	}
}

// Validate checks the configuration; needLog says whether the decision log
// is required for the command at hand.
func (c *Config) Validate(needLog bool) error {
	var errs []error
	if err := xa.ValidateNode(c.Node); err != nil {
		errs = append(errs, fmt.Errorf("node: %v (set node: in the config, XACTL_NODE or --node)", err))
	}
	if needLog && c.Log.Dir == "" {
		errs = append(errs, errors.New("log.dir is not set (the decision log's directory; XACTL_LOG_DIR or --log-dir)"))
	}
	if len(c.Participants) == 0 {
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
		if p.Driver != "mysql" && p.Driver != "postgres" {
			errs = append(errs, fmt.Errorf("participant %q: driver %q: want mysql (also for MariaDB) or postgres", p.Name, p.Driver))
		}
		if p.DSN == "" {
			errs = append(errs, fmt.Errorf("participant %q: dsn is empty", p.Name))
		}
		if p.DecisionTable != "" && p.Driver != "postgres" {
			errs = append(errs, fmt.Errorf("participant %q: decision_table is for postgres participants", p.Name))
		}
	}
	for _, n := range c.Recovery.Nodes {
		if err := xa.ValidateNode(n); err != nil {
			errs = append(errs, fmt.Errorf("recovery.nodes: %v", err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
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
