// Package recovery resolves in-doubt branches and stores commit decisions.
//
// The Scanner lists the prepared branches on every participant, keeps the
// ones this transaction manager owns (by XID), and drives each to the
// decision in the log: a logged COMMIT is committed; a branch with no
// record is rolled back (presumed abort) once it is older than the grace
// period, so that a live coordinator's in-flight transaction is never
// rolled back under it. It never touches another application's branches.
// It is idempotent and safe to run while transaction managers run and
// while other scanners run.
//
// The decision logs are in sub-packages: filelog (embedded, the default)
// and pebblelog (for comparison).
//
// Caller's duties:
//
//  1. Scan once when the process starts, before (or while) new
//     transactions begin, so that a crash's leftovers are resolved, and
//  2. keep scanning periodically: a branch left pending by a failed phase
//     2, or by a coordinator that died, is resolved there. Start does both.
//  3. Configure every participant the transaction manager used, under the
//     same names: a record naming an unknown participant is kept and
//     reported, never forgotten.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// Log is what the scanner needs from a decision log.
type Log interface {
	// Commits returns every commit record not yet forgotten.
	Commits(ctx context.Context) ([]xa.CommitRecord, error)
	// Lookup returns the record of id, if any.
	Lookup(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error)
	// Forget drops the record of id.
	Forget(ctx context.Context, id xa.GlobalID) error
}

// DecisionStore is implemented by participants that keep commit decisions
// in their own database: a branch there took the decision as the last
// resource (xa.LastResource), committing it together with its own work.
// The scanner reads those decisions as it reads the log, and forgets them
// the same way.
type DecisionStore interface {
	// Decisions returns every stored decision.
	Decisions(ctx context.Context) ([]xa.CommitRecord, error)
	// Decision returns the stored decision of id, if any.
	Decision(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error)
	// ForgetDecisions deletes the stored decisions of ids.
	ForgetDecisions(ctx context.Context, ids []xa.GlobalID) error

	// ClaimAbort fences a last-resource commit of id before recovery
	// presumes abort: it stores an abort marker under id's key, in the
	// same table and under the same unique key as a commit decision. A
	// commit of id still in flight on the server makes it wait until that
	// commit ends. nil: the abort is claimed (now, or by an earlier call),
	// and no commit of id can be stored any more. An error matching
	// xa.ErrCommitRecorded: the commit won; the decision is stored. Any
	// other error: nothing is known, nothing may be rolled back.
	ClaimAbort(ctx context.Context, id xa.GlobalID, reason string) error
	// ForgetAborts deletes abort markers stored more than retention ago
	// by the database's clock, and returns how many.
	ForgetAborts(ctx context.Context, retention time.Duration) (int, error)
}

// SharedServer is implemented by participants whose recover listing covers
// a whole server, beyond their own database (MySQL and MariaDB: XA RECOVER
// lists every branch of the server). Participants with equal ServerKeys
// list the same branches: the scanner attributes each branch to the one
// participant its commit record (or, without one, the first configured)
// names, and acts on it once.
type SharedServer interface {
	// ServerKey identifies the server, the same for every participant
	// connected to it and stable while it runs.
	ServerKey(ctx context.Context) (string, error)
}

// GhostCounter is implemented by resource managers whose database can hold
// prepared transactions that its recover listing does not show (MariaDB,
// fact 7). While it reports any, no record that names the participant is
// forgotten: the ghost may be one of its branches, and it comes back as
// prepared after a server restart.
type GhostCounter interface {
	UnlistedPrepared(ctx context.Context) (int, error)
}

// Config configures a Scanner.
type Config struct {
	// Participants are the databases to scan, by their stable names.
	Participants []xa.ResourceManager
	// Log holds the commit decisions.
	Log Log
	// Nodes are the transaction-manager nodes whose branches this scanner
	// resolves. Branches of other nodes are reported, never touched.
	Nodes []string
	// Grace: a branch with no commit record is rolled back only once it
	// is older than this (see xa.GracePeriod). Required.
	Grace time.Duration
	// Logger receives a line per action; nil discards.
	Logger *slog.Logger
	// Now returns the time; nil means time.Now.
	Now func() time.Time
}

// Scanner resolves in-doubt branches. It is safe for concurrent use.
type Scanner struct {
	cfg   Config
	log   *slog.Logger
	nodes map[string]bool
}

