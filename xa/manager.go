package xa

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Manager.
type Config struct {
	// Node identifies this transaction manager; it is written into every
	// XID so that recovery can tell its branches from everybody else's.
	// Two processes that run at the same time must have different nodes.
	Node string

	// Log stores commit decisions. Required.
	Log DecisionLog

	// Timeout bounds a global transaction from Begin to the commit
	// decision: work, prepare and the decision. When it expires, running
	// statements are cancelled on the servers and the transaction rolls
	// back. Default 30s.
	Timeout time.Duration

	// Phase2Attempts is how many times a branch is told to commit (or
	// roll back) before it is left to recovery. Default 8.
	Phase2Attempts int

	// Phase2Timeout bounds each phase-2 attempt and the decision-log
	// write. Default 10s.
	Phase2Timeout time.Duration

	// RetryBackoff is the wait before the second phase-2 attempt; it
	// doubles with each attempt up to 2s. Default 20ms.
	//
	// Phase2Attempts, Phase2Timeout and RetryBackoff make the
	// coordinator's RetryPolicy (Config.Phase2Policy).
	RetryBackoff time.Duration

	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger

	// Observer, if set, is told about every finished transaction (see
	// the metrics package), with its context if it is a ContextObserver.
	Observer Observer

	// Tracer, if set, records a span per global transaction, with a child
	// per prepare, decision-log write, last-resource commit and phase-2
	// call (see Tracer; package otelxa for OpenTelemetry). The
	// transaction's context (Tx.Context) carries its span, and log records
	// about a transaction are written with that context. nil: no tracing,
	// at no cost.
	Tracer Tracer

	// AsyncCommit makes Commit return as soon as the commit decision is
	// durable, with phase 2 going on in the background (Result.Phase2
	// closes when it ends). The transaction is committed then — recovery
	// guarantees every branch commits — but its effects may not yet be
	// visible in every database, and its locks are held until phase 2
	// ends. Transactions that commit in one phase, or whose only prepared
	// branch needs no decision record, still commit synchronously. Call
	// Manager.Close before exiting. Default false.
	AsyncCommit bool

	// Now is the coordinator's clock: it stamps each transaction's begin
	// time into its global id (and so into every branch XID). Default
	// time.Now. Tests set it to run a node whose clock is off. The
	// transaction's own timeout is measured on the process's monotonic
	// clock either way.
	Now func() time.Time
}

// Observer receives statistics of finished transactions. Implementations
// must be safe for concurrent use and must not block.
type Observer interface {
	ObserveTx(TxStats)
}

// TxStats describes one finished transaction.
type TxStats struct {
	ID       GlobalID
	Outcome  string // "committed", "aborted", "unknown" or "heuristic"
	Protocol string // ProtocolNone, ProtocolOnePhase, ProtocolTwoPhase or ProtocolLastResource
	OnePhase bool
	Logged   bool
	Branches int
	Pending  int // branches left to recovery
	// Durations of the protocol's phases; zero when a phase did not run.
	Prepare, Log, Commit, Total time.Duration
}

// Manager begins and coordinates global transactions. It is safe for
// concurrent use by many goroutines.
type Manager struct {
	cfg    Config
	ident  LogIdentity
	log    *slog.Logger
	closed atomic.Bool
	// clockBehind: the clock was seen reading earlier than the log's
	// creation (warned once).
	clockBehind atomic.Bool

	mu        sync.Mutex
	async     int           // asynchronous phase 2s in flight
	asyncIdle chan struct{} // closed while async == 0
	delegated sync.Map      // participant name -> true once LogDelegation returned nil, false once it refused the table
	recorded  sync.Map      // participant name -> the store id LogParticipant recorded
}

// ErrClosed is returned by Begin after Close.
var ErrClosed = errors.New("xa: manager closed")

