package filelog

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/xadb/xa/xa"
)

// liveRecord is a commit or heuristic record that the log must keep: its
// frame (for reads, and for copying it forward), the segment that holds
// its newest copy, and for a heuristic its decoded form. Commit records
// are decoded when read: reads are rare, writes are not.
type liveRecord struct {
	frame     []byte
	seg       uint64
	dead      bool // forgotten, cleared or replaced
	heuristic xa.HeuristicRecord
}

// commit decodes the commit record r holds.
func (r *liveRecord) commit() (xa.CommitRecord, error) {
	var c xa.CommitRecord
	if err := c.UnmarshalBinary(r.frame[frameHeader:]); err != nil {
		return c, fmt.Errorf("filelog: decoding a live record: %w", err)
	}
	return c, nil
}

// segStat counts what a segment still holds that is live.
type segStat struct {
	size      int64
	live      int
	liveBytes int64
}

// state is the replayed log: live commits (commits minus forgets), live
// heuristics (heuristics minus clears), and per-segment accounting for
// compaction.
type state struct {
	commits    map[string]*liveRecord   // by GlobalID text
	heuristics map[string][]*liveRecord // by XID text
	segs       map[uint64]*segStat
	liveBytes  int64
}

func newState() state {
	return state{
		commits:    make(map[string]*liveRecord),
		heuristics: make(map[string][]*liveRecord),
		segs:       make(map[uint64]*segStat),
	}
}

func (s *state) seg(n uint64) *segStat {
	st := s.segs[n]
	if st == nil {
		st = &segStat{}
		s.segs[n] = st
	}
	return st
}

func (s *state) link(r *liveRecord) {
	st := s.seg(r.seg)
	st.live++
	st.liveBytes += int64(len(r.frame))
	s.liveBytes += int64(len(r.frame))
}

func (s *state) unlink(r *liveRecord) {
	if st := s.segs[r.seg]; st != nil {
		st.live--
		st.liveBytes -= int64(len(r.frame))
	}
	s.liveBytes -= int64(len(r.frame))
}

// move records that r's newest copy is now in segment to.
func (s *state) move(r *liveRecord, to uint64) {
	s.unlink(r)
	r.seg = to
	s.link(r)
}

// apply replays one record written to segment seg. frame is retained for
// live records.
func (s *state) apply(t RecordType, d *decoded, frame []byte, seg uint64) {
	switch t {
	case RecordCommit:
		k := d.key
		s.forget(k)
		r := &liveRecord{frame: frame, seg: seg}
		s.commits[k] = r
		s.link(r)
	case RecordForget:
		s.forget(d.key)
	case RecordHeuristic:
		k := d.key
		r := &liveRecord{frame: frame, seg: seg, heuristic: d.heuristic}
		s.heuristics[k] = append(s.heuristics[k], r)
		s.link(r)
	case RecordClear:
		k := d.key
		for _, r := range s.heuristics[k] {
			r.dead = true
			s.unlink(r)
		}
		delete(s.heuristics, k)
	}
}

func (s *state) forget(k string) {
	if r := s.commits[k]; r != nil {
		r.dead = true
		s.unlink(r)
		delete(s.commits, k)
	}
}

// liveCommits returns the live commit records.
func (s *state) liveCommits() []*liveRecord {
	out := make([]*liveRecord, 0, len(s.commits))
	for _, r := range s.commits {
		out = append(out, r)
	}
	return out
}

// commitList decodes live commit records, oldest (by Logged) first.
func commitList(live []*liveRecord) ([]xa.CommitRecord, error) {
	out := make([]xa.CommitRecord, 0, len(live))
	for _, r := range live {
		c, err := r.commit()
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b xa.CommitRecord) int {
		return cmp.Or(a.Logged.Compare(b.Logged), cmp.Compare(a.ID.String(), b.ID.String()))
	})
	return out, nil
}

// heuristicList returns the live heuristic records, oldest (by Time) first.
func (s *state) heuristicList() []xa.HeuristicRecord {
	var out []xa.HeuristicRecord
	for _, rs := range s.heuristics {
		for _, r := range rs {
			out = append(out, cloneHeuristic(r.heuristic))
		}
	}
	slices.SortStableFunc(out, func(a, b xa.HeuristicRecord) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.XID.String(), b.XID.String()), cmp.Compare(a.RM, b.RM))
	})
	return out
}

// plan chooses the segments to retire after a rotation to active, oldest
// first (only a prefix of the log may go, or a forget could outlive its
// commit's removal and a replay would see a gap), and the live records in
// them that must be copied forward first.
//
// A segment is retired when nothing in it is live; or when it is mostly
// dead and not the newest closed segment (whose live records are usually
// transactions still in flight, soon forgotten) and the copies stay small;
// or, whatever it holds, when there are more segments than the live data
// needs, which bounds the number of segments.
func (s *state) plan(first, active uint64, segmentSize int64) (retire []uint64, copies []*liveRecord) {
	limit := minSegments + int(2*s.liveBytes/segmentSize)
	remaining := int(active - first + 1)
	var copied int64
	for n := first; n < active; n++ {
		st := s.seg(n)
		ok := st.live == 0 || remaining > limit ||
			n+1 < active && st.liveBytes*2 <= st.size && copied+st.liveBytes <= segmentSize/2
		if !ok {
			break
		}
		retire = append(retire, n)
		copied += st.liveBytes
		remaining--
	}
	if len(retire) == 0 || copied == 0 {
		return retire, nil
	}
	last := retire[len(retire)-1]
	for _, r := range s.commits {
		if r.seg <= last {
			copies = append(copies, r)
		}
	}
	for _, rs := range s.heuristics {
		for _, r := range rs {
			if r.seg <= last {
				copies = append(copies, r)
			}
		}
	}
	// Keep the log's order among the copies, for readable dumps.
	slices.SortStableFunc(copies, func(a, b *liveRecord) int { return cmp.Compare(a.seg, b.seg) })
	return retire, copies
}

// minSegments is the number of segments the log may keep before it copies
// live records forward regardless of how live their segment is.
const minSegments = 8

func cloneHeuristic(h xa.HeuristicRecord) xa.HeuristicRecord {
	h.XID = cloneXID(h.XID)
	return h
}

func cloneXID(x xa.XID) xa.XID {
	x.Gtrid = slices.Clone(x.Gtrid)
	x.Bqual = slices.Clone(x.Bqual)
	return x
}
