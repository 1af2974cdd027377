package xa

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A decision is trusted only from the store that made it (docs/protocol.md,
// "Identity"). Everything recovery finds by a name — a participant, a
// decision table — may, on another day, resolve to another store: another
// database of the same server, a staging copy, a table in another schema
// of the search path, an empty table created by whoever opened it first.
// Such a store answers "nothing prepared" or "no decision", which recovery
// would read as "finished" (and forget a commit record) or as "never
// decided" (and presume abort). So every such store carries an identity,
// written into it once by an explicit act, and the decision log records the
// identity of every participant and decision table under the name the
// coordinator used; recovery acts on a store only when the identity it
// answers with is the recorded one.

// StoreIdentity is the identity of a store that holds branches or
// decisions: a participant's database, or a decision table in it. It is
// the data's, not the process's or the address's: it is written into the
// store when the store is set up (xactl participant init, or a driver's
// Config.Init), survives restarts and a promoted physical replica, and
// differs for another database, another server or a new table.
type StoreIdentity struct {
	// ID is random (NewStoreID), 32 lower-case hex digits; "" for none.
	ID string
	// Where says what the store is, for operators (kind, server,
	// database, schema, table). It is not compared.
	Where string
}

// IsZero reports whether s names no store.
func (s StoreIdentity) IsZero() bool { return s.ID == "" }

// Same reports whether s and o are the same store: both have an id, and it
// is the same.
func (s StoreIdentity) Same(o StoreIdentity) bool { return s.ID != "" && s.ID == o.ID }

func (s StoreIdentity) String() string {
	switch {
	case s.ID == "" && s.Where != "":
		return "none (" + s.Where + ")"
	case s.ID == "":
		return "none"
	case s.Where == "":
		return s.ID
	}
	return s.ID + " (" + s.Where + ")"
}

// storeIDLen is the length of a StoreIdentity.ID: 128 random bits in hex.
const storeIDLen = 32

// maxWhere bounds StoreIdentity.Where in records.
const maxWhere = 512

// NewStoreID returns a fresh random store id.
func NewStoreID() (string, error) {
	var b [storeIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("xa: no randomness for a store id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidateStoreID reports whether id is a store id as NewStoreID makes them.
func ValidateStoreID(id string) error {
	if len(id) != storeIDLen {
		return fmt.Errorf("xa: store id %q: want %d hex digits", truncate(id, 80), storeIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("xa: store id %q: want lower-case hex digits", truncate(id, 80))
		}
	}
	return nil
}

// ErrIdentity is matched by every IdentityError: a store answered under a
// name with another identity than the one recorded when decisions were
// made there, or with none, or it is a store nothing may be decided from
// (a standby). Nothing was done on its strength.
var ErrIdentity = errors.New("xa: the store that answered is not the one recorded")

// IdentityError says which store was expected under a name, which one
// answered, and how to fix the configuration. errors.Is(err, ErrIdentity)
// holds.
type IdentityError struct {
	// Store names what was looked for, e.g. `participant "pg"` or
	// `decision table of participant "pg"`.
	Store string
	// Expected is the identity recorded (zero when none was recorded).
	Expected StoreIdentity
	// Found is the identity of what answered (zero when it has none).
	Found StoreIdentity
	// Why says what differs, in words.
	Why string
	// Fix says what to do.
	Fix string
}

func (e *IdentityError) Error() string {
	var b strings.Builder
	b.WriteString("xa: ")
	b.WriteString(e.Store)
	b.WriteString(": ")
	if e.Why != "" {
		b.WriteString(e.Why)
	} else {
		b.WriteString("another store answered than the one recorded")
	}
	if !e.Expected.IsZero() {
		fmt.Fprintf(&b, "; expected %s", e.Expected)
	}
	if !e.Found.IsZero() || e.Found.Where != "" {
		fmt.Fprintf(&b, "; found %s", e.Found)
	}
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns ErrIdentity.
func (e *IdentityError) Unwrap() error { return ErrIdentity }

// Identified is implemented by resource managers whose database carries a
// StoreIdentity. The coordinator records it in the decision log (as a
// ParticipantRecord) before it prepares any branch there, and recovery
// acts on the participant only while it answers with the recorded one.
type Identified interface {
	// Identity returns the identity of the participant's database, read
	// when the resource manager was opened; every session it opens later
	// is checked against it. An error matching ErrIdentity (an
	// *IdentityError) says that the database has none (it was never set
	// up: xactl participant init), or that it is one nothing may be
	// decided from (a standby, a read-only replica).
	Identity() (StoreIdentity, error)
}

// ParticipantRecord is the decision log's record of the store a
// participant's name denotes: written once per log and participant, before
// the first branch on it is prepared, and compared by recovery with what
// the configured participant answers.
type ParticipantRecord struct {
	Name     string
	Identity StoreIdentity
	Logged   time.Time
}

const participantVersion = 1

// Validate reports whether p can be recorded.
func (p ParticipantRecord) Validate() error {
	switch {
	case p.Name == "" || len(p.Name) > maxRMName:
		return fmt.Errorf("xa: participant record: name of %d bytes (1 to %d)", len(p.Name), maxRMName)
	case len(p.Identity.Where) > maxWhere:
		return fmt.Errorf("xa: participant record: description of %d bytes, the limit is %d", len(p.Identity.Where), maxWhere)
	}
	return ValidateStoreID(p.Identity.ID)
}

// MarshalBinary encodes p in a compact, versioned binary form.
func (p ParticipantRecord) MarshalBinary() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b := []byte{participantVersion}
	b = appendString(b, p.Name)
	b = appendString(b, p.Identity.ID)
	b = appendString(b, p.Identity.Where)
	b = binary.AppendVarint(b, unixNanos(p.Logged))
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Errors wrap
// ErrCorruptRecord.
func (p *ParticipantRecord) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != participantVersion {
		return fmt.Errorf("%w: unknown participant record version %d", ErrCorruptRecord, v)
	}
	var out ParticipantRecord
	out.Name = d.string(maxRMName)
	out.Identity.ID = d.string(storeIDLen)
	out.Identity.Where = d.string(maxWhere)
	if ns := d.varint(); ns != 0 {
		out.Logged = time.Unix(0, ns)
	}
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
	*p = out
	return nil
}

// MaxTableName bounds a decision table's fully qualified name in records.
const MaxTableName = 1 << 10

// DecisionTable is implemented by branches and resource managers that keep
// commit decisions in a table of their own database (a last resource). The
// coordinator records the table's name and identity in the delegation
// before the first last-resource commit through it; recovery trusts a
// decision table, and its absence of a decision, only while it answers
// with that identity.
type DecisionTable interface {
	// DecisionTableIdentity returns the table's fully qualified name
	// (schema.table) and its identity, read when the participant was
	// opened. An error matching ErrIdentity says the table has none (it
	// was not made by an explicit act) or is missing.
	DecisionTableIdentity() (table string, id StoreIdentity, err error)
}

// unixNanos returns t in Unix nanoseconds, 0 for the zero time.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// MergeParticipant is the rule every decision log applies to LogParticipant:
// given the record it holds for p.Name (ok: one exists) it says whether to
// store p, or refuses it with an *IdentityError when p names another store.
func MergeParticipant(held ParticipantRecord, ok bool, p ParticipantRecord) (store bool, err error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	switch {
	case !ok:
		return true, nil
	case held.Identity.Same(p.Identity):
		return false, nil
	}
	return false, &IdentityError{
		Store:    fmt.Sprintf("participant %q", p.Name),
		Expected: held.Identity, Found: p.Identity,
		Why: "the decision log recorded another database under this name: its decisions and branches are there, " +
			"and recovery acts only on that one",
		Fix: "point the participant at the database the log recorded (check its DSN and role), " +
			"or give the new database another participant name",
	}
}

// MergeDelegation is the rule every decision log applies to LogDelegation:
// given the delegation it holds for d.Participant (ok: one exists) it says
// whether to store d (new, or completing one recorded before decision
// tables had identities), or refuses it with an *IdentityError when d names
// another decision table than the one recorded.
func MergeDelegation(held Delegation, ok bool, d Delegation) (store bool, err error) {
	if err := d.Validate(); err != nil {
		return false, err
	}
	switch {
	case !ok:
		return true, nil
	case held.TableID == "":
		return d.TableID != "", nil
	case d.TableID == "" || held.SameTable(d):
		return false, nil
	}
	return false, &IdentityError{
		Store:    fmt.Sprintf("decision table of participant %q", d.Participant),
		Expected: StoreIdentity{ID: held.TableID, Where: held.Table},
		Found:    StoreIdentity{ID: d.TableID, Where: d.Table},
		Why:      "the decision log delegated decisions to another table of this participant: decisions may be stored there",
		Fix:      fmt.Sprintf("configure the participant's decision table as %s (schema-qualified)", held.Table),
	}
}
