package filelog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/xadb/xa/xa"
)

// CorruptError describes damage that is not a torn tail. It matches
// ErrCorrupt with errors.Is.
type CorruptError struct {
	File   string // segment file name (or IDENTITY), relative to the log directory
	Offset int64  // byte offset of the bad header or record
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("filelog: corrupt log: %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// TornTail describes an incomplete write at the end of the last segment:
// the bytes from Offset to the end of File were never acknowledged to any
// caller and are cut off by Open.
type TornTail struct {
	File   string
	Offset int64  // where the valid records end
	Bytes  int64  // how many bytes follow
	Reason string // what was found at Offset
}

// segmentScan is what scanning learned about one segment.
type segmentScan struct {
	num     uint64
	name    string
	size    int64 // file size
	end     int64 // end of the last valid record (or of the header)
	records int
}

type scanResult struct {
	segments []segmentScan
	torn     *TornTail
	corrupt  []CorruptError
	tmpFiles []string // leftovers of an interrupted segment or identity creation
}

// visitFunc sees each valid record in log order; frame is the whole framed
// record and is only valid during the call.
type visitFunc func(seg uint64, name string, off int64, t RecordType, d decoded, frame []byte) error

// listSegments returns the segment numbers in dir in ascending order and
// the names of leftover temporary files.
func listSegments(dir string) (nums []uint64, tmp []string, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("filelog: reading %s: %w", dir, err)
	}
	for _, de := range des {
		if n, ok := parseSegmentName(de.Name()); ok {
			nums = append(nums, n)
		} else if strings.HasSuffix(de.Name(), ".wal.tmp") || de.Name() == identityName+".tmp" {
			tmp = append(tmp, de.Name())
		}
	}
	slices.Sort(nums)
	return nums, tmp, nil
}

// scanLog reads every segment of dir in order, calling visit for each valid
// record, and classifies every bad spot as a torn tail or corruption. It
// never modifies anything. Scanning continues after corruption (records
// found past it are visited too), so that Verify and Dump show everything.
func scanLog(dir string, visit visitFunc) (scanResult, error) {
	var res scanResult
	nums, tmp, err := listSegments(dir)
	if err != nil {
		return res, err
	}
	res.tmpFiles = tmp
	for i, n := range nums {
		name := segmentName(n)
		last := i == len(nums)-1
		if i > 0 && n != nums[i-1]+1 {
			missing := nums[i-1] + 1
			res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: 0,
				Reason: fmt.Sprintf("segment %s is missing", segmentName(missing))})
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return res, fmt.Errorf("filelog: reading segment: %w", err)
		}
		seg := segmentScan{num: n, name: name, size: int64(len(b)), end: min(int64(len(b)), headerSize)}
		off := headerSize
		if bad := checkHeader(b, n); bad != "" {
			res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: 0, Reason: bad})
			// Look for records anyway, so that Dump shows them.
			if off = nextPlausibleFrame(b, min(headerSize, len(b))); off < 0 {
				off = len(b)
			}
		}
	records:
		for off < len(b) {
			t, payload, end, bad := parseFrame(b, off)
			if bad == "" {
				d, err := decodePayload(t, payload)
				if err != nil {
					// The checksum holds, so this was written as is: not
					// a torn write.
					res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: int64(off),
						Reason: fmt.Sprintf("undecodable %v record: %v", t, err)})
				} else {
					seg.records++
					if visit != nil {
						if err := visit(n, name, int64(off), t, d, b[off:end]); err != nil {
							return res, err
						}
					}
				}
				off = end
				seg.end = int64(end)
				continue
			}
			next := nextPlausibleFrame(b, off+1)
			switch {
			case next >= 0:
				res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: int64(off),
					Reason: fmt.Sprintf("%s, but a valid record follows at offset %d", bad, next)})
				off = next
				continue
			case !last:
				res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: int64(off),
					Reason: bad + " in a segment that is not the last"})
			default:
				res.torn = &TornTail{File: name, Offset: int64(off), Bytes: int64(len(b) - off), Reason: bad}
			}
			break records
		}
		res.segments = append(res.segments, seg)
	}
	return res, nil
}

// firstCorruption returns the first corruption as an error, or nil.
func (r *scanResult) firstCorruption() error {
	if len(r.corrupt) == 0 {
		return nil
	}
	e := r.corrupt[0]
	if len(r.corrupt) > 1 {
		e.Reason += fmt.Sprintf(" (and %d more problems)", len(r.corrupt)-1)
	}
	return &e
}

