package sqlsink

import (
	"errors"
	"fmt"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// ErrTable: a table the sink writes does not fit its Table: it is missing,
// lacks a mapped column, or an upsert's Key is not a unique key of it.
// Every *TableError matches it; Run and External refuse to start an
// instance then (see CheckTables).
var ErrTable = errors.New("sink: a table does not fit the sink's configuration")

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
	return []error{sink.ErrUnresolved, xa.ErrOutcomeUnknown, e.err}
}
