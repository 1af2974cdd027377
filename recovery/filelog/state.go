package filelog

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/xadb/xa/xa"
)

// liveRecord is a record that the log must keep: its frame (for reads, and
// for copying it forward), the segment that holds its newest copy, and for
// the rare kinds their decoded form. Commit records are decoded when read:
// reads are rare, writes are not, and a commit's liveRecord stays small.
type liveRecord struct {
	frame []byte
	seg   uint64
	dead  bool // forgotten, cleared or replaced
	*more      // nil for commit records
}

// more is the decoded form a liveRecord keeps of the rare kinds.
type more struct {
	heuristic  xa.HeuristicRecord
	abort      xa.AbortRecord
	delegation xa.Delegation
	part       xa.ParticipantRecord
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
// aborts (aborts minus forget-aborts), delegations (never dead), live
// heuristics (heuristics minus clears), and per-segment accounting for
// compaction. Open, the writer, ReadSnapshot, Verify and Dump all build it
// with apply, so they agree on what is live.
type state struct {
	commits     map[string]*liveRecord // by GlobalID text
	aborts      map[string]*liveRecord // by GlobalID text
	delegations map[string]*liveRecord // by participant
	parts       map[string]*liveRecord // participant records, by name
	heuristics  map[hkey][]*liveRecord // by participant and XID text
	segs        map[uint64]*segStat
	liveBytes   int64
}

func newState() state {
	return state{
		commits:     make(map[string]*liveRecord),
		aborts:      make(map[string]*liveRecord),
		delegations: make(map[string]*liveRecord),
		parts:       make(map[string]*liveRecord),
		heuristics:  make(map[hkey][]*liveRecord),
		segs:        make(map[uint64]*segStat),
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

// kill marks r dead and drops it from the accounting.
func (s *state) kill(r *liveRecord) {
	r.dead = true
	s.unlink(r)
}

// move records that r's newest copy is now in segment to.
func (s *state) move(r *liveRecord, to uint64) {
	s.unlink(r)
	r.seg = to
	s.link(r)
}

// apply replays one record written to segment seg and returns the live
// record it made, or nil when it made none (a forget or clear, or a
// repeated abort or delegation, which changes nothing). frame is retained
// for live records.
//
// A copy that compaction wrote forward is byte for byte the record it
// copies: it replaces that record, so the newest copy is the live one and
// the older is dead, in every replay.
func (s *state) apply(t RecordType, d *decoded, frame []byte, seg uint64) *liveRecord {
	switch t {
	case RecordCommit, RecordForget, RecordForgetAbort:
		return s.applyKeyed(t, d.key, frame, seg)
	case RecordHeuristic:
		r := &liveRecord{frame: frame, seg: seg, more: &more{heuristic: d.heuristic}}
		rs := s.heuristics[d.hkey]
		if i := slices.IndexFunc(rs, func(o *liveRecord) bool { return bytes.Equal(o.frame, frame) }); i >= 0 {
			s.kill(rs[i]) // a copy replaces its original
			rs[i] = r
		} else {
			s.heuristics[d.hkey] = append(rs, r)
		}
		s.link(r)
		return r
	case RecordClear:
		for _, r := range s.heuristics[d.hkey] {
			s.kill(r)
		}
		delete(s.heuristics, d.hkey)
	case RecordAbort:
		return s.applyOnce(s.aborts, d.key, &liveRecord{frame: frame, seg: seg, more: &more{abort: d.abort}})
	case RecordDelegation:
		r := &liveRecord{frame: frame, seg: seg, more: &more{delegation: d.delegation}}
		if old := s.delegations[d.key]; old != nil && old.delegation.TableID == "" && d.delegation.TableID != "" {
			// A delegation recorded before decision tables had
			// identities, completed by one that names its table.
			s.kill(old)
			delete(s.delegations, d.key)
		}
		return s.applyOnce(s.delegations, d.key, r)
	case RecordParticipant:
		return s.applyOnce(s.parts, d.key, &liveRecord{frame: frame, seg: seg, more: &more{part: d.part}})
	}
	return nil
}

// applyKeyed is apply for the records that need only their key: commit,
// forget and forget-abort.
func (s *state) applyKeyed(t RecordType, key string, frame []byte, seg uint64) *liveRecord {
	switch t {
	case RecordCommit:
		// Logging an id again replaces its record.
		s.forget(key)
		r := &liveRecord{frame: frame, seg: seg}
		s.commits[key] = r
		s.link(r)
		return r
	case RecordForget:
		s.forget(key)
	case RecordForgetAbort:
		s.forgetAbort(key)
	}
	return nil
}

// applyOnce adds r under k unless a record is live there already: then r
// replaces it if it is a copy of it, and is dead otherwise (the first
// record, with its time, stays).
func (s *state) applyOnce(m map[string]*liveRecord, k string, r *liveRecord) *liveRecord {
	if old := m[k]; old != nil {
		if !bytes.Equal(old.frame, r.frame) {
			return nil
		}
		s.kill(old)
	}
	m[k] = r
	s.link(r)
	return r
}

func (s *state) forget(k string) {
	if r := s.commits[k]; r != nil {
		s.kill(r)
		delete(s.commits, k)
	}
}

func (s *state) forgetAbort(k string) {
	if r := s.aborts[k]; r != nil {
		s.kill(r)
		delete(s.aborts, k)
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

// lookup returns the live commit record of id.
func (s *state) lookup(id xa.GlobalID) (xa.CommitRecord, bool, error) {
	r := s.commits[id.String()]
	if r == nil {
		return xa.CommitRecord{}, false, nil
	}
	c, err := r.commit()
	if err != nil {
		return xa.CommitRecord{}, false, err
	}
	return c, true, nil
}

// lookupAbort returns the live abort record of id.
func (s *state) lookupAbort(id xa.GlobalID) (xa.AbortRecord, bool) {
	r := s.aborts[id.String()]
	if r == nil {
		return xa.AbortRecord{}, false
	}
	return r.abort, true
}

// abortList returns the live abort records, oldest (by Logged) first.
func (s *state) abortList() []xa.AbortRecord {
	out := make([]xa.AbortRecord, 0, len(s.aborts))
	for _, r := range s.aborts {
		out = append(out, r.abort)
	}
	slices.SortFunc(out, func(a, b xa.AbortRecord) int {
		return cmp.Or(a.Logged.Compare(b.Logged), cmp.Compare(a.ID.String(), b.ID.String()))
	})
	return out
}

// delegationList returns the delegations, oldest first.
func (s *state) delegationList() []xa.Delegation {
	out := make([]xa.Delegation, 0, len(s.delegations))
	for _, r := range s.delegations {
		out = append(out, r.delegation)
	}
	slices.SortFunc(out, func(a, b xa.Delegation) int {
		return cmp.Or(a.Logged.Compare(b.Logged), cmp.Compare(a.Participant, b.Participant))
	})
	return out
}

// participantList returns the participant records, by name.
func (s *state) participantList() []xa.ParticipantRecord {
	out := make([]xa.ParticipantRecord, 0, len(s.parts))
	for _, r := range s.parts {
		out = append(out, r.part)
	}
	slices.SortFunc(out, func(a, b xa.ParticipantRecord) int { return cmp.Compare(a.Name, b.Name) })
	return out
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

// heuristicCount returns the number of live heuristic records.
func (s *state) heuristicCount() int {
	n := 0
	for _, rs := range s.heuristics {
		n += len(rs)
	}
	return n
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
//
// Live means commit, abort and heuristic records not forgotten or cleared,
// and every delegation and participant record: those are never dead.
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
	for _, m := range []map[string]*liveRecord{s.commits, s.aborts, s.delegations, s.parts} {
		for _, r := range m {
			if r.seg <= last {
				copies = append(copies, r)
			}
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
