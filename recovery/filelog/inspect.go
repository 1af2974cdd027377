package filelog

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/xadb/xa/xa"
)

// Report is what Verify found.
type Report struct {
	Dir string
	// Identity is the log's identity, when IDENTITY is sound (zero
	// otherwise: Corruption then says why).
	Identity xa.LogIdentity
	// InUse is set when another process had the log open during the
	// check: a torn tail may then be a write in progress.
	InUse bool
	// Head is what HEAD says, or nil when it is missing (a log of
	// segment format version 2) or damaged (Corruption then says so).
	Head     *Head
	Segments []SegmentReport
	Records  RecordCounts // valid records, by type, dead ones included (sync marks apart)
	// SyncMarks counts the sync marks (see the format); they hold no
	// decision and are not in Records or in the segments' counts.
	SyncMarks      int
	LiveCommits    int // commit records not forgotten
	LiveAborts     int // abort records not forgotten
	Delegations    int // participants delegated to
	LiveHeuristics int // heuristic records not cleared
	// TornTail is the incomplete write at the end of the last segment
	// that Open would cut off, or nil.
	TornTail *TornTail
	// Corruption lists every damaged spot that is not a torn tail, a
	// missing or damaged IDENTITY first. Open refuses a log with any.
	Corruption []CorruptError
}

// SegmentReport describes one segment file.
type SegmentReport struct {
	File    string
	Number  uint64
	Size    int64
	Records int // valid records, sync marks apart
}

// RecordCounts counts records by type.
type RecordCounts struct {
	Commit, Forget, Heuristic, Clear, Abort, ForgetAbort, Delegation, Participant int
	// Link counts link records, one at the start of every segment but
	// the first; they hold no decision.
	Link int
}

func (c *RecordCounts) add(t RecordType) {
	switch t {
	case RecordCommit:
		c.Commit++
	case RecordForget:
		c.Forget++
	case RecordHeuristic:
		c.Heuristic++
	case RecordClear:
		c.Clear++
	case RecordAbort:
		c.Abort++
	case RecordForgetAbort:
		c.ForgetAbort++
	case RecordDelegation:
		c.Delegation++
	case RecordParticipant:
		c.Participant++
	case RecordLink:
		c.Link++
	}
}

// Total returns the number of records counted.
func (c RecordCounts) Total() int {
	return c.Commit + c.Forget + c.Heuristic + c.Clear + c.Abort + c.ForgetAbort + c.Delegation + c.Participant + c.Link
}

// Entry is one valid record, as Dump shows it.
type Entry struct {
	Segment uint64 // 0 for the identity
	File    string
	Offset  int64 // of the record's frame in File
	Size    int   // of the frame
	Type    RecordType
	// Live says whether the record is part of the log's final state: a
	// commit, abort or heuristic record not forgotten, cleared or
	// replaced, a delegation (the first of a participant, or the first
	// that names its table), a participant record (the first of a name),
	// the identity.
	// Of a record that compaction copied forward, only the newest copy is
	// live. Open, ReadSnapshot and Dump compute it with the same replay.
	// Forget, clear, link and synced records are never live.
	Live        bool
	Identity    xa.LogIdentity       // RecordIdentity
	Commit      xa.CommitRecord      // RecordCommit
	ID          xa.GlobalID          // RecordCommit, RecordForget, RecordAbort, RecordForgetAbort
	Heuristic   xa.HeuristicRecord   // RecordHeuristic
	XID         xa.XID               // RecordHeuristic and RecordClear
	RM          string               // RecordHeuristic and RecordClear: the participant
	Abort       xa.AbortRecord       // RecordAbort
	Delegation  xa.Delegation        // RecordDelegation
	Participant xa.ParticipantRecord // RecordParticipant
	Link        Link                 // RecordLink: the previous segment and its length
	Synced      int64                // RecordSynced: every byte of the segment before it had been synced
}

