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
// from A-Z a-z 0-9 '-' '_'.
func ValidateNode(node string) error {
	if node == "" || len(node) > maxNodeLen {
		return fmt.Errorf("%w: node id %q must be 1 to %d characters", ErrInvalidNode, node, maxNodeLen)
	}
	for i := 0; i < len(node); i++ {
		c := node[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: node id %q may hold only A-Z a-z 0-9 - _", ErrInvalidNode, node)
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
	b := make([]byte, 0, len(gtridPrefix)+len(g.Node)+1+idHexLen)
	b = append(b, gtridPrefix...)
	b = append(b, g.Node...)
	b = append(b, '.')
	b = appendHex(b, uint64(g.Begun.UnixMilli())&(1<<48-1), 12)
	b = appendHex(b, g.Rand, 16)
	return string(b)
}

// appendHex appends v as exactly n lower-case hex digits.
func appendHex(b []byte, v uint64, n int) []byte {
	const digits = "0123456789abcdef"
	for i := n - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

// IsZero reports whether g is the zero GlobalID.
func (g GlobalID) IsZero() bool { return g.Node == "" }

// Gtrid returns the gtrid bytes of every branch of g.
func (g GlobalID) Gtrid() []byte { return []byte(g.String()) }

// Branch returns the XID of branch i (0 <= i <= 9999) of g.
func (g GlobalID) Branch(i int) XID {
	if i < 0 || i > maxBranchIdx {
		panic(fmt.Sprintf("xa: branch index %d out of range", i))
	}
	return XID{FormatID: FormatID, Gtrid: g.Gtrid(), Bqual: []byte(strconv.Itoa(i))}
}

// ParseGlobalID parses a gtrid written by GlobalID.String. It returns false
// for anything else, without error: foreign and malformed gtrids are simply
// not ours.
func ParseGlobalID(gtrid []byte) (GlobalID, bool) {
	s := string(gtrid)
	if len(s) > MaxGtridLen || !strings.HasPrefix(s, gtridPrefix) {
		return GlobalID{}, false
	}
	node, id, ok := strings.Cut(s[len(gtridPrefix):], ".")
	if !ok || ValidateNode(node) != nil || len(id) != idHexLen {
		return GlobalID{}, false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return GlobalID{}, false
		}
	}
	ms, err1 := strconv.ParseUint(id[:12], 16, 64)
	r, err2 := strconv.ParseUint(id[12:], 16, 64)
	if err1 != nil || err2 != nil {
		return GlobalID{}, false
	}
	return GlobalID{Node: node, Begun: time.UnixMilli(int64(ms)), Rand: r}, true
}

// ParseGlobalIDString is ParseGlobalID for text.
func ParseGlobalIDString(s string) (GlobalID, bool) { return ParseGlobalID([]byte(s)) }

// Owned reports whether x is a branch created by this project, and if so its
// global transaction and branch index. Foreign and malformed XIDs give false.
func Owned(x XID) (g GlobalID, branch int, ok bool) {
	if x.FormatID != FormatID {
		return GlobalID{}, 0, false
	}
	g, ok = ParseGlobalID(x.Gtrid)
	if !ok {
		return GlobalID{}, 0, false
	}
	q := string(x.Bqual)
	if q == "" || len(q) > 4 || (len(q) > 1 && q[0] == '0') {
		return GlobalID{}, 0, false
	}
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] < '0' || q[i] > '9' {
			return GlobalID{}, 0, false
		}
		n = n*10 + int(q[i]-'0')
	}
	return g, n, true
}
