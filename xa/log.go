package xa

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// DecisionLog stores commit decisions. The transaction manager writes a
// record before it tells any branch to commit and forgets it once every
// branch has acknowledged; presumed abort means nothing is written for an
// abort. Implementations live in recovery/.
type DecisionLog interface {
	// LogCommit makes rec durable. It returns nil only once the record
	// survives a crash of the process and of the machine; concurrent
	// calls may share one sync. An error means the decision may or may
	// not be durable: the caller must not commit any branch and must
	// treat the outcome as unknown until recovery reads the log.
	LogCommit(ctx context.Context, rec CommitRecord) error

	// Forget says that every branch of id has acknowledged its commit,
	// so the record may be dropped. It need not be durable: a forgotten
	// record that comes back after a crash is resolved and forgotten
	// again by recovery.
	Forget(ctx context.Context, id GlobalID) error
}

// CommitRecord is a durable commit decision.
type CommitRecord struct {
	ID       GlobalID
	Logged   time.Time // when the decision was taken
	Branches []BranchRecord
}

// BranchRecord is one prepared branch that a commit decision covers.
type BranchRecord struct {
	RM     string // ResourceManager.Name
	XID    XID
	Origin Origin
}

const recordVersion = 1

// maxRMName bounds a participant name in records.
const maxRMName = 1 << 10

// ErrCorruptRecord is wrapped by UnmarshalBinary errors.
var ErrCorruptRecord = errors.New("xa: corrupt decision record")

// MarshalBinary encodes r in a compact, versioned binary form. Decision
// logs add their own framing and checksums around it.
func (r CommitRecord) MarshalBinary() ([]byte, error) {
	// Refuse what UnmarshalBinary would refuse: a record that cannot be
	// read back must never reach a log.
	if r.ID.IsZero() {
		return nil, fmt.Errorf("xa: commit record without a global id")
	}
	if err := ValidateNode(r.ID.Node); err != nil {
		return nil, fmt.Errorf("xa: commit record: %w", err)
	}
	if len(r.Branches) > maxBranchIdx+1 {
		return nil, fmt.Errorf("xa: commit record with %d branches", len(r.Branches))
	}
	b := make([]byte, 0, 64+48*len(r.Branches))
	b = append(b, recordVersion)
	b = appendString(b, r.ID.String())
	b = binary.AppendVarint(b, r.Logged.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(r.Branches)))
	for _, br := range r.Branches {
		if err := br.XID.Validate(); err != nil {
			return nil, err
		}
		if len(br.RM) > maxRMName {
			return nil, fmt.Errorf("xa: commit record: participant name of %d bytes, the limit is %d", len(br.RM), maxRMName)
		}
		b = appendString(b, br.RM)
		b = binary.AppendUvarint(b, uint64(uint32(br.XID.FormatID)))
		b = appendString(b, string(br.XID.Gtrid))
		b = appendString(b, string(br.XID.Bqual))
		b = binary.AppendUvarint(b, br.Origin.Session)
		var prepared int64
		if !br.Origin.Prepared.IsZero() {
			prepared = br.Origin.Prepared.UnixNano()
		}
		b = binary.AppendVarint(b, prepared)
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Errors wrap
// ErrCorruptRecord.
func (r *CommitRecord) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != recordVersion {
		return fmt.Errorf("%w: unknown version %d", ErrCorruptRecord, v)
	}
	gid := d.string(MaxGtridLen)
	logged := d.varint()
	n := d.uvarint()
	if d.err == nil && n > maxBranchIdx+1 {
		return fmt.Errorf("%w: %d branches", ErrCorruptRecord, n)
	}
	var out CommitRecord
	for i := uint64(0); i < n && d.err == nil; i++ {
		var br BranchRecord
		br.RM = d.string(maxRMName)
		f := d.uvarint()
		if f > 1<<31-1 {
			d.fail("formatID out of range")
		}
		br.XID.FormatID = int32(f)
		br.XID.Gtrid = []byte(d.string(MaxGtridLen))
		br.XID.Bqual = []byte(d.string(MaxBqualLen))
		br.Origin.Session = d.uvarint()
		if p := d.varint(); p != 0 {
			br.Origin.Prepared = time.Unix(0, p)
		}
		out.Branches = append(out.Branches, br)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptRecord, d.err)
	}
	id, ok := ParseGlobalIDString(gid)
	if !ok {
		return fmt.Errorf("%w: global id %q is not ours", ErrCorruptRecord, truncate(gid, 80))
	}
	out.ID = id
	out.Logged = time.Unix(0, logged)
	*r = out
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = errors.New(why)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail("short record")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(max int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("string length out of range")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// Outcome is the fate of a branch or transaction.
type Outcome int

const (
	OutcomeCommit Outcome = 1 + iota
	OutcomeRollback
)

func (o Outcome) String() string {
	switch o {
	case OutcomeCommit:
		return "commit"
	case OutcomeRollback:
		return "rollback"
	}
	return "Outcome(invalid)"
}

// HeuristicRecord remembers a manual resolution of one branch (xactl commit
// or rollback). Forced is set when it contradicted the decision log. Such
// records are kept until an operator clears them, so that list and log show
// every heuristic outcome.
type HeuristicRecord struct {
	RM     string
	XID    XID
	Action Outcome // what was done to the branch
	Forced bool    // the action contradicted the decision log
	Time   time.Time
	Reason string // free text from the operator
}

const heuristicVersion = 1

// maxReason bounds an operator's reason in a heuristic record.
const maxReason = 1 << 16

// MarshalBinary encodes h in a compact, versioned binary form.
func (h HeuristicRecord) MarshalBinary() ([]byte, error) {
	if err := h.XID.Validate(); err != nil {
		return nil, err
	}
	if h.Action != OutcomeCommit && h.Action != OutcomeRollback {
		return nil, fmt.Errorf("xa: heuristic record with action %v", h.Action)
	}
	if len(h.RM) > maxRMName || len(h.Reason) > maxReason {
		return nil, fmt.Errorf("xa: heuristic record: participant name or reason too long")
	}
	b := []byte{heuristicVersion}
	b = appendString(b, h.RM)
	b = binary.AppendUvarint(b, uint64(uint32(h.XID.FormatID)))
	b = appendString(b, string(h.XID.Gtrid))
	b = appendString(b, string(h.XID.Bqual))
	b = append(b, byte(h.Action))
	if h.Forced {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendVarint(b, h.Time.UnixNano())
	b = appendString(b, h.Reason)
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Errors wrap
// ErrCorruptRecord.
func (h *HeuristicRecord) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != heuristicVersion {
		return fmt.Errorf("%w: unknown heuristic version %d", ErrCorruptRecord, v)
	}
	var out HeuristicRecord
	out.RM = d.string(maxRMName)
	f := d.uvarint()
	if f > 1<<31-1 {
		d.fail("formatID out of range")
	}
	out.XID.FormatID = int32(f)
	out.XID.Gtrid = []byte(d.string(MaxGtridLen))
	out.XID.Bqual = []byte(d.string(MaxBqualLen))
	out.Action = Outcome(d.byte())
	forced := d.byte()
	out.Time = time.Unix(0, d.varint())
	out.Reason = d.string(maxReason)
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil && (out.Action != OutcomeCommit && out.Action != OutcomeRollback || forced > 1) {
		d.fail("bad action or flag")
	}
	if d.err == nil {
		if err := out.XID.Validate(); err != nil {
			d.fail(err.Error())
		}
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptRecord, d.err)
	}
	out.Forced = forced == 1
	*h = out
	return nil
}
