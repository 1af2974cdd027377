package sqllog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/xa"
)

// SchemaVersion is the version of the tables this package reads and
// writes. Create writes it; every other entry point refuses tables of
// another version (ErrSchema).
const SchemaVersion = 1

// DefaultLeaseTTL is the lease's time to live when Options.LeaseTTL is 0:
// a holder renews it every third of it, and a dead holder's log is taken
// over this long after its last renewal, at the earliest.
const DefaultLeaseTTL = 10 * time.Second

// Options configure a Store and the logs it opens. The zero value is the
// production setting.
type Options struct {
	// LeaseTTL is the lease's time to live, by the database's clock
	// (default DefaultLeaseTTL, at least a second). A holder renews every
	// LeaseTTL/3.
	LeaseTTL time.Duration

	// LeaseWait is how long Open waits for a lease that another live
	// process holds (one that took the log over and is still resolving
	// it, or one with the same node) before it fails with ErrLeaseHeld.
	// Default 3 × LeaseTTL; negative: do not wait.
	LeaseWait time.Duration

	// Holder names this process in the lease and its events (who holds a
	// log, who took it over). Default "<node or xactl>@<host>/<pid>/<random>".
	Holder string

	// Pipeline is how many group-commit batches may be in flight at once
	// (default 1): the next batch is built while the previous one commits,
	// and sent as soon as it has. More batches in flight are smaller ones,
	// each a commit of its own: on the machine this was measured on (2
	// cores, the database on it), 1 did best at 16 and 64 writers, in
	// both PostgreSQL and MariaDB; a database on its own hardware may do
	// better with 2 or more.
	Pipeline int

	// MaxBatch bounds the records of one batch (default 512).
	MaxBatch int

	// WriteTimeout bounds one write (a batch's statements, a lease
	// renewal). Default 10s.
	WriteTimeout time.Duration

	// Clock is this process's clock (default time.Now): the offset of the
	// database's clock to it is measured at every lease renewal, so that
	// begin times stamped by it can be checked against the database's
	// clock. Tests set it to run a node whose clock is off.
	Clock func() time.Time

	// DBNow replaces the database's clock in every statement. For tests
	// only (the conformance suite owns the log's clock): in production
	// the database's clock is the only one that decides.
	DBNow func() time.Time

	// RescanReleased is how long a log released clean stays free before
	// the takeover of its peers (Peers) looks at it again (default
	// DefaultRescanReleased; negative: never). A clean release says
	// nothing was in doubt when the releasing scan ended, not that nothing
	// will be: a process of the log's node that was paused past its lease
	// may still prepare a branch after the release (prepares carry no
	// epoch), find its decision refused, and die before rolling it back;
	// no live node would ever look at that log again, and the branch
	// would hold its locks until an operator acts (docs/model.md, finding
	// 5). The rescan takes the log over like any other, presumes the
	// branch aborted at once (its node can no longer decide anything) and
	// releases it clean again.
	RescanReleased time.Duration

	// OnBatch, if set, is called after each group-commit batch with its
	// commit records, its forgets and the time it took. It must return
	// quickly.
	OnBatch func(records, forgets int, d time.Duration)

	// Logger receives the lease's events and warnings. Nil discards.
	Logger *slog.Logger
}

// DefaultRescanReleased is Options.RescanReleased's default: how long a
// branch prepared after its log's clean release may hold its locks.
const DefaultRescanReleased = time.Minute

