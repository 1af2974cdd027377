package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// store is the sink's bookkeeping in the progress target: the tables
// xa_sink_progress, xa_sink_decisions and xa_sink_instances. Each method
// is one local transaction, committed before it returns.
type store interface {
	// setup creates the tables if they are missing.
	setup(ctx context.Context) error
	// tableExists reports whether a table ("table" or "schema.table")
	// exists, as the sink's statements would find it.
	tableExists(ctx context.Context, name string) (bool, error)
	// tableShape returns a table's columns and its unique keys, as the
	// sink's statements would find the table (exists is false if they
	// would not).
	tableShape(ctx context.Context, name string) (tableShape, error)
	// slots reports the server's prepared-transaction limit and use, when
	// its kind has one, and which server that is (databases of one
	// server share the slots).
	slots(ctx context.Context) (server string, max, inUse int, limited bool, err error)
	// allocate inserts a new instance row and returns its incarnation:
	// one more than the sink's highest self-driven incarnation.
	allocate(ctx context.Context, sink, host string, pid int) (uint64, error)
	// register records an external member's incarnation and raises the
	// sink's generation fence (xa_sink_generations) to its generation, in
	// one transaction. It refuses, with an error matching
	// errGenerationStale, a generation below the highest registered (a
	// later generation has started), and, matching errGenerationReused,
	// an incarnation (member and generation) registered already; both
	// wrap a *generationError.
	register(ctx context.Context, sink string, inc uint64, host string, pid int) error
	// take raises the epoch of each partition and makes inc its owner,
	// creating missing rows (epoch 1, empty position), and returns the
	// rows as they are now.
	take(ctx context.Context, sink string, inc uint64, parts []string) ([]PartitionStatus, error)
	// read returns the rows of parts (missing ones are left out).
	read(ctx context.Context, sink string, parts []string) ([]PartitionStatus, error)
	// decide is step 3: in one round trip, move the positions and insert
	// the decision row. An error matching errEpochMoved: nothing was
	// committed, a partition's row no longer carries the epoch and owner
	// (or, external, a generation above the committer's is registered:
	// read under a shared lock of the sink's generation fence row, which
	// register raises under an exclusive one, so that a registration
	// either sees the decision committed or refuses it).
	// Any other error: the decision may or may not have committed (claim
	// settles it).
	decide(ctx context.Context, d decision) error
	// claim inserts an abort marker under (sink, inc, txn) in its own
	// transaction, waiting for a decision of the same key in flight, and
	// returns the row that holds the key afterwards: the marker, or the
	// commit decision that won.
	claim(ctx context.Context, sink string, inc, txn uint64) (decisionRow, error)
	// lookup returns the rows held under keys.
	lookup(ctx context.Context, sink string, keys []txnKey) (map[txnKey]decisionRow, error)
	// owners returns the incarnations that own at least one partition.
	owners(ctx context.Context, sink string) (map[uint64]bool, error)
	// forget deletes decisions and markers decided before cutoff (by the
	// progress target's clock, as now() - age), except keep.
	forget(ctx context.Context, sink string, age time.Duration, keep []txnKey) (int, error)
	// status reads the progress and instance rows.
	status(ctx context.Context, sink string) (Status, error)
	// bindings returns the sink's rows of xa_sink_bindings in this
	// store, by target (none, without an error, when the table is
	// missing).
	bindings(ctx context.Context, sink string) (map[string]binding, error)
	// bind creates xa_sink_bindings if missing and stores b: a new row,
	// or the participant id of a row of the same ids that has none.
	bind(ctx context.Context, b binding) error
	// unbind deletes the sink's row of target.
	unbind(ctx context.Context, sink, target string) error
	// describe says which store this is, for operators: kind, database,
	// server, schema.
	describe(ctx context.Context) (string, error)
	close()
}

// errEpochMoved: the decision found a partition without the epoch and
// owner it was written under.
var errEpochMoved = errors.New("sink: a partition's epoch or owner moved on")

// txnKey is the key of a decision: the incarnation field and the
// checkpoint number of the XIDs.
type txnKey struct{ inc, txn uint64 }

// decisionRow is what a decision key holds.
type decisionRow struct {
	aborted bool
	origins string // see encodeOrigins
}

// decision is what step 3 writes.
type decision struct {
	sink    string
	inc     uint64
	txn     uint64
	parts   []PartitionPosition
	origins string
	// external: the progress rows are the caller's record, not a fence:
	// they are moved forward (by generation, then checkpoint) without
	// conditions.
	external   bool
	generation uint32
	checkpoint uint64
	// committer (external) is the generation of the member that
	// commits the handle, whoever's handle it is (its own, another
	// member's, or one restored from a checkpoint): the decision is
	// refused (errEpochMoved) once a generation above it is registered:
	// the committer is then a zombie of a job that restarted.
	committer uint32
}

// Errors of register: the generation is below the highest registered, or
// the member registered this generation already.
var (
	errGenerationStale  = errors.New("sink: a later generation is registered")
	errGenerationReused = errors.New("sink: the member registered this generation already")
)

// generationError is register's refusal.
type generationError struct {
	reason  error // errGenerationStale or errGenerationReused
	highest uint32
}

func (e *generationError) Error() string {
	return fmt.Sprintf("%v (the highest generation registered for the sink is %d)", e.reason, e.highest)
}

func (e *generationError) Unwrap() error { return e.reason }

// lowWord masks an external incarnation's generation.
const lowWord = 1<<32 - 1

