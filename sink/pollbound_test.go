package sink

import (
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
)

// backlogSource is one partition of n records, all buffered: a Poll
// returns every record left, or at most the LimitPoll limit (a Kafka
// client with a backlog).
type backlogSource struct {
	h     Handler
	n     int
	next  int
	limit int
	taken bool
}

func (s *backlogSource) Start(ctx context.Context, h Handler) error { s.h = h; return nil }
func (s *backlogSource) LimitPoll(n int)                            { s.limit = n }

func (s *backlogSource) Poll(ctx context.Context) ([]Record, error) {
	if !s.taken {
		pos, err := s.h.Assigned(ctx, []string{"p0"})
		if err != nil {
			return nil, err
		}
		s.taken = true
		if err := s.Seek(ctx, pos); err != nil {
			return nil, err
		}
	}
	end := s.n
	if s.limit > 0 {
		end = min(end, s.next+s.limit)
	}
	var out []Record
	for ; s.next < end; s.next++ {
		out = append(out, Record{Partition: "p0", Next: strconv.Itoa(s.next + 1)})
	}
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

func (s *backlogSource) Seek(ctx context.Context, pos map[string]string) error {
	if v := pos["p0"]; v != "" {
		s.next, _ = strconv.Atoi(v)
	} else if _, ok := pos["p0"]; ok {
		s.next = 0
	}
	return nil
}

func (s *backlogSource) Committed(context.Context, map[string]string) error { return nil }
func (s *backlogSource) Close() error                                       { return nil }

// sizes records the committed checkpoints' sizes.
type sizes struct {
	NopObserver
	mu  sync.Mutex
	got []int
}

func (o *sizes) CheckpointDone(c CheckpointStats) {
	if c.Committed {
		o.mu.Lock()
		o.got = append(o.got, c.Records)
		o.mu.Unlock()
	}
}

// TestBoundPolls: over a source whose Poll returns its whole backlog,
// the Runner with BoundPolls commits checkpoints of at most
// CheckpointRecords records (issue 18, item 1); without it, one
// checkpoint holds the backlog.
func TestBoundPolls(t *testing.T) {
	for _, bounded := range []bool{true, false} {
		f := newFake()
		obs := &sizes{}
		opts := fastOpts()
		opts.CheckpointRecords, opts.Observer = 7, obs
		var c Committer[uint64] = f
		var src Source = &backlogSource{n: 100}
		if bounded {
			c, src = BoundPolls[uint64](f, src, opts.CheckpointRecords)
		}
		if err := NewRunner[uint64](c, f, opts).Run(context.Background(), src); err != nil {
			t.Fatal(err)
		}
		f.exactlyOnce(t, 1, 100)
		largest := 0
		for _, n := range obs.got {
			largest = max(largest, n)
		}
		t.Logf("bounded %v: checkpoints of %v records", bounded, obs.got)
		if bounded && (largest > 7 || len(obs.got) != 15) {
			t.Errorf("bounded: checkpoints of %v records; want 15 of at most 7", obs.got)
		}
		if !bounded && largest != 100 {
			t.Errorf("unbounded: checkpoints of %v records; want the backlog in one (the test's source would not show a bound)", obs.got)
		}
	}
}
