package sink

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xadb/xa/xa"
)

// FormatID is the XA format identifier of every branch a sink creates ("xs"
// and version 1 in its high bytes). The transaction manager's recovery
// (format xa.FormatID) never touches these branches; the sink's restore
// touches only its own sink's.
const FormatID int32 = 0x78730001

const (
	gtridPrefix = "xs1."
	// MaxNameLen bounds a sink's name.
	MaxNameLen = 24
	// MaxTargetLen bounds a target's name: it is the branch qualifier.
	MaxTargetLen = xa.MaxBqualLen
	// MaxCheckpoint is the largest checkpoint number an XID can carry
	// (12 hex digits).
	MaxCheckpoint = 1<<48 - 1
	// externalBit marks the incarnation field of an externally driven
	// member: 1<<62 | member<<32 | generation. Incarnations allocated by
	// self-driven instances stay below it.
	externalBit = uint64(1) << 62
	// MaxMember is the largest member number of an externally driven sink.
	MaxMember = 1<<30 - 1
)

// Ref is what a sink branch's XID says: the sink, the instance that wrote
// it (its incarnation, or an external member and generation), the
// checkpoint, and the target (participant) the branch is on. Its XID is
//
//	format 0x78730001, gtrid xs1.<sink>.<incarnation: 16 hex>.<checkpoint: 12 hex>, bqual <target>
type Ref struct {
	Sink        string
	Incarnation uint64
	Checkpoint  uint64
	Target      string
}

// ExternalIncarnation returns the incarnation field that stands for member
// and generation of an externally driven sink. It panics if member is
// above MaxMember.
func ExternalIncarnation(member, generation uint32) uint64 {
	if member > MaxMember {
		panic(fmt.Sprintf("sink: member %d above %d", member, MaxMember))
	}
	return externalBit | uint64(member)<<32 | uint64(generation)
}

// External reports whether r names a branch of an externally driven
// member (see ExternalIncarnation).
func (r Ref) External() bool { return r.Incarnation&externalBit != 0 }

// Member and Generation decode an external incarnation; both are 0 for a
// self-driven one.
func (r Ref) Member() uint32 {
	if !r.External() {
		return 0
	}
	return uint32(r.Incarnation>>32) & MaxMember
}

// Generation: see Member.
func (r Ref) Generation() uint32 {
	if !r.External() {
		return 0
	}
	return uint32(r.Incarnation)
}

// Gtrid returns the global transaction id of r's checkpoint, shared by its
// branches on every target.
func (r Ref) Gtrid() string {
	b := make([]byte, 0, len(gtridPrefix)+len(r.Sink)+1+16+1+12)
	b = append(b, gtridPrefix...)
	b = append(b, r.Sink...)
	b = append(b, '.')
	b = appendHex(b, r.Incarnation, 16)
	b = append(b, '.')
	b = appendHex(b, r.Checkpoint, 12)
	return string(b)
}

// XID returns the branch's XID. r must be valid (Validate).
func (r Ref) XID() xa.XID {
	return xa.XID{FormatID: FormatID, Gtrid: []byte(r.Gtrid()), Bqual: []byte(r.Target)}
}

// Validate reports whether r can be written as an XID that ParseXID reads
// back.
func (r Ref) Validate() error {
	if err := ValidateName(r.Sink); err != nil {
		return err
	}
	if err := ValidateTarget(r.Target); err != nil {
		return err
	}
	if r.Checkpoint > MaxCheckpoint {
		return fmt.Errorf("%w: checkpoint %d above %d", ErrConfig, r.Checkpoint, uint64(MaxCheckpoint))
	}
	if r.Incarnation >= 1<<63 {
		// Incarnations are stored as signed 64-bit integers.
		return fmt.Errorf("%w: incarnation %#x has bit 63 set", ErrConfig, r.Incarnation)
	}
	return nil
}

// String returns "sink/incarnation/checkpoint@target" (member and generation
// for external members), for logs and xactl.
func (r Ref) String() string {
	who := strconv.FormatUint(r.Incarnation, 10)
	if r.External() {
		who = fmt.Sprintf("m%d.g%d", r.Member(), r.Generation())
	}
	s := r.Sink + "/" + who + "/" + strconv.FormatUint(r.Checkpoint, 10)
	if r.Target != "" {
		s += "@" + r.Target
	}
	return s
}

// ParseXID reports whether x is a branch of some sink and, if so, what its
// XID says. Foreign and malformed XIDs give false. Every XID it accepts is
// the XID of the Ref it returns (r.XID().Equal(x)); xactl uses it to show
// sink branches with their checkpoint.
func ParseXID(x xa.XID) (Ref, bool) {
	if x.FormatID != FormatID {
		return Ref{}, false
	}
	g := string(x.Gtrid)
	if !strings.HasPrefix(g, gtridPrefix) {
		return Ref{}, false
	}
	rest := g[len(gtridPrefix):]
	// <sink>.<16 hex>.<12 hex>: the sink holds no '.', so cut from the
	// right.
	if len(rest) < 1+1+16+1+12 {
		return Ref{}, false
	}
	cp := rest[len(rest)-12:]
	inc := rest[len(rest)-12-1-16 : len(rest)-12-1]
	if rest[len(rest)-13] != '.' || rest[len(rest)-13-17] != '.' {
		return Ref{}, false
	}
	name := rest[:len(rest)-13-17]
	if ValidateName(name) != nil || !lowerHex(inc) || !lowerHex(cp) {
		return Ref{}, false
	}
	i, err1 := strconv.ParseUint(inc, 16, 64)
	c, err2 := strconv.ParseUint(cp, 16, 64)
	if err1 != nil || err2 != nil {
		return Ref{}, false
	}
	r := Ref{Sink: name, Incarnation: i, Checkpoint: c, Target: string(x.Bqual)}
	if r.Validate() != nil {
		return Ref{}, false
	}
	return r, true
}

// ValidateName reports whether name can name a sink: 1 to 24 characters
// from A-Z a-z 0-9 '_' '-'.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: sink name %q must be 1 to %d characters", ErrConfig, name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: sink name %q may hold only A-Z a-z 0-9 _ -", ErrConfig, name)
		}
	}
	return nil
}

// ValidateTarget reports whether name can name a target: 1 to 64
// characters from A-Z a-z 0-9 '_' '-' '.' (it is the branch qualifier,
// and xa.XID.String writes it as is).
func ValidateTarget(name string) error {
	if name == "" || len(name) > MaxTargetLen {
		return fmt.Errorf("%w: target name %q must be 1 to %d characters", ErrConfig, name, MaxTargetLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: target name %q may hold only A-Z a-z 0-9 _ - .", ErrConfig, name)
		}
	}
	return nil
}

func appendHex(b []byte, v uint64, n int) []byte {
	const digits = "0123456789abcdef"
	for i := n - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
