package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/xa"
)

// Config configures a resource manager.
type Config struct {
	// Name identifies the participant (xa.ResourceManager.Name); required
	// and stable across restarts.
	Name string
	// DSN is a go-sql-driver/mysql DSN. The RM sets multiStatements=true
	// and interpolateParams=true on its own copy of it. It dials tcp and
	// unix addresses itself, as go-sql-driver does, and keeps each
	// session's socket to cut off a statement whose KILL QUERY cannot be
	// delivered; a dial function registered for those networks with
	// mysql.RegisterDialContext is therefore not used (register it under a
	// network name of its own).
	DSN string
	// MaxConns bounds the pool (open and idle connections); default 32.
	// Each live branch holds one connection.
	MaxConns int
	// Logger receives the RM's diagnostics; nil discards them.
	Logger *slog.Logger
	// SkipCheck makes Open neither ping the server nor run Check (Ping
	// and Check can be called later). The participant's identity is then
	// read by the first session the pool opens.
	SkipCheck bool
	// Connector, if set, wraps go-sql-driver's connector of the RM's
	// sessions: driver-level tracing or metrics, such as an OpenTelemetry
	// database/sql instrumentation's connector wrapper. It sees every
	// statement of the branches, the XA commands included, with the
	// caller's context values (a traced global transaction's span) but
	// never its cancellation: the RM cancels statements with KILL QUERY.
	// The connections it makes must keep the interfaces go-sql-driver's
	// have (ConnBeginTx, ConnPrepareContext, ExecerContext, QueryerContext,
	// Pinger, SessionResetter, Validator, NamedValueChecker) and pass
	// driver.ErrSkip through; a connection that lacks one is refused when
	// it is made, with an error naming the interfaces.
	Connector func(driver.Connector) driver.Connector

	// Init makes Open create the participant's identity (a one-row table
	// of the DSN's database, see identity.go) when it is missing. It is
	// the explicit act of setting a participant up (xactl participant
	// init does the same): set it in the application that owns the
	// database, never in recovery tools, which must find the store the
	// decisions were made in rather than make a new one. Without it, a
	// database without an identity (or a read-only server) is refused
	// with an error matching xa.ErrIdentity, by Open or, with SkipCheck,
	// by the first statement.
	Init bool

	// now replaces time.Now (tests: a clock far off).
	now func() time.Time
}

// DefaultMaxConns is the pool size when Config.MaxConns is 0.
const DefaultMaxConns = 32

// sidePoolSize bounds the side pool that sends KILL QUERY, so that a
// cancellation never waits for a connection of the (maybe exhausted) main
// pool.
const sidePoolSize = 4

// RM is a MySQL/MariaDB resource manager: an xa.ResourceManager over a
// pool of sessions. It is safe for concurrent use.
type RM struct {
	name string
	user string // the DSN's user as 'U'@'%', for the GRANTs of fix messages
	// userName is the DSN's user, quoted, for connection errors.
	userName string
	addr     string
	db       *sql.DB // sessions for branches and RM-level commands
	side     *sql.DB // KILL QUERY only
	log      *slog.Logger
	closed   atomic.Bool
	// conns maps CONNECTION_ID() to this RM's open connections, so that
	// Commit and Rollback can tell that a preparing session still
	// connected is one of ours that has since ended its branch.
	conns sync.Map
	// noProcess is when the server last refused INNODB_TRX (no PROCESS
	// privilege), Unix nanoseconds; 0: not refused.
	noProcess atomic.Int64
	trx       *trxReadings // shared by every RM of this process on the same server and user
	now       func() time.Time
	// ident is the database's identity, read by the pool's first session;
	// every later session is checked against it (identity.go).
	ident atomic.Pointer[xa.StoreIdentity]
}

var _ xa.ResourceManager = (*RM)(nil)

