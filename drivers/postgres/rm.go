package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/xadb/xa/xa"
)

// DefaultMaxConns is the pool size when Config.MaxConns is 0.
const DefaultMaxConns = 32

// cancelDeadline is how long a statement whose context ended may take to
// answer the cancel request sent for it before its connection is closed
// under it.
const cancelDeadline = 2 * time.Second

// Config configures a resource manager.
type Config struct {
	// Name identifies the participant (xa.ResourceManager.Name); required,
	// stable across restarts.
	Name string

	// DSN is a postgres:// URL or a key=value connection string, as pgx
	// reads it (pgxpool options such as pool_max_conns included). The
	// pgx option default_query_exec_mode selects how statements with
	// arguments are sent; simple_protocol is replaced by exec, because
	// the simple protocol runs several statements from one string.
	DSN string

	// MaxConns is the pool size; 0 means DefaultMaxConns. Every active
	// branch holds one connection until it is prepared.
	MaxConns int32

	// Logger receives warnings (start-up check findings, sessions closed
	// in an unknown state, outcomes unknown); nil discards them.
	Logger *slog.Logger

	// SkipCheck skips the start-up check in Open.
	SkipCheck bool

	// DecisionTable, when set, makes this participant a last resource:
	// its branches can take the commit decision of the whole transaction
	// (xa.LastResource) by committing their own work in one phase
	// together with a row of this table, so the coordinator neither
	// prepares this branch nor writes its decision log — one fsync and
	// one round trip fewer. The table must exist with its identity row
	// (Init makes both; see DecisionTableDDL); a table of an earlier
	// version gets the column "aborted". Recovery reads and prunes the
	// commit rows and fences commits with abort markers in the same
	// table (recovery.DecisionStore). Empty: off. A plain or
	// schema-qualified name, e.g. "xa_decisions" or "ops.xa_decisions";
	// a plain one is resolved through the role's search_path once, at
	// Open, and used schema-qualified from then on.
	DecisionTable string

	// IdentityTable is the table that holds the database's identity
	// (xa.Identified; see identity.go); empty: DefaultIdentityTable. A
	// plain name is resolved through the role's search_path at Open.
	IdentityTable string

	// Init makes Open create what the participant needs in its database
	// when it is missing: the identity table and its row, and the
	// decision table (DecisionTable) with its identity row. It is the
	// explicit act of setting a participant up (xactl participant init
	// does the same): set it in the application that owns the database,
	// never in recovery tools, which must find the stores the decisions
	// were made in rather than make new ones. Without it, Open fails with
	// an error matching xa.ErrIdentity when the database has no identity
	// (or is a copy, or a standby), and with one matching
	// xa.ErrMisconfigured when the decision table is missing.
	Init bool

	// Adopt re-anchors the identity row to the database that answers
	// before it is read, keeping its id (AdoptIdentity): for the same data
	// moved to a new cluster by pg_upgrade, which changes the system
	// identifier. Never for a copy meant to be a participant of its own.
	Adopt bool

	// Tracer, if set, is pgx's tracer for every connection of the pool
	// (pgx.ConnConfig.Tracer): driver-level tracing such as an
	// OpenTelemetry pgx instrumentation. It sees the application's
	// statements with their context (inside a traced global transaction,
	// one carrying its span). A branch's first statement goes in a batch
	// with BEGIN, so implement pgx.BatchTracer too (CopyFromTracer,
	// PrepareTracer and ConnectTracer are used as well). The transaction
	// manager's own commands (PREPARE TRANSACTION, COMMIT PREPARED ...)
	// go through pgconn and are not seen: the xa spans (xa.Config.Tracer)
	// cover them.
	Tracer pgx.QueryTracer
}

// RM is a PostgreSQL resource manager: it implements xa.ResourceManager
// on a pgx connection pool. It is safe for concurrent use.
type RM struct {
	name   string
	pool   *pgxpool.Pool
	log    *slog.Logger
	closed atomic.Bool

	mu   sync.Mutex
	live map[*branch]struct{} // branches that may hold a pooled connection

	// oldPrepared is the age from which Check warns about a prepared
	// transaction.
	oldPrepared time.Duration

	// decisions is the quoted, schema-qualified decision table, "" when
	// this participant is no last resource; decisionsText the same as
	// text, and tableIdent its identity.
	decisions     string
	decisionsText string
	tableIdent    xa.StoreIdentity

	// ident is the database's identity, read at Open; identTable the
	// quoted, schema-qualified table it is in. Sessions opened later are
	// checked against it (checkSession).
	ident      atomic.Pointer[xa.StoreIdentity]
	identTable string
}

var _ xa.ResourceManager = (*RM)(nil)

