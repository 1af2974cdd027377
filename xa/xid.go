package xa

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Limits of an XID, from the X/Open XA specification and enforced by MySQL.
const (
	MaxGtridLen = 64 // bytes in the global transaction id
	MaxBqualLen = 64 // bytes in the branch qualifier
	// MaxTextLen bounds XID.String: below PostgreSQL's 200-byte gid limit
	// for every valid XID.
	MaxTextLen = 199
)

// XID identifies one transaction branch: a format identifier, a global
// transaction id (gtrid) shared by all branches of a global transaction, and
// a branch qualifier (bqual). Both byte strings may hold arbitrary bytes.
//
// An XID is a value; the zero XID is invalid.
type XID struct {
	FormatID int32
	Gtrid    []byte
	Bqual    []byte
}

// Validate reports whether x can be sent to a database. The error wraps
// ErrInvalidXID and says which limit was broken. Resource managers call it
// before sending any SQL.
func (x XID) Validate() error {
	switch {
	case x.FormatID < 0:
		return fmt.Errorf("%w: formatID %d is negative", ErrInvalidXID, x.FormatID)
	case len(x.Gtrid) == 0:
		return fmt.Errorf("%w: empty gtrid", ErrInvalidXID)
	case len(x.Gtrid) > MaxGtridLen:
		return fmt.Errorf("%w: gtrid is %d bytes, the limit is %d", ErrInvalidXID, len(x.Gtrid), MaxGtridLen)
	case len(x.Bqual) > MaxBqualLen:
		return fmt.Errorf("%w: bqual is %d bytes, the limit is %d", ErrInvalidXID, len(x.Bqual), MaxBqualLen)
	}
	return nil
}

// Equal reports whether x and y name the same branch.
func (x XID) Equal(y XID) bool {
	return x.FormatID == y.FormatID && bytes.Equal(x.Gtrid, y.Gtrid) && bytes.Equal(x.Bqual, y.Bqual)
}

// IsZero reports whether x is the zero XID.
func (x XID) IsZero() bool {
	return x.FormatID == 0 && len(x.Gtrid) == 0 && len(x.Bqual) == 0
}

// String returns the canonical text form "formatID:gtrid:bqual". A part made
// only of the characters A-Z a-z 0-9 '.' '-' is written as is; any other part
// (including an empty one) is written as '~' followed by its unpadded
// base64url encoding. The text of a valid XID is at most MaxTextLen bytes,
// so it is also the PostgreSQL gid of the branch. ParseXID inverts it.
func (x XID) String() string {
	var b strings.Builder
	b.Grow(16 + len(x.Gtrid) + len(x.Bqual))
	b.WriteString(strconv.FormatInt(int64(x.FormatID), 10))
	b.WriteByte(':')
	encodePart(&b, x.Gtrid)
	b.WriteByte(':')
	encodePart(&b, x.Bqual)
	return b.String()
}

// ParseXID parses the canonical text form written by XID.String. It accepts
// only canonical text: for every s it accepts, ParseXID(s).String() == s.
// The error wraps ErrInvalidXID.
func ParseXID(s string) (XID, error) {
	bad := func(why string) (XID, error) {
		return XID{}, fmt.Errorf("%w: %q: %s", ErrInvalidXID, truncate(s, 80), why)
	}
	if len(s) > MaxTextLen {
		return bad("too long")
	}
	f, rest, ok := strings.Cut(s, ":")
	if !ok {
		return bad("want formatID:gtrid:bqual")
	}
	g, q, ok := strings.Cut(rest, ":")
	if !ok {
		return bad("want formatID:gtrid:bqual")
	}
	if f == "" || (len(f) > 1 && f[0] == '0') || f[0] == '+' || f[0] == '-' {
		return bad("formatID is not a canonical non-negative decimal")
	}
	fid, err := strconv.ParseInt(f, 10, 32)
	if err != nil || fid < 0 {
		return bad("formatID is not a non-negative 32-bit integer")
	}
	gtrid, ok := decodePart(g)
	if !ok {
		return bad("malformed gtrid")
	}
	bqual, ok := decodePart(q)
	if !ok {
		return bad("malformed bqual")
	}
	x := XID{FormatID: int32(fid), Gtrid: gtrid, Bqual: bqual}
	if err := x.Validate(); err != nil {
		return XID{}, err
	}
	return x, nil
}

func plainPart(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	for _, c := range p {
		if !plainByte(c) {
			return false
		}
	}
	return true
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-'
}

func encodePart(b *strings.Builder, p []byte) {
	if plainPart(p) {
		b.Write(p)
		return
	}
	b.WriteByte('~')
	b.WriteString(base64.RawURLEncoding.EncodeToString(p))
}

func decodePart(s string) ([]byte, bool) {
	if s == "" {
		return nil, false
	}
	if s[0] != '~' {
		if !plainPart([]byte(s)) {
			return nil, false
		}
		return []byte(s), true
	}
	p, err := base64.RawURLEncoding.Strict().DecodeString(s[1:])
	if err != nil || plainPart(p) {
		// A plain part written encoded is not canonical.
		return nil, false
	}
	if p == nil {
		p = []byte{}
	}
	return p, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
