package sinkbench

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
)

// source is a bounded generator over some partitions of a
// gensource.Config: exactly the records gensource gives for those
// partitions (so every id in [0, Records) is in exactly one writer's
// partitions), read round-robin. It is the sink.Source of one sink
// instance, and what one baseline writer reads (next).
type source struct {
	cfg   gensource.Config
	parts []int // partition numbers
	names []string
	next  []int // per entry of parts: the next sequence number
	poll  int   // records per Poll
	limit int   // LimitPoll's; 0: none
	rr    int
	h     sink.Handler
	taken bool
}

var _ sink.Source = (*source)(nil)

var _ sink.PollLimiter = (*source)(nil)

// LimitPoll bounds the records of the following Polls to n, below poll
// (n <= 0: poll alone): the sink sets it to the room left in its open
// checkpoint, as it does for xactl's Kafka source.
func (s *source) LimitPoll(n int) { s.limit = max(n, 0) }

func newSource(cfg gensource.Config, parts []int, poll int) *source {
	s := &source{cfg: cfg, parts: parts, next: make([]int, len(parts)), poll: poll}
	for _, p := range parts {
		s.names = append(s.names, cfg.Partition(p))
	}
	return s
}

// partitionsOf returns the partitions of writer w of n: p with p % n = w.
func partitionsOf(partitions, w, n int) []int {
	var out []int
	for p := w; p < partitions; p += n {
		out = append(out, p)
	}
	return out
}

// nextRecords returns up to n records, round-robin over the partitions;
// none at the end.
func (s *source) nextRecords(n int) []sink.Record {
	per := max(1, n/len(s.parts))
	var out []sink.Record
	for i := 0; i < len(s.parts) && len(out) < n; i++ {
		j := (s.rr + i) % len(s.parts)
		p := s.parts[j]
		end := min(s.cfg.Len(p), s.next[j]+per, s.next[j]+n-len(out))
		for seq := s.next[j]; seq < end; seq++ {
			out = append(out, s.cfg.Record(p, seq))
		}
		s.next[j] = max(s.next[j], end)
	}
	s.rr = (s.rr + 1) % len(s.parts)
	return out
}

// Start records the handler: the partitions are taken at the first Poll.
func (s *source) Start(ctx context.Context, h sink.Handler) error {
	s.h = h
	return nil
}

// Poll takes the partitions at its first call, then returns up to poll
// records; io.EOF at the end.
func (s *source) Poll(ctx context.Context) ([]sink.Record, error) {
	if !s.taken {
		pos, err := s.h.Assigned(ctx, s.names)
		if err != nil {
			return nil, err
		}
		s.taken = true
		if err := s.Seek(ctx, pos); err != nil {
			return nil, err
		}
	}
	n := s.poll
	if s.limit > 0 {
		n = min(n, s.limit)
	}
	recs := s.nextRecords(n)
	if len(recs) == 0 {
		return nil, io.EOF
	}
	return recs, nil
}

// Seek sets the next record of each partition in positions.
func (s *source) Seek(ctx context.Context, positions map[string]string) error {
	for name, pos := range positions {
		j := -1
		for i, n := range s.names {
			if n == name {
				j = i
			}
		}
		if j < 0 {
			return fmt.Errorf("sinkbench: no partition %q", name)
		}
		n := 0
		if pos != "" {
			var err error
			if n, err = strconv.Atoi(pos); err != nil || n < 0 || n > s.cfg.Len(s.parts[j]) {
				return fmt.Errorf("sinkbench: partition %s: bad position %q", name, pos)
			}
		}
		s.next[j] = n
	}
	return nil
}

// Committed does nothing: the sink's progress table is the record.
func (s *source) Committed(context.Context, map[string]string) error { return nil }

// Close does nothing.
func (s *source) Close() error { return nil }
