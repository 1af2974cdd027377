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
	File   string // segment file name (or IDENTITY, HEAD), relative to the log directory
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
	size    int64  // file size
	end     int64  // end of the last valid record (or of the header)
	records int    // valid records, sync marks apart
	version uint32 // format version of the header; 0 when the header is bad
	link    *Link  // the link record that starts the segment, if sound
	linked  bool   // the segment starts with a link record, sound or not
	// unlinked: the first valid record was found not to be a link record,
	// and that was reported.
	unlinked bool
	// marked is what the last sync mark says was synced; the end of that
	// mark when it covers all that precedes it.
	marked int64
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
		} else if strings.HasSuffix(de.Name(), ".wal.tmp") || de.Name() == identityName+".tmp" || de.Name() == headName+".tmp" {
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
	var newest uint32 // the newest format version seen
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
		version, bad := parseHeader(b, n)
		if bad != "" {
			res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: 0, Reason: bad})
			// Look for records anyway, so that Dump shows them.
			if off = nextPlausibleFrame(b, min(headerSize, len(b))); off < 0 {
				off = len(b)
			}
		}
		seg.version = version
		if version != 0 && version < newest {
			before := "links"
			if version == formatLinked {
				before = "sync marks"
			}
			res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: 0,
				Reason: fmt.Sprintf("a segment of format version %d (before %s) after one of version %d: "+
					"an old file put back, or the segments of two logs mixed", version, before, newest)})
		}
		newest = max(newest, version)
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
					if int64(off) == headerSize && t != RecordLink && seg.version >= formatLinked && n > 1 {
						// Reported before what the records that follow
						// say, which is off by the link record's length.
						seg.unlinked = true
						res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: headerSize, Reason: reasonUnlinked})
					}
					var reason string
					switch t {
					case RecordLink:
						reason = seg.takeLink(int64(off), &d.link)
					case RecordSynced:
						if reason = seg.checkSynced(int64(off), d.synced); reason == "" {
							seg.marked = d.synced
							if d.synced == int64(off) {
								seg.marked = int64(end)
							}
						}
					}
					if reason != "" {
						res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: int64(off), Reason: reason})
					}
					if t != RecordSynced {
						seg.records++
					}
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
			if next >= 0 && last && seg.version >= formatVersion {
				// Valid records after a damaged one in the active
				// segment: a torn tail written back out of order,
				// unless a sync mark says the damaged bytes were synced
				// (see the format's description).
				if mark, upto := syncedPast(b, next, off); mark >= 0 {
					res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: int64(off),
						Reason: fmt.Sprintf("%s, but a valid record follows at offset %d, and the sync mark at offset %d "+
							"says every byte before offset %d had been synced: the disk lost data it had acknowledged",
							bad, next, mark, upto)})
					off = next
					continue
				}
				res.torn = &TornTail{File: name, Offset: int64(off), Bytes: int64(len(b) - off),
					Reason: fmt.Sprintf("%s, and the valid records from offset %d on were never synced "+
						"(no sync mark after it covers it): written back out of order before a crash", bad, next)}
				break records
			}
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
		if seg.version >= formatLinked && n > 1 && !seg.linked && !seg.unlinked {
			res.corrupt = append(res.corrupt, CorruptError{File: name, Offset: headerSize, Reason: reasonUnlinked})
		}
		res.segments = append(res.segments, seg)
	}
	return res, nil
}

// takeLink records lk, found at offset off, as the segment's link record,
// or returns why it is out of place.
func (s *segmentScan) takeLink(off int64, lk *Link) string {
	switch {
	case s.version == 0:
		return "" // the header is bad: reported already
	case s.version < formatLinked || s.num == 1 || off != headerSize:
		return "a link record where none belongs (only the first record of a segment after the first is one)"
	}
	s.linked = true
	if lk.Segment != s.num-1 {
		return fmt.Sprintf("the link record names segment %s, not the one before", segmentName(lk.Segment))
	}
	s.link = lk
	return ""
}

const reasonUnlinked = "the segment does not start with a link record naming the segment before it"

// checkSynced checks a sync mark found at offset off, giving upto, and
// returns why it is out of place.
func (s *segmentScan) checkSynced(off, upto int64) string {
	switch {
	case s.version == 0:
		return "" // the header is bad: reported already
	case s.version < formatVersion:
		return fmt.Sprintf("a sync mark in a segment of format version %d, which has none", s.version)
	case upto > off:
		return fmt.Sprintf("a sync mark at offset %d says bytes up to offset %d, after it, had been synced", off, upto)
	}
	return ""
}

