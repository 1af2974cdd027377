// Package recovery resolves in-doubt branches.
//
// The Scanner lists the prepared branches on every participant, keeps the
// ones this transaction manager owns (by XID), and drives each to the
// decision in the log: a logged COMMIT (or one stored by a last resource)
// is committed; a branch with no record is rolled back (presumed abort)
// only when all of these hold (docs/protocol.md):
//
//   - its XID names this scanner's decision log, and it began after the
//     log was created (branches of another log, or of none, are reported
//     and left alone: their decision is elsewhere);
//   - it is older than the log's grace period, by one clock (the
//     database's where it says: PostgreSQL);
//   - every participant the log delegated decisions to answered;
//   - the fence is taken: an abort marker in every delegated decision table,
//     then an abort record in the log, both refused if a commit got there
//     first. A coordinator that lost the race aborts; one that won has its
//     branches committed. The outcome never depends on clocks.
//
// It never touches another application's branches. It is idempotent and
// safe to run while transaction managers run and while other scanners run.
//
// The decision log is in a sub-package: filelog (embedded, the default).
//
// Caller's duties:
//
//  1. Scan once when the process starts, before (or while) new
//     transactions begin, so that a crash's leftovers are resolved, and
//  2. keep scanning periodically: a branch left pending by a failed phase
//     2, or by a coordinator that died, is resolved there. Start does both.
//  3. Configure every participant the transaction manager used, under the
//     same names: a record naming an unknown participant is kept and
//     reported, never forgotten, and without a delegated decision store
//     nothing is presumed aborted.
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
	// Log holds the commit decisions, and takes the abort records of
	// presumed aborts. A read-only log (filelog.Snapshot) serves Plan.
	Log xa.RecoveryLog
	// Nodes are the transaction-manager nodes whose branches this scanner
	// resolves; default: the log's node. Branches of other nodes are
	// reported, never touched.
	Nodes []string
	// Grace: a branch with no decision is presumed aborted only once it is
	// older than this. The log's grace (LogIdentity.Grace) is the default
	// and the minimum: a shorter value is ignored.
	Grace time.Duration
	// Unreachable names participants that are configured but could not be
	// opened, with why: reports say so instead of "not configured".
	Unreachable map[string]error
	// Logger receives a line per action; nil discards.
	Logger *slog.Logger
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// Tracer, if set, records a span per scan (SpanScan; package otelxa
	// for OpenTelemetry). nil: none.
	Tracer xa.Tracer
}

// Scanner resolves in-doubt branches. It is safe for concurrent use.
type Scanner struct {
	cfg   Config
	log   *slog.Logger
	ident xa.LogIdentity
	nodes map[string]bool
}

