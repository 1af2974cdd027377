package xa

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// DecisionLog is the decision log as the coordinator uses it. The
// transaction manager writes a commit record before it tells any branch to
// commit and forgets it once every branch has acknowledged; presumed abort
// means the coordinator writes nothing for an abort. Recovery's view of the
// same log is RecoveryLog; implementations live in recovery/ and pass the
// conformance suite in recovery/logtest.
//
// COMMIT and ABORT records of one global id exclude each other: of a
// coordinator's LogCommit and a recovery scanner's LogAbort for the same id,
// exactly one succeeds, whatever the timing (docs/protocol.md).
type DecisionLog interface {
	// Identity returns the log's identity, fixed when it was created.
	Identity() LogIdentity

	// LogCommit makes rec durable. It returns nil only once the record
	// survives a crash of the process and of the machine; concurrent
	// calls may share one sync.
	//
	// If an abort record exists for rec.ID, or is being written, the
	// record is refused with an error matching ErrAbortRecorded: nothing
	// was logged and the transaction is aborted. A log that can tell time
	// may also refuse a record whose transaction began more than
	// Identity().Timeout ago by its clock, with an error matching
	// ErrDecisionTooLate: nothing was logged. A log held under a lease
	// (recovery/sqllog) refuses every decision of a writer whose lease
	// epoch moved on, with an error matching ErrFenced: nothing was
	// logged. Any other error means the decision may or may not be
	// durable: the caller must not commit any branch and must treat the
	// outcome as unknown until recovery reads the log.
	LogCommit(ctx context.Context, rec CommitRecord) error

	// LogDelegation durably records that commit decisions of this log's
	// transactions may live in the decision table d names (a last
	// resource, see LastResource), with the table's identity. The
	// coordinator calls it before the first last-resource commit through
	// that participant; recovery then refuses to presume abort without
	// that table's decisions, read from a table that answers with that
	// identity. Recording the same delegation again is a no-op; one that
	// names another table identity for a participant delegated to already
	// is refused with an *IdentityError (nothing is logged): decisions of
	// this log may be in the recorded table. A delegation recorded before
	// identities (no TableID) is completed by one that has it.
	LogDelegation(ctx context.Context, d Delegation) error

	// LogParticipant durably records which store the participant p.Name
	// denotes (p.Identity). The coordinator calls it before it prepares
	// the first branch on the participant; recovery then acts on that
	// participant only while it answers with that identity. Recording the
	// same again is a no-op; another identity under a name recorded
	// already is refused with an *IdentityError and nothing is logged.
	LogParticipant(ctx context.Context, p ParticipantRecord) error

	// LogHeuristic makes h durable, like LogCommit. The record is kept
	// until an operator clears it.
	LogHeuristic(ctx context.Context, h HeuristicRecord) error

	// LookupAbort reports whether an abort record exists for id.
	LookupAbort(ctx context.Context, id GlobalID) (AbortRecord, bool, error)

	// Forget says that every branch of id has acknowledged its commit,
	// so the record may be dropped. It need not be durable: a forgotten
	// record that comes back after a crash is resolved and forgotten
	// again by recovery.
	Forget(ctx context.Context, id GlobalID) error
}

// RecoveryLog is the decision log as recovery (the scanner, xactl) uses it:
// the coordinator's operations and the reads and writes of presumed abort.
type RecoveryLog interface {
	DecisionLog

	// Commits returns every commit record not yet forgotten, oldest first.
	Commits(ctx context.Context) ([]CommitRecord, error)
	// Lookup returns the commit record of id, if any.
	Lookup(ctx context.Context, id GlobalID) (CommitRecord, bool, error)

	// LogAbort makes rec durable before recovery rolls back any branch of
	// rec.ID (presumed abort). If a commit record exists for rec.ID, or
	// is being written, it is refused with an error matching
	// ErrCommitRecorded and nothing is logged: the transaction committed.
	// Logging an abort that exists already is a no-op. Any other error: the
	// abort may or may not be durable; nothing may be rolled back on its
	// strength.
	LogAbort(ctx context.Context, rec AbortRecord) error
	// Aborts returns every abort record not yet forgotten, oldest first.
	Aborts(ctx context.Context) ([]AbortRecord, error)
	// ForgetAbort drops the abort record of id. Recovery calls it once no
	// branch of id is left and the record's KeptUntil(Identity().Timeout)
	// has passed. The log judges that by its own clock (which stamped the
	// record) and refuses, keeping the record, until then: a recovery
	// process whose clock runs ahead cannot shorten the fence's life.
	ForgetAbort(ctx context.Context, id GlobalID) error

	// Delegations returns the participants whose decision tables may hold
	// decisions of this log's transactions.
	Delegations(ctx context.Context) ([]Delegation, error)

	// Participants returns the participant records (LogParticipant), by
	// name.
	Participants(ctx context.Context) ([]ParticipantRecord, error)

	// Heuristics returns the heuristic records not cleared, oldest first.
	Heuristics(ctx context.Context) ([]HeuristicRecord, error)
	// ClearHeuristic drops the heuristic records of branch x on
	// participant rm, durably.
	ClearHeuristic(ctx context.Context, rm string, x XID) error
}

