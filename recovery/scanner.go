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
// What is done with each branch is Judge's verdict (judge.go), a pure
// function of what the scan read about it (Facts); a resolution by hand
// (Resolve) is measured against the same verdict (Contradiction). The
// scan's phases, in order: readLog, readStores, groupServers, listServer
// (judging and acting on each branch), forgetRecords, forgetAborts.
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

// Plan reports what Scan would do, without doing it.
func (s *Scanner) Plan(ctx context.Context) (Report, error) { return s.traced(ctx, true) }

// Scan resolves every in-doubt branch it can and forgets the records that
// are done. The error is non-nil only when nothing could be scanned (the
// log could not be read); partial failures are in Report.Errors and in
// each Branch.Err.
func (s *Scanner) Scan(ctx context.Context) (Report, error) { return s.traced(ctx, false) }

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
	dry bool
	// recs are the decisions read before the listing: the log's, then
	// the decision stores'; records has them by global id text.
	recs    []xa.CommitRecord
	records map[string]xa.CommitRecord
	// abortRecs are the log's abort records; aborts has them by id text.
	abortRecs []xa.AbortRecord
	aborts    map[string]xa.AbortRecord
	inStore   map[string]DecisionStore // global id text -> the store holding its decision
	stores    map[string]DecisionStore // configured decision stores, by participant name
	// ids: the identities compared with the log's records; unfit:
	// participants and decision tables that are not the stores the log
	// recorded, by participant name, with why.
	ids   identities
	unfit map[string]error
	// delegated: the decision tables the log delegated to, as found.
	delegated []Delegated
	servers   []*server          // one listing each
	serverOf  map[string]*server // participant name -> its listing
	// What the listings found: branches of ours by server and XID, their
	// transactions, the servers that answered, and their counts of
	// prepared transactions they do not list (-1: unknown).
	listed    map[listedKey]bool
	listedIDs map[string]bool
	answered  map[*server]bool
	ghosts    map[*server]int
	fenced    map[string]error // global id text -> outcome of taking the fence this scan
	aborted   []xa.GlobalID    // abort records this scan wrote
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

type listedKey struct {
	server *server
	xid    string
}

func newScanState(dry bool) *scanState {
	return &scanState{dry: dry, records: map[string]xa.CommitRecord{}, aborts: map[string]xa.AbortRecord{},
		inStore: map[string]DecisionStore{}, stores: map[string]DecisionStore{}, serverOf: map[string]*server{},
		fenced: map[string]error{}, rolledBack: map[string]bool{}, vanished: map[string]bool{}, unfit: map[string]error{},
		listed: map[listedKey]bool{}, listedIDs: map[string]bool{}, answered: map[*server]bool{}, ghosts: map[*server]int{}}
}

// scan runs the phases of one scan: read the decisions (before the
// listing), group the participants by server, list each server and judge
// and act on its branches, then forget what is done.
func (s *Scanner) scan(ctx context.Context, dry bool) (Report, error) {
	var rep Report
	st := newScanState(dry)
	if err := s.readLog(ctx, st); err != nil {
		return rep, err
	}
	if err := s.readStores(ctx, st, &rep); err != nil {
		return rep, err
	}
	s.groupServers(ctx, st, &rep)
	now := s.cfg.Now()
	for _, sv := range st.servers {
		s.listServer(ctx, st, sv, now, &rep)
	}
	s.forgetRecords(ctx, st, &rep)
	if !dry {
		s.forgetAborts(ctx, &rep, st)
	}
	// Report the presumed aborts that found something to roll back.
	for _, id := range st.aborted {
		if k := id.String(); st.rolledBack[k] || !st.vanished[k] {
			rep.Aborted = append(rep.Aborted, id)
		}
	}
	return rep, nil
}

