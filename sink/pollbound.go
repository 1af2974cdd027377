package sink

import (
	"context"
	"sync/atomic"
)

// DefaultCheckpointRecords is RunOptions.CheckpointRecords' default.
const DefaultCheckpointRecords = 10000

// BoundPolls returns c and src wrapped so that the Runner's checkpoints
// never hold more than records records (0: DefaultCheckpointRecords) when
// src is a PollLimiter: before each Poll, the source is limited to what
// the open checkpoint still has room for. The Runner pre-commits a
// checkpoint as soon as it holds records records, so the room is never 0
// when it polls; the count is the records written into the checkpoint
// begun last, and starts again at Begin and PreCommit. (A checkpoint
// aborted while open leaves its count until the next Begin, which only
// makes the next Poll smaller, never larger.) Pass the wrapped values to
// NewRunner and Run; the wrapped source forwards everything else to src.
func BoundPolls[H any](c Committer[H], src Source, records int) (Committer[H], Source) {
	if records <= 0 {
		records = DefaultCheckpointRecords
	}
	l, ok := src.(PollLimiter)
	if !ok {
		return c, src
	}
	b := &bound{limit: records}
	return boundCommitter[H]{Committer: c, b: b}, boundSource{Source: src, l: l, b: b}
}

// bound counts the records of the open checkpoint.
type bound struct {
	limit int
	open  atomic.Int64
}

// room is what the next Poll may return: at least 1.
func (b *bound) room() int {
	return max(b.limit-int(b.open.Load()), 1)
}

type boundCommitter[H any] struct {
	Committer[H]
	b *bound
}

func (c boundCommitter[H]) Begin(ctx context.Context, checkpoint uint64) (H, error) {
	c.b.open.Store(0)
	return c.Committer.Begin(ctx, checkpoint)
}

func (c boundCommitter[H]) Write(ctx context.Context, h H, records []Record) error {
	c.b.open.Add(int64(len(records)))
	return c.Committer.Write(ctx, h, records)
}

func (c boundCommitter[H]) PreCommit(ctx context.Context, h H, id uint64) (H, error) {
	c.b.open.Store(0)
	return c.Committer.PreCommit(ctx, h, id)
}

type boundSource struct {
	Source
	l PollLimiter
	b *bound
}

func (s boundSource) Poll(ctx context.Context) ([]Record, error) {
	s.l.LimitPoll(s.b.room())
	return s.Source.Poll(ctx)
}
