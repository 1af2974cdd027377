package sink

import (
	"context"
	"time"
)

// Record is one record of a source.
type Record struct {
	// Partition names the record's partition ("events/3": topic and
	// partition; a file's path; a generator stream).
	Partition string
	// Next is the partition's position after this record: where reading
	// resumes once the record is durable in the targets. Positions are
	// opaque to the sink (a Kafka offset in decimal, a byte offset).
	Next string
	Key  []byte
	// Value is the payload the mapping turns into rows.
	Value []byte
	Time  time.Time
}

// Source is a replayable stream of records, split into partitions, each
// of which can be read again from a position. It is consumed by one
// goroutine of the sink: Poll, Seek and Committed are never called
// concurrently, and the Handler's methods are called only from within Poll
// (as Kafka clients deliver rebalances).
//
// A bounded source (a file, a generator) ends: once every assigned
// partition has been read to its end, Poll returns io.EOF (with no
// records); the sink then commits what it holds and returns. After Seek,
// Poll reads again. An unbounded source (Kafka) never returns io.EOF.
type Source interface {
	// Start begins reading; h is told which partitions this instance
	// reads. A source without groups (a generator, a file) calls
	// h.Assigned once, from the first Poll, with every partition.
	Start(ctx context.Context, h Handler) error
	// Poll returns the next records of the assigned partitions, waiting
	// at most until ctx ends (then it returns what it has, maybe none, and
	// ctx's error only if it has none). Records of one partition come in
	// order.
	Poll(ctx context.Context) ([]Record, error)
	// Seek makes the following Polls return the records of each
	// partition in positions from that position on (an empty position:
	// from the source's start), forgetting whatever was read past it.
	// The sink calls it after an aborted checkpoint, with the positions
	// of the last committed one, so that the aborted records are read
	// again. Partitions not in positions are unaffected.
	Seek(ctx context.Context, positions map[string]string) error
	// Committed reports that every record before positions[p] is durable
	// in the targets, for each partition p. A source with its own record
	// of progress (a Kafka group's committed offsets) updates it; the
	// sink's progress table stays the truth.
	Committed(ctx context.Context, positions map[string]string) error
	// Close stops reading and leaves the group, if any.
	Close() error
}

// Handler receives partition assignments from a Source.
type Handler interface {
	// Assigned hands partitions to this instance. The sink takes them
	// over (raises their epochs, resolves orphans) and returns where each
	// must be read from: the source seeks there before it returns records
	// of that partition. A partition missing from the map is read from the
	// source's start.
	Assigned(ctx context.Context, partitions []string) (positions map[string]string, err error)
	// Revoked takes partitions away. Before it returns, the sink has
	// committed or aborted every checkpoint that holds records of them, so
	// the next owner can take them over at once.
	Revoked(ctx context.Context, partitions []string) error
}

// LostHandler is implemented by a Handler that wants to be told that
// partitions were lost rather than revoked: the instance was thrown out of
// its group, another instance may own them already, so the checkpoints
// holding their records can only be aborted (they could not be decided
// anyway: their epochs moved on). A Source with groups calls Lost when the
// handler has it, Revoked otherwise; no record of a lost partition is
// returned after it. The sink's Runner implements it.
type LostHandler interface {
	Lost(ctx context.Context, partitions []string) error
}

// PollLimiter is implemented by a Source whose Poll can be told to return
// fewer records: after LimitPoll(n), with n > 0, no Poll returns more than
// n records until the limit changes (0: no limit but the source's own).
// The Runner's records bound (BoundPolls) uses it, so that a checkpoint
// never holds more than RunOptions.CheckpointRecords records, nor the
// instance more in memory, whatever backlog the source has buffered. A
// Source without it returns what it returns, and a checkpoint may then
// pass CheckpointRecords by one Poll's records.
type PollLimiter interface {
	LimitPoll(n int)
}
