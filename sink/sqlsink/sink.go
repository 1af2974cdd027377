package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/sink"
)

// Config configures a SQL sink.
type Config struct {
	// Name is the sink's name (ValidateName): it keys the bookkeeping
	// rows and goes into every XID. Two sinks must not share a name.
	Name string
	// Targets are the participant databases written to.
	Targets []TargetConfig
	// Progress names the target holding the bookkeeping tables (see
	// Setup); default: the first target.
	Progress string
	// Tables are the tables written.
	Tables []Table
	// Map turns records into rows; nil: every Table's column mapping
	// (Column.From), for records of Format.
	Map MapFunc
	// Format is what the records' values are, when Map is nil:
	// FormatJSON (default; see JSONMapping) or FormatDebezium (change
	// events; see DebeziumMapping).
	Format string
	// RestoreGrace: a self-driven restore fences an undecided branch of
	// another live instance once it is this old (default 30 s, at least
	// a few checkpoint intervals: a younger branch may be a checkpoint
	// still being decided).
	RestoreGrace time.Duration
	// RestoreWait bounds how long taking partitions over retries the
	// restore of orphans it could not finish yet (a MySQL branch whose
	// preparing session is still closing), before reading on (default
	// 10 s). An orphan's locks would block the writes that follow.
	RestoreWait time.Duration
	// Phase2Attempts and Phase2Timeout bound phase two of one branch
	// (defaults 5 and 5 s); a branch not committed by then is left to
	// restore, which commits it (its decision row proves it).
	Phase2Attempts int
	Phase2Timeout  time.Duration
	// DecisionRetention: restore forgets decision rows and abort markers
	// older than this whose branches are no longer listed (default 24 h;
	// negative: never).
	DecisionRetention time.Duration
	// Host and PID go into xa_sink_instances (default: this process's).
	Host string
	PID  int
	// Logger receives warnings; nil: none.
	Logger *slog.Logger
	// OnError says what a bad record does: OnErrorStop (default) or
	// OnErrorDeadLetter (see there; docs/sink.md, "Bad records").
	OnError OnError
	// MaxDeadLetters bounds the bad records of one checkpoint with
	// OnErrorDeadLetter (default DefaultMaxDeadLetters): beyond it the
	// checkpoint aborts with ErrTooManyDeadLetters.
	MaxDeadLetters int
	// DeadLettersCommitted, if set, is told how many dead letters a
	// checkpoint committed (metrics count them).
	DeadLettersCommitted func(n int)
}

// Sink is an open SQL sink: its targets, tables and mapping. Run drives it
// self-driven from a Source; External gives the externally driven API.
// Each Run and each External is an instance of its own (an incarnation,
// or a member and generation). A Sink is safe for concurrent use.
type Sink struct {
	cfg     Config
	log     *slog.Logger
	targets map[string]*target
	names   []string // target names, sorted
	tables  map[string]*table
	// order is each table's place in Config.Tables (the dead letters'
	// last): a target's tables are flushed in that order, so that a
	// table listed before another may hold the rows its foreign keys
	// reference.
	order    map[string]int
	mapFn    MapFunc
	progress string // the progress target's name
	// books is the progress target's store: the protocol's bookkeeping.
	books bookkeeping
	// stores are every target's stores (the progress target's is books),
	// by name: their bindings (identity.go) and catalogues (tablecheck.go).
	stores map[string]store

	closed atomic.Bool
	// hook is called at protocol steps (tests simulate crashes with it).
	hook func(step string, h Handle) error

	mu    sync.Mutex
	insts map[*instance]bool
	seen  map[string]time.Time // XID text -> when restore first listed it
	// lastForget is when restore last forgot old decisions.
	lastForget time.Time
}

