// Package gensource is a generator sink.Source for tests, benchmarks and
// the demo: M records with unique keys over K partitions, deterministic
// and replayable from any position.
//
// Partition p (named "<prefix>/<p>") holds the records with ids p, p+K,
// p+2K, ... below M; its i-th record (i from 0) has id i*K+p, key the id in
// decimal, value {"id":<id>,"p":<p>,"seq":<i>,"v":"<payload>"} and time
// Base + id milliseconds; the position after it is i+1 in decimal. So every
// id in [0, M) appears exactly once, and a partition read again from a
// position yields the same records.
package gensource

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/xadb/xa/sink"
)

// Base is the time of record 0.
var Base = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Config describes the records.
type Config struct {
	// Records is M, the number of records over all partitions.
	Records int
	// Partitions is K (default 1).
	Partitions int
	// Batch bounds the records of one Poll (default 500).
	Batch int
	// Prefix names the partitions (default "gen").
	Prefix string
	// Payload is the length of the value's "v" field (default 0).
	Payload int
}

func (c Config) withDefaults() Config {
	if c.Partitions <= 0 {
		c.Partitions = 1
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.Prefix == "" {
		c.Prefix = "gen"
	}
	return c
}

// Source generates the records of a Config. It implements sink.Source.
type Source struct {
	cfg       Config
	h         sink.Handler
	assigned  bool
	next      []int // per partition: the next sequence number
	rr        int   // round-robin start
	committed map[string]string
	payload   string
	limit     int // LimitPoll's; 0: none
}

var _ sink.Source = (*Source)(nil)

// Limitable returns the source as a sink.PollLimiter: the sink then
// bounds each Poll, below Batch, by the room left in its open checkpoint,
// so that no checkpoint holds more than its CheckpointRecords (xactl
// builds its sources so). The Source itself is not one: its Polls return
// Batch records whatever the checkpoint holds.
func (s *Source) Limitable() sink.Source { return limitable{s} }

// limitable is a Source that is a sink.PollLimiter.
type limitable struct{ *Source }

var _ sink.PollLimiter = limitable{}

// LimitPoll bounds the records of the following Polls to n, below Batch
// (n <= 0: Batch alone); see sink.PollLimiter.
func (l limitable) LimitPoll(n int) { l.limit = max(n, 0) }

// New returns a Source of cfg.
func New(cfg Config) *Source {
	cfg = cfg.withDefaults()
	return &Source{cfg: cfg, next: make([]int, cfg.Partitions), committed: map[string]string{},
		payload: strings.Repeat("x", cfg.Payload)}
}

// Partition returns the name of partition p.
func (c Config) Partition(p int) string {
	return c.withDefaults().Prefix + "/" + strconv.Itoa(p)
}

// Len returns how many records partition p holds.
func (c Config) Len(p int) int {
	c = c.withDefaults()
	n := c.Records / c.Partitions
	if p < c.Records%c.Partitions {
		n++
	}
	return n
}

// Record returns record seq of partition p.
func (c Config) Record(p, seq int) sink.Record {
	return c.withDefaults().record(p, seq, strings.Repeat("x", c.Payload))
}

func (c Config) record(p, seq int, payload string) sink.Record {
	id := seq*c.Partitions + p
	key := strconv.Itoa(id)
	return sink.Record{
		Partition: c.Partition(p),
		Next:      strconv.Itoa(seq + 1),
		Key:       []byte(key),
		Value:     fmt.Appendf(nil, `{"id":%d,"p":%d,"seq":%d,"v":"%s"}`, id, p, seq, payload),
		Time:      Base.Add(time.Duration(id) * time.Millisecond),
	}
}

// Start records the handler; the partitions are assigned at the first
// Poll.
func (s *Source) Start(ctx context.Context, h sink.Handler) error {
	s.h = h
	return nil
}

// Poll assigns every partition at its first call, then returns up to
// Batch records, taken round-robin from the partitions; io.EOF once every
// partition is read to its end.
func (s *Source) Poll(ctx context.Context) ([]sink.Record, error) {
	if !s.assigned {
		parts := make([]string, s.cfg.Partitions)
		for p := range parts {
			parts[p] = s.cfg.Partition(p)
		}
		pos, err := s.h.Assigned(ctx, parts)
		if err != nil {
			return nil, err
		}
		s.assigned = true
		if err := s.Seek(ctx, pos); err != nil {
			return nil, err
		}
	}
	batch := s.cfg.Batch
	if s.limit > 0 {
		batch = min(batch, s.limit)
	}
	per := max(1, batch/s.cfg.Partitions)
	var out []sink.Record
	for i := 0; i < s.cfg.Partitions && len(out) < batch; i++ {
		p := (s.rr + i) % s.cfg.Partitions
		end := min(s.cfg.Len(p), s.next[p]+per, s.next[p]+batch-len(out))
		for seq := s.next[p]; seq < end; seq++ {
			out = append(out, s.cfg.record(p, seq, s.payload))
		}
		s.next[p] = max(s.next[p], end)
	}
	s.rr = (s.rr + 1) % s.cfg.Partitions
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

// Seek sets the next record of each partition in positions ("" : the
// first).
func (s *Source) Seek(ctx context.Context, positions map[string]string) error {
	for name, pos := range positions {
		p, err := s.partition(name)
		if err != nil {
			return err
		}
		n := 0
		if pos != "" {
			n, err = strconv.Atoi(pos)
			if err != nil || n < 0 || n > s.cfg.Len(p) {
				return fmt.Errorf("gensource: partition %s: bad position %q", name, pos)
			}
		}
		s.next[p] = n
	}
	return nil
}

func (s *Source) partition(name string) (int, error) {
	prefix, num, ok := strings.Cut(name, "/")
	p, err := strconv.Atoi(num)
	if !ok || prefix != s.cfg.Prefix || err != nil || p < 0 || p >= s.cfg.Partitions || s.cfg.Partition(p) != name {
		return 0, fmt.Errorf("gensource: no partition %q", name)
	}
	return p, nil
}

// Committed remembers the positions (see Acknowledged).
func (s *Source) Committed(ctx context.Context, positions map[string]string) error {
	maps.Copy(s.committed, positions)
	return nil
}

// Acknowledged returns the positions the sink reported committed.
func (s *Source) Acknowledged() map[string]string { return maps.Clone(s.committed) }

// Close does nothing.
func (s *Source) Close() error { return nil }
