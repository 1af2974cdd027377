package sink

import (
	"errors"
	"fmt"

	"github.com/xadb/xa/xa"
)

var (
	// ErrConfig: a configuration, name or argument is invalid; nothing
	// was done.
	ErrConfig = errors.New("sink: invalid configuration")

	// ErrFenced: every partition this instance wrote has been taken over
	// by another instance (its epoch moved on): the instance is a zombie
	// and stops. Run returns an error matching it. Nothing it wrote after
	// the takeover lands. An external member's Commit returns it when a
	// generation above the member's has started, whoever's handle it
	// commits: the member is a zombie, and that generation's Restore
	// finishes or fences the checkpoint. Sink.External returns it for a
	// generation below the highest registered.
	ErrFenced = errors.New("sink: fenced: every partition of this instance was taken over")

	// ErrAborted is matched by every *AbortError: a checkpoint was rolled
	// back and none of its rows land; its records are read again.
	ErrAborted = errors.New("sink: checkpoint aborted")

	// ErrTakenOver is the reason of an abort when a partition of the
	// checkpoint no longer carries the epoch and owner it was written
	// under: another instance took it over (self-driven).
	ErrTakenOver = errors.New("sink: a partition of the checkpoint was taken over")

	// ErrAbortMarked is the reason of an abort when the checkpoint's key
	// holds an abort marker: a restore fenced it (or an earlier Abort).
	ErrAbortMarked = errors.New("sink: the checkpoint holds an abort marker")

	// ErrDecided: Abort was asked for a checkpoint whose commit decision
	// is durable; it is committed instead.
	ErrDecided = errors.New("sink: the checkpoint is decided commit")

	// ErrUnresolved: the fate of a checkpoint's decision could not be
	// settled. Self-driven: the decision's reply was lost and the abort
	// marker could not be claimed either; nothing may be assumed, the
	// instance stops and a restore settles it through the fence.
	// External: the decision could not be stored; Commit may be called
	// again. It matches xa.ErrOutcomeUnknown too.
	ErrUnresolved = errors.New("sink: the checkpoint's decision is unresolved")

	// ErrClosed: the sink was closed (or abandoned by a test).
	ErrClosed = errors.New("sink: closed")

	// ErrTable: a table the sink writes does not fit its Table: it is
	// missing, lacks a mapped column, or an upsert's Key is not a unique
	// key of it. Every *TableError matches it; Run and External refuse to
	// start an instance then (see CheckTables).
	ErrTable = errors.New("sink: a table does not fit the sink's configuration")
)

// AbortError says that a checkpoint was aborted, and why. errors.Is(err,
// ErrAborted) holds, and so does errors.Is(err, reason).
type AbortError struct {
	Checkpoint uint64
	Reason     error
}

// Error says which checkpoint aborted and why.
func (e *AbortError) Error() string {
	return fmt.Sprintf("sink: checkpoint %d aborted: %v", e.Checkpoint, e.Reason)
}

// Unwrap returns ErrAborted and the reason.
func (e *AbortError) Unwrap() []error { return []error{ErrAborted, e.Reason} }

// MappingError is a record the mapping refused (or a row that does not fit
// its table). The checkpoint holding it aborts like any other failed write.
type MappingError struct {
	Partition string
	Position  string // the record's Next
	Err       error
}

// Error names the record and the mapping's error.
func (e *MappingError) Error() string {
	return fmt.Sprintf("sink: mapping the record of %s before position %s: %v", e.Partition, e.Position, e.Err)
}

// Unwrap returns the mapping's error.
func (e *MappingError) Unwrap() error { return e.Err }

// unresolvedError carries ErrUnresolved and the last error seen.
type unresolvedError struct {
	checkpoint uint64
	err        error
}

func (e *unresolvedError) Error() string {
	return fmt.Sprintf("sink: checkpoint %d: decision unresolved: %v", e.checkpoint, e.err)
}

func (e *unresolvedError) Unwrap() []error {
	return []error{ErrUnresolved, xa.ErrOutcomeUnknown, e.err}
}
