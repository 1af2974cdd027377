package filelog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/xadb/xa/xa"
)

// On-disk format.
//
// A log is a directory of segment files named by their number, 20 decimal
// digits and ".wal" (00000000000000000001.wal). Numbers are consecutive;
// the highest is the active segment, the only one that is appended to.
//
// A segment starts with a 24-byte header:
//
//	magic   [8]byte  "xa-dlog\n"
//	version uint32   1
//	number  uint64   the segment number, equal to the one in the file name
//	crc     uint32   CRC-32C of the 20 bytes above
//
// followed by records, each framed as
//
//	length  uint32   length of payload
//	crc     uint32   CRC-32C of type and payload
//	type    byte     RecordType
//	payload [length]byte
//
// All integers are little endian. Payloads are xa.CommitRecord and
// xa.HeuristicRecord in their MarshalBinary form, the text of an
// xa.GlobalID (forget) and the canonical text of an xa.XID (clear).
//
// The active segment may end in zeros (preallocated space); every other
// segment ends exactly at its last record.
const (
	magic         = "xa-dlog\n"
	formatVersion = 1
	headerSize    = 24
	frameHeader   = 9
	// maxPayload bounds a record's payload: a commit record of 10000
	// branches with long resource manager names fits.
	maxPayload = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RecordType is the type of a log record.
type RecordType uint8

const (
	// RecordCommit holds an xa.CommitRecord.
	RecordCommit RecordType = 1 + iota
	// RecordForget holds the xa.GlobalID of a forgotten commit record.
	RecordForget
	// RecordHeuristic holds an xa.HeuristicRecord.
	RecordHeuristic
	// RecordClear holds the xa.XID whose heuristic records are cleared.
	RecordClear
)

func (t RecordType) String() string {
	switch t {
	case RecordCommit:
		return "commit"
	case RecordForget:
		return "forget"
	case RecordHeuristic:
		return "heuristic"
	case RecordClear:
		return "clear"
	}
	return "RecordType(" + strconv.Itoa(int(t)) + ")"
}

func (t RecordType) valid() bool { return t >= RecordCommit && t <= RecordClear }

// segmentName returns the file name of segment n.
func segmentName(n uint64) string { return fmt.Sprintf("%020d.wal", n) }

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, ".wal")
	if !ok || len(digits) != 20 {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

func appendHeader(b []byte, n uint64) []byte {
	start := len(b)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, formatVersion)
	b = binary.LittleEndian.AppendUint64(b, n)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// checkHeader validates the header of segment n; it returns a reason when
// the header is bad.
func checkHeader(b []byte, n uint64) string {
	switch {
	case len(b) < headerSize:
		return fmt.Sprintf("short segment header (%d bytes)", len(b))
	case string(b[:8]) != magic:
		return "bad magic"
	case crc32.Checksum(b[:20], castagnoli) != binary.LittleEndian.Uint32(b[20:24]):
		return "header checksum mismatch"
	case binary.LittleEndian.Uint32(b[8:12]) != formatVersion:
		return fmt.Sprintf("unknown format version %d", binary.LittleEndian.Uint32(b[8:12]))
	case binary.LittleEndian.Uint64(b[12:20]) != n:
		return fmt.Sprintf("header names segment %d", binary.LittleEndian.Uint64(b[12:20]))
	}
	return ""
}

// appendFrame appends one framed record.
func appendFrame(b []byte, t RecordType, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	crc := crc32.Update(0, castagnoli, []byte{byte(t)})
	crc = crc32.Update(crc, castagnoli, payload)
	b = binary.LittleEndian.AppendUint32(b, crc)
	b = append(b, byte(t))
	return append(b, payload...)
}

// parseFrame reads the frame at b[off:]. It returns the frame's end, or a
// reason why there is no valid frame there.
func parseFrame(b []byte, off int) (t RecordType, payload []byte, end int, bad string) {
	t, payload, end, bad = parseFrame1(b[off:])
	if bad != "" && allZero(b[off:]) {
		bad = reasonZeroTail
	}
	return t, payload, off + end, bad
}

func parseFrame1(rest []byte) (t RecordType, payload []byte, end int, bad string) {
	if len(rest) < frameHeader {
		return 0, nil, 0, fmt.Sprintf("incomplete record header (%d bytes)", len(rest))
	}
	n := binary.LittleEndian.Uint32(rest)
	if n > maxPayload {
		return 0, nil, 0, fmt.Sprintf("record length %d out of range", n)
	}
	if uint64(len(rest)) < frameHeader+uint64(n) {
		return 0, nil, 0, fmt.Sprintf("incomplete record (%d of %d bytes)", len(rest), frameHeader+n)
	}
	if crc32.Checksum(rest[8:frameHeader+n], castagnoli) != binary.LittleEndian.Uint32(rest[4:]) {
		return 0, nil, 0, "checksum mismatch"
	}
	// An unknown type with a good checksum was written on purpose (by a
	// newer version, say): decodePayload rejects it as corruption.
	return RecordType(rest[8]), rest[frameHeader : frameHeader+n], frameHeader + int(n), ""
}

// plausibleFrame reports whether a non-empty record with a good checksum
// starts at b[off:]. It decides whether a bad record is followed by
// anything that was written on purpose.
func plausibleFrame(b []byte, off int) bool {
	rest := b[off:]
	if len(rest) < frameHeader+1 {
		return false
	}
	n := binary.LittleEndian.Uint32(rest)
	if n == 0 || n > maxPayload || uint64(len(rest)) < frameHeader+uint64(n) {
		return false
	}
	return crc32.Checksum(rest[8:frameHeader+n], castagnoli) == binary.LittleEndian.Uint32(rest[4:])
}

// nextPlausibleFrame returns the offset of the first plausible frame at or
// after from, or -1.
func nextPlausibleFrame(b []byte, from int) int {
	for off := from; off+frameHeader < len(b); off++ {
		if plausibleFrame(b, off) {
			return off
		}
	}
	return -1
}

// reasonZeroTail is the reason given for a bad record when only zeros
// follow: preallocated space never written, or a write that never reached
// the disk.
const reasonZeroTail = "zeroed tail"

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// decoded is a record's payload decoded.
type decoded struct {
	key       string             // GlobalID text (commit, forget) or XID text (heuristic, clear)
	commit    xa.CommitRecord    // RecordCommit
	id        xa.GlobalID        // RecordCommit, RecordForget
	heuristic xa.HeuristicRecord // RecordHeuristic
	xid       xa.XID             // RecordHeuristic, RecordClear
}

func decodePayload(t RecordType, p []byte) (decoded, error) {
	var d decoded
	switch t {
	case RecordCommit:
		if err := d.commit.UnmarshalBinary(p); err != nil {
			return d, err
		}
		d.id = d.commit.ID
		d.key = commitKey(p, d.id)
	case RecordForget:
		d.key = string(p)
		id, ok := xa.ParseGlobalIDString(d.key)
		if !ok {
			return d, fmt.Errorf("bad global id %q in forget record", truncate(d.key, 80))
		}
		d.id = id
	case RecordHeuristic:
		if err := d.heuristic.UnmarshalBinary(p); err != nil {
			return d, err
		}
		d.xid = d.heuristic.XID
		d.key = d.xid.String()
	case RecordClear:
		d.key = string(p)
		x, err := xa.ParseXID(d.key)
		if err != nil {
			return d, err
		}
		d.xid = x
	default:
		return d, fmt.Errorf("unknown record type %d", t)
	}
	return d, nil
}

// commitKey returns the text of id, the global id of the encoded commit
// record p. xa.CommitRecord.MarshalBinary writes it right after the version
// byte, as a length-prefixed string, and UnmarshalBinary accepts only the
// canonical text, so it is id.String() without formatting it again.
func commitKey(p []byte, id xa.GlobalID) string {
	if len(p) > 1 {
		if n, k := binary.Uvarint(p[1:]); k > 0 && uint64(len(p)-1-k) >= n {
			if s := p[1+k : 1+k+int(n)]; len(s) > len("xa1.") && string(s[:4]) == "xa1." {
				return string(s)
			}
		}
	}
	return id.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
