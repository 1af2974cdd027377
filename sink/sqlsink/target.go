package sqlsink

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/xadb/xa/drivers"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// Drivers of a target: the names of the participant kinds in the driver
// registry (package drivers) that the sink can write to; their aliases
// ("mariadb", "postgresql") are accepted too.
const (
	DriverMySQL    = "mysql"    // MySQL 8 and MariaDB (drivers/mysql)
	DriverPostgres = "postgres" // PostgreSQL (drivers/postgres)
)

// TargetConfig is one participant database the sink writes to.
type TargetConfig struct {
	// Name is the participant's name: the branch qualifier of its XIDs,
	// stable across restarts (see ValidateTarget).
	Name string
	// Driver is the participant kind: DriverMySQL or DriverPostgres, or
	// an alias the driver registry knows.
	Driver string
	// DSN is the driver's DSN (go-sql-driver/mysql or pgx).
	DSN string
	// MaxConns bounds the participant's pool (default 8). Each
	// checkpoint in flight holds one session until it is prepared
	// (MySQL: until it is committed).
	MaxConns int
	// BatchBytes bounds one MySQL multi-row INSERT (default 1 MiB; keep
	// it well below the server's max_allowed_packet) and one PostgreSQL
	// COPY or batched INSERT; a table's buffer is flushed when it holds
	// this much.
	BatchBytes int
	// BatchRows bounds the rows of one flush (default 5000).
	BatchRows int
	// Init creates the participant's identity in its database when it is
	// missing (drivers.Options.Init): the explicit act of setting a target
	// up, which xactl sink setup and xactl participant init do. Without it
	// a target whose database has no identity is refused.
	Init bool
}

const (
	defaultBatchBytes = 1 << 20
	defaultBatchRows  = 5000
	// maxPlaceholders bounds the arguments of one statement (both
	// servers refuse more than 65535 in a prepared statement).
	maxPlaceholders = 60000
)

// target is an open participant, with its dialect.
type target struct {
	cfg   TargetConfig
	rm    xa.ResourceManager
	d     dialect
	close func()
}

func (c TargetConfig) withDefaults() TargetConfig {
	if c.MaxConns <= 0 {
		c.MaxConns = 8
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = defaultBatchBytes
	}
	if c.BatchRows <= 0 {
		c.BatchRows = defaultBatchRows
	}
	return c
}

func (c TargetConfig) validate() error {
	if err := ValidateTarget(c.Name); err != nil {
		return err
	}
	switch c.kind() {
	case DriverMySQL, DriverPostgres:
	default:
		return fmt.Errorf("%w: target %s: driver %q: the sink writes to %q and %q", sink.ErrConfig, c.Name, c.Driver, DriverMySQL, DriverPostgres)
	}
	if c.DSN == "" {
		return fmt.Errorf("%w: target %s: no DSN", sink.ErrConfig, c.Name)
	}
	return nil
}

// kind returns the registry's name of the target's driver, "" if the
// registry does not know it.
func (c TargetConfig) kind() string {
	k, ok := drivers.Lookup(c.Driver)
	if !ok {
		return ""
	}
	return k.Name
}

// openTarget opens the participant through the driver registry.
func openTarget(ctx context.Context, c TargetConfig, log *slog.Logger) (*target, error) {
	c = c.withDefaults()
	c.Driver = c.kind()
	d, err := dialectFor(c.Driver)
	if err != nil {
		return nil, err
	}
	dsn := c.DSN
	if c.Driver == DriverMySQL {
		// The sink's sessions run in strict mode, whatever the server's
		// sql_mode: a value a column cannot hold is refused, never
		// changed (strictDSN).
		if dsn, err = strictDSN(dsn); err != nil {
			return nil, fmt.Errorf("sqlsink: target %s: DSN: %w", c.Name, err)
		}
	}
	p, err := drivers.Open(ctx, c.Driver, drivers.Options{Name: c.Name, DSN: dsn, MaxConns: c.MaxConns, Logger: log, Init: c.Init})
	if err != nil {
		return nil, err
	}
	return &target{cfg: c, rm: p, d: d, close: func() { p.Close() }}, nil
}
