// Package drivers is the registry of participant kinds: the name a kind
// has in configuration, how a participant of it is opened, and what it
// supports. xactl's configuration, its commands and the test rigs consult
// it instead of spelling kinds out.
//
// Adding a participant kind takes a folder drivers/<kind> whose resource
// manager implements xa.ResourceManager, passes the conformance suite
// drivers/rmtest, and has a start-up Check; and one line in the kinds
// table below.
//
// The drivers are laid out alike, a file per job:
//
//	rm.go         Config, Open, the resource manager, Start
//	enlist.go     RM.Enlist: the branch's session, typed
//	branch.go     one branch on its pinned session: prepare, commit, roll back, one phase
//	conn.go       the application's session (Conn): statements on the branch
//	phase2.go     commit and rollback by XID from another session (recovery)
//	recover.go    the recover listing (and, for MySQL, what it cannot show)
//	decisions.go  the decision table of a last resource (PostgreSQL)
//	sqltext.go    scanning SQL text: transaction control refused, literals
//	xid.go        XIDs as the server writes them
//	errors.go     server errors to xa error kinds: the one place
//	check.go      the start-up check: findings with fixes
//	doc.go        what the package owns and what the caller must do
//
// MySQL has two more: connector.go (database/sql's connector and what a
// connection learns of its server) and session.go (pinned sessions and
// KILL QUERY).
package drivers

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// Options are what any participant is opened with.
type Options struct {
	// Name is the participant's stable name (xa.ResourceManager.Name).
	Name string
	// DSN is the kind's connection string.
	DSN string
	// MaxConns bounds the participant's pool; 0: the kind's default.
	MaxConns int
	// DecisionTable makes the participant a last resource (kinds with
	// DecisionTables only).
	DecisionTable string
	// Logger receives the participant's diagnostics; nil discards them.
	Logger *slog.Logger
	// SkipCheck opens without running Check (the connection is still
	// tried, so that a wrong address or login fails here, as
	// xa.ErrConnect, and the participant's identity is read).
	SkipCheck bool
	// Init creates the participant's identity (and its decision table)
	// when missing: the explicit act of setting it up (see the drivers'
	// Config.Init). Never for recovery.
	Init bool
	// Adopt re-anchors an existing identity to the database that answers
	// (PostgreSQL after pg_upgrade; see postgres.Config.Adopt).
	Adopt bool
	// IdentityTable names the table holding the participant's identity,
	// for kinds that let it be chosen (PostgreSQL: a schema-qualified
	// name when roles' search paths differ); empty: the kind's default.
	IdentityTable string
}

// ErrNoDecisionTable is matched by the error of Open, without Init, when
// the participant's decision table is not found under its configured name
// (PostgreSQL: as the role's search_path resolves it). A table that exists
// without its identity row is another error (xa.ErrIdentity alone).
var ErrNoDecisionTable = postgres.ErrNoDecisionTable

// Participant is an open participant of any kind.
type Participant interface {
	xa.ResourceManager
	// Check inspects the server as the transaction manager needs it
	// (version, XA settings, privileges, prepared-transaction slots, the
	// server's clock against this machine's): one finding per item, each
	// with its fix. The error wraps xa.ErrMisconfigured when a finding
	// fails.
	Check(ctx context.Context) ([]xa.Finding, error)
	// Close releases the participant's connections.
	Close() error
}

// Kind is one kind of participant.
type Kind struct {
	// Name is how configuration names the kind; Aliases are accepted too.
	Name    string
	Aliases []string
	// Summary says what the kind is, for help texts.
	Summary string
	// DecisionTables: participants of the kind can be last resources
	// (Options.DecisionTable).
	DecisionTables bool
	// DefaultMaxConns is the pool size when Options.MaxConns is 0.
	DefaultMaxConns int
	// Open opens a participant.
	Open func(ctx context.Context, o Options) (Participant, error)
}

var kinds = []Kind{
	{Name: "mysql", Aliases: []string{"mariadb"}, Summary: "MySQL 8 and MariaDB 10.5+, with XA statements",
		DefaultMaxConns: mysql.DefaultMaxConns, Open: openMySQL},
	{Name: "postgres", Aliases: []string{"postgresql"}, Summary: "PostgreSQL 12+, with PREPARE TRANSACTION",
		DecisionTables: true, DefaultMaxConns: postgres.DefaultMaxConns, Open: openPostgres},
}

// Kinds returns every kind.
func Kinds() []Kind { return slices.Clone(kinds) }

// Names returns the kinds' names.
func Names() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.Name
	}
	return out
}

// Lookup finds a kind by name or alias, ignoring case.
func Lookup(name string) (Kind, bool) {
	name = strings.ToLower(name)
	for _, k := range kinds {
		if k.Name == name || slices.Contains(k.Aliases, name) {
			return k, true
		}
	}
	return Kind{}, false
}

// Open opens a participant of the named kind.
func Open(ctx context.Context, kind string, o Options) (Participant, error) {
	k, ok := Lookup(kind)
	if !ok {
		return nil, fmt.Errorf("drivers: unknown participant kind %q (known: %s)", kind, strings.Join(Names(), ", "))
	}
	if o.DecisionTable != "" && !k.DecisionTables {
		return nil, fmt.Errorf("drivers: participant %q: a %s participant cannot hold a decision table", o.Name, k.Name)
	}
	return k.Open(ctx, o)
}

func openMySQL(ctx context.Context, o Options) (Participant, error) {
	if o.Adopt {
		return nil, fmt.Errorf("drivers: participant %q: a mysql participant's identity has no anchor to adopt", o.Name)
	}
	if o.IdentityTable != "" {
		return nil, fmt.Errorf("drivers: participant %q: a mysql participant keeps its identity in table xa_participant of its database; identity_table cannot be set", o.Name)
	}
	rm, err := mysql.Open(ctx, mysql.Config{Name: o.Name, DSN: o.DSN, MaxConns: o.MaxConns, Logger: o.Logger, SkipCheck: o.SkipCheck, Init: o.Init})
	if err != nil {
		return nil, err
	}
	if o.SkipCheck {
		// The driver's SkipCheck does not connect at all.
		if err := rm.Ping(ctx); err != nil {
			rm.Close()
			return nil, err
		}
	}
	return rm, nil
}

func openPostgres(ctx context.Context, o Options) (Participant, error) {
	rm, err := postgres.Open(ctx, postgres.Config{Name: o.Name, DSN: o.DSN, MaxConns: int32(o.MaxConns), Logger: o.Logger,
		SkipCheck: o.SkipCheck, DecisionTable: o.DecisionTable, Init: o.Init, IdentityTable: o.IdentityTable, Adopt: o.Adopt})
	if err != nil {
		return nil, err
	}
	return pgParticipant{rm}, nil
}

// pgParticipant gives postgres.RM's Close an error result.
type pgParticipant struct{ *postgres.RM }

func (p pgParticipant) Close() error { p.RM.Close(); return nil }

var (
	_ Participant = (*mysql.RM)(nil)
	_ Participant = pgParticipant{}
)
