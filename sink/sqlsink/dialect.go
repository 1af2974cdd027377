package sqlsink

import (
	"context"
	"fmt"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// A dialect is what the SQL sink knows of one kind of database, chosen
// once per target from its driver (dialectFor): how rows are written on a
// branch's session, and how a pool of plain sessions on the target keeps
// the bookkeeping and reads the catalogue. Each kind lives in files of its
// own (mysql*.go, postgres*.go), with its server errors mapped to what the
// sink makes of them in one place (myClass, pgClass): the rest of the sink
// holds no SQL and no error number.
type dialect interface {
	// compile returns a table's statements, once per table at Open.
	compile(tb Table) statements
	// writer returns the writer of a branch's session, when the branch
	// starts.
	writer(b xa.Branch) (rowWriter, error)
	// open opens a pool of plain sessions on the target, for its
	// bookkeeping, its bindings and its catalogue.
	open(ctx context.Context, c TargetConfig) (store, error)
}

// dialectFor returns the dialect of a driver kind (TargetConfig.kind).
func dialectFor(kind string) (dialect, error) {
	switch kind {
	case DriverMySQL:
		return mysqlDialect{}, nil
	case DriverPostgres:
		return postgresDialect{}, nil
	}
	return nil, fmt.Errorf("%w: driver %q: the sink writes to %q and %q", sink.ErrConfig, kind, DriverMySQL, DriverPostgres)
}

// statements are a table's statements in its target's dialect, compiled
// once (dialect.compile).
type statements struct {
	// insert starts a multi-row INSERT: "INSERT INTO t (a,b) VALUES ".
	insert string
	// row is one row's placeholders, "(?,?)" (MySQL; PostgreSQL numbers
	// its placeholders per statement).
	row string
	// conflict ends an upsert: ON DUPLICATE KEY UPDATE ... (MySQL), ON
	// CONFLICT (key) DO UPDATE ... (PostgreSQL); "" for an insert.
	conflict string
	// ident is the table's name, split at its dot (PostgreSQL's COPY).
	ident []string
	// del starts a delete by key, "DELETE FROM t WHERE k IN (" or
	// "DELETE FROM t WHERE (k1,k2) IN ("; "" for an insert table.
	del string
}

// rowWriter writes rows on one branch's session. A write refused for its
// data returns a *batchRefused, which putRows narrows to its refused rows
// (refusal.go); any other failed statement is not retried: the caller
// aborts the checkpoint. The statements of one branch
// are sent one after the other (flushTargets), never at once.
type rowWriter interface {
	write(ctx context.Context, tb *table, rows [][]any) error
	// delete deletes an upsert table's rows by key: each of keys holds
	// the Key columns' values, in Key's order. A key without a row is no
	// error (a delete applied again changes nothing).
	delete(ctx context.Context, tb *table, keys [][]any) error
	// rowGuard lets putRows undo a refused write (refusal.go).
	rowGuard
}

// store is a dialect's pool of plain sessions on one target. The progress
// target's keeps the protocol's bookkeeping (decisions, progress) and
// creates its tables (setup); every target's keeps its bindings (binder)
// and reads its catalogue (catalogue). Each method is one local
// transaction, committed before it returns.
type store interface {
	bookkeeping
	binder
	catalogue
	// deadLetters reads the sink's dead letters, oldest first, at most
	// limit (0: all).
	deadLetters(ctx context.Context, sink string, limit int) ([]DeadLetter, error)
	close()
}

// bookkeeping is the protocol's bookkeeping, in the progress target's
// store.
type bookkeeping interface {
	decisions
	progress
	// setup creates the bookkeeping tables if they are missing.
	setup(ctx context.Context) error
}

// decisions are the rows of xa_sink_decisions: a checkpoint's commit
// decision or its abort marker, under its key (docs/sink.md, step 3 and
// "Abort").
type decisions interface {
	// decide is step 3 for h: in one round trip, move the positions and
	// insert the decision row (with the origins of h's branches). An
	// external member's decision moves the progress rows forward (by
	// generation, then checkpoint id) without conditions: they are the
	// caller's record, not a fence; committer is the generation of the
	// member that commits h, whoever's handle it is (its own, another
	// member's, or one restored from a checkpoint). An error matching
	// errEpochMoved: nothing was committed, a partition's row no longer
	// carries the epoch and owner (or, external, a generation above the
	// committer's is registered: read under a shared lock of the sink's
	// generation fence row, which register raises under an exclusive
	// one, so that a registration either sees the decision committed or
	// refuses it). Any other error: the decision may or may not have
	// committed (claim settles it).
	decide(ctx context.Context, h Handle, committer uint32) error
	// claim inserts an abort marker under k in its own transaction,
	// waiting for a decision of the same key in flight, and returns what
	// holds the key afterwards: the marker, or the commit decision that
	// won.
	claim(ctx context.Context, sink string, k checkpointKey) (stored, error)
	// lookup returns what is held under keys.
	lookup(ctx context.Context, sink string, keys []checkpointKey) (map[checkpointKey]stored, error)
	// forget deletes decisions and markers decided before cutoff (by the
	// progress target's clock, as now() - age), except keep.
	forget(ctx context.Context, sink string, age time.Duration, keep []checkpointKey) (int, error)
}

// progress is xa_sink_progress (positions under epochs),
// xa_sink_instances (incarnations) and xa_sink_generations (the external
// members' generation fence).
type progress interface {
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
	// owners returns the incarnations that own at least one partition.
	owners(ctx context.Context, sink string) (map[uint64]bool, error)
	// status reads the progress and instance rows.
	status(ctx context.Context, sink string) (Status, error)
}

// binder keeps a target's rows of xa_sink_bindings (identity.go).
type binder interface {
	// bindings returns the sink's rows in this store, by target (none,
	// without an error, when the table is missing).
	bindings(ctx context.Context, sink string) (map[string]binding, error)
	// bind creates xa_sink_bindings if missing and stores b: a new row,
	// or the participant id of a row of the same ids that has none.
	bind(ctx context.Context, b binding) error
	// unbind deletes the sink's row of target.
	unbind(ctx context.Context, sink, target string) error
	// describe says which store this is, for operators: kind, database,
	// server, schema.
	describe(ctx context.Context) (string, error)
}

// catalogue reads what the target's catalogue says of tables and of its
// server's limits.
type catalogue interface {
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
}

// errClass is what the sink makes of a server's error on one of its own
// statements (myClass, pgClass map the error numbers).
type errClass int

const (
	classOther errClass = iota
	// classNotNull: a NOT NULL column got NULL: a condition of a
	// one-round-trip decision failed (docs/sink.md, step 3).
	classNotNull
	// classDuplicate: a unique key is taken.
	classDuplicate
	// classContention: a deadlock or a lock wait timeout; nothing was
	// done, try again.
	classContention
	// classNoTable: the table does not exist.
	classNoTable
)

// rows is what the bookkeeping's queries scan, on either pool (pgx.Rows,
// *sql.Rows).
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}