// New checks cfg and returns a Scanner.
func New(cfg Config) (*Scanner, error) {
	if cfg.Log == nil {
		return nil, errors.New("recovery: Config.Log is required")
	}
	if len(cfg.Nodes) == 0 {
		return nil, errors.New("recovery: Config.Nodes is empty: whose branches would it resolve?")
	}
	if cfg.Grace <= 0 {
		return nil, errors.New("recovery: Config.Grace must be positive (see xa.GracePeriod)")
	}
	names := map[string]bool{}
	for _, p := range cfg.Participants {
		if names[p.Name()] {
			return nil, fmt.Errorf("recovery: two participants are named %q", p.Name())
		}
		names[p.Name()] = true
	}
	s := &Scanner{cfg: cfg, nodes: map[string]bool{}}
	for _, n := range cfg.Nodes {
		if err := xa.ValidateNode(n); err != nil {
			return nil, err
		}
		s.nodes[n] = true
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	s.log = cfg.Logger
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s, nil
}

// Verdict is what recovery does (or would do) with a branch.
type Verdict int

const (
	// Commit: a commit record exists; the branch is committed.
	Commit Verdict = 1 + iota
	// Rollback: no record and older than the grace period: presumed abort.
	Rollback
	// Wait: no record yet, younger than the grace period: its coordinator
	// may still be deciding.
	Wait
	// Foreign: not ours (another application or transaction manager).
	Foreign
	// OtherNode: ours, but owned by a node this scanner does not serve.
	OtherNode
	// Anomaly: a record exists but does not list this branch: reported,
	// not touched.
	Anomaly
)

var verdictNames = [...]string{"", "commit", "rollback", "wait", "foreign", "other-node", "anomaly"}

func (v Verdict) String() string {
	if v <= 0 || int(v) >= len(verdictNames) {
		return "Verdict(invalid)"
	}
	return verdictNames[v]
}

// Branch is one prepared branch found by a scan and what became of it.
type Branch struct {
	Participant string
	Prepared    xa.PreparedBranch
	ID          xa.GlobalID // zero for foreign branches
	Age         time.Duration
	AgeKnown    bool
	Logged      bool // a commit record exists
	Verdict     Verdict
	// Done: the action was carried out (false in a dry run, for Wait,
	// Foreign, OtherNode and Anomaly, and when Err is set).
	Done bool
	// Err: the action failed; a retryable error means "later".
	Err error
}

// Report is the outcome of one scan.
type Report struct {
	// Participants that could be listed.
	Participants []string
	Branches     []Branch
	// Forgotten records: every branch of them is resolved.
	Forgotten []xa.GlobalID
	// Kept records that could have been forgotten but for a reason
	// (ghost prepared transactions, a participant that did not answer).
	Kept []KeptRecord
	// Errors that stopped part of the scan (a participant that could not
	// be listed, a log that could not be read).
	Errors []error
}

// KeptRecord is a commit record left in the log, and why.
type KeptRecord struct {
	ID     xa.GlobalID
	Reason string
	// Unseen: some branch of the record is on a participant this scan
	// could not see (not configured, or not listed), so it may still be
	// in doubt there. False when the only reason is MariaDB's count of
	// prepared transactions it does not list, which errs on the side of
	// keeping (its snapshot can be stale).
	Unseen bool
}

// InDoubt counts the branches of ours left unresolved after the scan
// (waiting, failed or anomalous).
func (r Report) InDoubt() int {
	n := 0
	for _, b := range r.Branches {
		switch b.Verdict {
		case Commit, Rollback:
			if !b.Done {
				n++
			}
		case Wait, Anomaly:
			n++
		}
	}
	return n
}

// Plan reports what Scan would do, without doing it.
func (s *Scanner) Plan(ctx context.Context) (Report, error) { return s.scan(ctx, true) }

// Scan resolves every in-doubt branch it can and forgets the records that
// are done. The error is non-nil only when nothing could be scanned (the
// log could not be read); partial failures are in Report.Errors and in
// each Branch.Err.
func (s *Scanner) Scan(ctx context.Context) (Report, error) { return s.scan(ctx, false) }

func (s *Scanner) scan(ctx context.Context, dry bool) (Report, error) {
	var rep Report
	// Read the decisions BEFORE listing the branches: every branch of a
	// record read here was prepared before the record was written, so a
	// listing taken afterwards that lacks it means it is finished.
	recs, err := s.cfg.Log.Commits(ctx)
	if err != nil {
		return rep, fmt.Errorf("recovery: reading the decision log: %w", err)
	}
	// Decisions taken by last resources live in their databases; a store
	// that cannot be read may hold the decision of any branch without a
	// record, so nothing is presumed aborted in this scan then.
	stores := map[string]DecisionStore{} // gtrid -> where the record lives; absent: the log
	incomplete := false
	for _, rm := range s.cfg.Participants {
		ds, ok := rm.(DecisionStore)
		if !ok {
			continue
		}
		decs, err := ds.Decisions(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: reading the decisions stored in %s (nothing is presumed aborted until it answers): %w", rm.Name(), err))
			incomplete = true
			continue
		}
		for _, r := range decs {
			stores[r.ID.String()] = ds
			recs = append(recs, r)
		}
	}
	records := make(map[string]xa.CommitRecord, len(recs))
	for _, r := range recs {
		records[r.ID.String()] = r
	}
	type key struct{ rm, xid string }
	listed := map[key]bool{}
	answered := map[string]bool{}
	ghosts := map[string]int{}
	now := s.cfg.Now()

	for _, rm := range s.cfg.Participants {
		prepared, err := rm.Recover(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: listing %s: %w", rm.Name(), err))
			continue
		}
		answered[rm.Name()] = true
		rep.Participants = append(rep.Participants, rm.Name())
		if gc, ok := rm.(GhostCounter); ok {
			n, err := gc.UnlistedPrepared(ctx)
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("recovery: counting unlisted prepared transactions on %s: %w", rm.Name(), err))
				n = -1
			}
			ghosts[rm.Name()] = n
		}
		for _, p := range prepared {
			b := Branch{Participant: rm.Name(), Prepared: p}
			b.Age, b.AgeKnown = p.Age(now)
			g, _, ours := xa.Owned(p.XID)
			switch {
			case !ours:
				b.Verdict = Foreign
			case !s.nodes[g.Node]:
				b.ID, b.Verdict = g, OtherNode
			default:
				b.ID = g
				listed[key{rm.Name(), p.XID.String()}] = true
				rec, logged := records[g.String()]
				b.Logged = logged
				b.Verdict = s.verdict(b, rec, logged)
				if !dry {
					s.act(ctx, rm, &b, rec, incomplete)
				}
			}
			rep.Branches = append(rep.Branches, b)
		}
	}

	// Forget the records whose branches are all gone from listings taken
	// after the record was read.
	storeForget := map[DecisionStore][]xa.GlobalID{}
	for _, rec := range recs {
		if !s.nodes[rec.ID.Node] {
			continue
		}
		// A branch still prepared is resolved by now and the record
		// forgotten by the next scan; any other reason to keep the
		// record is reported, all of them.
		var reasons []string
		prepared, unseen := false, false
		for _, br := range rec.Branches {
			switch {
			case !s.known(br.RM):
				reasons = append(reasons, fmt.Sprintf("participant %q is not configured", br.RM))
				unseen = true
			case !answered[br.RM]:
				reasons = append(reasons, fmt.Sprintf("participant %q could not be listed", br.RM))
				unseen = true
			case listed[key{br.RM, br.XID.String()}]:
				prepared = true
			case ghosts[br.RM] < 0:
				reasons = append(reasons, fmt.Sprintf("participant %q could not tell whether it holds prepared transactions it does not list (see the scan's errors)", br.RM))
			case ghosts[br.RM] > 0:
				reasons = append(reasons, fmt.Sprintf("participant %q holds prepared transactions it does not list (fact 7): restart it and recover", br.RM))
			}
		}
		if len(reasons) > 0 {
			rep.Kept = append(rep.Kept, KeptRecord{ID: rec.ID, Reason: strings.Join(slices.Compact(reasons), "; "), Unseen: unseen})
		}
		if len(reasons) > 0 || prepared {
			continue
		}
		if dry {
			rep.Forgotten = append(rep.Forgotten, rec.ID)
			continue
		}
		if ds, ok := stores[rec.ID.String()]; ok {
			storeForget[ds] = append(storeForget[ds], rec.ID)
			continue
		}
		if err := s.cfg.Log.Forget(ctx, rec.ID); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: forgetting %s: %w", rec.ID, err))
			continue
		}
		s.log.Info("forgot commit record: every branch resolved", "tx", rec.ID)
		rep.Forgotten = append(rep.Forgotten, rec.ID)
	}
	// Stored decisions go in one statement per store.
	for ds, ids := range storeForget {
		if err := ds.ForgetDecisions(ctx, ids); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: forgetting %d stored decisions: %w", len(ids), err))
			continue
		}
		s.log.Info("forgot stored decisions: every branch resolved", "count", len(ids))
		rep.Forgotten = append(rep.Forgotten, ids...)
	}
	return rep, nil
}

