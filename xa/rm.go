package xa

import (
	"context"
	"time"
)

// Vote is a branch's answer to prepare.
type Vote int

const (
	// VotePrepared: the branch is prepared and durable; it waits for
	// Commit or Rollback.
	VotePrepared Vote = 1 + iota
	// VoteReadOnly: the branch changed nothing; it is finished and takes
	// no part in phase 2.
	VoteReadOnly
	// VoteAbort: the branch refused (the error says why) and is rolled
	// back, or may be prepared if the error is ErrOutcomeUnknown.
	VoteAbort
)

func (v Vote) String() string {
	switch v {
	case VotePrepared:
		return "prepared"
	case VoteReadOnly:
		return "read-only"
	case VoteAbort:
		return "abort"
	}
	return "Vote(invalid)"
}

// ResourceManager is one participant database as the transaction manager
// and the recovery scanner use it. Implementations (drivers/mysql,
// drivers/postgres) are safe for concurrent use.
type ResourceManager interface {
	// Name identifies the participant in logs, decision records and
	// errors. It must be stable across restarts: recovery finds a
	// branch's participant by this name.
	Name() string

	// Start opens branch xid on a database session pinned to it until
	// the branch ends. The implementation may defer XA START / BEGIN to
	// the branch's first statement; a branch that never ran a statement
	// costs no round trip and votes read-only.
	//
	// As with database/sql's BeginTx, ctx bounds the branch's work: once
	// it is done, a statement running on the session is cancelled on the
	// server and later statements fail. Prepare, Commit and Rollback take
	// their own contexts and are not affected.
	Start(ctx context.Context, xid XID) (Branch, error)

	// Commit commits the prepared branch xid from a session other than
	// the one that prepared it (phase 2 retried elsewhere, recovery).
	// from says where it was prepared; a driver whose database ties a
	// prepared branch to its session (MariaDB) returns an ErrRetryable
	// error while that session may still be alive. ErrUnknownXID means
	// the database does not list the branch as prepared: already
	// committed, or never prepared; only the decision log can tell.
	Commit(ctx context.Context, xid XID, from Origin) error

	// Rollback rolls back the prepared branch xid from another session.
	// A branch the database does not know is reported as nil: rolling
	// back a branch that is gone is success.
	Rollback(ctx context.Context, xid XID, from Origin) error

	// Recover lists every prepared branch the database holds, this
	// transaction manager's and everybody else's. Callers filter with
	// Owned.
	Recover(ctx context.Context) ([]PreparedBranch, error)
}

// Branch is one transaction branch on a pinned session, as the
// transaction manager drives it. The application never sees it: it uses
// Session.
//
// Prepare, Commit and Rollback are called by one goroutine at a time.
// After VoteReadOnly, VoteAbort, a successful Commit or Rollback, or any
// error other than ErrRetryable from Commit, the branch has released its
// session; a session that may still hold a prepared branch is closed, never
// returned to a pool.
type Branch interface {
	// Session returns the application's handle on the branch session:
	// the native API of the driver, without the means to end the
	// transaction.
	Session() any

	// Prepare ends the branch's work and prepares it.
	Prepare(ctx context.Context) (Vote, error)

	// Commit commits the prepared branch on its own session. After an
	// ErrRetryable error it may be called again.
	Commit(ctx context.Context) error

	// Rollback rolls the branch back in any state, waiting for a
	// statement still running on the session to be cancelled.
	Rollback(ctx context.Context) error

	// Close releases the session without ending the branch, when the
	// transaction manager gives phase 2 up to recovery: a prepared branch
	// stays prepared (its session is closed, never pooled, so that the
	// database detaches it); a branch that is not prepared is rolled back
	// by the database when its session closes. Close after the branch has
	// ended is a no-op.
	Close() error
}

// OnePhaseCommitter is implemented by branches that can commit without
// preparing, when they are the only branch that did work.
type OnePhaseCommitter interface {
	CommitOnePhase(ctx context.Context) error
}

// OnePhaseCommitter note: after CommitOnePhase, whatever its error, the
// branch has released its session; ErrOutcomeUnknown means the commit may
// or may not have happened.

// LastResource is implemented by branches that can take the transaction's
// commit decision themselves ("last resource commit"): commit their own
// local transaction in one phase together with a row that holds the commit
// record, written in their own database. When such a branch did work, the
// coordinator prepares every other branch, then calls CommitLast instead
// of writing the decision log: the branch's commit is the decision, durable
// exactly when the branch commits, and it saves one fsync and one round
// trip. Recovery finds the record through the participant (see
// DecisionStore).
type LastResource interface {
	// CanCommitLast reports whether the branch is set up to do it (the
	// driver may implement the method and have it turned off).
	CanCommitLast() bool
	// CommitLast commits the branch in one phase together with rec. nil:
	// both are durable. An error matching ErrOutcomeUnknown: either both
	// or neither happened, recovery will look. Any other error: neither
	// happened and the branch is rolled back.
	CommitLast(ctx context.Context, rec CommitRecord) error
}