// readLog reads the log's decisions, abort records, lease and heuristic
// commits. It runs BEFORE the listing: every branch of a record read here
// was prepared before the record was written, so a listing taken
// afterwards that lacks it means it is finished.
func (s *Scanner) readLog(ctx context.Context, st *scanState) error {
	var err error
	if st.recs, err = s.cfg.Log.Commits(ctx); err != nil {
		return fmt.Errorf("recovery: reading the decision log: %w", err)
	}
	if st.abortRecs, err = s.cfg.Log.Aborts(ctx); err != nil {
		return fmt.Errorf("recovery: reading the decision log's abort records: %w", err)
	}
	for _, a := range st.abortRecs {
		st.aborts[a.ID.String()] = a
	}
	st.lease = s.presumption(ctx)
	st.handCommits, err = s.handCommits(ctx)
	return err
}

// readStores compares the stores with the log's identity records (only
// the recorded ones are listed and read), reads the decisions the last
// resources stored, and finds what the delegated decision tables say.
func (s *Scanner) readStores(ctx context.Context, st *scanState, rep *Report) error {
	delegations, err := s.cfg.Log.Delegations(ctx)
	if err != nil {
		return fmt.Errorf("recovery: reading the decision log's delegations: %w", err)
	}
	if st.ids, err = s.checkIdentities(ctx); err != nil {
		return err
	}
	for name, err := range st.ids.participants {
		st.unfit[name] = err
	}
	for name, err := range st.ids.tables {
		st.unfit[name] = err
	}
	for name, err := range st.unfit {
		s.mismatched(rep, name, err)
	}
	// Decisions taken by last resources live in their databases. A
	// store this log delegated to that cannot be read may hold the
	// decision of any branch without a record: nothing is presumed
	// aborted in this scan then.
	unread := map[string]error{}
	for _, rm := range s.cfg.Participants {
		ds, ok := xa.AsDecisionStore(rm)
		if !ok || st.unfit[rm.Name()] != nil {
			continue
		}
		st.stores[rm.Name()] = ds
		decs, err := ds.Decisions(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: reading the decisions stored in %s: %w", rm.Name(), err))
			unread[rm.Name()] = err
			continue
		}
		for _, r := range decs {
			st.inStore[r.ID.String()] = ds
			st.recs = append(st.recs, r)
		}
	}
	// The decisions just read from the stores may be younger than the
	// participant records compared above (a coordinator that used a
	// participant for the first time since): it records a participant
	// before it prepares there, so the records read now cover every
	// branch those decisions name.
	later, err := s.recheckParticipants(ctx, st.ids)
	if err != nil {
		return err
	}
	for name, err := range later {
		st.ids.participants[name] = err
		st.unfit[name] = err
		delete(st.stores, name)
		s.mismatched(rep, name, err)
	}
	for _, d := range delegations {
		st.delegated = append(st.delegated, s.delegatedTable(st, d.Participant, unread[d.Participant]))
	}
	for _, r := range st.recs {
		st.records[r.ID.String()] = r
	}
	return nil
}

// mismatched reports a participant (or its decision table) that is not the
// store the log recorded.
func (s *Scanner) mismatched(rep *Report, name string, err error) {
	if rep.Mismatched == nil {
		rep.Mismatched = map[string]error{}
	}
	rep.Mismatched[name] = err
	rep.Errors = append(rep.Errors, err)
	s.log.Error("participant not acted on: it is not the store the decision log recorded", "rm", name, "err", err)
}

// delegatedTable says what the scan found of the decision table of the
// participant name, which the log delegated decisions to; unread: reading
// its decisions failed.
func (s *Scanner) delegatedTable(st *scanState, name string, unread error) Delegated {
	d := Delegated{Participant: name}
	switch {
	case st.stores[name] != nil && unread != nil:
		d.Table, d.Err = TableUnread, unread
	case st.stores[name] != nil:
		d.Table = TableReady
	case st.unfit[name] != nil:
		d.Table, d.Err = TableMismatched, st.unfit[name]
	case s.cfg.Unreachable[name] != nil:
		d.Table, d.Err = TableUnreachable, s.cfg.Unreachable[name]
	default:
		d.Table = TableMissing
	}
	return d
}