// Open opens the RM's pool on cfg.DSN. Unless cfg.SkipCheck is set it
// pings the server and runs Check, and fails (with ErrMisconfigured and
// the fixes) when a finding fails. A missing name or an invalid DSN is an
// error of the caller's configuration, of no kind: not the database's.
func Open(ctx context.Context, cfg Config) (*RM, error) {
	if cfg.Name == "" {
		return nil, &xa.Error{Op: opOpen, Err: errors.New("mysql: Config.Name is required")}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dsn, err := gomysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Err: fmt.Errorf("invalid DSN: %w", err)}
	}
	dsn.Logger = driverLogger{log}
	main := dsn.Clone()
	main.MultiStatements = true
	main.InterpolateParams = true
	if main.DialFunc == nil && dialNetworks[main.Net] {
		main.DialFunc = dial
	}
	inner, err := gomysql.NewConnector(main)
	if err != nil {
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Err: fmt.Errorf("invalid DSN: %w", err)}
	}
	sideConnector, err := gomysql.NewConnector(dsn.Clone())
	if err != nil {
		return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Err: fmt.Errorf("invalid DSN: %w", err)}
	}
	rm := &RM{
		name:     cfg.Name,
		user:     fmt.Sprintf("'%s'@'%%'", dsn.User),
		userName: fmt.Sprintf("'%s'", dsn.User),
		addr:     dsn.Addr,
		side:     sql.OpenDB(sideConnector),
		log:      log.With("rm", cfg.Name),
		now:      cfg.now,
	}
	if rm.now == nil {
		rm.now = time.Now
	}
	var wrapped driver.Connector = inner
	if cfg.Connector != nil {
		if wrapped = cfg.Connector(inner); wrapped == nil {
			return nil, &xa.Error{Op: opOpen, RM: cfg.Name, Err: errors.New("mysql: Config.Connector returned nil")}
		}
	}
	rm.db = sql.OpenDB(&connector{inner: wrapped, rm: rm})
	tr, _ := sharedReadings.LoadOrStore(dsn.Net+"("+dsn.Addr+")/"+dsn.User, &trxReadings{})
	rm.trx = tr.(*trxReadings)
	n := cfg.MaxConns
	if n <= 0 {
		n = DefaultMaxConns
	}
	rm.db.SetMaxOpenConns(n)
	rm.db.SetMaxIdleConns(n)
	rm.side.SetMaxOpenConns(sidePoolSize)
	rm.side.SetMaxIdleConns(1)
	if cfg.Init {
		if err := rm.initIdentity(ctx); err != nil {
			rm.Close()
			return nil, err
		}
	}
	if cfg.SkipCheck {
		return rm, nil
	}
	if err := rm.Ping(ctx); err != nil {
		rm.Close()
		return nil, err
	}
	fs, err := rm.Check(ctx)
	for _, f := range fs {
		level := slog.LevelInfo
		if f.Severity != xa.SeverityOK {
			level = slog.LevelWarn
		}
		rm.log.Log(ctx, level, "mysql: start-up check", "name", f.Name, "value", f.Value, "severity", f.Severity.String(), "fix", f.Fix)
	}
	if err != nil {
		rm.Close()
		return nil, err
	}
	return rm, nil
}

// Ping connects to the server once. A failure is an error of kind
// xa.ErrConnect that says what failed (the login, the database, the
// address) and how to fix it.
func (rm *RM) Ping(ctx context.Context) error {
	if err := rm.db.PingContext(ctx); err != nil {
		if errors.Is(err, xa.ErrIdentity) {
			return rm.rmError(opOpen, xa.XID{}, nil, err)
		}
		return rm.rmError(opOpen, xa.XID{}, xa.ErrConnect, err)
	}
	return nil
}

// erBadDB is ER_BAD_DB_ERROR: the DSN names an unknown database.
const erBadDB = 1049

// driverLogger sends go-sql-driver's messages to the RM's logger.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Debug("mysql: driver: " + fmt.Sprint(v...)) }

// Close closes the pools. Branches still open lose their sessions when
// they end.
func (rm *RM) Close() error {
	rm.closed.Store(true)
	err := rm.db.Close()
	if err2 := rm.side.Close(); err == nil {
		err = err2
	}
	return err
}

// Name returns the participant name.
func (rm *RM) Name() string { return rm.name }

// Start opens branch xid on a session taken from the pool and pinned to
// the branch until it ends. No SQL is sent: XA START goes with the
// branch's first statement. The returned branch's Session() is a *Conn.
// With a ctx that has already ended, Start takes no session and returns a
// branch whose statements fail with ctx's error.
//
// An XID breaking a limit is refused with ErrInvalidXID before anything
// is sent.
func (rm *RM) Start(ctx context.Context, xid xa.XID) (xa.Branch, error) {
	if err := xid.Validate(); err != nil {
		return nil, rm.rmError(opStart, xid, xa.ErrInvalidXID, err)
	}
	if rm.closed.Load() {
		return nil, rm.rmError(opStart, xid, nil, errors.New("resource manager closed"))
	}
	b := &branch{rm: rm, xid: xid, lit: xidLiteral(xid), state: stIdle}
	b.work, b.stopWork = context.WithCancelCause(ctx)
	if ctx.Err() == nil {
		s, err := rm.newSession(ctx)
		if err != nil {
			b.stopWork(err)
			return nil, rm.rmError(opStart, xid, nil, err)
		}
		s.work = b.work
		if comparableCtx(ctx) {
			s.start = ctx // else statements under it are watched on their own
		}
		b.s = s
	}
	// else: the branch's work is over before it began; it takes no
	// session, its statements fail and it votes read-only.
	b.conn = &Conn{b: b}
	return b, nil
}