// Verify checks the log in dir without modifying anything and reports what
// replay would find. It takes a shared lock on the log when it can (so an
// Open waits out the check by failing with ErrLocked); when a Log holds the
// log open it reads anyway and sets Report.InUse.
//
// The error wraps ErrCorrupt (as a *CorruptError for the first damaged
// spot) when Report.Corruption is not empty; the report is complete then
// too. It wraps ErrNoLog when dir holds no log (and fs.ErrNotExist when dir
// is missing). Other errors mean the log could not be read.
func Verify(dir string) (Report, error) {
	r := Report{Dir: dir}
	rp, inUse, err := inspect(dir, func(_ uint64, _ string, _ int64, t RecordType, _ *decoded, _ []byte, _ *liveRecord) {
		if t == RecordSynced {
			r.SyncMarks++
		}
		r.Records.add(t)
	})
	r.InUse = inUse
	if err != nil {
		return r, err
	}
	r.Identity = rp.ident
	r.Head = rp.head
	for _, s := range rp.res.segments {
		r.Segments = append(r.Segments, SegmentReport{File: s.name, Number: s.num, Size: s.size, Records: s.records})
	}
	r.LiveCommits = len(rp.st.commits)
	r.LiveAborts = len(rp.st.aborts)
	r.Delegations = len(rp.st.delegations)
	r.LiveHeuristics = rp.st.heuristicCount()
	r.TornTail = rp.res.torn
	r.Corruption = rp.res.corrupt
	return r, rp.res.firstCorruption()
}

// Dump calls fn for the identity (an Entry of type RecordIdentity, when
// IDENTITY is sound) and then for every valid record of the log in dir but
// the sync marks (DumpAll shows them too), in log order, each marked Live or not by the replay Open does, without
// modifying anything (locking as Verify does). It reads the whole log
// before the first call. It stops at the first error from fn and returns
// it. Records past a corrupt spot are shown too; Dump then returns an
// error wrapping ErrCorrupt at the end. A torn tail is not an error (Verify
// reports it).
func Dump(dir string, fn func(Entry) error) error {
	return dump(dir, false, fn)
}

// DumpAll is Dump with the sync marks (entries of type RecordSynced), which
// hold no decision: each says up to which offset of its segment everything
// had been synced when it was written.
func DumpAll(dir string, fn func(Entry) error) error {
	return dump(dir, true, fn)
}

func dump(dir string, marks bool, fn func(Entry) error) error {
	var entries []Entry
	var live []*liveRecord
	rp, _, err := inspect(dir, func(seg uint64, name string, off int64, t RecordType, d *decoded, frame []byte, r *liveRecord) {
		if t == RecordSynced && !marks {
			return
		}
		entries = append(entries, Entry{
			Segment: seg, File: name, Offset: off, Size: len(frame), Type: t,
			Commit: d.commit, ID: d.id, Heuristic: d.heuristic, XID: d.xid, RM: d.rm,
			Abort: d.abort, Delegation: d.delegation, Participant: d.part, Link: d.link,
			Synced: d.synced,
		})
		live = append(live, r)
	})
	if err != nil {
		return err
	}
	if rp.hasIdent {
		e := Entry{File: identityName, Size: rp.identLen, Type: RecordIdentity, Live: true, Identity: rp.ident}
		if err := fn(e); err != nil {
			return err
		}
	}
	for i, e := range entries {
		e.Live = live[i] != nil && !live[i].dead
		if err := fn(e); err != nil {
			return err
		}
	}
	return rp.res.firstCorruption()
}

// inspect replays the log in dir under a shared lock when it can get one,
// and reports whether another process had the log open.
func inspect(dir string, fn recordFunc) (*replayed, bool, error) {
	if err := statLogDir(dir); err != nil {
		return nil, false, err
	}
	lock, inUse, err := lockShared(dir)
	if err != nil {
		return nil, false, err
	}
	if lock != nil {
		defer lock.Close()
	}
	// A log another process has open changes under the reader: a
	// compaction may write HEAD and remove segments between the reading
	// of HEAD and the listing, or remove a segment before it is read.
	// What looks like damage then is the reader's torn view: read again,
	// a few times, before reporting it.
	for attempt := 1; ; attempt++ {
		type visit struct {
			seg   uint64
			name  string
			off   int64
			t     RecordType
			d     *decoded
			frame []byte
			live  *liveRecord
		}
		var visits []visit
		var record recordFunc
		if fn != nil {
			record = func(seg uint64, name string, off int64, t RecordType, d *decoded, frame []byte, live *liveRecord) {
				visits = append(visits, visit{seg, name, off, t, d, frame, live})
			}
		}
		rp, err := replayLog(dir, record)
		torn := err != nil && errors.Is(err, fs.ErrNotExist) || err == nil && len(rp.res.corrupt) > 0
		if inUse && torn && attempt < inUseAttempts {
			time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
			continue
		}
		for _, v := range visits {
			fn(v.seg, v.name, v.off, v.t, v.d, v.frame, v.live)
		}
		if err != nil && inUse && errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("filelog: the log changed while it was read (another process has it open); try again: %w", err)
		}
		return rp, inUse, err
	}
}

// inUseAttempts is how many times a log another process has open is read
// before what looks like damage is reported.
const inUseAttempts = 5
