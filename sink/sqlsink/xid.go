package sqlsink

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xadb/xa/sink"
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
	b = xa.AppendHex(b, r.Incarnation, 16)
	b = append(b, '.')
	b = xa.AppendHex(b, r.Checkpoint, 12)
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
	if r.Checkpoint > sink.MaxCheckpoint {
		return fmt.Errorf("%w: checkpoint %d above %d", sink.ErrConfig, r.Checkpoint, uint64(sink.MaxCheckpoint))
	}
	if r.Incarnation >= 1<<63 {
		// Incarnations are stored as signed 64-bit integers.
		return fmt.Errorf("%w: incarnation %#x has bit 63 set", sink.ErrConfig, r.Incarnation)
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
	i, ok1 := xa.ParseHex(inc, 16)
	c, ok2 := xa.ParseHex(cp, 12)
	if ValidateName(name) != nil || !ok1 || !ok2 {
		return Ref{}, false
	}
	r := Ref{Sink: name, Incarnation: i, Checkpoint: c, Target: string(x.Bqual)}
	if r.Validate() != nil {
		return Ref{}, false
	}
	return r, true
}

// ValidateName reports whether name can name a sink: 1 to 24 characters
// from A-Z a-z 0-9 '_' '-' (xa.ValidateIdent: the gtrid holds it between
// dots).
func ValidateName(name string) error {
	if err := xa.ValidateIdent("sink name", name, MaxNameLen, ""); err != nil {
		return fmt.Errorf("%w: %w", sink.ErrConfig, err)
	}
	return nil
}

// ValidateTarget reports whether name can name a target: 1 to 64
// characters from A-Z a-z 0-9 '_' '-' '.' (xa.ValidateIdent: it is the
// branch qualifier, and xa.XID.String writes it as is).
func ValidateTarget(name string) error {
	if err := xa.ValidateIdent("target name", name, MaxTargetLen, "."); err != nil {
		return fmt.Errorf("%w: %w", sink.ErrConfig, err)
	}
	return nil
}