// New checks cfg and returns a Scanner.
func New(cfg Config) (*Scanner, error) {
	if cfg.Log == nil {
		return nil, errors.New("recovery: Config.Log is required")
	}
	ident := cfg.Log.Identity()
	if err := ident.Validate(); err != nil {
		return nil, fmt.Errorf("recovery: the decision log has no valid identity: %w", err)
	}
	if len(cfg.Nodes) == 0 {
		cfg.Nodes = []string{ident.Node}
	}
	if cfg.Grace < ident.Grace {
		cfg.Grace = ident.Grace
	}
	names := map[string]bool{}
	for _, p := range cfg.Participants {
		if names[p.Name()] {
			return nil, fmt.Errorf("recovery: two participants are named %q", p.Name())
		}
		names[p.Name()] = true
	}
	s := &Scanner{cfg: cfg, ident: ident, nodes: map[string]bool{}}
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

// Grace returns the grace period the scanner applies.
func (s *Scanner) Grace() time.Duration { return s.cfg.Grace }

// Identity returns the identity of the scanner's decision log.
func (s *Scanner) Identity() xa.LogIdentity { return s.ident }

// Verdict is what recovery does (or would do) with a branch.
type Verdict int

const (
	// Commit: a commit decision exists; the branch is committed.
	Commit Verdict = 1 + iota
	// Rollback: presumed abort (or an abort is recorded): the branch is
	// rolled back.
	Rollback
	// Wait: no decision yet, younger than the grace period: its
	// coordinator may still be deciding.
	Wait
	// Foreign: not ours (another application or transaction manager).
	Foreign
	// OtherNode: ours, but owned by a node this scanner does not serve.
	OtherNode
	// Anomaly: a record exists but does not list this branch: reported,
	// not touched.
	Anomaly
	// OtherLog: ours, with no decision here, and its XID names another
	// decision log (or none): its decision may be there. Left alone.
	OtherLog
	// Predates: ours, no decision, but it began before this log was
	// created: its decision may be in a log that no longer exists here.
	// Left alone.
	Predates
	// Blocked: presumed abort is due, but a participant this log delegated
	// decisions to is not configured or did not answer: the decision may
	// be there. Left alone until it answers.
	Blocked
)

var verdictNames = [...]string{"", "commit", "rollback", "wait", "foreign", "other-node", "anomaly", "other-log", "predates-log", "blocked"}

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
	Log         xa.LogID    // the decision log the XID names; zero if none
	Age         time.Duration
	AgeKnown    bool
	Logged      bool // a commit decision exists
	AbortLogged bool // an abort record exists
	Verdict     Verdict
	// Reason says why a branch is left alone (Wait, OtherLog, Predates,
	// Blocked, Anomaly), for operators.
	Reason string
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
	// Unlisted: configured participants that could not be listed, and
	// why. Nothing is known about their branches.
	Unlisted map[string]error
	// Mismatched: configured participants, or their decision tables, that
	// answered as another store than the one the decision log recorded
	// under their name, or as none (an *xa.IdentityError says which was
	// expected, which answered, and the fix). Nothing on them was acted
	// on, no record naming them was forgotten, and presumed abort waits
	// for a decision table that is not the recorded one. An anomaly for
	// the operator: xactl exits 3.
	Mismatched map[string]error
	Branches   []Branch
	// Forgotten records: every branch of them is resolved.
	Forgotten []xa.GlobalID
	// Kept records that could have been forgotten but for a reason
	// (ghost prepared transactions, a participant that did not answer).
	Kept []KeptRecord
	// Aborted: transactions whose abort this scan recorded (presumed
	// abort) and whose branches it then rolled back. A transaction that
	// turned out to have finished between the listing and the abort record
	// is not counted: its abort record is inert (nothing of it is left to
	// decide) and is forgotten after its retention.
	Aborted []xa.GlobalID
	// ForgottenAborts: abort records dropped (no branch left, retention
	// passed).
	ForgottenAborts []xa.GlobalID
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
// (waiting, failed, blocked or anomalous). Branches of other logs and
// older than the log count too: they are in doubt, only not for this
// scanner to resolve.
func (r Report) InDoubt() int {
	n := 0
	for _, b := range r.Branches {
		switch b.Verdict {
		case Commit, Rollback:
			if !b.Done {
				n++
			}
		case Wait, Anomaly, OtherLog, Predates, Blocked:
			n++
		}
	}
	return n
}

// Plan reports what Scan would do, without doing it.
func (s *Scanner) Plan(ctx context.Context) (Report, error) { return s.traced(ctx, true) }

// Scan resolves every in-doubt branch it can and forgets the records that
// are done. The error is non-nil only when nothing could be scanned (the
// log could not be read); partial failures are in Report.Errors and in
// each Branch.Err.
func (s *Scanner) Scan(ctx context.Context) (Report, error) { return s.traced(ctx, false) }

// hasDecisionTable is implemented by participants that implement
// DecisionStore but may have it turned off (a PostgreSQL participant
// without a decision table).
type hasDecisionTable interface{ HasDecisionTable() bool }

// store returns rm as a decision store, if it is one.
func store(rm xa.ResourceManager) (DecisionStore, bool) {
	ds, ok := rm.(DecisionStore)
	if !ok {
		return nil, false
	}
	if h, ok := rm.(hasDecisionTable); ok && !h.HasDecisionTable() {
		return nil, false
	}
	return ds, true
}

// server is one listing: a participant, or several on one server
// (SharedServer) whose listings are the same.
type server struct {
	members []xa.ResourceManager
	key     string // "" when not shared
}

func (sv *server) has(name string) bool {
	return slices.ContainsFunc(sv.members, func(rm xa.ResourceManager) bool { return rm.Name() == name })
}

// scanState is what one scan has learned.
type scanState struct {
	dry     bool
	records map[string]xa.CommitRecord // by global id text: the log's and the stores'
	aborts  map[string]xa.AbortRecord
	inStore map[string]DecisionStore // global id text -> the store holding its decision
	stores  map[string]DecisionStore // configured decision stores, by participant name
	// unfit: participants and decision tables that are not the stores the
	// log recorded (see identities), by participant name, with why.
	unfit    map[string]error
	blocked  string             // why nothing may be presumed aborted, "" if it may
	serverOf map[string]*server // participant name -> its listing
	fenced   map[string]error   // global id text -> outcome of taking the fence this scan
	aborted  []xa.GlobalID      // abort records this scan wrote
	// handCommits are the branches committed by hand (forced, heuristic
	// records), by their gtrid: their transactions are not presumed
	// aborted.
	handCommits map[string]xa.HeuristicRecord
	// Of those, transactions with a branch still listed after the fence
	// (rolledBack), and those with one found gone (vanished).
	rolledBack, vanished map[string]bool
	// lease says when presumed abort may happen (lease.go).
	lease leaseView
}

func (s *Scanner) scan(ctx context.Context, dry bool) (Report, error) {
	var rep Report
	st := &scanState{dry: dry, records: map[string]xa.CommitRecord{}, aborts: map[string]xa.AbortRecord{},
		inStore: map[string]DecisionStore{}, stores: map[string]DecisionStore{}, serverOf: map[string]*server{},
		fenced: map[string]error{}, rolledBack: map[string]bool{}, vanished: map[string]bool{}, unfit: map[string]error{}}
	// Read the decisions BEFORE listing the branches: every branch of a
	// record read here was prepared before the record was written, so a
	// listing taken afterwards that lacks it means it is finished.
	recs, err := s.cfg.Log.Commits(ctx)
	if err != nil {
		return rep, fmt.Errorf("recovery: reading the decision log: %w", err)
	}
	aborts, err := s.cfg.Log.Aborts(ctx)
	if err != nil {
		return rep, fmt.Errorf("recovery: reading the decision log's abort records: %w", err)
	}
	for _, a := range aborts {
		st.aborts[a.ID.String()] = a
	}
	st.lease = s.presumption(ctx)
	if st.handCommits, err = s.handCommits(ctx); err != nil {
		return rep, err
	}
	delegations, err := s.cfg.Log.Delegations(ctx)
	if err != nil {
		return rep, fmt.Errorf("recovery: reading the decision log's delegations: %w", err)
	}
	// Only the stores the log recorded are listed and read.
	ids, err := s.checkIdentities(ctx)
	if err != nil {
		return rep, err
	}
	for name, err := range ids.participants {
		st.unfit[name] = err
	}
	for name, err := range ids.tables {
		st.unfit[name] = err
	}
	for name, err := range st.unfit {
		if rep.Mismatched == nil {
			rep.Mismatched = map[string]error{}
		}
		rep.Mismatched[name] = err
		rep.Errors = append(rep.Errors, err)
		s.log.Error("participant not acted on: it is not the store the decision log recorded", "rm", name, "err", err)
	}
	// Decisions taken by last resources live in their databases. A
	// store this log delegated to that cannot be read may hold the
	// decision of any branch without a record: nothing is presumed
	// aborted in this scan then.
	unread := map[string]bool{}
	for _, rm := range s.cfg.Participants {
		ds, ok := store(rm)
		if !ok || st.unfit[rm.Name()] != nil {
			continue
		}
		st.stores[rm.Name()] = ds
		decs, err := ds.Decisions(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: reading the decisions stored in %s: %w", rm.Name(), err))
			unread[rm.Name()] = true
			continue
		}
		for _, r := range decs {
			st.inStore[r.ID.String()] = ds
			recs = append(recs, r)
		}
	}
	// The decisions just read from the stores may be younger than the
	// participant records compared above (a coordinator that used a
	// participant for the first time since): it records a participant
	// before it prepares there, so the records read now cover every
	// branch those decisions name.
	later, err := s.recheckParticipants(ctx, ids)
	if err != nil {
		return rep, err
	}
	for name, err := range later {
		ids.participants[name] = err
		st.unfit[name] = err
		delete(st.stores, name)
		if rep.Mismatched == nil {
			rep.Mismatched = map[string]error{}
		}
		rep.Mismatched[name] = err
		rep.Errors = append(rep.Errors, err)
		s.log.Error("participant not acted on: it is not the store the decision log recorded", "rm", name, "err", err)
	}
	var why []string
	for _, d := range delegations {
		switch {
		case st.stores[d.Participant] == nil:
			why = append(why, s.undelegated(st, d.Participant))
		case unread[d.Participant]:
			why = append(why, fmt.Sprintf("the decision may be in participant %q's decision table, which could not be read", d.Participant))
		}
	}
	st.blocked = strings.Join(why, "; ")
	for _, r := range recs {
		st.records[r.ID.String()] = r
	}

	// One listing per server: participants on one MySQL server list the
	// same branches.
	var servers []*server
	byKey := map[string]*server{}
	for _, rm := range s.cfg.Participants {
		if err := ids.participants[rm.Name()]; err != nil {
			if rep.Unlisted == nil {
				rep.Unlisted = map[string]error{}
			}
			rep.Unlisted[rm.Name()] = err
			continue
		}
		key := ""
		if sh, ok := rm.(SharedServer); ok {
			k, err := sh.ServerKey(ctx)
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("recovery: identifying the server of %s (listed on its own): %w", rm.Name(), err))
			} else {
				key = k
			}
		}
		if sv := byKey[key]; key != "" && sv != nil {
			sv.members = append(sv.members, rm)
			st.serverOf[rm.Name()] = sv
			continue
		}
		sv := &server{members: []xa.ResourceManager{rm}, key: key}
		if key != "" {
			byKey[key] = sv
		}
		servers = append(servers, sv)
		st.serverOf[rm.Name()] = sv
	}

	type key struct {
		server *server
		xid    string
	}
	listed := map[key]bool{}
	listedIDs := map[string]bool{}
	answered := map[*server]bool{}
	ghosts := map[*server]int{}
	now := s.cfg.Now()

	for _, sv := range servers {
		var prepared []xa.PreparedBranch
		var lister xa.ResourceManager
		var errs []error
		for _, rm := range sv.members {
			p, err := rm.Recover(ctx)
			if err == nil {
				prepared, lister = p, rm
				break
			}
			errs = append(errs, fmt.Errorf("recovery: listing %s: %w", rm.Name(), err))
		}
		if lister == nil {
			rep.Errors = append(rep.Errors, errs...)
			if rep.Unlisted == nil {
				rep.Unlisted = map[string]error{}
			}
			for i, rm := range sv.members {
				rep.Unlisted[rm.Name()] = errs[i]
			}
			continue
		}
		answered[sv] = true
		for _, rm := range sv.members {
			rep.Participants = append(rep.Participants, rm.Name())
		}
		for _, p := range prepared {
			b := Branch{Participant: sv.members[0].Name(), Prepared: p}
			b.Age, b.AgeKnown = p.Age(now)
			ref, ours := xa.ParseOwned(p.XID)
			rm := sv.members[0]
			switch {
			case !ours:
				b.Verdict = Foreign
			case !s.nodes[ref.ID.Node]:
				b.ID, b.Log, b.Verdict = ref.ID, ref.Log, OtherNode
			default:
				b.ID, b.Log = ref.ID, ref.Log
				listed[key{sv, p.XID.String()}] = true
				listedIDs[ref.ID.String()] = true
				rec, logged := st.records[ref.ID.String()]
				_, b.AbortLogged = st.aborts[ref.ID.String()]
				b.Logged = logged
				if logged {
					// Attribute the branch to the participant its record
					// names, among those sharing the server.
					for _, br := range rec.Branches {
						if br.XID.Equal(p.XID) && sv.has(br.RM) {
							b.Participant = br.RM
							rm = s.participant(br.RM)
						}
					}
				}
				s.judge(st, &b, ref, rec, logged)
				if !dry {
					s.act(ctx, st, rm, &b, rec)
				}
			}
			rep.Branches = append(rep.Branches, b)
		}
		// Counted after acting, not between the listing and the acts,
		// which it would delay: it only decides what may be forgotten.
		if gc, ok := lister.(GhostCounter); ok {
			n, err := gc.UnlistedPrepared(ctx)
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("recovery: counting unlisted prepared transactions on %s: %w", lister.Name(), err))
				n = -1
			}
			ghosts[sv] = n
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
			sv := st.serverOf[br.RM]
			switch {
			case ids.participants[br.RM] != nil:
				reasons = append(reasons, fmt.Sprintf("participant %q is not the database the log recorded (see Mismatched)", br.RM))
				unseen = true
			case sv == nil && s.cfg.Unreachable[br.RM] != nil:
				reasons = append(reasons, fmt.Sprintf("participant %q could not be opened: %v", br.RM, s.cfg.Unreachable[br.RM]))
				unseen = true
			case sv == nil:
				reasons = append(reasons, fmt.Sprintf("participant %q is not configured", br.RM))
				unseen = true
			case !answered[sv]:
				reasons = append(reasons, fmt.Sprintf("participant %q could not be listed", br.RM))
				unseen = true
			case listed[key{sv, br.XID.String()}]:
				prepared = true
			case ghosts[sv] < 0:
				reasons = append(reasons, fmt.Sprintf("participant %q could not tell whether it holds prepared transactions it does not list (see the scan's errors)", br.RM))
			case ghosts[sv] > 0:
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
		if ds, ok := st.inStore[rec.ID.String()]; ok {
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
	if !dry {
		s.forgetAborts(ctx, &rep, st, aborts, len(answered) == len(servers) && len(ids.participants) == 0, listedIDs)
	}
	// Report the presumed aborts that found something to roll back.
	for _, id := range st.aborted {
		if k := id.String(); st.rolledBack[k] || !st.vanished[k] {
			rep.Aborted = append(rep.Aborted, id)
		}
	}
	return rep, nil
}

// forgetAborts drops abort records whose branches are gone, once their
// retention has passed (the log enforces it by its own clock), and abort
// markers in decision stores past retention.
func (s *Scanner) forgetAborts(ctx context.Context, rep *Report, st *scanState, aborts []xa.AbortRecord, all bool, listed map[string]bool) {
	now := s.cfg.Now()
	timeout := s.cfg.Log.Identity().Timeout
	for _, a := range aborts {
		if !all || listed[a.ID.String()] || now.Before(a.KeptUntil(timeout)) {
			continue
		}
		if err := s.cfg.Log.ForgetAbort(ctx, a.ID); err != nil {
			s.log.Debug("abort record kept", "tx", a.ID, "err", err)
			continue
		}
		rep.ForgottenAborts = append(rep.ForgottenAborts, a.ID)
	}
	for name, ds := range st.stores {
		if n, err := ds.ForgetAborts(ctx, xa.MarkerRetention(timeout)); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: pruning abort markers in %s: %w", name, err))
		} else if n > 0 {
			s.log.Info("pruned abort markers past their retention", "rm", name, "count", n)
		}
	}
}