// Errors of the fence between a commit decision and presumed abort.
var (
	// ErrAbortRecorded: LogCommit was refused because recovery recorded an
	// abort for the transaction first. Nothing was logged; the transaction
	// aborts.
	ErrAbortRecorded = errors.New("xa: an abort is recorded for this transaction (presumed abort won the race)")

	// ErrCommitRecorded: LogAbort (or an abort marker in a decision table)
	// was refused because a commit decision exists or is being written.
	// The transaction commits; nothing may be rolled back.
	ErrCommitRecorded = errors.New("xa: a commit decision is recorded for this transaction")

	// ErrFenced: a decision log held under a lease refused the write
	// because the writer's lease epoch moved on: another process took the
	// log over (docs/protocol.md, "Leases, epochs, takeover"). The database
	// refused it, so nothing was written: a LogCommit refused so logged
	// nothing, and the transaction aborts (the process that took the log
	// over rolls its branches back, or has).
	ErrFenced = errors.New("xa: the decision log's lease was taken over (the writer's epoch moved on): nothing was written")
)

// AbortRetention is how long an abort record is kept, at least, after it
// was logged and after its transaction's commit deadline passed (see
// AbortRecord.KeptUntil), before recovery forgets it. It covers a
// coordinator that paused, or a clock that stepped, for that long.
const AbortRetention = 24 * time.Hour

// LogIdentity says which log a log is. It is written once, when the log is
// created, and never changes.
type LogIdentity struct {
	// ID is random, unique to this log; every branch XID of its
	// transactions carries it.
	ID LogID
	// Node is the transaction-manager node whose decisions the log holds.
	Node string
	// Created is when the log was created.
	Created time.Time
	// Timeout is the global transaction timeout of the log's coordinators:
	// a Manager takes it as its default and refuses a longer one.
	Timeout time.Duration
	// Grace is how old a prepared branch without a decision must be before
	// recovery presumes it aborted: at least Timeout plus the coordinator's
	// phase-2 retry budget (see GracePeriod).
	Grace time.Duration
}

// NewLogIdentity returns the identity of a new log for node, with a fresh
// ID, the given timeout (0: DefaultTimeout) and grace (0: GracePeriod of the
// timeout).
func NewLogIdentity(node string, timeout, grace time.Duration, now time.Time) (LogIdentity, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if grace <= 0 {
		grace = GracePeriod(timeout)
	}
	id, err := NewLogID()
	if err != nil {
		return LogIdentity{}, err
	}
	li := LogIdentity{ID: id, Node: node, Created: now.Round(0), Timeout: timeout, Grace: grace}
	return li, li.Validate()
}

// Validate reports whether li is complete and consistent.
func (li LogIdentity) Validate() error {
	switch {
	case li.ID == 0:
		return errors.New("xa: log identity without an id")
	case li.Created.IsZero():
		return errors.New("xa: log identity without a creation time")
	case li.Timeout <= 0:
		return fmt.Errorf("xa: log identity: timeout %v must be positive", li.Timeout)
	case li.Grace <= li.Timeout:
		return fmt.Errorf("xa: log identity: grace %v must exceed the timeout %v", li.Grace, li.Timeout)
	}
	return ValidateNode(li.Node)
}

const identityVersion = 1