// Status is what the progress target says about a sink.
type Status struct {
	Sink       string
	Partitions []PartitionStatus
	Instances  []InstanceStatus
	// Branches are the sink's prepared branches on its targets, with
	// what restore would do with each; filled by Sink.Status only.
	Branches []BranchStatus
	// Removed are the targets set up for the sink that the configuration
	// no longer has (Sink.Status only): their prepared branches are
	// neither listed nor resolved, and restore forgets no decision while
	// there is one.
	Removed []RemovedTarget
}

// PartitionStatus is one row of xa_sink_progress.
type PartitionStatus struct {
	Partition string
	// Position is where reading resumes ("" : the source's start).
	Position string
	Epoch    int64
	// Owner is the incarnation holding the epoch.
	Owner uint64
	// Checkpoint is the last checkpoint decided for the partition (the
	// caller's checkpoint id for an external member).
	Checkpoint uint64
	Updated    time.Time
}

// InstanceStatus is one row of xa_sink_instances, and how many partitions
// the incarnation owns.
type InstanceStatus struct {
	Incarnation uint64
	Started     time.Time
	Host        string
	PID         int
	Partitions  int
}

// BranchStatus is one prepared branch of the sink.
type BranchStatus struct {
	Ref      Ref
	Age      time.Duration
	Decision Decision
	Action   Action
	Why      string
}

// encodeOrigins writes where each MySQL branch was prepared, for phase two
// from another session: "target=session:unixnano;...". Targets without an
// origin are left out.
func encodeOrigins(bs []BranchState) string {
	var parts []string
	for _, b := range bs {
		if b.Session == 0 && b.Prepared.IsZero() {
			continue
		}
		var ns int64
		if !b.Prepared.IsZero() {
			ns = b.Prepared.UnixNano()
		}
		parts = append(parts, b.Target+"="+strconv.FormatUint(b.Session, 10)+":"+strconv.FormatInt(ns, 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// decodeOrigins reads encodeOrigins; malformed entries are skipped (phase
// two then waits as for an unknown origin).
func decodeOrigins(s string) map[string]xa.Origin {
	out := map[string]xa.Origin{}
	for _, p := range strings.Split(s, ";") {
		name, v, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		sess, at, ok := strings.Cut(v, ":")
		if !ok {
			continue
		}
		id, err1 := strconv.ParseUint(sess, 10, 64)
		ns, err2 := strconv.ParseInt(at, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		o := xa.Origin{Session: id}
		if ns != 0 {
			o.Prepared = time.Unix(0, ns)
		}
		out[name] = o
	}
	return out
}

// storeFor opens the bookkeeping store on a target.
func storeFor(ctx context.Context, c TargetConfig) (store, error) {
	switch c.kind() {
	case DriverMySQL:
		return openMyStore(ctx, c)
	case DriverPostgres:
		return openPgStore(ctx, c)
	}
	return nil, fmt.Errorf("%w: driver %q", ErrConfig, c.Driver)
}

// Setup creates the sink's tables (xa_sink_progress, xa_sink_decisions,
// xa_sink_instances, xa_sink_generations) in the progress target if they
// are missing. It is idempotent; run it once before the first instance
// (xactl sink setup), and again after an upgrade that adds a table.
func Setup(ctx context.Context, progress TargetConfig) error {
	if err := progress.validate(); err != nil {
		return err
	}
	st, err := storeFor(ctx, progress)
	if err != nil {
		return err
	}
	defer st.close()
	return st.setup(ctx)
}

// Tables lists the bookkeeping tables Setup creates.
func Tables() []string {
	return []string{"xa_sink_progress", "xa_sink_decisions", "xa_sink_instances", "xa_sink_generations"}
}

// TablesExist reports, for each of names ("table" or "schema.table"),
// whether target t holds it, as the sink's statements would find it.
func TablesExist(ctx context.Context, t TargetConfig, names []string) (map[string]bool, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	st, err := storeFor(ctx, t)
	if err != nil {
		return nil, err
	}
	defer st.close()
	out := make(map[string]bool, len(names))
	for _, n := range names {
		ok, err := st.tableExists(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("sink: target %s: looking for table %s: %w", t.Name, n, err)
		}
		out[n] = ok
	}
	return out, nil
}

// PreparedSlots reports how many prepared transactions target t's server
// may hold at once and holds now, where its kind sets a limit
// (PostgreSQL's max_prepared_transactions, shared by every database of the
// server, which server names); limited is false for kinds without one
// (MySQL, MariaDB).
func PreparedSlots(ctx context.Context, t TargetConfig) (server string, max, inUse int, limited bool, err error) {
	if err := t.validate(); err != nil {
		return "", 0, 0, false, err
	}
	st, err := storeFor(ctx, t)
	if err != nil {
		return "", 0, 0, false, err
	}
	defer st.close()
	return st.slots(ctx)
}

// ReadStatus reads a sink's progress and instances from its progress
// target, without opening the other targets (Status.Branches stays empty).
func ReadStatus(ctx context.Context, progress TargetConfig, sink string) (Status, error) {
	if err := progress.validate(); err != nil {
		return Status{}, err
	}
	if err := ValidateName(sink); err != nil {
		return Status{}, err
	}
	st, err := storeFor(ctx, progress)
	if err != nil {
		return Status{}, err
	}
	defer st.close()
	return st.status(ctx, sink)
}

// maxSelfIncarnation bounds self-driven incarnations (external ones carry
// bit 62).
const maxSelfIncarnation = int64(externalBit)

func countOwned(s *Status) {
	n := map[uint64]int{}
	for _, p := range s.Partitions {
		n[p.Owner]++
	}
	for i := range s.Instances {
		s.Instances[i].Partitions = n[s.Instances[i].Incarnation]
	}
}
