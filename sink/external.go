package sink

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// Checkpointed is a transaction handle that knows the checkpoint it was
// pre-committed under and which transaction it is.
type Checkpointed interface {
	CheckpointID() uint64
	// TransactionKey names the handle's transaction: two handles have
	// the same key only if they are the same transaction (members of one
	// sink pre-commit different transactions under one checkpoint id).
	TransactionKey() string
}

// Restorer fences what a restart from a checkpoint leaves behind.
type Restorer interface {
	// AbortLingering fences and rolls back every undecided transaction
	// of this sink from an earlier generation that began after checkpoint
	// restored: no restored handle names it, so no caller will ever
	// commit it. Transactions that began at or before restored are left
	// to the members whose restored state names them.
	AbortLingering(ctx context.Context, restored uint64) error
}

// External drives checkpoints for a caller that runs its own (a stream
// processor, Flink-style): the caller writes records, pre-commits at its
// checkpoint barrier, keeps the returned handle in its checkpoint state,
// and commits it when its checkpoint completes. Its methods are safe for
// concurrent use (they are serialised).
//
// Transactions are numbered for their XIDs before the caller's checkpoint
// id is known: a transaction is numbered one more than the last checkpoint
// id pre-committed (or restored), or than the last number used if that is
// higher (a transaction aborted by a failed Write or PreCommit spends its
// number: its abort may be fenced by a marker under it), and it is
// pre-committed under a checkpoint id at least its number. So a
// transaction numbered above a restored checkpoint id is one that no
// restored state can name (see Restorer). A checkpoint id whose PreCommit
// failed is spent with its transaction's number: the next must be higher.
type External[H Checkpointed] struct {
	mu      sync.Mutex
	c       Committer[H]
	r       Restorer
	open    H
	hasOpen bool
	openTxn uint64 // the open transaction's number
	last    uint64 // the last checkpoint id pre-committed or restored
	used    uint64 // the last transaction number begun
	pending Pending[H]
}

// NewExternal returns an External over c and r.
func NewExternal[H Checkpointed](c Committer[H], r Restorer) *External[H] {
	return &External[H]{c: c, r: r}
}

// Write adds records to the open transaction, beginning one if needed. On
// error the open transaction is aborted; the caller should fail its
// checkpoint (and restart from the last one).
func (e *External[H]) Write(ctx context.Context, records []Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.begin(ctx); err != nil {
		return err
	}
	if err := e.c.Write(ctx, e.open, records); err != nil {
		e.abortOpen(ctx)
		return err
	}
	return nil
}

func (e *External[H]) begin(ctx context.Context) error {
	if e.hasOpen {
		return nil
	}
	txn := e.nextTxn()
	h, err := e.c.Begin(ctx, txn)
	if err != nil {
		return err
	}
	e.open, e.hasOpen, e.openTxn, e.used = h, true, txn, txn
	return nil
}

// nextTxn returns the number of the next transaction to begin.
func (e *External[H]) nextTxn() uint64 { return max(e.last, e.used) + 1 }

func (e *External[H]) abortOpen(ctx context.Context) error {
	if !e.hasOpen {
		return nil
	}
	var zero H
	h := e.open
	e.open, e.hasOpen = zero, false
	return e.c.Abort(ctx, h)
}

// PreCommit flushes and prepares the open transaction (an empty one if
// nothing was written) under the caller's checkpoint id, which must be
// above every earlier one, and returns its handle for the caller's
// checkpoint state. On error the transaction is aborted.
func (e *External[H]) PreCommit(ctx context.Context, checkpoint uint64) (H, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var zero H
	floor := e.nextTxn() // the lowest id allowed
	if e.hasOpen {
		floor = max(e.last+1, e.openTxn)
	}
	if checkpoint < floor || checkpoint > MaxCheckpoint {
		return zero, fmt.Errorf("%w: checkpoint id %d: must be at least %d (above every checkpoint id pre-committed or spent by a failed one) and at most %d",
			ErrConfig, checkpoint, floor, uint64(MaxCheckpoint))
	}
	if err := e.begin(ctx); err != nil {
		return zero, err
	}
	h, err := e.c.PreCommit(ctx, e.open, checkpoint)
	if err != nil {
		e.abortOpen(ctx)
		return zero, err
	}
	e.open, e.hasOpen = zero, false
	e.last = checkpoint
	if err := e.pending.Add(checkpoint, h); err != nil {
		return zero, err
	}
	return h, nil
}

// Commit commits h once its checkpoint is complete, committing every
// earlier pending handle first, in order (checkpoint h's completion
// completes them). A handle this External does not hold (one restored from
// state, or another member's) is committed as given. Committing a
// committed handle again only repeats phase two. A handle not decided yet
// is refused (ErrFenced) once a generation above this member's has
// registered, whoever's handle it is: the member is then a zombie.
func (e *External[H]) Commit(ctx context.Context, h H) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids, hs := e.pending.Through(h.CheckpointID())
	mine := false
	for i, p := range hs {
		if err := e.c.Commit(ctx, p); err != nil {
			return fmt.Errorf("sink: committing checkpoint %d: %w", ids[i], err)
		}
		e.pending.Remove(ids[i])
		mine = mine || p.TransactionKey() == h.TransactionKey()
	}
	if mine {
		return nil
	}
	return e.c.Commit(ctx, h)
}

// Abort rolls h back (its checkpoint failed): it claims h's abort marker,
// so that h can never commit afterwards (a later Commit or Restore with h
// returns ErrAborted). If h is the handle this External holds pending for
// its checkpoint, it is pending no more; a handle of another member leaves
// this one's pending handle alone. The sink cannot tell whether the
// caller's checkpoint completed: abort only a handle whose checkpoint will
// never complete, keep it out of every checkpoint state, and write its
// records again (or restart from an earlier checkpoint) before committing
// a later one, which does not bring them back (docs/sink.md).
func (e *External[H]) Abort(ctx context.Context, h H) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.c.Abort(ctx, h); err != nil {
		return err
	}
	if _, hs := e.pending.Through(h.CheckpointID()); len(hs) > 0 && hs[len(hs)-1].CheckpointID() == h.CheckpointID() &&
		hs[len(hs)-1].TransactionKey() == h.TransactionKey() {
		e.pending.Remove(h.CheckpointID())
	}
	return nil
}

// Restore is called once after a restart from checkpoint restored (0:
// none), before any Write, with the handles the caller's state holds: it
// commits them in checkpoint order, then fences and rolls back every
// transaction of an earlier generation that no restored state names (see
// Restorer). Transactions are never rolled back by age in this mode: a
// caller's checkpoint may still complete.
func (e *External[H]) Restore(ctx context.Context, handles []H, restored uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hasOpen || e.pending.Len() > 0 || e.last != 0 {
		return fmt.Errorf("%w: Restore must come first", ErrConfig)
	}
	hs := slices.SortedFunc(slices.Values(handles), func(a, b H) int { return cmp.Compare(a.CheckpointID(), b.CheckpointID()) })
	for _, h := range hs {
		if err := e.c.Commit(ctx, h); err != nil {
			return fmt.Errorf("sink: restoring checkpoint %d: %w", h.CheckpointID(), err)
		}
	}
	if err := e.r.AbortLingering(ctx, restored); err != nil {
		return err
	}
	e.last = restored
	return nil
}

// Close aborts the open transaction, if any. Pending handles stay
// prepared: their checkpoints may still complete.
func (e *External[H]) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.abortOpen(ctx)
}
