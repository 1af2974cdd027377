// Package memrm is an in-memory resource manager for deterministic fault
// simulation of the protocol: a database with XA semantics (active and
// prepared branches, committed rows) and a hook that decides the fate of
// every operation (fail, refuse, lose the reply, hang, or act as if the
// transaction manager's process were dead).
//
// It supplements tests against real databases; it never replaces them.
package memrm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/xadb/xa/xa"
)

// Op names an operation the injector is asked about.
type Op int

const (
	OpStart Op = 1 + iota
	OpPut
	OpPrepare
	OpCommit     // phase 2 on the branch's session
	OpCommitRM   // phase 2 from another session
	OpRollback   // on the branch's session
	OpRollbackRM // from another session
	OpOnePhase
	OpRecover
	OpCommitLast // one-phase commit with the decision (last resource)
)

var opNames = [...]string{"", "start", "put", "prepare", "commit", "commit-rm", "rollback", "rollback-rm", "one-phase", "recover", "commit-last"}

func (o Op) String() string { return opNames[o] }

// Fault is what happens to an operation.
type Fault int

const (
	// OK: the operation works.
	OK Fault = iota
	// Fail: a transient error (ErrRetryable); nothing happens.
	Fail
	// Refuse: prepare votes abort (the branch is rolled back); other
	// operations fail with a plain error and no effect.
	Refuse
	// LoseReply: the operation takes effect but the caller gets
	// ErrOutcomeUnknown and the session is lost.
	LoseReply
	// Hang: the operation blocks until its context ends, then fails with
	// ErrOutcomeUnknown without effect.
	Hang
	// Dead: the caller's process is gone: no effect, an error.
	Dead
	// Heuristic: a phase-2 commit finds that the database rolled the
	// branch back by itself (a heuristic decision): the branch is rolled
	// back and the caller gets ErrRolledBack.
	Heuristic
)

// Injector decides the fate of operation op on branch x. It may be called
// from many goroutines.
type Injector func(op Op, x xa.XID) Fault

// DB is an in-memory database shared by any number of RMs (sessions of
// different processes).
type DB struct {
	mu        sync.Mutex
	rows      map[int]int
	branches  map[string]*brec           // by XID text
	decisions map[string]xa.CommitRecord // written by last-resource commits
	aborts    map[string]time.Time       // abort markers (recovery's fence), same key space as decisions
}

type brec struct {
	xid      xa.XID
	prepared bool
	writes   map[int]int
	owner    *RM // the RM whose session holds it while active
}

// NewDB returns an empty database.
func NewDB() *DB {
	return &DB{rows: map[int]int{}, branches: map[string]*brec{}, decisions: map[string]xa.CommitRecord{}, aborts: map[string]time.Time{}}
}

// Get returns row k as committed.
func (db *DB) Get(k int) (int, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	v, ok := db.rows[k]
	return v, ok
}