func (s *Scanner) known(name string) bool {
	return slices.ContainsFunc(s.cfg.Participants, func(rm xa.ResourceManager) bool { return rm.Name() == name })
}

func (s *Scanner) verdict(b Branch, rec xa.CommitRecord, logged bool) Verdict {
	if logged {
		for _, br := range rec.Branches {
			if br.RM == b.Participant && br.XID.Equal(b.Prepared.XID) {
				return Commit
			}
		}
		return Anomaly
	}
	if b.AgeKnown && b.Age > s.cfg.Grace {
		return Rollback
	}
	return Wait
}

// act carries out b's verdict. incomplete says that some stored decisions
// could not be read.
func (s *Scanner) act(ctx context.Context, rm xa.ResourceManager, b *Branch, rec xa.CommitRecord, incomplete bool) {
	attrs := []any{"rm", b.Participant, "xid", b.Prepared.XID, "tx", b.ID, "age", b.Age.Round(time.Millisecond)}
	switch b.Verdict {
	case Commit:
		var from xa.Origin
		for _, br := range rec.Branches {
			if br.RM == b.Participant && br.XID.Equal(b.Prepared.XID) {
				from = br.Origin
			}
		}
		err := rm.Commit(ctx, b.Prepared.XID, from)
		if errors.Is(err, xa.ErrUnknownXID) {
			// Listed a moment ago, gone now: a concurrent committer (the
			// coordinator or another scanner) finished it.
			err = nil
		}
		s.record(b, err, "committed in-doubt branch (logged decision)", attrs)
	case Rollback:
		if incomplete {
			b.Err = fmt.Errorf("%w: not rolled back: a participant's stored decisions could not be read", xa.ErrRetryable)
			return
		}
		// A record written since the decisions were read would mean a
		// live coordinator decided after all; look again just before
		// acting.
		if logged, err := s.decided(ctx, b.ID); err != nil || logged {
			if err == nil {
				err = fmt.Errorf("%w: a commit record appeared; next scan commits it", xa.ErrRetryable)
			}
			b.Err = err
			return
		}
		err := rm.Rollback(ctx, b.Prepared.XID, xa.Origin{})
		s.record(b, err, "rolled back in-doubt branch (presumed abort)", attrs)
	case Anomaly:
		s.log.Error("in-doubt branch not listed by its commit record: left alone", attrs...)
	}
}