// Idler is implemented by branches that can tell that no statement has
// reached the database yet (their start was deferred).
type Idler interface {
	Idle() bool
}

// OriginReporter is implemented by branches whose database ties a prepared
// branch to the session that prepared it. The transaction manager records
// the origin with the commit decision, so that recovery knows which session
// to wait for.
type OriginReporter interface {
	Origin() Origin
}

// DecisionStore is implemented by participants that keep commit decisions
// in their own database: a branch there took the decision as the last
// resource (LastResource), committing it together with its own work.
// The scanner reads those decisions as it reads the log, and forgets them
// the same way.
type DecisionStore interface {
	// Decisions returns every stored decision.
	Decisions(ctx context.Context) ([]CommitRecord, error)
	// Decision returns the stored decision of id, if any.
	Decision(ctx context.Context, id GlobalID) (CommitRecord, bool, error)
	// ForgetDecisions deletes the stored decisions of ids.
	ForgetDecisions(ctx context.Context, ids []GlobalID) error

	// ClaimAbort fences a last-resource commit of id before recovery
	// presumes abort: it stores an abort marker under id's key, in the
	// same table and under the same unique key as a commit decision. A
	// commit of id still in flight on the server makes it wait until that
	// commit ends. nil: the abort is claimed (now, or by an earlier call),
	// and no commit of id can be stored any more. An error matching
	// ErrCommitRecorded: the commit won; the decision is stored. Any
	// other error: nothing is known, nothing may be rolled back.
	ClaimAbort(ctx context.Context, id GlobalID, reason string) error
	// ForgetAborts deletes abort markers stored more than retention ago
	// by the database's clock, and returns how many.
	ForgetAborts(ctx context.Context, retention time.Duration) (int, error)
}

// SharedServer is implemented by participants whose recover listing covers
// a whole server, beyond their own database (MySQL and MariaDB: XA RECOVER
// lists every branch of the server). Participants with equal ServerKeys
// list the same branches: the scanner attributes each branch to the one
// participant its commit record (or, without one, the first configured)
// names, and acts on it once.
type SharedServer interface {
	// ServerKey identifies the server, the same for every participant
	// connected to it and stable while it runs.
	ServerKey(ctx context.Context) (string, error)
}

// GhostCounter is implemented by resource managers whose database can hold
// prepared transactions that its recover listing does not show (MariaDB,
// docs/xa-facts.md fact 7). While it reports any, no record that names the
// participant is forgotten (the recovery scanner's commit records, the SQL
// sink's decision rows): the ghost may be one of its branches, and it
// comes back as prepared after a server restart.
type GhostCounter interface {
	UnlistedPrepared(ctx context.Context) (int, error)
}

// DecisionStoreSwitch is implemented by participants that implement
// DecisionStore but may have it turned off (a PostgreSQL participant
// without a decision table).
type DecisionStoreSwitch interface{ HasDecisionTable() bool }

// AsDecisionStore returns rm as a decision store, if it is one and has it
// turned on.
func AsDecisionStore(rm ResourceManager) (DecisionStore, bool) {
	ds, ok := rm.(DecisionStore)
	if !ok {
		return nil, false
	}
	if h, ok := rm.(DecisionStoreSwitch); ok && !h.HasDecisionTable() {
		return nil, false
	}
	return ds, true
}

// Origin says where a branch was prepared.
type Origin struct {
	// Session is the database's session (connection) id, 0 if unknown.
	Session uint64
	// Prepared is when the branch was prepared, zero if unknown.
	Prepared time.Time
}

// PreparedBranch is one prepared branch listed by a database.
type PreparedBranch struct {
	// XID is the branch's identifier; zero when the database's identifier
	// is not one (a PostgreSQL gid of another application).
	XID XID
	// Raw is the identifier as the database shows it: the gid in
	// PostgreSQL, X'gtrid',X'bqual',formatID in MySQL.
	Raw string
	// Prepared is when the database says the branch was prepared; zero if
	// it does not say (MySQL).
	Prepared time.Time
	// ServerAge is how long ago the branch was prepared by the database's
	// own clock (PostgreSQL: now() - prepared, read in the same query);
	// zero if the database does not say. Recovery measures age with it, so
	// that no two clocks are compared.
	ServerAge time.Duration
	// Owner and Database are the PostgreSQL role and database, if known.
	Owner    string
	Database string
}

// Age returns how long the branch has been in doubt, as well as can be
// told: by the database's own clock (ServerAge), else from the database's
// prepare time, else from the begin time encoded in one of our own XIDs;
// ok is false when none is known.
func (p PreparedBranch) Age(now time.Time) (age time.Duration, ok bool) {
	if p.ServerAge > 0 {
		return p.ServerAge, true
	}
	if !p.Prepared.IsZero() {
		return now.Sub(p.Prepared), true
	}
	if g, _, owned := Owned(p.XID); owned {
		return now.Sub(g.Begun), true
	}
	return 0, false
}
