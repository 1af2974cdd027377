package xa

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FormatID is the XA format identifier of every branch this project
// creates ("xa" and a version in its high bytes). Together with the gtrid
// prefix it tells our branches from other transaction managers'.
const FormatID int32 = 0x78610001

const (
	gtridPrefix  = "xa1."
	maxNodeLen   = 31
	idHexLen     = 28 // 12 hex digits of milliseconds, 16 of random
	maxBranchIdx = 9999
)

// GlobalID identifies one global transaction: the transaction manager node
// that owns it, the time it began (millisecond precision) and 64 random
// bits. Its text form, used as the gtrid of every branch, is
//
//	xa1.<node>.<12 hex digits of Unix milliseconds><16 hex random digits>
//
// at most 64 bytes, printable, so it reads the same in XA RECOVER and in
// pg_prepared_xacts.
type GlobalID struct {
	Node  string
	Begun time.Time
	Rand  uint64
}

// ValidateNode reports whether node can own transactions: 1 to 31 characters
// from A-Z a-z 0-9 '-' '_' (ValidateIdent).
func ValidateNode(node string) error {
	if err := ValidateIdent("node id", node, maxNodeLen, ""); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidNode, err)
	}
	return nil
}

// ValidateIdent reports whether s can name something inside a gtrid or a
// bqual of this module's XIDs: 1 to max characters from A-Z a-z 0-9 '-'
// '_' and the bytes of extra, so that it is written as is and read back
// by splitting on a byte it cannot hold. Node ids follow it (ValidateNode),
// and so do the sink's names and targets. what names s in the error
// ("node id"); the error has no kind: the caller wraps its own.
func ValidateIdent(what, s string, max int, extra string) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%s %q must be 1 to %d characters", what, s, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || strings.IndexByte(extra, c) >= 0) {
			only := "A-Z a-z 0-9 - _"
			for j := 0; j < len(extra); j++ {
				only += " " + extra[j:j+1]
			}
			return fmt.Errorf("%s %q may hold only %s", what, s, only)
		}
	}
	return nil
}

// NewGlobalID returns a fresh GlobalID owned by node, begun at now.
func NewGlobalID(node string, now time.Time) (GlobalID, error) {
	if err := ValidateNode(node); err != nil {
		return GlobalID{}, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return GlobalID{}, fmt.Errorf("xa: reading random bits: %w", err)
	}
	return GlobalID{Node: node, Begun: time.UnixMilli(now.UnixMilli()), Rand: binary.BigEndian.Uint64(b[:])}, nil
}

// String returns the gtrid text of g.
func (g GlobalID) String() string {
	b := make([]byte, 0, g.textLen())
	return string(g.appendText(b))
}

// textLen is the length of g's text.
func (g GlobalID) textLen() int { return len(gtridPrefix) + len(g.Node) + 1 + idHexLen }

// appendText appends the gtrid text of g to b.
func (g GlobalID) appendText(b []byte) []byte {
	b = append(b, gtridPrefix...)
	b = append(b, g.Node...)
	b = append(b, '.')
	b = AppendHex(b, uint64(g.Begun.UnixMilli())&(1<<48-1), 12)
	return AppendHex(b, g.Rand, 16)
}