// decided looks id up in the log and in every decision store.
func (s *Scanner) decided(ctx context.Context, id xa.GlobalID) (bool, error) {
	if _, ok, err := s.cfg.Log.Lookup(ctx, id); err != nil || ok {
		return ok, err
	}
	for _, rm := range s.cfg.Participants {
		if ds, ok := rm.(DecisionStore); ok {
			if _, ok, err := ds.Decision(ctx, id); err != nil || ok {
				return ok, err
			}
		}
	}
	return false, nil
}

func (s *Scanner) record(b *Branch, err error, msg string, attrs []any) {
	b.Err = err
	if err == nil {
		b.Done = true
		s.log.Info(msg, attrs...)
		return
	}
	lvl := slog.LevelWarn
	if xa.Retryable(err) {
		lvl = slog.LevelInfo
	}
	s.log.Log(context.Background(), lvl, "could not resolve in-doubt branch yet", append(attrs, "verdict", b.Verdict, "err", err)...)
}

// Start runs a first scan now, so that a crash's leftovers are resolved
// before the caller goes on, and then keeps scanning every interval in a
// goroutine until ctx ends or stop is called (stop waits for it). This is
// how a process that runs a Manager starts its recovery. Each report,
// the first included, is passed to report (which may be nil).
func (s *Scanner) Start(ctx context.Context, interval time.Duration, report func(Report, error)) (first Report, stop func(), err error) {
	first, err = s.Scan(ctx)
	if report != nil {
		report(first, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rep, err := s.Scan(ctx)
			if report != nil && ctx.Err() == nil {
				report(rep, err)
			}
		}
	}()
	return first, func() { cancel(); <-done }, err
}

// Run scans now and then every interval until ctx ends. Each report is
// passed to report (which may be nil).
func (s *Scanner) Run(ctx context.Context, interval time.Duration, report func(Report, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, err := s.Scan(ctx)
		if report != nil {
			report(rep, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