// undelegated says why a store the log delegated to cannot be read.
func (s *Scanner) undelegated(st *scanState, name string) string {
	if err := st.unfit[name]; err != nil {
		return fmt.Sprintf("the decision may be in participant %q's decision table (the log delegated decisions to it), "+
			"but the store that answers under that name is not the recorded one: %v", name, err)
	}
	if err := s.cfg.Unreachable[name]; err != nil {
		return fmt.Sprintf("the decision may be in participant %q's decision table (the log delegated decisions to it), which could not be opened: %v", name, err)
	}
	return fmt.Sprintf("the decision may be in participant %q's decision table (the log delegated decisions to it), which is not configured", name)
}

func (s *Scanner) participant(name string) xa.ResourceManager {
	for _, rm := range s.cfg.Participants {
		if rm.Name() == name {
			return rm
		}
	}
	return nil
}

// judge sets b's verdict (and reason) from what the scan knows.
func (s *Scanner) judge(st *scanState, b *Branch, ref xa.BranchRef, rec xa.CommitRecord, logged bool) {
	switch {
	case logged:
		for _, br := range rec.Branches {
			if br.RM == b.Participant && br.XID.Equal(b.Prepared.XID) {
				b.Verdict = Commit
				return
			}
		}
		b.Verdict = Anomaly
		b.Reason = "its transaction's commit record does not list this branch"
	case st.handCommits[string(b.Prepared.XID.Gtrid)].RM != "":
		hr := st.handCommits[string(b.Prepared.XID.Gtrid)]
		b.Verdict = Blocked
		b.Reason = handCommitReason(hr)
	case b.AbortLogged:
		// This log fenced the transaction: no commit can be recorded.
		b.Verdict = Rollback
	case ref.Log == 0:
		b.Verdict = OtherLog
		b.Reason = "its XID names no decision log (made before logs had identities, or by hand): only a commit record decides it"
	case ref.Log != s.ident.ID:
		b.Verdict = OtherLog
		b.Reason = fmt.Sprintf("belongs to decision log %s; this is log %s: recover it with that log", ref.Log, s.ident.ID)
	case s.predates(ref.ID.Begun):
		b.Verdict = Predates
		b.Reason = fmt.Sprintf("began %s, before this log was created (%s)", ref.ID.Begun.UTC().Format(time.RFC3339), s.ident.Created.UTC().Format(time.RFC3339))
	case st.lease.wait(!b.AgeKnown || b.Age <= s.cfg.Grace):
		b.Verdict = Wait
		b.Reason = st.lease.waitReason(s.cfg.Grace)
	case st.blocked != "":
		b.Verdict = Blocked
		b.Reason = st.blocked
	default:
		b.Verdict = Rollback
	}
}