// AppendHex appends v as exactly n lower-case hex digits: the fixed-width
// fields of this module's gtrids and bquals (a GlobalID's time and random
// bits, a LogID, the sink's incarnations and checkpoint numbers).
// ParseHex reads them back.
func AppendHex(b []byte, v uint64, n int) []byte {
	const digits = "0123456789abcdef"
	for i := n - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

// IsZero reports whether g is the zero GlobalID.
func (g GlobalID) IsZero() bool { return g.Node == "" }

// Gtrid returns the gtrid bytes of every branch of g.
func (g GlobalID) Gtrid() []byte { return g.appendText(make([]byte, 0, g.textLen())) }

// Branch returns the XID of branch i (0 <= i <= 9999) of g, naming no
// decision log. Recovery commits such a branch when a record decides it but
// never presumes it aborted; transactions of a Manager use
// BranchRef{ID: g, Index: i, Log: log}.XID() instead.
func (g GlobalID) Branch(i int) XID { return BranchRef{ID: g, Index: i}.XID() }

// ParseGlobalID parses a gtrid written by GlobalID.String. It returns false
// for anything else, without error: foreign and malformed gtrids are simply
// not ours.
func ParseGlobalID(gtrid []byte) (GlobalID, bool) {
	return ParseGlobalIDString(string(gtrid))
}

// ParseGlobalIDString is ParseGlobalID for text.
func ParseGlobalIDString(s string) (GlobalID, bool) {
	if len(s) > MaxGtridLen || !strings.HasPrefix(s, gtridPrefix) {
		return GlobalID{}, false
	}
	node, id, ok := strings.Cut(s[len(gtridPrefix):], ".")
	if !ok || ValidateNode(node) != nil || len(id) != idHexLen {
		return GlobalID{}, false
	}
	ms, ok1 := ParseHex(id[:12], 12)
	r, ok2 := ParseHex(id[12:], 16)
	if !ok1 || !ok2 {
		return GlobalID{}, false
	}
	return GlobalID{Node: node, Begun: time.UnixMilli(int64(ms)), Rand: r}, true
}

// LogID identifies one decision log: 64 random bits chosen when the log is
// created. Every branch XID carries the id of the log that holds (or will
// hold) its transaction's decision, so that recovery presumes abort only of
// branches whose decision it can see. The zero LogID means "no log": XIDs
// made before logs had identities, and XIDs made by GlobalID.Branch.
type LogID uint64

// NewLogID returns a fresh random LogID.
func NewLogID() (LogID, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("xa: reading random bits: %w", err)
		}
		if id := LogID(binary.BigEndian.Uint64(b[:])); id != 0 {
			return id, nil
		}
	}
}

// String returns the 16 lower-case hex digits of id.
func (id LogID) String() string { return string(AppendHex(nil, uint64(id), 16)) }

// ParseLogID parses what LogID.String wrote.
func ParseLogID(s string) (LogID, error) {
	v, ok := ParseHex(s, 16)
	if !ok {
		return 0, fmt.Errorf("xa: log id %q: want 16 lower-case hex digits", truncate(s, 40))
	}
	if v == 0 {
		return 0, fmt.Errorf("xa: log id %q is not valid", s)
	}
	return LogID(v), nil
}

// ParseHex parses exactly n (at most 16) lower-case hex digits, as
// AppendHex writes them; false for anything else (another length, upper
// case, a sign).
func ParseHex(s string, n int) (uint64, bool) {
	if len(s) != n || n > 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// BranchRef is what one of our XIDs says about its branch: the global
// transaction, the branch's index in it, and the decision log its
// coordinator used (zero for XIDs without one). Its branch qualifier is
//
//	<index>.<16 hex digits of the log id>
//
// or just <index> when Log is zero.
type BranchRef struct {
	ID    GlobalID
	Index int
	Log   LogID
}

// XID returns the branch's XID. It panics if Index is out of range
// (0..9999).
func (r BranchRef) XID() XID {
	if r.Index < 0 || r.Index > maxBranchIdx {
		panic(fmt.Sprintf("xa: branch index %d out of range", r.Index))
	}
	q := strconv.AppendInt(nil, int64(r.Index), 10)
	if r.Log != 0 {
		q = append(q, '.')
		q = AppendHex(q, uint64(r.Log), 16)
	}
	return XID{FormatID: FormatID, Gtrid: r.ID.Gtrid(), Bqual: q}
}

// ParseOwned reports whether x is a branch created by this project and, if
// so, what its XID says. Foreign and malformed XIDs give false. Every XID it
// accepts is the XID of the BranchRef it returns (r.XID().Equal(x)).
func ParseOwned(x XID) (r BranchRef, ok bool) {
	if x.FormatID != FormatID {
		return BranchRef{}, false
	}
	g, ok := ParseGlobalID(x.Gtrid)
	if !ok {
		return BranchRef{}, false
	}
	q, logHex, hasLog := strings.Cut(string(x.Bqual), ".")
	if q == "" || len(q) > 4 || (len(q) > 1 && q[0] == '0') {
		return BranchRef{}, false
	}
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] < '0' || q[i] > '9' {
			return BranchRef{}, false
		}
		n = n*10 + int(q[i]-'0')
	}
	r = BranchRef{ID: g, Index: n}
	if hasLog {
		id, err := ParseLogID(logHex)
		if err != nil {
			return BranchRef{}, false
		}
		r.Log = id
	}
	return r, true
}

// Owned reports whether x is a branch created by this project, and if so its
// global transaction and branch index. Foreign and malformed XIDs give false.
// ParseOwned also says which decision log the branch belongs to.
func Owned(x XID) (g GlobalID, branch int, ok bool) {
	r, ok := ParseOwned(x)
	return r.ID, r.Index, ok
}
