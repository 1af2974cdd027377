package filelog

import (
	"context"
	"fmt"

	"github.com/xadb/xa/xa"
)

// Snapshot is a read-only view of a log, as ReadSnapshot found it: the
// state Open would rebuild, without taking the log. It implements the read
// side of xa.RecoveryLog; its writes fail with ErrReadOnly. It does not
// change when the log does.
type Snapshot struct {
	dir   string
	ident xa.LogIdentity
	st    state
	inUse bool
}

var _ xa.RecoveryLog = (*Snapshot)(nil)

// ReadSnapshot replays the log in dir, with the code Open replays it with,
// without modifying anything: it takes a shared lock when it can, and reads
// anyway while another process (a transaction manager) has the log open.
// A torn tail is left out, as Open would cut it off. Errors are those of
// Open: ErrNoLog for a directory without a log, ErrCorrupt for damage
// (nothing is read from a damaged log; Verify and Dump show it).
func ReadSnapshot(dir string) (*Snapshot, error) {
	rp, inUse, err := inspect(dir, nil)
	if err != nil {
		return nil, err
	}
	if err := rp.res.firstCorruption(); err != nil {
		return nil, err
	}
	return &Snapshot{dir: dir, ident: rp.ident, st: rp.st, inUse: inUse}, nil
}

// InUse reports whether another process had the log open when the snapshot
// was read: its newest records may since have been forgotten or joined by
// others.
func (s *Snapshot) InUse() bool { return s.inUse }

// Identity returns the log's identity.
func (s *Snapshot) Identity() xa.LogIdentity { return s.ident }

// Commits returns the live commit records, oldest first, as Log.Commits.
func (s *Snapshot) Commits(ctx context.Context) ([]xa.CommitRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return commitList(s.st.liveCommits())
}

// Lookup returns the live commit record of id, if there is one.
func (s *Snapshot) Lookup(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return xa.CommitRecord{}, false, err
	}
	return s.st.lookup(id)
}

// Aborts returns the live abort records, oldest first.
func (s *Snapshot) Aborts(ctx context.Context) ([]xa.AbortRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.st.abortList(), nil
}

// LookupAbort returns the live abort record of id, if there is one.
func (s *Snapshot) LookupAbort(ctx context.Context, id xa.GlobalID) (xa.AbortRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return xa.AbortRecord{}, false, err
	}
	a, ok := s.st.lookupAbort(id)
	return a, ok, nil
}

// Delegations returns the delegations, oldest first.
func (s *Snapshot) Delegations(ctx context.Context) ([]xa.Delegation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.st.delegationList(), nil
}

// Heuristics returns the heuristic records not cleared, oldest first.
func (s *Snapshot) Heuristics(ctx context.Context) ([]xa.HeuristicRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.st.heuristicList(), nil
}

func (s *Snapshot) readOnly(what string) error {
	return fmt.Errorf("%w: %s of %s refused", ErrReadOnly, what, s.dir)
}

// LogCommit fails with ErrReadOnly.
func (s *Snapshot) LogCommit(context.Context, xa.CommitRecord) error { return s.readOnly("commit") }

// LogDelegation fails with ErrReadOnly.
func (s *Snapshot) LogDelegation(context.Context, xa.Delegation) error {
	return s.readOnly("delegation")
}

// LogParticipant fails with ErrReadOnly.
func (s *Snapshot) LogParticipant(context.Context, xa.ParticipantRecord) error {
	return s.readOnly("participant record")
}

// Participants returns the participant records, by name.
func (s *Snapshot) Participants(ctx context.Context) ([]xa.ParticipantRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.st.participantList(), nil
}

// LogHeuristic fails with ErrReadOnly.
func (s *Snapshot) LogHeuristic(context.Context, xa.HeuristicRecord) error {
	return s.readOnly("heuristic record")
}

// Forget fails with ErrReadOnly.
func (s *Snapshot) Forget(context.Context, xa.GlobalID) error { return s.readOnly("forget") }

// LogAbort fails with ErrReadOnly.
func (s *Snapshot) LogAbort(context.Context, xa.AbortRecord) error { return s.readOnly("abort") }

// ForgetAbort fails with ErrReadOnly.
func (s *Snapshot) ForgetAbort(context.Context, xa.GlobalID) error { return s.readOnly("forget abort") }

// ClearHeuristic fails with ErrReadOnly.
func (s *Snapshot) ClearHeuristic(context.Context, string, xa.XID) error {
	return s.readOnly("clear heuristic")
}