// NewManager checks cfg and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if err := ValidateNode(cfg.Node); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		return nil, errors.New("xa: Config.Log is required: commit decisions must be durable")
	}
	ident := cfg.Log.Identity()
	if err := ident.Validate(); err != nil {
		return nil, fmt.Errorf("xa: the decision log has no valid identity: %w", err)
	}
	if ident.Node != cfg.Node {
		return nil, fmt.Errorf("xa: the decision log belongs to node %q, not %q: give each node its own log", ident.Node, cfg.Node)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = ident.Timeout
	}
	if cfg.Timeout > ident.Timeout {
		return nil, fmt.Errorf("xa: Config.Timeout %v exceeds the timeout %v the decision log %s was created for: "+
			"recovery would presume abort too early; create a log with a longer timeout or lower Config.Timeout", cfg.Timeout, ident.Timeout, ident.ID)
	}
	if cfg.Phase2Attempts <= 0 {
		cfg.Phase2Attempts = DefaultPhase2Attempts
	}
	if cfg.Phase2Timeout <= 0 {
		cfg.Phase2Timeout = DefaultPhase2Timeout
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if need := cfg.Timeout + cfg.Phase2Policy().Budget(); ident.Grace < need {
		return nil, fmt.Errorf("xa: the decision log's grace period %v is shorter than the timeout plus the phase-2 retry budget (%v): "+
			"recovery would presume abort of branches this manager may still commit; create a log with a grace of at least %v, "+
			"or lower Config.Timeout, Phase2Attempts or Phase2Timeout", ident.Grace, need, need)
	}
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Manager{cfg: cfg, ident: ident, log: l.With("node", cfg.Node), asyncIdle: make(chan struct{})}
	close(m.asyncIdle)
	return m, nil
}

// Close refuses new transactions and waits until every asynchronous phase
// 2 (Config.AsyncCommit) has ended, or ctx ends. Transactions already
// begun can still commit or roll back.
func (m *Manager) Close(ctx context.Context) error {
	m.closed.Store(true)
	return m.Wait(ctx)
}

// Wait waits until no asynchronous phase 2 is running, or ctx ends.
func (m *Manager) Wait(ctx context.Context) error {
	m.mu.Lock()
	idle := m.asyncIdle
	m.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("xa: asynchronous phase 2 still running: %w", ctx.Err())
	}
}

// asyncStarted and asyncEnded count asynchronous phase 2s.
func (m *Manager) asyncStarted() {
	m.mu.Lock()
	if m.async == 0 {
		m.asyncIdle = make(chan struct{})
	}
	m.async++
	m.mu.Unlock()
}

func (m *Manager) asyncEnded() {
	m.mu.Lock()
	m.async--
	if m.async == 0 {
		close(m.asyncIdle)
	}
	m.mu.Unlock()
}

// Node returns the manager's node id.
func (m *Manager) Node() string { return m.cfg.Node }

// Timeout returns the global transaction timeout.
func (m *Manager) Timeout() time.Duration { return m.cfg.Timeout }

// GracePeriod is how old a prepared branch of this manager must be before
// recovery may presume it aborted: the grace of the manager's decision log.
func (m *Manager) GracePeriod() time.Duration { return m.ident.Grace }

// LogID returns the id of the manager's decision log, which every branch
// XID of its transactions carries.
func (m *Manager) LogID() LogID { return m.ident.ID }

// Defaults of Config.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultPhase2Attempts = 8
	DefaultPhase2Timeout  = 10 * time.Second
	DefaultRetryBackoff   = 20 * time.Millisecond
)

// Phase2Policy is the coordinator's phase-2 retry policy: Phase2Attempts
// attempts of at most Phase2Timeout each, RetryBackoff doubling up to
// DefaultMaxBackoff between them. NewManager fills in the defaults first.
func (c Config) Phase2Policy() RetryPolicy {
	return RetryPolicy{Attempts: c.Phase2Attempts, Timeout: c.Phase2Timeout, Backoff: c.RetryBackoff, MaxBackoff: DefaultMaxBackoff}
}

// Phase2Budget is the longest a coordinator keeps working on one branch in
// phase 2 before it leaves it to recovery: every attempt with its backoff
// (RetryPolicy.Budget of the coordinator's policy).
func Phase2Budget(attempts int, timeout, backoff time.Duration) time.Duration {
	return Config{Phase2Attempts: attempts, Phase2Timeout: timeout, RetryBackoff: backoff}.Phase2Policy().Budget()
}

// GracePeriod returns the default presumed-abort grace period for a global
// transaction timeout: the timeout, the phase-2 retry budget of the default
// settings, and a margin of a minute (or the timeout again, if longer) for
// pauses and clock skew. The fence between commit and presumed abort keeps
// recovery safe with any grace (docs/protocol.md); the grace keeps it from
// aborting transactions that would have committed.
func GracePeriod(timeout time.Duration) time.Duration {
	margin := time.Minute
	if timeout > margin {
		margin = timeout
	}
	return timeout + Phase2Budget(DefaultPhase2Attempts, DefaultPhase2Timeout, DefaultRetryBackoff) + margin
}

