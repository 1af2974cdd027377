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
	// one round trip fewer. Open creates the table if it is missing
	// (see DecisionTableDDL) and adds the column "aborted" to a table
	// created by an earlier version. Recovery reads and prunes the
	// commit rows and fences commits with abort markers in the same
	// table (recovery.DecisionStore). Empty: off. A plain or
	// schema-qualified name, e.g. "xa_decisions" or "ops.xa_decisions".
	DecisionTable string
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

	// decisions is the quoted decision table, "" when this participant
	// is no last resource.
	decisions string
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
	rm := &RM{name: cfg.Name, pool: pool, log: log.With("rm", cfg.Name), oldPrepared: 10 * time.Minute,
		live: map[*branch]struct{}{}}
	if cfg.DecisionTable != "" {
		if err := rm.openDecisionTable(ctx, cfg.DecisionTable); err != nil {
			pool.Close()
			return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Kind: xa.ErrMisconfigured, Err: err}
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

// Enlist enlists rm in tx (tx.Enlist) and returns the branch's session.
// Enlisting again in the same transaction returns the same session.
func (rm *RM) Enlist(ctx context.Context, tx *xa.Tx) (*Conn, error) {
	s, err := tx.Enlist(ctx, rm)
	if err != nil {
		return nil, err
	}
	c, ok := s.(*Conn)
	if !ok {
		return nil, fmt.Errorf("postgres: the session of %q is a %T, not a *postgres.Conn", rm.name, s)
	}
	return c, nil
}

// Commit commits the prepared branch xid (COMMIT PREPARED) on any pooled
// session; from is not needed by PostgreSQL, whose prepared transactions
// belong to no session.
//
// ErrUnknownXID (42704) is ambiguous: the branch was committed already (by
// an earlier attempt whose reply was lost, or by recovery), or it was never
// prepared or was rolled back. Only the decision log and a fresh Recover
// can tell. ErrRetryable: the branch is busy (another session is finishing
// it) or the command was never sent. ErrOutcomeUnknown: the reply was lost.
func (rm *RM) Commit(ctx context.Context, xid xa.XID, _ xa.Origin) error {
	return rm.finish(ctx, opCommit, xid)
}

// Rollback rolls back the prepared branch xid (ROLLBACK PREPARED) on any
// pooled session. A branch the server does not know (42704) is gone, which
// is success: nil.
func (rm *RM) Rollback(ctx context.Context, xid xa.XID, _ xa.Origin) error {
	return rm.finish(ctx, opRollback, xid)
}

// finish runs COMMIT PREPARED or ROLLBACK PREPARED outside any transaction
// block.
func (rm *RM) finish(ctx context.Context, op string, xid xa.XID) error {
	lit, err := gidLiteral(xid)
	if err != nil {
		return rm.kindErr(op, xid, xa.ErrInvalidXID, err)
	}
	sql := "COMMIT PREPARED " + lit
	if op == opRollback {
		sql = "ROLLBACK PREPARED " + lit
	}
	conn, err := rm.pool.Acquire(ctx)
	if err != nil {
		// Nothing was sent.
		return rm.kindErr(op, xid, xa.ErrRetryable, err)
	}
	pc := conn.Conn().PgConn()
	if pc.IsClosed() {
		conn.Release()
		return rm.kindErr(op, xid, xa.ErrRetryable, errors.New("pooled connection closed; nothing sent"))
	}
	_, err = pc.Exec(ctx, sql).ReadAll()
	conn.Release() // the pool closes it if the reply was lost
	if err == nil {
		return nil
	}
	e := rm.xaErr(op, xid, err)
	if op == opRollback && errors.Is(e, xa.ErrUnknownXID) {
		return nil
	}
	if xa.OutcomeUnknown(e) {
		rm.log.Warn("phase 2 outcome unknown", "op", op, "xid", xid.String(), "err", err)
	}
	return e
}

// Recover lists the prepared transactions of the current database, ours
// and everybody else's. A gid that xa.ParseXID does not accept (another
// application's) is listed with a zero XID and Raw set: callers filter with
// xa.Owned and never touch it.
//
// Each branch comes with its prepare time (Prepared) and with its age by
// the server's own clock (ServerAge: clock_timestamp() - prepared, read in
// the same query), so that recovery never compares the server's prepare
// time with another clock. ServerAge is at least one nanosecond: zero
// would make xa.PreparedBranch.Age fall back to the caller's clock.
func (rm *RM) Recover(ctx context.Context) ([]xa.PreparedBranch, error) {
	// clock_timestamp(), not now(): now() is fixed when the statement's
	// transaction starts, before pg_prepared_xacts is read, so a branch
	// prepared in between would look younger than zero.
	rows, err := rm.pool.Query(ctx,
		`SELECT gid, prepared, (extract(epoch FROM clock_timestamp() - prepared) * 1000000)::bigint, owner::text, database::text
		FROM pg_prepared_xacts WHERE database = current_database() ORDER BY prepared, gid`,
		pgx.QueryExecModeExec)
	if err != nil {
		return nil, rm.xaErr(opRecover, xa.XID{}, err)
	}
	var out []xa.PreparedBranch
	for rows.Next() {
		var p xa.PreparedBranch
		var ageMicros int64
		if err := rows.Scan(&p.Raw, &p.Prepared, &ageMicros, &p.Owner, &p.Database); err != nil {
			rows.Close()
			return nil, rm.xaErr(opRecover, xa.XID{}, err)
		}
		p.ServerAge = max(time.Duration(ageMicros)*time.Microsecond, time.Nanosecond)
		if x, err := xa.ParseXID(p.Raw); err == nil {
			p.XID = x
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, rm.xaErr(opRecover, xa.XID{}, err)
	}
	return out, nil
}

// gidLiteral returns the gid of xid (xid.String()) as an SQL literal,
// after checking that xid is valid.
func gidLiteral(xid xa.XID) (string, error) {
	if err := xid.Validate(); err != nil {
		return "", err
	}
	return quoteLiteral(xid.String()), nil
}