// groupServers makes one listing per server: participants on one MySQL
// server list the same branches. Participants that are not the recorded
// stores are not listed.
func (s *Scanner) groupServers(ctx context.Context, st *scanState, rep *Report) {
	byKey := map[string]*server{}
	for _, rm := range s.cfg.Participants {
		if err := st.ids.participants[rm.Name()]; err != nil {
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
		st.servers = append(st.servers, sv)
		st.serverOf[rm.Name()] = sv
	}
}

// listServer lists sv's prepared branches, judges each and, unless the
// scan is dry, acts on it; then counts the prepared transactions sv does
// not list.
func (s *Scanner) listServer(ctx context.Context, st *scanState, sv *server, now time.Time, rep *Report) {
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
		return
	}
	st.answered[sv] = true
	for _, rm := range sv.members {
		rep.Participants = append(rep.Participants, rm.Name())
	}
	for _, p := range prepared {
		rep.Branches = append(rep.Branches, s.branch(ctx, st, sv, p, now))
	}
	// Counted after acting, not between the listing and the acts,
	// which it would delay: it only decides what may be forgotten.
	if gc, ok := lister.(GhostCounter); ok {
		n, err := gc.UnlistedPrepared(ctx)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("recovery: counting unlisted prepared transactions on %s: %w", lister.Name(), err))
			n = -1
		}
		st.ghosts[sv] = n
	}
}

// branch gathers the facts of one listed branch, judges it, and acts on
// the verdict unless the scan is dry.
func (s *Scanner) branch(ctx context.Context, st *scanState, sv *server, p xa.PreparedBranch, now time.Time) Branch {
	b := Branch{Participant: sv.members[0].Name(), Prepared: p}
	b.Age, b.AgeKnown = p.Age(now)
	ref, ours := xa.ParseOwned(p.XID)
	f := s.facts(st, ref, ours, b.Age, b.AgeKnown)
	f.Presume, f.LeaseWhy = st.lease.presume, st.lease.why
	rm := sv.members[0]
	var rec xa.CommitRecord
	if ours {
		b.ID, b.Log = ref.ID, ref.Log
	}
	if f.Served {
		k := ref.ID.String()
		st.listed[listedKey{sv, p.XID.String()}] = true
		st.listedIDs[k] = true
		rec, f.Committed = st.records[k]
		_, f.Aborted = st.aborts[k]
		if f.Committed {
			// Attribute the branch to the participant its record names,
			// among those sharing the server.
			for _, br := range rec.Branches {
				if br.XID.Equal(p.XID) && sv.has(br.RM) {
					b.Participant = br.RM
					rm = s.participant(br.RM)
				}
			}
			f.Lists = slices.ContainsFunc(rec.Branches, func(br xa.BranchRecord) bool {
				return br.RM == b.Participant && br.XID.Equal(p.XID)
			})
		}
		if hr, ok := st.handCommits[string(p.XID.Gtrid)]; ok && hr.RM != "" {
			f.HandCommit = &hr
		}
		f.Mismatched = st.ids.participants[b.Participant]
	}
	j := Judge(f)
	b.Verdict, b.Reason = j.Verdict, j.Reason
	b.Logged, b.AbortLogged = f.Committed, f.Aborted
	if f.Served && !st.dry {
		s.act(ctx, st, rm, &b, rec)
	}
	return b
}

// facts returns what the scanner knows of a branch with XID reference ref
// (ours: it parsed) and age, from this log's identity and the delegated
// decision tables st found. The decisions, the lease and the identity of
// the listing participant are the caller's to add.
func (s *Scanner) facts(st *scanState, ref xa.BranchRef, ours bool, age time.Duration, ageKnown bool) Facts {
	f := Facts{Ours: ours, Log: s.ident.ID, Created: s.ident.Created, Age: age, AgeKnown: ageKnown, Grace: s.cfg.Grace, Delegated: st.delegated}
	if ours {
		f.Ref, f.Served = ref, s.nodes[ref.ID.Node]
		f.Predates = s.predates(ref.ID.Begun)
	}
	return f
}