func (o Options) withDefaults(who string) Options {
	// who names the process in a default Holder.
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.LeaseTTL < time.Second {
		o.LeaseTTL = time.Second
	}
	if o.LeaseWait == 0 {
		o.LeaseWait = 3 * o.LeaseTTL
	}
	if o.RescanReleased == 0 {
		o.RescanReleased = DefaultRescanReleased
	}
	if o.Pipeline <= 0 {
		o.Pipeline = 1
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Holder == "" {
		o.Holder = NewHolder(who)
	}
	return o
}

// NewHolder returns a holder name for a process that acts as who (a node,
// or "xactl"): who, the host, the process id and random digits, so that two
// processes never share one.
func NewHolder(who string) string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand does not fail
	return fmt.Sprintf("%s@%s/%d/%s", who, host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Store is the log tables in one database: one decision log per node,
// each with its identity, lease and records. It opens logs as their
// owner (Open), without the lease (Observe) or by taking an expired lease
// over (TakeOver), and lists them (Logs).
type Store struct {
	db   *sql.DB
	d    Dialect
	opts Options
	// multi: whether MySQL connections run several statements per query
	// (0 unknown, 1 yes, -1 no).
	multi atomic.Int32
	// arrays: whether the driver passes Go slices as PostgreSQL arrays
	// (0 not asked yet, 1 yes, -1 no).
	arrays atomic.Int32
}

// NewStore returns the store in db, whose SQL dialect is d. db must be
// opened with the settings the package doc lists (MySQL: parseTime is not
// needed; multiStatements is not used).
func NewStore(db *sql.DB, d Dialect, opts Options) (*Store, error) {
	if d != Postgres && d != MySQL {
		return nil, fmt.Errorf("sqllog: dialect %v", d)
	}
	return &Store{db: db, d: d, opts: opts.withDefaults(filepath.Base(os.Args[0]))}, nil
}

// Options returns the store's options, with their defaults.
func (s *Store) Options() Options { return s.opts }

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect returns the store's SQL dialect.
func (s *Store) Dialect() Dialect { return s.d }

// dbNow is the parameter that replaces the database's clock: NULL but in
// tests (Options.DBNow).
func (s *Store) dbNow() any {
	if s.opts.DBNow == nil {
		return nil
	}
	return s.opts.DBNow().UnixMicro()
}

// Version returns the schema version of the store's tables: ErrNoLog when
// there are none.
func (s *Store) Version(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.d.q(`SELECT count(*) FROM information_schema.tables WHERE table_schema = `+
		s.currentSchema()+` AND table_name = 'xa_log_schema'`)).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqllog: reading the catalogue: %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: no table xa_log_schema in this database (xactl log init creates the log)", ErrNoLog)
	}
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT version FROM xa_log_schema`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: xa_log_schema holds no version (an interrupted xactl log init: run it again)", ErrNoLog)
	}
	if err != nil {
		return 0, fmt.Errorf("sqllog: reading the schema version: %w", err)
	}
	return v, nil
}

func (s *Store) currentSchema() string {
	if s.d == Postgres {
		return "current_schema()"
	}
	return "DATABASE()"
}

// checkVersion refuses tables of another schema version.
func (s *Store) checkVersion(ctx context.Context) error {
	v, err := s.Version(ctx)
	if err != nil {
		return err
	}
	if v != SchemaVersion {
		return fmt.Errorf("%w: the tables are version %d, this program reads version %d", ErrSchema, v, SchemaVersion)
	}
	return nil
}

// Init creates the log tables where there are none (an explicit act: xactl
// log init), and checks their version where there are. Create calls it.
func (s *Store) Init(ctx context.Context, by string) error {
	_, err := s.Version(ctx)
	switch {
	case err == nil:
		return s.checkVersion(ctx)
	case !errors.Is(err, ErrNoLog):
		return err
	}
	for _, stmt := range s.d.schema() {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqllog: creating the log tables: %w", err)
		}
	}
	// The version row last: tables without it are an interrupted Init,
	// which the next one completes.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM xa_log_schema`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO xa_log_schema (version, created_us, created_by) VALUES (?, `+s.d.now("?")+`, ?)`),
			SchemaVersion, s.dbNow(), by); err != nil {
			return fmt.Errorf("sqllog: writing the schema version: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return s.checkVersion(ctx)
}

// Create creates the decision log of ident.Node with identity ident (its
// creation time taken from the database's clock), and
// the tables first if the database has none (Init), and opens it as its
// owner (Open). It fails with ErrExist when the node has a log: the log is
// made once, by an explicit act (xactl log init); Open never makes one.
func (s *Store) Create(ctx context.Context, ident xa.LogIdentity) (*Log, error) {
	stored, err := s.CreateLog(ctx, ident)
	if err != nil {
		return nil, err
	}
	return s.Open(ctx, stored.Node)
}

// CreateLog is Create without the Open: it returns the identity as
// stored. Its lease is free, with nothing in doubt.
func (s *Store) CreateLog(ctx context.Context, ident xa.LogIdentity) (xa.LogIdentity, error) {
	// The log's creation is stamped by the database's clock, the one its
	// nodes' begin times are translated to (Log.OnLogClock).
	var none xa.LogIdentity
	var created int64
	if err := s.db.QueryRowContext(ctx, s.d.q(`SELECT `+s.d.now("?")), s.dbNow()).Scan(&created); err != nil {
		return none, fmt.Errorf("sqllog: create: reading the database's clock: %w", err)
	}
	ident.Created = time.UnixMicro(created)
	b, err := ident.MarshalBinary()
	if err != nil {
		return none, fmt.Errorf("sqllog: create: %w", err)
	}
	var stored xa.LogIdentity
	if err := stored.UnmarshalBinary(b); err != nil {
		return none, fmt.Errorf("sqllog: create: the identity does not read back: %w", err)
	}
	if err := s.Init(ctx, NewHolder("xactl log init")); err != nil {
		return none, err
	}
	if err := s.insertLog(ctx, stored, b); err != nil {
		return none, err
	}
	s.opts.Logger.Info("decision log created", "node", stored.Node, "id", stored.ID, "timeout", stored.Timeout, "grace", stored.Grace)
	return stored, nil
}

func (s *Store) insertLog(ctx context.Context, ident xa.LogIdentity, b []byte) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if s.d == Postgres {
		if _, err := tx.ExecContext(ctx, syncOn); err != nil {
			return err
		}
	}
	exists := func() error {
		var id string
		err := s.db.QueryRowContext(ctx, s.d.q(`SELECT log_id FROM xa_log_logs WHERE node = ?`), ident.Node).Scan(&id)
		if err == nil {
			return fmt.Errorf("%w: node %q has decision log %s in this database; nothing was changed", ErrExist, ident.Node, id)
		}
		return nil
	}
	if err := exists(); err != nil {
		return err
	}
	id := ident.ID.String()
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO xa_log_logs (log_id, node, identity, created_us, epoch) VALUES (?, ?, ?, ?, 0)`),
		id, ident.Node, b, ident.Created.UnixMicro()); err != nil {
		if e := exists(); e != nil {
			return e
		}
		return fmt.Errorf("sqllog: creating the log of node %q: %w", ident.Node, err)
	}
	if _, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO xa_log_leases (log_id, holder, epoch, kind, ttl_us, expires_us, acquired_us, renewed_us, clean, node_offset_us)
		VALUES (?, '', 0, 'none', 0, 0, 0, 0, ?, 0)`), id, true); err != nil {
		return fmt.Errorf("sqllog: creating the lease of node %q: %w", ident.Node, err)
	}
	if err := s.event(ctx, tx, id, "init", 0, "", "", 0, fmt.Sprintf("log created for node %s (timeout %v, grace %v)", ident.Node, ident.Timeout, ident.Grace)); err != nil {
		return err
	}
	return tx.Commit()
}

// event records a lease event (or the log's creation) in tx.
func (s *Store) event(ctx context.Context, tx *sql.Tx, logID, action string, epoch int64, holder, prev string, prevEpoch int64, reason string) error {
	_, err := tx.ExecContext(ctx, s.d.q(`INSERT INTO xa_log_events (log_id, at_us, action, epoch, holder, prev_holder, prev_epoch, reason)
		VALUES (?, `+s.d.now("?")+`, ?, ?, ?, ?, ?, ?)`), logID, s.dbNow(), action, epoch, holder, prev, prevEpoch, reason)
	if err != nil {
		return fmt.Errorf("sqllog: recording the %s event: %w", action, err)
	}
	return nil
}

// identity reads the identity of node's log (byNode) or of the log with id.
func (s *Store) identity(ctx context.Context, node string, id xa.LogID) (xa.LogIdentity, error) {
	if err := s.checkVersion(ctx); err != nil {
		return xa.LogIdentity{}, err
	}
	q, arg := `SELECT identity FROM xa_log_logs WHERE node = ?`, any(node)
	what := fmt.Sprintf("node %q", node)
	if node == "" {
		q, arg = `SELECT identity FROM xa_log_logs WHERE log_id = ?`, id.String()
		what = "log " + id.String()
	}
	var b []byte
	err := s.db.QueryRowContext(ctx, s.d.q(q), arg).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return xa.LogIdentity{}, fmt.Errorf("%w for %s in this database (xactl log init creates it)", ErrNoLog, what)
	}
	if err != nil {
		return xa.LogIdentity{}, fmt.Errorf("sqllog: reading the identity of %s: %w", what, err)
	}
	var ident xa.LogIdentity
	if err := ident.UnmarshalBinary(b); err != nil {
		return xa.LogIdentity{}, fmt.Errorf("sqllog: the identity of %s: %w", what, err)
	}
	return ident, nil
}

// Open opens node's decision log as its owner: it takes the log's lease at
// a new epoch, waiting up to Options.LeaseWait while another live process
// holds it, and keeps it renewed until Close. It never creates a log
// (ErrNoLog).
func (s *Store) Open(ctx context.Context, node string) (*Log, error) {
	ident, err := s.identity(ctx, node, 0)
	if err != nil {
		return nil, err
	}
	l := s.newLog(ident, roleOwner)
	deadline := time.Now().Add(l.opts.LeaseWait)
	for {
		err := l.acquire(ctx, acquireOwn, "opened by its node")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLeaseHeld) || l.opts.LeaseWait < 0 || time.Now().After(deadline) {
			return nil, err
		}
		l.opts.Logger.Info("waiting for the log's lease", "node", node, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(l.opts.LeaseTTL / 4):
		}
	}
	l.start()
	return l, nil
}

// Observe opens node's decision log without its lease, as xactl does
// beside the live nodes: reads, abort records (an operator's rollback
// takes the fence), heuristic records and forgets are allowed; decisions
// only its holder takes (LogCommit, LogDelegation, LogParticipant) are
// refused with ErrNotHolder. Recovery with it never presumes abort
// (Presumption): that is the holder's.
func (s *Store) Observe(ctx context.Context, node string) (*Log, error) {
	ident, err := s.identity(ctx, node, 0)
	if err != nil {
		return nil, err
	}
	return s.newLog(ident, roleObserver), nil
}

// TakeoverOptions qualify TakeOver.
type TakeoverOptions struct {
	// Manual: an operator's takeover (xactl recover --takeover), recorded
	// as such.
	Manual bool
	// Reason is recorded with the takeover: who and why.
	Reason string
}

// TakeOver takes the lease of the log with id over at a new epoch, if it
// has expired by the database's clock (or was released), and returns the
// log: from then on the database refuses every decision write of the
// previous holder (xa.ErrFenced), and recovery with it presumes abort of
// every undecided branch at once (Presumption). The lease is renewed until
// Release or Close. A lease another live process holds is refused with
// ErrLeaseHeld: a live node's transactions are never touched.
func (s *Store) TakeOver(ctx context.Context, id xa.LogID, o TakeoverOptions) (*Log, error) {
	ident, err := s.identity(ctx, "", id)
	if err != nil {
		return nil, err
	}
	l := s.newLog(ident, roleTaker)
	mode := acquireTakeover
	if o.Manual {
		mode = acquireManual
	}
	if err := l.acquire(ctx, mode, o.Reason); err != nil {
		return nil, err
	}
	l.start()
	return l, nil
}

// TakeOverNode is TakeOver by the log's node.
func (s *Store) TakeOverNode(ctx context.Context, node string, o TakeoverOptions) (*Log, error) {
	ident, err := s.identity(ctx, node, 0)
	if err != nil {
		return nil, err
	}
	return s.TakeOver(ctx, ident.ID, o)
}