// act carries out b's verdict.
func (s *Scanner) act(ctx context.Context, st *scanState, rm xa.ResourceManager, b *Branch, rec xa.CommitRecord) {
	attrs := []any{"rm", b.Participant, "xid", b.Prepared.XID, "tx", b.ID, "age", b.Age.Round(time.Millisecond)}
	switch b.Verdict {
	case Commit:
		s.commit(ctx, rm, b, rec, attrs)
	case Rollback:
		if !b.AbortLogged {
			rec, committed, err := s.fence(ctx, st, b)
			switch {
			case err != nil:
				b.Err = err
				s.record(b, err, "", attrs)
				return
			case committed:
				b.Verdict, b.Logged = Commit, true
				s.commit(ctx, rm, b, rec, attrs)
				return
			}
			// An operator may have committed a branch by hand since
			// the scan began: xactl records that before committing,
			// and reads the abort again after, so one of the two sees
			// the other.
			hc, err := s.handCommits(ctx)
			if err != nil {
				b.Err = err
				s.record(b, err, "", attrs)
				return
			}
			if hr, ok := hc[string(b.Prepared.XID.Gtrid)]; ok {
				b.Verdict, b.Reason = Blocked, handCommitReason(hr)
				s.log.Warn("in-doubt branch left prepared: "+b.Reason, attrs...)
				return
			}
			// The listing is older than the fence: the transaction may
			// have finished in between (committed, and its record
			// forgotten, before the abort was recorded). Then the abort
			// record is inert, and this scan rolled back nothing.
			if listed, err := stillListed(ctx, rm, b.Prepared.XID); err == nil && !listed {
				b.Done = true
				b.Reason = "finished before the abort was recorded (committed or rolled back by its coordinator): nothing to roll back"
				st.vanished[b.ID.String()] = true
				s.log.Info("in-doubt branch finished before its presumed abort was recorded", attrs...)
				return
			}
			st.rolledBack[b.ID.String()] = true
		}
		err := rm.Rollback(ctx, b.Prepared.XID, xa.Origin{})
		s.record(b, err, "rolled back in-doubt branch (presumed abort)", attrs)
	case Anomaly:
		s.log.Error("in-doubt branch not listed by its commit record: left alone", attrs...)
	}
}

