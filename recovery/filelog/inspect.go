package filelog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/xadb/xa/xa"
)

// Report is what Verify found.
type Report struct {
	Dir string
	// InUse is set when another process had the log open during the
	// check: a torn tail may then be a write in progress.
	InUse          bool
	Segments       []SegmentReport
	Records        RecordCounts // valid records, by type, dead ones included
	LiveCommits    int          // commit records not forgotten
	LiveHeuristics int          // heuristic records not cleared
	// TornTail is the incomplete write at the end of the last segment
	// that Open would cut off, or nil.
	TornTail *TornTail
	// Corruption lists every damaged spot that is not a torn tail. Open
	// refuses a log with any.
	Corruption []CorruptError
}

// SegmentReport describes one segment file.
type SegmentReport struct {
	File    string
	Number  uint64
	Size    int64
	Records int // valid records
}

// RecordCounts counts records by type.
type RecordCounts struct {
	Commit, Forget, Heuristic, Clear int
}

// Entry is one valid record, as Dump shows it.
type Entry struct {
	Segment   uint64
	File      string
	Offset    int64 // of the record's frame in File
	Size      int   // of the frame
	Type      RecordType
	Commit    xa.CommitRecord    // Type == RecordCommit
	ID        xa.GlobalID        // RecordCommit and RecordForget
	Heuristic xa.HeuristicRecord // RecordHeuristic
	XID       xa.XID             // RecordHeuristic and RecordClear
}

// Verify checks the log in dir without modifying anything and reports what
// replay would find. It takes a shared lock on the log when it can (so an
// Open waits out the check by failing with ErrLocked); when a Log holds the
// log open it reads anyway and sets Report.InUse.
//
// The error wraps ErrCorrupt (as a *CorruptError for the first damaged
// spot) when Report.Corruption is not empty; the report is complete then
// too. Other errors mean the log could not be read.
func Verify(dir string) (Report, error) {
	r := Report{Dir: dir}
	st := newState()
	res, inUse, err := inspect(dir, func(seg uint64, _ string, _ int64, t RecordType, d decoded, _ []byte) error {
		switch t {
		case RecordCommit:
			r.Records.Commit++
		case RecordForget:
			r.Records.Forget++
		case RecordHeuristic:
			r.Records.Heuristic++
		case RecordClear:
			r.Records.Clear++
		}
		st.apply(t, &d, nil, seg)
		return nil
	})
	r.InUse = inUse
	if err != nil {
		return r, err
	}
	for _, s := range res.segments {
		r.Segments = append(r.Segments, SegmentReport{File: s.name, Number: s.num, Size: s.size, Records: s.records})
	}
	r.LiveCommits = len(st.commits)
	for _, hs := range st.heuristics {
		r.LiveHeuristics += len(hs)
	}
	r.TornTail = res.torn
	r.Corruption = res.corrupt
	return r, res.firstCorruption()
}

// Dump calls fn for every valid record of the log in dir, in log order,
// without modifying anything (locking as Verify does). It stops at the
// first error from fn and returns it. Records past a corrupt spot are shown
// too; Dump then returns an error wrapping ErrCorrupt at the end. A torn
// tail is not an error (Verify reports it).
func Dump(dir string, fn func(Entry) error) error {
	res, _, err := inspect(dir, func(seg uint64, name string, off int64, t RecordType, d decoded, frame []byte) error {
		return fn(Entry{
			Segment: seg, File: name, Offset: off, Size: len(frame), Type: t,
			Commit: d.commit, ID: d.id, Heuristic: d.heuristic, XID: d.xid,
		})
	})
	if err != nil {
		return err
	}
	return res.firstCorruption()
}

func inspect(dir string, visit visitFunc) (scanResult, bool, error) {
	if _, err := os.Stat(dir); err != nil {
		return scanResult{}, false, fmt.Errorf("filelog: %w", err)
	}
	lock, inUse, err := lockShared(dir)
	if err != nil {
		return scanResult{}, false, err
	}
	if lock != nil {
		defer lock.Close()
	}
	res, err := scanLog(dir, visit)
	if err != nil && inUse && errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("filelog: the log changed while it was read (another process has it open); try again: %w", err)
	}
	return res, inUse, err
}