// Open validates cfg and opens its targets and the progress store.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("%w: sink %s has no targets", sink.ErrConfig, cfg.Name)
	}
	if cfg.Progress == "" {
		cfg.Progress = cfg.Targets[0].Name
	}
	if cfg.RestoreGrace <= 0 {
		cfg.RestoreGrace = 30 * time.Second
	}
	if cfg.RestoreWait <= 0 {
		cfg.RestoreWait = 10 * time.Second
	}
	if cfg.Phase2Attempts <= 0 {
		cfg.Phase2Attempts = 5
	}
	if cfg.Phase2Timeout <= 0 {
		cfg.Phase2Timeout = 5 * time.Second
	}
	if cfg.DecisionRetention == 0 {
		cfg.DecisionRetention = 24 * time.Hour
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.PID == 0 {
		cfg.PID = os.Getpid()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sink{cfg: cfg, log: log.With("sink", cfg.Name), targets: map[string]*target{}, tables: map[string]*table{},
		progress: cfg.Progress, seen: map[string]time.Time{}, insts: map[*instance]bool{}}
	var progress *TargetConfig
	for i, tc := range cfg.Targets {
		if err := tc.validate(); err != nil {
			return nil, err
		}
		if s.targets[tc.Name] != nil {
			return nil, fmt.Errorf("%w: target %s twice", sink.ErrConfig, tc.Name)
		}
		s.targets[tc.Name] = nil
		if tc.Name == cfg.Progress {
			progress = &cfg.Targets[i]
		}
	}
	if progress == nil {
		return nil, fmt.Errorf("%w: the progress target %s is not among the targets", sink.ErrConfig, cfg.Progress)
	}
	for _, tb := range cfg.Tables {
		if err := tb.validate(); err != nil {
			return nil, err
		}
		if _, ok := s.targets[tb.Target]; !ok {
			return nil, fmt.Errorf("%w: table %s: no target %q", sink.ErrConfig, tb.id(), tb.Target)
		}
		if s.tables[tb.id()] != nil {
			return nil, fmt.Errorf("%w: table id %s twice", sink.ErrConfig, tb.id())
		}
		s.tables[tb.id()] = &table{Table: tb}
		if s.order == nil {
			s.order = map[string]int{}
		}
		s.order[tb.id()] = len(s.order)
	}
	if len(cfg.Tables) == 0 {
		return nil, fmt.Errorf("%w: sink %s has no tables", sink.ErrConfig, cfg.Name)
	}
	switch cfg.OnError {
	case "":
		s.cfg.OnError = OnErrorStop
	case OnErrorStop:
	case OnErrorDeadLetter:
		// The dead letters go to the progress target, in the checkpoint's
		// branch there: exactly once, like any row.
		s.tables[deadTableID] = &table{Table: Table{ID: deadTableID, Target: cfg.Progress, Name: DeadLetterTable, Columns: deadColumns}}
		s.order[deadTableID] = len(s.order)
	default:
		return nil, fmt.Errorf("%w: OnError %q: want %q or %q", sink.ErrConfig, cfg.OnError, OnErrorStop, OnErrorDeadLetter)
	}
	if cfg.MaxDeadLetters < 0 {
		return nil, fmt.Errorf("%w: MaxDeadLetters must not be negative", sink.ErrConfig)
	}
	if cfg.MaxDeadLetters == 0 {
		s.cfg.MaxDeadLetters = DefaultMaxDeadLetters
	}
	s.mapFn = cfg.Map
	if s.mapFn == nil {
		var f MapFunc
		var err error
		switch cfg.Format {
		case "", FormatJSON:
			f, err = JSONMapping(cfg.Tables)
		case FormatDebezium:
			f, err = DebeziumMapping(cfg.Tables)
		default:
			err = fmt.Errorf("%w: Format %q: want %q or %q", sink.ErrConfig, cfg.Format, FormatJSON, FormatDebezium)
		}
		if err != nil {
			return nil, err
		}
		s.mapFn = f
	}
	ok := false
	defer func() {
		if !ok {
			s.closeAll()
		}
	}()
	for _, tc := range cfg.Targets {
		t, err := openTarget(ctx, tc, log)
		if err != nil {
			return nil, fmt.Errorf("sink: opening target %s: %w", tc.Name, err)
		}
		s.targets[tc.Name] = t
		s.names = append(s.names, tc.Name)
	}
	slices.Sort(s.names)
	for id, tb := range s.tables {
		s.tables[id] = compileTable(tb.Table, s.targets[tb.Target])
	}
	s.stores = map[string]store{}
	for _, tc := range cfg.Targets {
		st, err := openStore(ctx, tc)
		if err != nil {
			return nil, err
		}
		s.stores[tc.Name] = st
	}
	s.books = s.stores[cfg.Progress]
	ok = true
	return s, nil
}

func (s *Sink) closeAll() {
	for _, t := range s.targets {
		if t != nil {
			t.close()
		}
	}
	for _, st := range s.stores {
		st.close()
	}
}

// Name returns the sink's name.
func (s *Sink) Name() string { return s.cfg.Name }

// Close closes the targets. Prepared branches stay prepared (restore or a
// caller's Commit finishes them); branches not prepared are rolled back by
// their databases.
func (s *Sink) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	insts := make([]*instance, 0, len(s.insts))
	for in := range s.insts {
		insts = append(insts, in)
	}
	s.mu.Unlock()
	for _, in := range insts {
		in.closeLive()
	}
	s.closeAll()
	return nil
}