// Prepared lists the prepared branches.
func (db *DB) Prepared() []xa.XID {
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []xa.XID
	for _, b := range db.branches {
		if b.prepared {
			out = append(out, b.xid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Disconnect ends every session of rm, as when its process dies: active
// branches are rolled back, prepared ones stay.
func (db *DB) Disconnect(rm *RM) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for k, b := range db.branches {
		if !b.prepared && b.owner == rm {
			delete(db.branches, k)
		}
	}
}

// RM is one process's handle on a DB.
type RM struct {
	name   string
	db     *DB
	inject Injector
	last   bool // branches can commit last with the decision
}

// EnableLastResource lets rm's branches take the decision as the last
// resource (xa.LastResource), storing it in the DB.
func (rm *RM) EnableLastResource() *RM { rm.last = true; return rm }

// Decisions lists the decisions stored by last-resource commits.
func (rm *RM) Decisions(ctx context.Context) ([]xa.CommitRecord, error) {
	if _, err := rm.fault(ctx, OpRecover, xa.XID{}); err != nil {
		return nil, err
	}
	rm.db.mu.Lock()
	defer rm.db.mu.Unlock()
	out := make([]xa.CommitRecord, 0, len(rm.db.decisions))
	for _, r := range rm.db.decisions {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out, nil
}

// Decision returns the stored decision of id.
func (rm *RM) Decision(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	if _, err := rm.fault(ctx, OpRecover, xa.XID{}); err != nil {
		return xa.CommitRecord{}, false, err
	}
	rm.db.mu.Lock()
	defer rm.db.mu.Unlock()
	r, ok := rm.db.decisions[id.String()]
	return r, ok, nil
}

// ForgetDecisions deletes stored decisions.
func (rm *RM) ForgetDecisions(ctx context.Context, ids []xa.GlobalID) error {
	if _, err := rm.fault(ctx, OpRecover, xa.XID{}); err != nil {
		return err
	}
	rm.db.mu.Lock()
	defer rm.db.mu.Unlock()
	for _, id := range ids {
		delete(rm.db.decisions, id.String())
	}
	return nil
}

// HasDecisionTable reports true: every DB has a decision table.
func (rm *RM) HasDecisionTable() bool { return true }

// ClaimAbort stores an abort marker under id's key, unless a decision is
// stored there (xa.ErrCommitRecorded). A last-resource commit holds the
// DB's lock for its whole commit, so a claim waits for one in flight, as a
// database's unique key makes it.
func (rm *RM) ClaimAbort(ctx context.Context, id xa.GlobalID, _ string) error {
	if _, err := rm.fault(ctx, OpRecover, xa.XID{}); err != nil {
		return err
	}
	rm.db.mu.Lock()
	defer rm.db.mu.Unlock()
	if _, ok := rm.db.decisions[id.String()]; ok {
		return fmt.Errorf("memrm: %s: %w", id, xa.ErrCommitRecorded)
	}
	if _, ok := rm.db.aborts[id.String()]; !ok {
		rm.db.aborts[id.String()] = time.Now()
	}
	return nil
}

// ForgetAborts deletes abort markers older than retention.
func (rm *RM) ForgetAborts(ctx context.Context, retention time.Duration) (int, error) {
	if _, err := rm.fault(ctx, OpRecover, xa.XID{}); err != nil {
		return 0, err
	}
	rm.db.mu.Lock()
	defer rm.db.mu.Unlock()
	n := 0
	for k, t := range rm.db.aborts {
		if time.Since(t) > retention {
			delete(rm.db.aborts, k)
			n++
		}
	}
	return n, nil
}

// fenced reports whether an abort marker holds id's key; db.mu is held.
func (db *DB) fenced(id xa.GlobalID) bool {
	_, ok := db.aborts[id.String()]
	return ok
}

// AbortMarkers counts the abort markers stored.
func (db *DB) AbortMarkers() int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return len(db.aborts)
}

var _ xa.ResourceManager = (*RM)(nil)

// New returns an RM named name on db; inject may be nil (no faults).
func New(name string, db *DB, inject Injector) *RM {
	if inject == nil {
		inject = func(Op, xa.XID) Fault { return OK }
	}
	return &RM{name: name, db: db, inject: inject}
}

// Name implements xa.ResourceManager.
func (rm *RM) Name() string { return rm.name }

func (rm *RM) err(op Op, x xa.XID, kind error, msg string) error {
	return &xa.Error{Op: op.String(), RM: rm.name, XID: x, Kind: kind, Err: errors.New(msg)}
}

// fault consults the injector and handles Hang and Dead; it returns the
// fault for the caller to apply.
func (rm *RM) fault(ctx context.Context, op Op, x xa.XID) (Fault, error) {
	f := rm.inject(op, x)
	switch f {
	case Hang:
		<-ctx.Done()
		return f, rm.err(op, x, xa.ErrOutcomeUnknown, "hung: "+ctx.Err().Error())
	case Dead:
		return f, rm.err(op, x, nil, "process is dead")
	case Fail:
		return f, rm.err(op, x, xa.ErrRetryable, "transient failure")
	}
	return f, nil
}

// Start implements xa.ResourceManager. The branch starts lazily, at its
// first Put.
func (rm *RM) Start(ctx context.Context, x xa.XID) (xa.Branch, error) {
	if err := x.Validate(); err != nil {
		return nil, err
	}
	if _, err := rm.fault(ctx, OpStart, x); err != nil {
		return nil, err
	}
	return &Branch{rm: rm, xid: x, ctx: ctx}, nil
}

// Commit implements xa.ResourceManager.
func (rm *RM) Commit(ctx context.Context, x xa.XID, _ xa.Origin) error {
	return rm.finish(ctx, OpCommitRM, x, true)
}

// Rollback implements xa.ResourceManager.
func (rm *RM) Rollback(ctx context.Context, x xa.XID, _ xa.Origin) error {
	return rm.finish(ctx, OpRollbackRM, x, false)
}

func (rm *RM) finish(ctx context.Context, op Op, x xa.XID, commit bool) error {
	if err := x.Validate(); err != nil {
		return err
	}
	f, err := rm.fault(ctx, op, x)
	if err != nil {
		return err
	}
	if f == Refuse {
		return rm.err(op, x, nil, "refused")
	}
	if f == Heuristic {
		commit = false
	}
	rm.db.mu.Lock()
	b, ok := rm.db.branches[x.String()]
	if ok && !b.prepared {
		rm.db.mu.Unlock()
		return rm.err(op, x, xa.ErrInvalidState, "branch is active on another session")
	}
	if ok {
		delete(rm.db.branches, x.String())
		if commit {
			for k, v := range b.writes {
				rm.db.rows[k] = v
			}
		}
	}
	rm.db.mu.Unlock()
	switch {
	case f == Heuristic:
		return rm.err(op, x, xa.ErrRolledBack, "the database rolled the branch back (heuristic)")
	case f == LoseReply:
		return rm.err(op, x, xa.ErrOutcomeUnknown, "reply lost")
	case !ok && commit:
		return rm.err(op, x, xa.ErrUnknownXID, "unknown XID")
	}
	return nil
}

// Recover implements xa.ResourceManager.
func (rm *RM) Recover(ctx context.Context) ([]xa.PreparedBranch, error) {
	if _, err := rm.fault(ctx, OpRecover, xa.XID{}); err != nil {
		return nil, err
	}
	var out []xa.PreparedBranch
	for _, x := range rm.db.Prepared() {
		out = append(out, xa.PreparedBranch{XID: x, Raw: x.String()})
	}
	return out, nil
}

// Branch is a branch on a session of an RM. Its session is itself: use Put
// and Get.
type Branch struct {
	rm       *RM
	xid      xa.XID
	ctx      context.Context
	mu       sync.Mutex
	started  bool
	ended    bool // prepared, finished or closed: the session is released
	prepared bool
}

var (
	_ xa.Branch            = (*Branch)(nil)
	_ xa.OnePhaseCommitter = (*Branch)(nil)
	_ xa.Idler             = (*Branch)(nil)
	_ xa.LastResource      = (*Branch)(nil)
)

// CanCommitLast implements xa.LastResource.
func (b *Branch) CanCommitLast() bool { return b.rm.last }

// CommitLast implements xa.LastResource: the branch's writes and rec
// become durable together, or neither does.
func (b *Branch) CommitLast(ctx context.Context, rec xa.CommitRecord) error {
	return b.commitLocal(ctx, OpCommitLast, &rec)
}

// commitLocal commits the branch in one phase, with rec stored alongside
// when it is not nil. An error is ErrOutcomeUnknown (lost reply: it
// happened; hang: it did not) or ErrRolledBack (it did not).
func (b *Branch) commitLocal(ctx context.Context, op Op, rec *xa.CommitRecord) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return xa.ErrBranchDone
	}
	b.ended = true
	f, err := b.rm.fault(ctx, op, b.xid)
	if err != nil && f != LoseReply {
		b.drop()
		if f == Hang {
			return err // outcome unknown, nothing done
		}
		return b.rm.err(op, b.xid, xa.ErrRolledBack, err.Error())
	}
	db := b.rm.db
	db.mu.Lock()
	r, ok := db.branches[b.xid.String()]
	if f == Refuse || !ok {
		delete(db.branches, b.xid.String())
		db.mu.Unlock()
		return b.rm.err(op, b.xid, xa.ErrRolledBack, "refused")
	}
	if rec != nil && db.fenced(rec.ID) {
		// The decision's key holds recovery's abort marker.
		delete(db.branches, b.xid.String())
		db.mu.Unlock()
		return &xa.Error{Op: op.String(), RM: b.rm.name, XID: b.xid, Kind: xa.ErrRolledBack, Err: xa.ErrAbortRecorded}
	}
	delete(db.branches, b.xid.String())
	for k, v := range r.writes {
		db.rows[k] = v
	}
	if rec != nil {
		db.decisions[rec.ID.String()] = *rec
	}
	db.mu.Unlock()
	if f == LoseReply {
		return b.rm.err(op, b.xid, xa.ErrOutcomeUnknown, "reply lost")
	}
	return nil
}

// Session returns the branch itself.
func (b *Branch) Session() any { return b }

// Idle implements xa.Idler.
func (b *Branch) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.started
}