// syncedPast looks through the frames of b from offset from on (skipping
// damaged ones) for a sync mark covering offset bad, and returns the
// offset of the first such mark and what it covers, or -1.
func syncedPast(b []byte, from, bad int) (mark int, upto int64) {
	for off := from; off >= 0 && off < len(b); {
		t, p, end, why := parseFrame(b, off)
		if why != "" {
			off = nextPlausibleFrame(b, off+1)
			continue
		}
		if t == RecordSynced {
			if u, err := decodeSynced(p); err == nil && u > int64(bad) && u <= int64(off) {
				return off, u
			}
		}
		off = end
	}
	return -1, 0
}

// checkChain checks what the segments and HEAD say of each other: each
// link record against the length of the segment it names, when that
// segment is there (compaction removes segments oldest first, so the
// oldest segment's predecessor is legitimately gone); HEAD's newest
// segment against the newest segment file; HEAD's first against the
// oldest. It appends what it finds to r.corrupt.
func (r *scanResult) checkChain(head *Head, headErr *CorruptError) {
	segs := r.segments
	for i := 1; i < len(segs); i++ {
		prev, s := segs[i-1], segs[i]
		if s.link == nil || prev.num != s.num-1 || prev.end == s.link.Size {
			continue
		}
		how := "it was cut, and the records past its end are lost"
		if prev.end > s.link.Size {
			how = "it holds more than was written to it: replaced by another file"
		}
		r.corrupt = append(r.corrupt, CorruptError{File: prev.name, Offset: prev.end,
			Reason: fmt.Sprintf("the segment's records end at offset %d, but the link record of %s says it is %d bytes long: %s",
				prev.end, s.name, s.link.Size, how)})
	}
	if len(segs) == 0 {
		return // replayLog reports an identity without segments
	}
	oldest, newest := segs[0], segs[len(segs)-1]
	switch {
	case headErr != nil && headErr.Reason == reasonNoHead:
		for _, s := range segs {
			if s.version >= formatLinked {
				r.corrupt = append(r.corrupt, CorruptError{File: headName,
					Reason: fmt.Sprintf("missing, but %s is of format version %d, which is only written after HEAD: "+
						"HEAD was deleted or lost, and with it the check that no newer segment is missing", s.name, s.version)})
				break
			}
		}
	case headErr != nil:
		r.corrupt = append(r.corrupt, *headErr)
	case head != nil && newest.num < head.Newest:
		missing := segmentName(head.Newest) + " is"
		if head.Newest > newest.num+1 {
			missing = fmt.Sprintf("%s to %s are", segmentName(newest.num+1), segmentName(head.Newest))
		}
		r.corrupt = append(r.corrupt, CorruptError{File: headName,
			Reason: fmt.Sprintf("names %s as the newest segment, but the newest segment file is %s: %s missing "+
				"(deleted, or lost in a copy or restore), and every record written to it is lost with it",
				segmentName(head.Newest), newest.name, missing)})
	case head != nil && oldest.num > head.First:
		missing := segmentName(head.First) + " is"
		if oldest.num > head.First+1 {
			missing = fmt.Sprintf("%s to %s are", segmentName(head.First), segmentName(oldest.num-1))
		}
		r.corrupt = append(r.corrupt, CorruptError{File: oldest.name,
			Reason: fmt.Sprintf("%s missing (deleted, or lost in a copy or restore): HEAD says the log starts at %s, "+
				"and compaction had not copied the live records there forward", missing, segmentName(head.First))})
	}
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
	hasIdent bool  // IDENTITY was read and is sound
	identLen int   // size of IDENTITY
	head     *Head // HEAD, when it was read and is sound
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
	headErr, err := rp.readHead(dir)
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
	rp.res.checkChain(rp.head, headErr)
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

// reasonNoHead marks a missing HEAD, which is sound in a log whose
// segments are all of version formatNoLink.
const reasonNoHead = "missing"

// readHead reads dir/HEAD. A missing or bad file is returned as a
// *CorruptError (Reason reasonNoHead when missing); the error is for a
// file that could not be read.
func (rp *replayed) readHead(dir string) (*CorruptError, error) {
	b, err := os.ReadFile(filepath.Join(dir, headName))
	if errors.Is(err, fs.ErrNotExist) {
		return &CorruptError{File: headName, Reason: reasonNoHead}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filelog: reading HEAD: %w", err)
	}
	h, bad := parseHead(b)
	if bad != "" {
		return &CorruptError{File: headName, Reason: bad}, nil
	}
	rp.head = &h
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