// abandon simulates a crash: every session is closed at once, nothing
// more is sent (tests).
func (s *Sink) abandon() { s.Close() }

func (s *Sink) check() error {
	if s.closed.Load() {
		return sink.ErrClosed
	}
	return nil
}

func (s *Sink) step(name string, h Handle) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(name, h)
}

// Run runs an instance self-driven: it allocates a new incarnation, reads
// src into the targets with checkpoints as opts say, and returns as
// Runner.Run does (ErrFenced once every partition was taken over; nil at
// the end of a bounded source). It refuses to start, with errors matching
// ErrTable (each a *TableError), when a table does not fit its Table
// (CheckTables). A src that is a sink.PollLimiter is limited before every
// Poll to the room left in the open checkpoint, so that no checkpoint
// holds more than opts.CheckpointRecords records.
func (s *Sink) Run(ctx context.Context, src sink.Source, opts sink.RunOptions) error {
	in, err := s.newInstance(ctx, false, 0, 0)
	if err != nil {
		return err
	}
	defer s.release(in)
	if opts.Logger == nil {
		opts.Logger = s.log
	}
	// The source is told, before every Poll, how many records the open
	// checkpoint still has room for (sink.BoundPolls): a checkpoint never
	// holds more than CheckpointRecords, whatever backlog the source has.
	c, src := sink.BoundPolls[Handle](in, src, opts.CheckpointRecords)
	err = sink.NewRunner[Handle](c, in, opts).Run(ctx, src)
	if cerr := s.check(); cerr != nil && err != nil && !errors.Is(err, sink.ErrClosed) {
		err = fmt.Errorf("%w: %w", sink.ErrClosed, err)
	}
	return err
}

// External returns the externally driven API of member (0 to MaxMember)
// in generation: the caller runs the checkpoints (see External). Call
// Restore on it first after a restart. The member and generation go into
// the XIDs in place of an incarnation; a caller's restart must use a
// generation above every one registered for the sink (the members of one
// restart share it). Registering raises the sink's generation fence: from
// then on no member of an earlier generation can decide a checkpoint,
// whoever's handle it commits. A generation below the highest registered
// is refused with ErrFenced; a member and generation registered already
// (a generation reused) with ErrConfig. Two live members must not share a
// member number. Like Run, it refuses tables that do not fit (ErrTable).
func (s *Sink) External(ctx context.Context, member, generation uint32) (*sink.External[Handle], error) {
	if member > MaxMember {
		return nil, fmt.Errorf("%w: member %d above %d", sink.ErrConfig, member, MaxMember)
	}
	in, err := s.newInstance(ctx, true, member, generation)
	if err != nil {
		return nil, err
	}
	return sink.NewExternal[Handle](in, in), nil
}

