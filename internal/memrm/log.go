package memrm

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/xadb/xa/xa"
)

// Log is an in-memory decision log for protocol tests: "durable" means
// stored in the map. Kill makes every later write fail without effect, as
// when the process writing it has died.
type Log struct {
	mu      sync.Mutex
	records map[string]xa.CommitRecord
	dead    bool
	// Writes counts LogCommit calls that stored a record.
	Writes int
}

// NewLog returns an empty log.
func NewLog() *Log { return &Log{records: map[string]xa.CommitRecord{}} }

// ErrDead is returned by a killed log.
var ErrDead = errors.New("memrm: log writer is dead")

// Kill makes later LogCommit and Forget calls fail; stored records stay.
func (l *Log) Kill() {
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
}

// Revive undoes Kill, as a restarted process reopening the log.
func (l *Log) Revive() {
	l.mu.Lock()
	l.dead = false
	l.mu.Unlock()
}

// LogCommit implements xa.DecisionLog.
func (l *Log) LogCommit(_ context.Context, rec xa.CommitRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return ErrDead
	}
	l.records[rec.ID.String()] = rec
	l.Writes++
	return nil
}

// Forget implements xa.DecisionLog.
func (l *Log) Forget(_ context.Context, id xa.GlobalID) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return ErrDead
	}
	delete(l.records, id.String())
	return nil
}

// Lookup returns the record of id.
func (l *Log) Lookup(_ context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[id.String()]
	return r, ok, nil
}

// Commits returns every record, oldest first.
func (l *Log) Commits(context.Context) ([]xa.CommitRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]xa.CommitRecord, 0, len(l.records))
	for _, r := range l.records {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Logged.Before(out[j].Logged) })
	return out, nil
}