// Put writes row k = v in the branch.
func (b *Branch) Put(ctx context.Context, k, v int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return xa.ErrBranchDone
	}
	if err := b.ctx.Err(); err != nil {
		return err
	}
	if _, err := b.rm.fault(ctx, OpPut, b.xid); err != nil {
		return err
	}
	db := b.rm.db
	db.mu.Lock()
	defer db.mu.Unlock()
	r, ok := db.branches[b.xid.String()]
	if !b.started {
		if ok {
			return b.rm.err(OpPut, b.xid, xa.ErrDuplicateXID, "XID in use")
		}
		r = &brec{xid: b.xid, writes: map[int]int{}, owner: b.rm}
		db.branches[b.xid.String()] = r
		b.started = true
	} else if !ok {
		return b.rm.err(OpPut, b.xid, xa.ErrRolledBack, "branch was rolled back")
	}
	r.writes[k] = v
	return nil
}

// Prepare implements xa.Branch.
func (b *Branch) Prepare(ctx context.Context) (xa.Vote, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return xa.VoteAbort, xa.ErrBranchDone
	}
	if !b.started {
		b.ended = true
		return xa.VoteReadOnly, nil
	}
	f, err := b.rm.fault(ctx, OpPrepare, b.xid)
	if err != nil {
		// The branch is rolled back (or its session is gone, which
		// rolls it back): an abort vote.
		b.ended = true
		b.drop()
		return xa.VoteAbort, err
	}
	db := b.rm.db
	db.mu.Lock()
	r, ok := db.branches[b.xid.String()]
	switch {
	case !ok:
		db.mu.Unlock()
		b.ended = true
		return xa.VoteAbort, b.rm.err(OpPrepare, b.xid, xa.ErrRolledBack, "branch was rolled back")
	case f == Refuse:
		delete(db.branches, b.xid.String())
		db.mu.Unlock()
		b.ended = true
		return xa.VoteAbort, b.rm.err(OpPrepare, b.xid, xa.ErrRolledBack, "refused")
	case len(r.writes) == 0:
		delete(db.branches, b.xid.String())
		db.mu.Unlock()
		b.ended = true
		return xa.VoteReadOnly, nil
	}
	r.prepared = true
	r.owner = nil
	db.mu.Unlock()
	b.prepared = true
	if f == LoseReply {
		b.ended = true
		return xa.VoteAbort, b.rm.err(OpPrepare, b.xid, xa.ErrOutcomeUnknown, "reply lost")
	}
	return xa.VotePrepared, nil
}

