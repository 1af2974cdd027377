package filelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// On-disk format.
//
// A log is a directory holding an IDENTITY file, a HEAD file and segment
// files named by their number, 20 decimal digits and ".wal"
// (00000000000000000001.wal). Numbers are consecutive; the highest is the
// active segment, the only one that is appended to. LOCK is the lock file
// (see lockDir); files ending in ".tmp" are leftovers of an interrupted
// creation or replacement and are removed by Open.
//
// IDENTITY is written once, by Create, and never changes:
//
//	magic    [8]byte  "xa-dlid\n"
//	version  uint32   1
//	length   uint32   length of identity
//	identity [length]byte  xa.LogIdentity in its MarshalBinary form
//	crc      uint32   CRC-32C of everything above
//
// HEAD names the newest segment that was started and the oldest segment
// that must still exist. It is replaced whole (temporary file, synced,
// renamed, directory synced), after the segment it names is durable and
// before any segment below its first is removed:
//
//	magic    [8]byte  "xa-dhed\n"
//	version  uint32   1
//	newest   uint64   the newest segment: every segment up to it exists
//	first    uint64   every segment from first to newest exists
//	crc      uint32   CRC-32C of the 28 bytes above
//
// A segment starts with a 24-byte header:
//
//	magic   [8]byte  "xa-dlog\n"
//	version uint32   4 (3: a segment written before sync marks; 2: one
//	                 written before links and HEAD)
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
// All integers of the framing are little endian. The payloads, by type:
//
//	commit        xa.CommitRecord, MarshalBinary form
//	forget        the text of the xa.GlobalID whose commit record is forgotten
//	heuristic     xa.HeuristicRecord, MarshalBinary form
//	clear         participant (uvarint length, bytes), then the canonical
//	              text of the xa.XID: that participant's heuristic records
//	              of that XID are cleared
//	abort         xa.AbortRecord, MarshalBinary form
//	forget-abort  the text of the xa.GlobalID whose abort record is forgotten
//	delegation    version byte 1, participant (uvarint length, bytes), time
//	              logged (varint Unix nanoseconds); version byte 2 adds
//	              the decision table's qualified name and its identity
//	              (uvarint length, bytes, each)
//	participant   xa.ParticipantRecord, MarshalBinary form
//	link          version byte 1, the number of the previous segment
//	              (uint64), the length of the previous segment in bytes
//	              (uint64), both little endian
//	synced        version byte 1, an offset in this segment (uint64, little
//	              endian): every byte before it had been synced when this
//	              record was written
//
// Every version 3 or 4 segment but segment 1 starts with a link record,
// written and synced with its header before the segment gets its name: it
// says how long the previous segment is, which was cut back to its last
// record and synced before. It is the only link record in a segment.
//
// A version 4 segment also holds synced records (sync marks): each batch
// of records written after a sync that succeeded starts with one, giving
// the end of what that sync made durable; compaction writes one (and syncs
// it) for the live records it copied forward before their originals go,
// and Close one for all.
// They tell the two kinds of damage in the active segment apart. The
// kernel writes dirty pages back in any order, so a crash can keep an
// unsynced record while losing one written before it (more so with two
// batches syncing at once): a damaged record followed by valid ones, none
// of them ever acknowledged, since a sync that succeeded after the damaged
// record was written would have made it durable. That is a torn tail, cut
// off at the damaged record. A damaged record that a later sync mark says
// was synced is not: the disk lost data it had acknowledged, and the log
// is corrupt. In a version 3 segment, which has no marks, a damaged record
// followed by a valid one is corrupt, as it always was. Version 4 segments
// are started by rotation and Create; a log opened with a version 3 active
// segment goes on appending to it without marks until it rotates, so that
// an older version can still read it until then.
//
// Version 2 segments (no link records) are read, and a log of them without
// HEAD is one written before HEAD existed: Open writes HEAD for it, and
// the segments it starts are of version 4. A segment of an older version
// after one of a newer, or a version 3 or 4 segment in a log without HEAD,
// is corrupt.
// Version 1 segments (before identities, with clear records naming an XID
// only) are not read: Open refuses a directory without IDENTITY anyway.
//
// The active segment may end in zeros (preallocated space); every other
// segment ends exactly at its last record.
const (
	magic         = "xa-dlog\n"
	formatVersion = 4
	// formatLinked is the segment format with link records and HEAD but
	// before sync marks.
	formatLinked = 3
	// formatNoLink is the segment format before link records and HEAD.
	formatNoLink = 2
	headerSize   = 24
	frameHeader  = 9
	// maxPayload bounds a record's payload: a commit record of 10000
	// branches with long resource manager names fits.
	maxPayload = 16 << 20

	identityName    = "IDENTITY"
	identityMagic   = "xa-dlid\n"
	identityVersion = 1
	// maxIdentity bounds the identity in IDENTITY; the encoded identity
	// is well under 100 bytes.
	maxIdentity = 4096
	// maxParticipant bounds a participant name in delegation and clear
	// records, as xa bounds it in commit and heuristic records.
	maxParticipant = 1 << 10
	// delegationCodec is the delegation payload version written;
	// delegationNoTable (before decision tables had identities) is read.
	delegationCodec   = 2
	delegationNoTable = 1
	linkCodec         = 1
	linkPayload       = 1 + 8 + 8
	syncedCodec       = 1
	syncedPayload     = 1 + 8

	headName    = "HEAD"
	headMagic   = "xa-dhed\n"
	headVersion = 1
	headSize    = 8 + 4 + 8 + 8 + 4
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
	// RecordClear names a participant and an xa.XID whose heuristic
	// records on that participant are cleared.
	RecordClear
	// RecordAbort holds an xa.AbortRecord: presumed abort, the fence
	// against a commit record for the same global id.
	RecordAbort
	// RecordForgetAbort holds the xa.GlobalID of a forgotten abort record.
	RecordForgetAbort
	// RecordDelegation holds an xa.Delegation: a participant whose
	// decision table may hold this log's commit decisions.
	RecordDelegation
	// RecordLink starts every segment but the first: it names the
	// previous segment and that segment's length in bytes, so that a
	// segment cut at a record boundary is caught.
	RecordLink
	// RecordParticipant holds an xa.ParticipantRecord: the identity of
	// the store a participant's name denotes.
	RecordParticipant
	// RecordSynced (a sync mark) gives an offset in its segment before
	// which every byte had been synced when it was written. It holds no
	// decision: it tells a torn tail from lost acknowledged data.
	RecordSynced
)

