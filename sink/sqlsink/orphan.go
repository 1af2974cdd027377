package sqlsink

import "time"

// Decision is what the progress target holds under a checkpoint's key.
type Decision int

const (
	// NoDecision: neither a commit decision nor an abort marker.
	NoDecision Decision = iota
	// DecidedCommit: the decision row; the checkpoint committed.
	DecidedCommit
	// DecidedAbort: an abort marker; the checkpoint can never commit.
	DecidedAbort
)

// String names the decision.
func (d Decision) String() string {
	switch d {
	case NoDecision:
		return "undecided"
	case DecidedCommit:
		return "decided commit"
	case DecidedAbort:
		return "abort marker"
	}
	return "Decision(invalid)"
}

// Action is what restore does with a prepared branch of its sink.
type Action int

const (
	// Leave the branch to its owner (or to a later restore).
	ActLeave Action = iota
	// Commit the branch: its checkpoint is decided.
	ActCommit
	// Rollback the branch: an abort marker holds its key.
	ActRollback
	// Fence the branch: claim the abort marker, then roll it back; if
	// the claim finds the decision instead, commit it.
	ActFence
)

// String names the action.
func (a Action) String() string {
	switch a {
	case ActLeave:
		return "leave"
	case ActCommit:
		return "commit"
	case ActRollback:
		return "roll back"
	case ActFence:
		return "fence and roll back"
	}
	return "Action(invalid)"
}

// Orphan is a prepared branch found by restore, with what the progress
// target says about its checkpoint.
type Orphan struct {
	Ref      Ref
	Decision Decision
	// Age is how long the branch is known to have been prepared: by the
	// database's clock where it says (PostgreSQL), else since this
	// process first saw it listed (MySQL keeps no prepare time).
	Age time.Duration
}

// View is what restore knows about the instances when it classifies.
type View struct {
	// External selects the externally driven rules (Restore); else the
	// self-driven ones (takeover and periodic sweeps).
	External bool

	// Self-driven: this instance's incarnation, whether a checkpoint of
	// it is still in flight (never touched), whether an incarnation owns
	// at least one partition in the progress table, and the restore
	// grace.
	Incarnation uint64
	InFlight    func(checkpoint uint64) bool
	Owns        func(incarnation uint64) bool
	Grace       time.Duration

	// External: the generation restoring and the checkpoint id it
	// restored from.
	Generation uint32
	Restored   uint64
}

// Classify returns what restore does with o, and why. It is restore's
// decision table (docs/sink.md, "Restore and ownership"):
//
//	self-driven, this incarnation's, in flight -> leave (it finishes it)
//	decision row                              -> commit
//	abort marker                              -> roll back
//	self-driven:
//	  an external member's branch             -> leave
//	  this incarnation's, not in flight       -> fence
//	  its incarnation owns no partition       -> fence (it can never be decided)
//	  older than the grace                    -> fence
//	  otherwise (young, of a live instance)   -> leave
//	external (Restore of generation g from checkpoint n):
//	  a self-driven instance's branch         -> leave
//	  of generation < g, numbered above n     -> fence (no restored state names it)
//	  otherwise                               -> leave (a restored state may name it)
//
// Fencing is always safe: the abort marker and the decision exclude each
// other under one key. The rules only decide when it is worth disturbing.
func Classify(o Orphan, v View) (Action, string) {
	if !v.External && !o.Ref.External() && o.Ref.Incarnation == v.Incarnation && v.InFlight != nil && v.InFlight(o.Ref.Checkpoint) {
		// Its instance is this one, which finishes it (it may be in
		// phase two right now).
		return ActLeave, "this instance's checkpoint in flight"
	}
	switch o.Decision {
	case DecidedCommit:
		return ActCommit, "its checkpoint is decided"
	case DecidedAbort:
		return ActRollback, "its checkpoint holds an abort marker"
	}
	if v.External {
		switch {
		case !o.Ref.External():
			return ActLeave, "a self-driven instance's branch: its own restore handles it"
		case o.Ref.Generation() >= v.Generation:
			return ActLeave, "of this generation or a later one"
		case o.Ref.Checkpoint <= v.Restored:
			return ActLeave, "begun before the restored checkpoint: a restored state names it"
		}
		return ActFence, "of an earlier generation, begun after the restored checkpoint: no restored state names it"
	}
	switch {
	case o.Ref.External():
		return ActLeave, "an external member's branch: only its Restore fences it"
	case o.Ref.Incarnation == v.Incarnation:
		return ActFence, "this instance's, no longer in flight"
	case v.Owns != nil && !v.Owns(o.Ref.Incarnation):
		return ActFence, "its instance owns no partition: it can never be decided"
	case v.Grace > 0 && o.Age >= v.Grace:
		return ActFence, "older than the restore grace"
	}
	return ActLeave, "young, of an instance that owns partitions"
}