// replayed is a log as read from its directory: identity, state and what
// scanning found. Open, ReadSnapshot, Verify and Dump all read a log with
// replayLog, so they agree on which records are live.
type replayed struct {
	ident    xa.LogIdentity
	hasIdent bool // IDENTITY was read and is sound
	identLen int  // size of IDENTITY
	st       state
	res      scanResult
}

// recordFunc sees each valid record in log order, decoded, with the live
// record apply made of it (nil if none; it may die later in the replay).
type recordFunc func(seg uint64, name string, off int64, t RecordType, d *decoded, frame []byte, live *liveRecord)

// replayLog reads the identity and every segment of dir and applies each
// valid record to a new state. It modifies nothing. Damage, including a
// missing or bad IDENTITY, is in res.corrupt (the identity's first); the
// error is for a log that could not be read at all, or wraps ErrNoLog when
// dir holds neither an identity nor a segment.
func replayLog(dir string, fn recordFunc) (*replayed, error) {
	rp := &replayed{st: newState()}
	idErr, err := rp.readIdentity(dir)
	if err != nil {
		return rp, err
	}
	rp.res, err = scanLog(dir, func(seg uint64, name string, off int64, t RecordType, d decoded, frame []byte) error {
		// frame is a view of the segment as read: keep a copy of the
		// records that may stay live, not the whole segment.
		switch t {
		case RecordCommit, RecordHeuristic, RecordAbort, RecordDelegation:
			frame = slices.Clone(frame)
		}
		r := rp.st.apply(t, &d, frame, seg)
		if fn != nil {
			fn(seg, name, off, t, &d, frame, r)
		}
		return nil
	})
	if err != nil {
		return rp, err
	}
	switch {
	case idErr == nil && len(rp.res.segments) == 0:
		idErr = &CorruptError{File: identityName, Reason: "the log has an identity but no segment file: its segments were removed or lost"}
	case idErr != nil && idErr.Reason == reasonNoIdentity && len(rp.res.segments) == 0:
		return rp, noLogError(dir, nil)
	case idErr != nil && idErr.Reason == reasonNoIdentity:
		idErr.Reason = fmt.Sprintf("missing, but the directory holds %d segment files: a damaged log, or one from a version "+
			"before logs had identities; it is not adopted as this log", len(rp.res.segments))
		if rp.res.segments[0].num == 1 && len(rp.res.segments) == 1 && rp.res.segments[0].size == headerSize {
			idErr.Reason += " (a single empty segment is what an interrupted Create leaves: Create finishes it)"
		}
	}
	if idErr != nil {
		rp.res.corrupt = append([]CorruptError{*idErr}, rp.res.corrupt...)
	}
	return rp, nil
}

// reasonNoIdentity marks a missing IDENTITY until replayLog knows whether
// the directory holds segments.
const reasonNoIdentity = "missing"

// readIdentity reads dir/IDENTITY. A missing or bad file is returned as a
// *CorruptError (Reason reasonNoIdentity when missing); the error is for a
// file that could not be read.
func (rp *replayed) readIdentity(dir string) (*CorruptError, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityName))
	if errors.Is(err, fs.ErrNotExist) {
		return &CorruptError{File: identityName, Reason: reasonNoIdentity}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filelog: reading the identity: %w", err)
	}
	li, bad := parseIdentity(b)
	if bad != "" {
		return &CorruptError{File: identityName, Reason: bad}, nil
	}
	rp.ident, rp.hasIdent, rp.identLen = li, true, len(b)
	return nil, nil
}

// noLogError says that dir holds no log, and how to make one. cause, if
// not nil, is wrapped too (fs.ErrNotExist for a missing directory).
func noLogError(dir string, cause error) error {
	msg := fmt.Sprintf("%s: no decision log there (no %s file); create one with `xactl log init` (filelog.Create). "+
		"Check the directory first: a log opened in the wrong directory is empty, every in-doubt branch would look "+
		"undecided and recovery would roll back branches whose commit is logged elsewhere", dir, identityName)
	if cause != nil {
		return fmt.Errorf("%w: %s: %w", ErrNoLog, msg, cause)
	}
	return fmt.Errorf("%w: %s", ErrNoLog, msg)
}

// statLogDir checks that dir exists and is a directory.
func statLogDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return noLogError(dir, err)
	}
	if err != nil {
		return fmt.Errorf("filelog: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("filelog: %s is not a directory", dir)
	}
	return nil
}