// RecordIdentity is the type Dump gives the IDENTITY file, shown as the
// first entry. It never occurs in a segment.
const RecordIdentity RecordType = 0x80

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
	case RecordAbort:
		return "abort"
	case RecordForgetAbort:
		return "forget-abort"
	case RecordDelegation:
		return "delegation"
	case RecordLink:
		return "link"
	case RecordParticipant:
		return "participant"
	case RecordSynced:
		return "synced"
	case RecordIdentity:
		return "identity"
	}
	return "RecordType(" + strconv.Itoa(int(t)) + ")"
}

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
	_, bad := parseHeader(b, n)
	return bad
}

// parseHeader validates the header of segment n and returns its format
// version (formatVersion, formatLinked or formatNoLink), or a reason when
// it is bad.
func parseHeader(b []byte, n uint64) (version uint32, bad string) {
	switch {
	case len(b) < headerSize:
		return 0, fmt.Sprintf("short segment header (%d bytes)", len(b))
	case string(b[:8]) != magic:
		return 0, "bad magic"
	case crc32.Checksum(b[:20], castagnoli) != binary.LittleEndian.Uint32(b[20:24]):
		return 0, "header checksum mismatch"
	}
	version = binary.LittleEndian.Uint32(b[8:12])
	switch {
	case version != formatVersion && version != formatLinked && version != formatNoLink:
		return 0, fmt.Sprintf("unknown format version %d", version)
	case binary.LittleEndian.Uint64(b[12:20]) != n:
		return 0, fmt.Sprintf("header names segment %d", binary.LittleEndian.Uint64(b[12:20]))
	}
	return version, ""
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

// appendFrameString is appendFrame for a payload held as text (the
// payload of forget and forget-abort records is their key), without
// copying it into a slice of its own first. The checksum covers the type
// byte and the payload, which lie next to each other in the frame.
func appendFrameString(b []byte, t RecordType, payload string) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, 0, 0, 0, 0, byte(t))
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+8:], castagnoli))
	return b
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

// hkey is what heuristic records are kept by: participant and XID text.
type hkey struct{ rm, xid string }

