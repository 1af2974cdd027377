package sqlsink

import (
	"context"
	"time"
)

// Status is what the progress target says about a sink.
type Status struct {
	Sink       string
	Partitions []PartitionStatus
	Instances  []InstanceStatus
	// Branches are the sink's prepared branches on its targets, with
	// what restore would do with each; filled by Sink.Status only.
	Branches []BranchStatus
	// Removed are the targets set up for the sink that the configuration
	// no longer has (Sink.Status only): their prepared branches are
	// neither listed nor resolved, and restore forgets no decision while
	// there is one.
	Removed []RemovedTarget
}

// PartitionStatus is one row of xa_sink_progress.
type PartitionStatus struct {
	Partition string
	// Position is where reading resumes ("" : the source's start).
	Position string
	Epoch    int64
	// Owner is the incarnation holding the epoch.
	Owner uint64
	// Checkpoint is the last checkpoint decided for the partition (the
	// caller's checkpoint id for an external member).
	Checkpoint uint64
	Updated    time.Time
}

// InstanceStatus is one row of xa_sink_instances, and how many partitions
// the incarnation owns.
type InstanceStatus struct {
	Incarnation uint64
	Started     time.Time
	Host        string
	PID         int
	Partitions  int
}

// BranchStatus is one prepared branch of the sink.
type BranchStatus struct {
	Ref      Ref
	Age      time.Duration
	Decision Decision
	Action   Action
	Why      string
}

// ReadStatus reads a sink's progress and instances from its progress
// target, without opening the other targets (Status.Branches stays empty).
func ReadStatus(ctx context.Context, progress TargetConfig, sink string) (Status, error) {
	if err := progress.validate(); err != nil {
		return Status{}, err
	}
	if err := ValidateName(sink); err != nil {
		return Status{}, err
	}
	var st Status
	err := withStore(ctx, progress, func(s store) error {
		var err error
		st, err = s.status(ctx, sink)
		return err
	})
	return st, err
}