// Open connects to the database, checks that it answers and, unless
// cfg.SkipCheck, runs Check: an error wrapping xa.ErrMisconfigured that
// lists the failed findings and their fixes means the database cannot take
// part in two-phase commit as configured. Warnings are logged.
func Open(ctx context.Context, cfg Config) (*RM, error) {
	if cfg.Name == "" {
		return nil, &xa.Error{Op: opOpen, Err: errors.New("postgres: Config.Name is required")}
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Err: fmt.Errorf("invalid DSN: %w", err)}
	}
	pc.MaxConns = cfg.MaxConns
	if pc.MaxConns <= 0 {
		pc.MaxConns = DefaultMaxConns
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	if pc.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	// A statement whose context ends is cancelled on the server with a
	// cancel request, so that the session survives it; the connection is
	// closed only if the server does not answer in time.
	pc.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelDeadline}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rm := &RM{name: cfg.Name, log: log.With("rm", cfg.Name), oldPrepared: 10 * time.Minute, live: map[*branch]struct{}{}}
	pc.AfterConnect = rm.checkSession
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Err: err}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		what, fix := connectProblem(err)
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Kind: xa.ErrConnect, Err: &xa.ConnectError{
			What: fmt.Sprintf("%s as %q at %s:%d, database %q", what, pc.ConnConfig.User, pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database),
			Fix:  fix, Err: err}}
	}
	rm.pool = pool
	identTable := cfg.IdentityTable
	if identTable == "" {
		identTable = DefaultIdentityTable
	}
	if cfg.Init {
		if err := rm.initIdentity(ctx, identTable); err != nil {
			pool.Close()
			return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Kind: xa.ErrMisconfigured, Err: err}
		}
	}
	if cfg.Adopt {
		if err := rm.adoptIdentity(ctx, identTable); err != nil {
			pool.Close()
			return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Kind: xa.ErrMisconfigured, Err: err}
		}
	}
	id, err := rm.readIdentity(ctx, identTable)
	if err != nil {
		pool.Close()
		kind := xa.ErrMisconfigured
		if errors.Is(err, xa.ErrIdentity) {
			kind = nil
		}
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Kind: kind, Err: err}
	}
	rm.ident.Store(&id)
	if cfg.DecisionTable != "" {
		if err := rm.openDecisionTable(ctx, cfg.DecisionTable, cfg.Init); err != nil {
			pool.Close()
			kind := xa.ErrMisconfigured
			if errors.Is(err, xa.ErrIdentity) {
				kind = nil
			}
			return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Kind: kind, Err: err}
		}
	}
	if !cfg.SkipCheck {
		fs, err := rm.Check(ctx)
		for _, f := range fs {
			if f.Severity == xa.SeverityWarn {
				rm.log.Warn("start-up check", "check", f.Name, "value", f.Value, "fix", f.Fix)
			}
		}
		if err != nil {
			pool.Close()
			return nil, err
		}
	}
	return rm, nil
}

// Close closes the pool. Branches still active lose their sessions, which
// rolls them back on the server (as Branch.Close); prepared branches stay
// prepared. Close waits for a Prepare, Commit or Rollback in progress.
func (rm *RM) Close() {
	rm.closed.Store(true)
	rm.mu.Lock()
	live := make([]*branch, 0, len(rm.live))
	for b := range rm.live {
		live = append(live, b)
	}
	rm.mu.Unlock()
	for _, b := range live {
		b.Close() //nolint:errcheck // Close never fails
	}
	rm.pool.Close()
}

func (rm *RM) track(b *branch) {
	rm.mu.Lock()
	rm.live[b] = struct{}{}
	rm.mu.Unlock()
}

func (rm *RM) untrack(b *branch) {
	rm.mu.Lock()
	delete(rm.live, b)
	rm.mu.Unlock()
}

// Name returns Config.Name.
func (rm *RM) Name() string { return rm.name }

// Start returns branch xid, without I/O: the branch takes a connection
// from the pool at its first statement (waiting for one is bounded by that
// statement's context and by ctx) and sends BEGIN with it. ctx bounds the
// branch's work (see xa.ResourceManager): once it is done, a running
// statement is cancelled on the server and later statements fail.
// Start fails only for an invalid XID or a closed resource manager.
func (rm *RM) Start(ctx context.Context, xid xa.XID) (xa.Branch, error) {
	if err := xid.Validate(); err != nil {
		return nil, rm.kindErr(opStart, xid, xa.ErrInvalidXID, err)
	}
	if rm.closed.Load() {
		return nil, rm.kindErr(opStart, xid, nil, errors.New("resource manager closed"))
	}
	return newBranch(ctx, rm, xid), nil
}