// decoded is a record's payload decoded.
type decoded struct {
	key        string               // GlobalID text (commit, forget, abort, forget-abort), participant (delegation, participant)
	hkey       hkey                 // RecordHeuristic, RecordClear
	commit     xa.CommitRecord      // RecordCommit
	id         xa.GlobalID          // RecordCommit, RecordForget, RecordAbort, RecordForgetAbort
	heuristic  xa.HeuristicRecord   // RecordHeuristic
	xid        xa.XID               // RecordHeuristic, RecordClear
	rm         string               // RecordHeuristic, RecordClear: the participant
	abort      xa.AbortRecord       // RecordAbort
	delegation xa.Delegation        // RecordDelegation
	part       xa.ParticipantRecord // RecordParticipant
	link       Link                 // RecordLink
	synced     int64                // RecordSynced
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
	case RecordForget, RecordForgetAbort:
		id, ok := xa.ParseGlobalIDString(string(p))
		if !ok {
			return d, fmt.Errorf("bad global id %q in %v record", truncate(string(p), 80), t)
		}
		d.id, d.key = id, id.String()
	case RecordHeuristic:
		if err := d.heuristic.UnmarshalBinary(p); err != nil {
			return d, err
		}
		d.xid, d.rm = d.heuristic.XID, d.heuristic.RM
		d.hkey = hkey{d.rm, d.xid.String()}
	case RecordClear:
		rm, x, err := decodeClear(p)
		if err != nil {
			return d, err
		}
		d.rm, d.xid = rm, x
		d.hkey = hkey{rm, x.String()}
	case RecordAbort:
		if err := d.abort.UnmarshalBinary(p); err != nil {
			return d, err
		}
		d.id = d.abort.ID
		d.key = d.id.String()
	case RecordDelegation:
		dg, err := decodeDelegation(p)
		if err != nil {
			return d, err
		}
		d.delegation, d.key = dg, dg.Participant
	case RecordParticipant:
		if err := d.part.UnmarshalBinary(p); err != nil {
			return d, err
		}
		d.key = d.part.Name
	case RecordLink:
		lk, err := decodeLink(p)
		if err != nil {
			return d, err
		}
		d.link = lk
	case RecordSynced:
		off, err := decodeSynced(p)
		if err != nil {
			return d, err
		}
		d.synced = off
	default:
		return d, fmt.Errorf("unknown record type %d", t)
	}
	return d, nil
}

// encodeClear returns the payload of a clear record.
func encodeClear(rm string, x xa.XID) ([]byte, error) {
	if len(rm) > maxParticipant {
		return nil, fmt.Errorf("participant name of %d bytes, the limit is %d", len(rm), maxParticipant)
	}
	if err := x.Validate(); err != nil {
		return nil, err
	}
	b := binary.AppendUvarint(nil, uint64(len(rm)))
	b = append(b, rm...)
	return append(b, x.String()...), nil
}

func decodeClear(p []byte) (string, xa.XID, error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > maxParticipant || n > uint64(len(p)-k) {
		return "", xa.XID{}, errors.New("clear record: bad participant length")
	}
	rm := string(p[k : k+int(n)])
	x, err := xa.ParseXID(string(p[k+int(n):]))
	if err != nil {
		return "", xa.XID{}, fmt.Errorf("clear record: %w", err)
	}
	if err := x.Validate(); err != nil {
		return "", xa.XID{}, fmt.Errorf("clear record: %w", err)
	}
	return rm, x, nil
}

// encodeDelegation returns the payload of a delegation record.
func encodeDelegation(d xa.Delegation) ([]byte, error) {
	if d.Participant == "" || len(d.Participant) > maxParticipant {
		return nil, fmt.Errorf("participant name of %d bytes: want 1 to %d", len(d.Participant), maxParticipant)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	b := []byte{delegationCodec}
	b = binary.AppendUvarint(b, uint64(len(d.Participant)))
	b = append(b, d.Participant...)
	b = binary.AppendVarint(b, d.Logged.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(d.Table)))
	b = append(b, d.Table...)
	b = binary.AppendUvarint(b, uint64(len(d.TableID)))
	return append(b, d.TableID...), nil
}

func decodeDelegation(p []byte) (xa.Delegation, error) {
	if len(p) < 1 || p[0] != delegationCodec && p[0] != delegationNoTable {
		return xa.Delegation{}, errors.New("delegation record: unknown version")
	}
	version := p[0]
	p = p[1:]
	n, k := binary.Uvarint(p)
	if k <= 0 || n == 0 || n > maxParticipant || n > uint64(len(p)-k) {
		return xa.Delegation{}, errors.New("delegation record: bad participant length")
	}
	d := xa.Delegation{Participant: string(p[k : k+int(n)])}
	p = p[k+int(n):]
	ns, k := binary.Varint(p)
	if k <= 0 || version == delegationNoTable && k != len(p) {
		return xa.Delegation{}, errors.New("delegation record: bad time")
	}
	d.Logged = time.Unix(0, ns)
	p = p[k:]
	if version == delegationNoTable {
		return d, nil
	}
	for _, f := range []*string{&d.Table, &d.TableID} {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > xa.MaxTableName || n > uint64(len(p)-k) {
			return xa.Delegation{}, errors.New("delegation record: bad table")
		}
		*f = string(p[k : k+int(n)])
		p = p[k+int(n):]
	}
	if len(p) != 0 {
		return xa.Delegation{}, errors.New("delegation record: trailing bytes")
	}
	if err := d.Validate(); err != nil {
		return xa.Delegation{}, fmt.Errorf("delegation record: %w", err)
	}
	return d, nil
}

