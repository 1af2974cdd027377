package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PartitionStatus is what Kafka says of one partition, for `xactl sink
// status`: the sink's lag on it is End − position, the position being the
// one in the sink's progress table.
type PartitionStatus struct {
	// Partition is "<topic>/<partition>".
	Partition string
	// Start is the offset of the oldest record still in the log.
	Start int64
	// End is the high watermark: the offset the next record written gets.
	End int64
	// Stable is the last stable offset, the end a read_committed reader
	// (the source's default) reaches: below End while a transaction is
	// open.
	Stable int64
	// Committed is the group's committed offset (the source's copy of the
	// sink's progress), -1 if the group has none.
	Committed int64
}

// Lag is End − position, position being a sink position ("" counts as
// Start: nothing read yet). A position below Start means records the sink
// never read were deleted by retention.
func (p PartitionStatus) Lag(position string) (int64, error) {
	if position == "" {
		return p.End - p.Start, nil
	}
	off, err := parsePosition(position)
	if err != nil {
		return 0, err
	}
	return p.End - off, nil
}

// Status asks Kafka for the start, end and last stable offsets of every
// partition of topics, and the group's committed offsets, with a client of
// its own (no group member). opts are more kgo options (TLS, SASL).
func Status(ctx context.Context, brokers []string, group string, topics []string, opts ...kgo.Opt) ([]PartitionStatus, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkasource: %w", err)
	}
	defer cl.Close()
	return StatusWith(ctx, kadm.NewClient(cl), group, topics...)
}

// StatusWith is Status on an admin client the caller has, sorted by
// partition.
func StatusWith(ctx context.Context, adm *kadm.Client, group string, topics ...string) ([]PartitionStatus, error) {
	if len(topics) == 0 {
		return nil, errors.New("kafkasource: status: no topics")
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafkasource: start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafkasource: end offsets: %w", err)
	}
	stables, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stables.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafkasource: last stable offsets: %w", err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafkasource: offsets of group %s: %w", group, err)
	}
	var out []PartitionStatus
	ends.Each(func(e kadm.ListedOffset) {
		ps := PartitionStatus{
			Partition: partName(e.Topic, e.Partition),
			Start:     -1,
			End:       e.Offset,
			Stable:    -1,
			Committed: -1,
		}
		if o, ok := starts.Lookup(e.Topic, e.Partition); ok {
			ps.Start = o.Offset
		}
		if o, ok := stables.Lookup(e.Topic, e.Partition); ok {
			ps.Stable = o.Offset
		}
		if o, ok := committed.Lookup(e.Topic, e.Partition); ok && o.At >= 0 {
			ps.Committed = o.At
		}
		out = append(out, ps)
	})
	sort.Slice(out, func(i, j int) bool {
		ti, pi, _ := splitName(out[i].Partition)
		tj, pj, _ := splitName(out[j].Partition)
		if ti != tj {
			return ti < tj
		}
		return pi < pj
	})
	return out, nil
}