// stillListed reports whether rm lists x as prepared now.
func stillListed(ctx context.Context, rm xa.ResourceManager, x xa.XID) (bool, error) {
	ps, err := rm.Recover(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(ps, func(p xa.PreparedBranch) bool { return p.XID.Equal(x) }), nil
}

func (s *Scanner) commit(ctx context.Context, rm xa.ResourceManager, b *Branch, rec xa.CommitRecord, attrs []any) {
	var from xa.Origin
	for _, br := range rec.Branches {
		if br.RM == b.Participant && br.XID.Equal(b.Prepared.XID) {
			from = br.Origin
		}
	}
	err := rm.Commit(ctx, b.Prepared.XID, from)
	if errors.Is(err, xa.ErrUnknownXID) {
		// Listed a moment ago, gone now: a concurrent committer (the
		// coordinator or another scanner) finished it. Nobody rolls back
		// a branch with a commit decision: the fence refuses the abort.
		err = nil
	}
	s.record(b, err, "committed in-doubt branch (logged decision)", attrs)
}

// fence takes the fence for b's transaction before presumed abort, once per
// scan and transaction: an abort marker in every configured decision store
// (the log delegated to them all, or the scan is blocked), then an abort
// record in the log. committed: a commit won the race (rec is its
// decision); err: nothing is known, nothing may be rolled back.
func (s *Scanner) fence(ctx context.Context, st *scanState, b *Branch) (rec xa.CommitRecord, committed bool, err error) {
	k := b.ID.String()
	if err, ok := st.fenced[k]; ok {
		if errors.Is(err, xa.ErrCommitRecorded) {
			rec, ok := st.records[k]
			return rec, ok, nil
		}
		return xa.CommitRecord{}, false, err
	}
	rec, committed, err = s.takeFence(ctx, st, b, false)
	switch {
	case committed:
		st.records[k] = rec
		st.fenced[k] = xa.ErrCommitRecorded
	case err != nil:
		st.fenced[k] = err
	default:
		st.fenced[k] = nil
	}
	return rec, committed, err
}

// handCommits returns the log's heuristic commits, by gtrid.
func (s *Scanner) handCommits(ctx context.Context) (map[string]xa.HeuristicRecord, error) {
	hs, err := s.cfg.Log.Heuristics(ctx)
	if err != nil {
		return nil, fmt.Errorf("recovery: reading the decision log's heuristic records: %w", err)
	}
	m := map[string]xa.HeuristicRecord{}
	for _, h := range hs {
		if h.Action == xa.OutcomeCommit {
			m[string(h.XID.Gtrid)] = h
		}
	}
	return m, nil
}

// handCommitReason says why a branch whose sibling was committed by hand
// is left prepared.
func handCommitReason(hr xa.HeuristicRecord) string {
	return fmt.Sprintf("branch %s on %s of its transaction was committed by hand (heuristic record): presuming abort would mix the outcome; "+
		"commit this branch too (xactl commit --force), or clear that record (xactl heuristic clear) to let presumed abort go on", hr.XID, hr.RM)
}

// takeFence claims the abort of b's transaction in every configured
// decision store, then records it in the log. A store the log delegated to
// but not configured here blocks it, unless forced (an operator's forced
// rollback): then the fence is what can be claimed.
func (s *Scanner) takeFence(ctx context.Context, st *scanState, b *Branch, forced bool) (xa.CommitRecord, bool, error) {
	reason := st.lease.abortReason(b.Participant, b.Age, s.cfg.Grace)
	if forced {
		reason = fmt.Sprintf("forced rollback of %s on %s by an operator", b.Prepared.XID, b.Participant)
	}
	// Read the delegations again, after the listing: a coordinator records
	// a delegation before it prepares any branch, so every store that may
	// decide this transaction is named by now.
	delegations, err := s.cfg.Log.Delegations(ctx)
	if err != nil {
		return xa.CommitRecord{}, false, fmt.Errorf("recovery: reading the decision log's delegations: %w", err)
	}
	for _, d := range delegations {
		// A delegation recorded since the scan compared the decision
		// tables with the log's (a coordinator delegated for the first
		// time while this scan listed) was not compared: the table this
		// participant reaches may be another one, and a marker there
		// fences nothing.
		if ds := st.stores[d.Participant]; ds != nil && d.TableID != "" {
			if err := tableIdentity(s.participant(d.Participant), d); err != nil {
				st.unfit[d.Participant] = err
				delete(st.stores, d.Participant)
			}
		}
		if st.stores[d.Participant] == nil && !forced {
			b.Verdict = Blocked
			b.Reason = s.undelegated(st, d.Participant)
			return xa.CommitRecord{}, false, fmt.Errorf("%w: %s", xa.ErrRetryable, b.Reason)
		}
	}
	names := make([]string, 0, len(st.stores))
	for name := range st.stores {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ds := st.stores[name]
		err := ds.ClaimAbort(ctx, b.ID, reason)
		if errors.Is(err, xa.ErrCommitRecorded) {
			rec, ok, lerr := ds.Decision(ctx, b.ID)
			if lerr != nil || !ok {
				return xa.CommitRecord{}, false, fmt.Errorf("%w: %s holds a commit decision for %s that could not be read back: %v", xa.ErrRetryable, name, b.ID, lerr)
			}
			st.inStore[b.ID.String()] = ds
			s.log.Info("presumed abort lost the race: a last-resource commit holds the decision", "tx", b.ID, "rm", name)
			return rec, true, nil
		}
		if err != nil {
			return xa.CommitRecord{}, false, fmt.Errorf("recovery: claiming the abort of %s in %s's decision table: %w", b.ID, name, err)
		}
	}
	err = s.cfg.Log.LogAbort(ctx, xa.AbortRecord{ID: b.ID, Logged: s.cfg.Now(), Reason: reason})
	if errors.Is(err, xa.ErrCommitRecorded) {
		rec, ok, lerr := s.cfg.Log.Lookup(ctx, b.ID)
		if lerr != nil || !ok {
			// Being written right now: the next scan commits it.
			return xa.CommitRecord{}, false, fmt.Errorf("%w: a commit decision for %s is being logged; the next scan commits it", xa.ErrRetryable, b.ID)
		}
		s.log.Info("presumed abort lost the race: the coordinator logged the commit", "tx", b.ID)
		return rec, true, nil
	}
	if err != nil {
		return xa.CommitRecord{}, false, fmt.Errorf("recovery: recording the abort of %s: %w", b.ID, err)
	}
	s.log.Info("recorded presumed abort", "tx", b.ID, "reason", reason)
	st.aborted = append(st.aborted, b.ID)
	return xa.CommitRecord{}, false, nil
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