// Begin starts a global transaction. As with database/sql's BeginTx, ctx
// bounds it: if ctx ends before Commit, the transaction rolls back. The
// transaction also rolls back when Config.Timeout expires.
func (m *Manager) Begin(ctx context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if m.closed.Load() {
		return nil, ErrClosed
	}
	// The begin time in the global id is the coordinator's clock
	// (Config.Now); the transaction's own deadline runs on this process's
	// monotonic clock, whatever the wall clock says.
	now := time.Now()
	stamp := now
	if m.cfg.Now != nil {
		stamp = m.cfg.Now()
	}
	id, err := NewGlobalID(m.cfg.Node, m.beginTime(stamp))
	if err != nil {
		return nil, err
	}
	return newTx(ctx, m, id, now), nil
}

// beginTime is the begin time a transaction's global id records: now, or,
// when the clock reads earlier than the decision log's creation (it
// stepped back since xactl log init), the creation time. Recovery leaves a
// branch that began before its log was created alone forever (its decision
// may be in an older log), so an id dated before the log would never be
// presumed aborted. Dating it later is safe: its grace and its commit
// deadline only start later (the fence decides the race, whatever the
// clocks say); the transaction's own timeout still runs from now.
func (m *Manager) beginTime(now time.Time) time.Time {
	onLog := now
	if lc, ok := m.cfg.Log.(logClock); ok {
		onLog = lc.OnLogClock(now)
	}
	if created := m.ident.Created; onLog.Before(created) {
		if m.clockBehind.CompareAndSwap(false, true) {
			m.log.Warn("the clock reads earlier than the decision log's creation: transactions are dated at the log's creation",
				"now", now, "log_created", created)
		}
		return now.Add(created.Sub(onLog))
	}
	return now
}

// logClock is implemented by decision logs whose creation was stamped by
// another clock than the node's (a shared log's database; see
// recovery.NodeClock): begin times are compared with the creation on it.
type logClock interface {
	OnLogClock(begun time.Time) time.Time
}

// Run runs fn in a new global transaction and commits it. If fn returns an
// error or panics, the transaction is rolled back (and the panic goes on).
// fn must do all its work through tx, with the ctx it is given.
//
// The error is nil exactly when the transaction committed and fn
// succeeded; Result.Pending then lists branches that recovery will finish.
// If fn calls tx.Commit itself and then fails, Run reports what that Commit
// did: with Result.Committed set and an error carrying fn's failure (not
// matching ErrAborted) when it committed. An error matching
// ErrAborted means nothing committed (when fn failed, the *AbortError
// wraps fn's error, so errors.Is and errors.As see it, and ErrTimeout when
// the timeout was the cause); ErrOutcomeUnknown means recovery will decide
// from the decision log. Do not blindly retry on the latter.
func (m *Manager) Run(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) (res Result, err error) {
	tx, err := m.Begin(ctx)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the panic is what matters
			panic(p)
		}
	}()
	if err := fn(tx.Context(), tx); err != nil {
		if tx.commitCalled.Load() {
			// fn committed (or tried to) itself, then failed: the
			// transaction's fate is what its Commit said, not an abort.
			res, txErr := tx.result()
			if res.Committed {
				return res, fmt.Errorf("xa: transaction %s is committed (fn committed it), but fn then failed: %w", tx.id, err)
			}
			if txErr == nil || errors.Is(txErr, ErrTxDone) {
				txErr = ErrTxDone
			}
			return res, errors.Join(txErr, fmt.Errorf("fn, after calling Commit: %w", err))
		}
		reason := err
		if rerr := tx.Rollback(context.WithoutCancel(ctx)); rerr != nil && !errors.Is(rerr, ErrTxDone) {
			reason = errors.Join(reason, fmt.Errorf("rollback: %w", rerr))
		}
		res, txErr := tx.result()
		// fn often fails because the transaction timed out (its statement
		// was cancelled): say so, whatever fn's error says.
		var ae *AbortError
		if errors.As(txErr, &ae) && (errors.Is(ae.Reason, ErrTimeout) || errors.Is(ae.Reason, context.Canceled) ||
			errors.Is(ae.Reason, context.DeadlineExceeded)) && !errors.Is(err, ae.Reason) {
			reason = errors.Join(reason, ae.Reason)
		}
		return res, &AbortError{ID: tx.id, Reason: reason}
	}
	return tx.Commit(ctx)
}

// backoff returns the wait before phase-2 attempt n (n >= 1).
func (m *Manager) backoff(n int) time.Duration { return m.cfg.Phase2Policy().Wait(n) }
