package sink

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Committer is a sink's two-phase commit, one transaction per checkpoint,
// generic over the transaction's handle H (as Flink's
// TwoPhaseCommitSinkFunction is over its TXN). The drivers call it from
// one goroutine at a time per transaction, and in this order: Begin, Write
// any number of times, then PreCommit followed by Commit, or Abort at any
// point. A handle returned by PreCommit may be kept by the caller
// (serialised) and given to Commit or Abort later, also by another process:
// H must carry everything needed to finish the transaction without the
// process that began it.
//
// The SQL sink (*Sink) implements Committer[Handle].
type Committer[H any] interface {
	// Begin opens the transaction of the checkpoint numbered checkpoint
	// (the number goes into the branches' XIDs; it increases within an
	// instance). It need not do any I/O.
	Begin(ctx context.Context, checkpoint uint64) (H, error)
	// Write adds records to the transaction. An error means the
	// transaction cannot go on: the driver aborts it.
	Write(ctx context.Context, h H, records []Record) error
	// PreCommit flushes what is buffered and prepares every branch (phase
	// one); id is the checkpoint id the transaction completes under (a
	// Runner's is the checkpoint number itself; an external caller's is
	// its own checkpoint id). It returns the handle to keep. An error
	// means the transaction is not prepared everywhere: the driver aborts
	// it.
	PreCommit(ctx context.Context, h H, id uint64) (H, error)
	// Commit decides the transaction and commits its branches (phase
	// two). It is idempotent: a decided transaction only goes through
	// phase two again, which is how restore finishes a handle of an
	// earlier process. nil: decided commit (branches that could not be
	// committed yet are left to restore). An error matching ErrAborted:
	// the transaction was rolled back instead and none of it lands. Any
	// other error (matching ErrUnresolved when the decision's reply was
	// lost): nothing may be assumed, restore settles it.
	Commit(ctx context.Context, h H) error
	// Abort rolls the transaction back; none of it lands. Aborting a
	// transaction decided commit fails with ErrDecided (and leaves it to
	// be committed).
	Abort(ctx context.Context, h H) error
}

// Owner is how a self-driven Runner takes, keeps and loses partitions.
// The SQL sink implements it with epochs in the progress table.
type Owner interface {
	// Take takes partitions over before any of their records is read:
	// raises their epochs, resolves orphaned branches, and returns where
	// each must be read from (missing: from the source's start).
	Take(ctx context.Context, partitions []string) (positions map[string]string, err error)
	// Release forgets partitions after their checkpoints are finished.
	Release(ctx context.Context, partitions []string) error
	// Rewind returns the committed positions of partitions, to read again
	// after an aborted checkpoint, and which of them were lost to another
	// instance (they are read no more).
	Rewind(ctx context.Context, partitions []string) (positions map[string]string, lost []string, err error)
	// Sweep resolves orphaned branches (restore's step 2); the Runner
	// calls it periodically from a goroutine of its own, concurrently
	// with the other methods.
	Sweep(ctx context.Context) error
}

// Observer receives what metrics need. Its methods are called from the
// sink's goroutines, must be quick and must not block; embed NopObserver
// to implement only some.
type Observer interface {
	// RecordsWritten: n records were written into the open checkpoint.
	RecordsWritten(n int)
	// CheckpointDone: a checkpoint was committed or aborted.
	CheckpointDone(c CheckpointStats)
	// PendingChanged: n checkpoints are prepared and waiting for, or in,
	// their decision and phase two.
	PendingChanged(n int)
}

// CheckpointStats describes one finished checkpoint.
type CheckpointStats struct {
	Checkpoint uint64
	Records    int
	Committed  bool
	Err        error         // why it aborted; phase-2 trouble of a committed one
	Write      time.Duration // first record to pre-commit
	Prepare    time.Duration // flush and prepare
	Commit     time.Duration // decision and phase two (or the abort)
}

// NopObserver ignores everything.
type NopObserver struct{}

// RecordsWritten does nothing.
func (NopObserver) RecordsWritten(int) {}

// CheckpointDone does nothing.
func (NopObserver) CheckpointDone(CheckpointStats) {}

// PendingChanged does nothing.
func (NopObserver) PendingChanged(int) {}

// Pending holds prepared transactions in checkpoint order until they are
// committed or aborted. Through returns every one up to a checkpoint, in
// order: committing a checkpoint first commits the earlier ones. It is
// not safe for concurrent use.
type Pending[H any] struct {
	ids     []uint64
	handles []H
}

// Add appends h, prepared under checkpoint id; ids must increase.
func (p *Pending[H]) Add(id uint64, h H) error {
	if n := len(p.ids); n > 0 && id <= p.ids[n-1] {
		return fmt.Errorf("%w: checkpoint %d after %d: checkpoint ids must increase", ErrConfig, id, p.ids[n-1])
	}
	p.ids = append(p.ids, id)
	p.handles = append(p.handles, h)
	return nil
}

// Through returns the checkpoint ids and handles up to and including id, in
// order, without removing them.
func (p *Pending[H]) Through(id uint64) ([]uint64, []H) {
	n, _ := slices.BinarySearch(p.ids, id+1)
	if id == ^uint64(0) {
		n = len(p.ids)
	}
	return slices.Clone(p.ids[:n]), slices.Clone(p.handles[:n])
}

// Remove drops checkpoint id; it reports whether it was there.
func (p *Pending[H]) Remove(id uint64) bool {
	i, ok := slices.BinarySearch(p.ids, id)
	if !ok {
		return false
	}
	p.ids = slices.Delete(p.ids, i, i+1)
	p.handles = slices.Delete(p.handles, i, i+1)
	return true
}

// Len returns how many are pending.
func (p *Pending[H]) Len() int { return len(p.ids) }

// Last returns the highest pending checkpoint id, 0 if none.
func (p *Pending[H]) Last() uint64 {
	if len(p.ids) == 0 {
		return 0
	}
	return p.ids[len(p.ids)-1]
}