// MarshalBinary encodes li in a compact, versioned binary form. Logs add
// their own framing and checksum.
func (li LogIdentity) MarshalBinary() ([]byte, error) {
	if err := li.Validate(); err != nil {
		return nil, err
	}
	b := []byte{identityVersion}
	b = binary.BigEndian.AppendUint64(b, uint64(li.ID))
	b = appendString(b, li.Node)
	b = binary.AppendVarint(b, li.Created.UnixNano())
	b = binary.AppendVarint(b, int64(li.Timeout))
	b = binary.AppendVarint(b, int64(li.Grace))
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Errors wrap
// ErrCorruptRecord.
func (li *LogIdentity) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != identityVersion {
		return fmt.Errorf("%w: unknown log identity version %d", ErrCorruptRecord, v)
	}
	var out LogIdentity
	if d.err == nil && len(d.b) >= 8 {
		out.ID = LogID(binary.BigEndian.Uint64(d.b))
		d.b = d.b[8:]
	} else {
		d.fail("short log id")
	}
	out.Node = d.string(maxNodeLen)
	out.Created = time.Unix(0, d.varint())
	out.Timeout = time.Duration(d.varint())
	out.Grace = time.Duration(d.varint())
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil {
		if err := out.Validate(); err != nil {
			d.fail(err.Error())
		}
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptRecord, d.err)
	}
	*li = out
	return nil
}

// Delegation says that a participant's decision table may hold commit
// decisions of a log's transactions (see DecisionLog.LogDelegation).
type Delegation struct {
	Participant string
	// Table is the decision table's fully qualified name (schema.table)
	// and TableID its identity (see DecisionTable), when the delegation
	// was recorded; both empty in a delegation recorded before decision
	// tables had identities.
	Table   string
	TableID string
	Logged  time.Time
}

// Validate reports whether d can be recorded.
func (d Delegation) Validate() error {
	switch {
	case d.Participant == "" || len(d.Participant) > maxRMName:
		return fmt.Errorf("xa: delegation: participant name of %d bytes (1 to %d)", len(d.Participant), maxRMName)
	case len(d.Table) > MaxTableName:
		return fmt.Errorf("xa: delegation: table name of %d bytes, the limit is %d", len(d.Table), MaxTableName)
	case d.TableID == "" && d.Table != "":
		return errors.New("xa: delegation: a table without an identity")
	case d.TableID != "":
		return ValidateStoreID(d.TableID)
	}
	return nil
}

// SameTable reports whether d and o name the same decision table by
// identity (false when either has none).
func (d Delegation) SameTable(o Delegation) bool { return d.TableID != "" && d.TableID == o.TableID }

// AbortRecord is a durable presumed-abort decision, written by recovery
// before it rolls back any branch of the transaction. It fences the
// coordinator: the log refuses a commit record for the same id.
type AbortRecord struct {
	ID     GlobalID
	Logged time.Time
	// Reason says who decided and why, for operators.
	Reason string
}

// KeptUntil returns the earliest time, by the log's clock, at which r may
// be forgotten, for a log whose identity has the given timeout: the later
// of r.Logged and the transaction's commit deadline (r.ID.Begun +
// timeout), plus AbortRetention. Until the deadline a log still accepts a
// commit record for r.ID were r gone, so r, the fence, must outlive it:
// measuring retention from Logged alone would let a log whose timeout
// exceeds AbortRetention forget an abort and then accept the commit.
func (r AbortRecord) KeptUntil(timeout time.Duration) time.Time {
	from := r.Logged
	if d := r.ID.Begun.Add(timeout); d.After(from) {
		from = d
	}
	return from.Add(AbortRetention)
}

// MarkerRetention is how long recovery keeps an abort marker in a
// participant's decision table (a last resource's fence), for a log whose
// identity has the given timeout. The marker carries no begin time, so it
// is kept AbortRetention past the longest a transaction it fences could
// still commit after the marker was stored.
func MarkerRetention(timeout time.Duration) time.Duration {
	return timeout + AbortRetention
}

const abortVersion = 1

// MarshalBinary encodes r in a compact, versioned binary form.
func (r AbortRecord) MarshalBinary() ([]byte, error) {
	if r.ID.IsZero() {
		return nil, errors.New("xa: abort record without a global id")
	}
	if err := ValidateNode(r.ID.Node); err != nil {
		return nil, fmt.Errorf("xa: abort record: %w", err)
	}
	if len(r.Reason) > maxReason {
		return nil, errors.New("xa: abort record: reason too long")
	}
	b := []byte{abortVersion}
	b = appendString(b, r.ID.String())
	b = binary.AppendVarint(b, r.Logged.UnixNano())
	b = appendString(b, r.Reason)
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Errors wrap
// ErrCorruptRecord.
func (r *AbortRecord) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != abortVersion {
		return fmt.Errorf("%w: unknown abort record version %d", ErrCorruptRecord, v)
	}
	gid := d.string(MaxGtridLen)
	logged := d.varint()
	reason := d.string(maxReason)
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
	*r = AbortRecord{ID: id, Logged: time.Unix(0, logged), Reason: reason}
	return nil
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