// forgetRecords forgets the records whose branches are all gone from
// listings taken after the record was read, and reports those kept for
// another reason.
func (s *Scanner) forgetRecords(ctx context.Context, st *scanState, rep *Report) {
	storeForget := map[DecisionStore][]xa.GlobalID{}
	for _, rec := range st.recs {
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
			case st.ids.participants[br.RM] != nil:
				reasons = append(reasons, fmt.Sprintf("participant %q is not the database the log recorded (see Mismatched)", br.RM))
				unseen = true
			case sv == nil && s.cfg.Unreachable[br.RM] != nil:
				reasons = append(reasons, fmt.Sprintf("participant %q could not be opened: %v", br.RM, s.cfg.Unreachable[br.RM]))
				unseen = true
			case sv == nil:
				reasons = append(reasons, fmt.Sprintf("participant %q is not configured", br.RM))
				unseen = true
			case !st.answered[sv]:
				reasons = append(reasons, fmt.Sprintf("participant %q could not be listed", br.RM))
				unseen = true
			case st.listed[listedKey{sv, br.XID.String()}]:
				prepared = true
			case st.ghosts[sv] < 0:
				reasons = append(reasons, fmt.Sprintf("participant %q could not tell whether it holds prepared transactions it does not list (see the scan's errors)", br.RM))
			case st.ghosts[sv] > 0:
				reasons = append(reasons, fmt.Sprintf("participant %q holds prepared transactions it does not list (fact 7): restart it and recover", br.RM))
			}
		}
		if len(reasons) > 0 {
			rep.Kept = append(rep.Kept, KeptRecord{ID: rec.ID, Reason: strings.Join(slices.Compact(reasons), "; "), Unseen: unseen})
		}
		if len(reasons) > 0 || prepared {
			continue
		}
		if st.dry {
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
}

// forgetAborts drops abort records whose branches are gone, once their
// retention has passed (the log enforces it by its own clock), and abort
// markers in decision stores past retention. An abort record is kept
// while any participant was not listed or not the recorded store.
func (s *Scanner) forgetAborts(ctx context.Context, rep *Report, st *scanState) {
	all := len(st.answered) == len(st.servers) && len(st.ids.participants) == 0
	now := s.cfg.Now()
	timeout := s.cfg.Log.Identity().Timeout
	for _, a := range st.abortRecs {
		if !all || st.listedIDs[a.ID.String()] || now.Before(a.KeptUntil(timeout)) {
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

func (s *Scanner) participant(name string) xa.ResourceManager {
	for _, rm := range s.cfg.Participants {
		if rm.Name() == name {
			return rm
		}
	}
	return nil
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
		res := xa.Phase2(ctx, scanRetry, xa.Phase2Call{Rollback: true}, func(ctx context.Context) error {
			return rm.Rollback(ctx, b.Prepared.XID, xa.Origin{})
		})
		s.record(b, res.Err, "rolled back in-doubt branch (presumed abort)", attrs)
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
	// Proven: an "unknown XID" means listed a moment ago, gone now: a
	// concurrent committer (the coordinator or another scanner) finished
	// it. Nobody rolls back a branch with a commit decision: the fence
	// refuses the abort.
	res := xa.Phase2(ctx, scanRetry, xa.Phase2Call{Proven: true}, func(ctx context.Context) error {
		return rm.Commit(ctx, b.Prepared.XID, from)
	})
	s.record(b, res.Err, "committed in-doubt branch (logged decision)", attrs)
}

// scanRetry is the scanner's phase-2 policy: one attempt, bounded by the
// scan's context. The next scan is the retry.
var scanRetry = xa.RetryPolicy{Attempts: 1}

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
			b.Reason = s.delegatedTable(st, d.Participant, nil).why()
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