// newInstance checks the tables (CheckTables: a table that does not fit
// is refused here, with ErrTable, rather than by every checkpoint, or not
// at all: an upsert without its unique key duplicates rows on MySQL) and
// the identities of the progress target and the targets (Verify: a
// mismatch is refused with errors matching xa.ErrIdentity), then
// registers the instance.
func (s *Sink) newInstance(ctx context.Context, external bool, member, generation uint32) (*instance, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.checkTables(ctx); err != nil {
		return nil, err
	}
	// The progress target and the targets are the stores the sink was
	// set up with (identity.go), before anything is written.
	if _, err := s.verify(ctx); err != nil {
		return nil, err
	}
	in := &instance{s: s, external: external, generation: generation, epochs: map[string]int64{},
		live: map[uint64]*checkpoint{}}
	s.mu.Lock()
	s.insts[in] = true
	s.mu.Unlock()
	var err error
	if external {
		in.inc = ExternalIncarnation(member, generation)
		err = s.books.register(ctx, s.cfg.Name, in.inc, s.cfg.Host, s.cfg.PID)
		var ge *generationError
		if errors.As(err, &ge) {
			if errors.Is(err, errGenerationStale) {
				err = fmt.Errorf("sink: member %d of generation %d: %w: generation %d is registered for sink %s: a restart's members use a generation above every one registered",
					member, generation, sink.ErrFenced, ge.highest, s.cfg.Name)
			} else {
				err = fmt.Errorf("%w: member %d of generation %d is registered already for sink %s: a generation is used once per member (a restart uses a generation above %d, the highest registered)",
					sink.ErrConfig, member, generation, s.cfg.Name, ge.highest)
			}
		}
	} else {
		in.inc, err = s.books.allocate(ctx, s.cfg.Name, s.cfg.Host, s.cfg.PID)
	}
	if err != nil {
		s.release(in)
		return nil, err
	}
	in.log = s.log.With("incarnation", Ref{Incarnation: in.inc}.String())
	return in, nil
}

func (s *Sink) release(in *instance) {
	s.mu.Lock()
	delete(s.insts, in)
	s.mu.Unlock()
}

// Handle is a checkpoint's transaction as the caller keeps it: what
// Commit and Abort need to finish it in any process. It marshals to JSON.
type Handle struct {
	Sink        string `json:"sink"`
	Incarnation uint64 `json:"incarnation"`
	// Checkpoint is the checkpoint's number, which its XIDs carry
	// (Ref.Checkpoint). Its JSON name, "txn", is kept from the handles
	// of earlier versions.
	Checkpoint uint64 `json:"txn"`
	// ID is the checkpoint id it was pre-committed under: an external
	// caller's own (which the XIDs cannot carry: see External), or
	// Checkpoint for a self-driven instance.
	ID uint64 `json:"checkpoint"`
	// Branches are the prepared branches, with where they were prepared.
	Branches []BranchState `json:"branches,omitempty"`
	// Partitions are the positions after the checkpoint's records, with
	// the epochs they were written under.
	Partitions []PartitionPosition `json:"partitions,omitempty"`
	// Spent (external members) are earlier transactions of the same
	// incarnation whose PreCommit failed and whose abort could not be
	// fenced then: committing this handle, or restoring it, fences and
	// rolls them back.
	Spent []uint64 `json:"spent,omitempty"`
}

// BranchState is one prepared branch of a Handle.
type BranchState struct {
	Target string `json:"target"`
	// Session and Prepared are the branch's xa.Origin (MySQL: phase two
	// from another session waits for that one to be gone).
	Session  uint64    `json:"session,omitempty"`
	Prepared time.Time `json:"prepared,omitzero"`
}

// PartitionPosition is a partition's position after a checkpoint, and the
// epoch it was written under (the generation, for an external member).
type PartitionPosition struct {
	Partition string `json:"partition"`
	Position  string `json:"position"`
	Epoch     int64  `json:"epoch"`
}

// CheckpointID returns the id h was pre-committed under.
func (h Handle) CheckpointID() uint64 { return h.ID }

// TransactionKey implements Checkpointed: the sink, the incarnation and
// the checkpoint number, which its XIDs carry.
func (h Handle) TransactionKey() string {
	return h.Sink + "/" + strconv.FormatUint(h.Incarnation, 10) + "/" + strconv.FormatUint(h.Checkpoint, 10)
}

// Ref returns the Ref of h's branch on target.
func (h Handle) Ref(target string) Ref {
	return Ref{Sink: h.Sink, Incarnation: h.Incarnation, Checkpoint: h.Checkpoint, Target: target}
}

func (h Handle) key() checkpointKey { return checkpointKey{h.Incarnation, h.Checkpoint} }