// drop rolls back an active branch whose session was lost.
func (b *Branch) drop() {
	db := b.rm.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if r, ok := db.branches[b.xid.String()]; ok && !r.prepared {
		delete(db.branches, b.xid.String())
	}
}

// Commit implements xa.Branch.
func (b *Branch) Commit(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.prepared {
		return b.rm.err(OpCommit, b.xid, xa.ErrInvalidState, "not prepared")
	}
	err := b.rm.finish(ctx, OpCommit, b.xid, true)
	if !xa.Retryable(err) {
		b.ended = true
	}
	return err
}

// Rollback implements xa.Branch.
func (b *Branch) Rollback(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.prepared {
		f, err := b.rm.fault(ctx, OpRollback, b.xid)
		if err != nil && f == Fail {
			return err
		}
		// Any other fault loses the session: the database rolls back.
		b.ended = true
		b.drop()
		return err
	}
	err := b.rm.finish(ctx, OpRollback, b.xid, false)
	if !xa.Retryable(err) {
		b.ended = true
	}
	return err
}

// CommitOnePhase implements xa.OnePhaseCommitter.
func (b *Branch) CommitOnePhase(ctx context.Context) error {
	return b.commitLocal(ctx, OpOnePhase, nil)
}

// Close implements xa.Branch: the session goes; an active branch is rolled
// back by the database, a prepared one stays.
func (b *Branch) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ended {
		b.ended = true
		b.drop()
	}
	return nil
}

// String describes the branch.
func (b *Branch) String() string { return fmt.Sprintf("%s/%s", b.rm.name, b.xid) }

// XID returns the branch's XID.
func (b *Branch) XID() xa.XID { return b.xid }