// Link is the payload of a link record: the segment before the one that
// holds it, and that segment's length in bytes (the end of its last
// record).
type Link struct {
	Segment uint64
	Size    int64
}

// encodeLink returns the payload of a link record.
func encodeLink(lk Link) []byte {
	b := []byte{linkCodec}
	b = binary.LittleEndian.AppendUint64(b, lk.Segment)
	return binary.LittleEndian.AppendUint64(b, uint64(lk.Size))
}

func decodeLink(p []byte) (Link, error) {
	if len(p) != linkPayload || p[0] != linkCodec {
		return Link{}, fmt.Errorf("link record: unknown version or length (%d bytes)", len(p))
	}
	lk := Link{Segment: binary.LittleEndian.Uint64(p[1:]), Size: int64(binary.LittleEndian.Uint64(p[9:]))}
	if lk.Segment == 0 || lk.Size < headerSize {
		return Link{}, fmt.Errorf("link record: segment %d of %d bytes", lk.Segment, lk.Size)
	}
	return lk, nil
}

// Head is the content of HEAD: the newest segment started, and the oldest
// segment that must still exist. Every segment from First to Newest
// exists in a sound log.
type Head struct {
	Newest uint64
	First  uint64
}

// appendHead returns the content of a HEAD file.
func appendHead(b []byte, h Head) []byte {
	start := len(b)
	b = append(b, headMagic...)
	b = binary.LittleEndian.AppendUint32(b, headVersion)
	b = binary.LittleEndian.AppendUint64(b, h.Newest)
	b = binary.LittleEndian.AppendUint64(b, h.First)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// parseHead decodes a HEAD file; it returns a reason when the file is bad.
func parseHead(b []byte) (Head, string) {
	switch {
	case len(b) != headSize:
		return Head{}, fmt.Sprintf("HEAD of %d bytes, want %d", len(b), headSize)
	case string(b[:8]) != headMagic:
		return Head{}, "bad HEAD magic"
	case crc32.Checksum(b[:headSize-4], castagnoli) != binary.LittleEndian.Uint32(b[headSize-4:]):
		return Head{}, "HEAD checksum mismatch"
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != headVersion {
		return Head{}, fmt.Sprintf("unknown HEAD version %d", v)
	}
	h := Head{Newest: binary.LittleEndian.Uint64(b[12:20]), First: binary.LittleEndian.Uint64(b[20:28])}
	if h.First == 0 || h.First > h.Newest {
		return Head{}, fmt.Sprintf("HEAD names segments %d to %d", h.First, h.Newest)
	}
	return h, ""
}

// appendIdentity returns the content of an IDENTITY file for the encoded
// identity id.
func appendIdentity(b []byte, id []byte) []byte {
	start := len(b)
	b = append(b, identityMagic...)
	b = binary.LittleEndian.AppendUint32(b, identityVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(id)))
	b = append(b, id...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// parseIdentity decodes an IDENTITY file; it returns a reason when the
// file is bad.
func parseIdentity(b []byte) (xa.LogIdentity, string) {
	const fixed = 8 + 4 + 4
	if len(b) < fixed+4 {
		return xa.LogIdentity{}, fmt.Sprintf("short identity file (%d bytes)", len(b))
	}
	if string(b[:8]) != identityMagic {
		return xa.LogIdentity{}, "bad identity magic"
	}
	n := binary.LittleEndian.Uint32(b[12:16])
	if n > maxIdentity || uint64(len(b)) != fixed+uint64(n)+4 {
		return xa.LogIdentity{}, fmt.Sprintf("identity length %d does not match a file of %d bytes", n, len(b))
	}
	end := fixed + int(n)
	if crc32.Checksum(b[:end], castagnoli) != binary.LittleEndian.Uint32(b[end:]) {
		return xa.LogIdentity{}, "identity checksum mismatch"
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != identityVersion {
		return xa.LogIdentity{}, fmt.Sprintf("unknown identity version %d", v)
	}
	var li xa.LogIdentity
	if err := li.UnmarshalBinary(b[fixed:end]); err != nil {
		return xa.LogIdentity{}, err.Error()
	}
	return li, ""
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

// encodeSynced returns the payload of a sync mark for offset off.
func encodeSynced(off int64) []byte {
	b := append(make([]byte, 0, syncedPayload), syncedCodec)
	return binary.LittleEndian.AppendUint64(b, uint64(off))
}

func decodeSynced(p []byte) (int64, error) {
	if len(p) != syncedPayload || p[0] != syncedCodec {
		return 0, fmt.Errorf("synced record: unknown version or length (%d bytes)", len(p))
	}
	off := binary.LittleEndian.Uint64(p[1:])
	if off < headerSize || off > 1<<62 {
		return 0, fmt.Errorf("synced record gives offset %d, out of range", off)
	}
	return int64(off), nil
}
