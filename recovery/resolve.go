package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// ErrContradiction is wrapped by Resolve's error when the resolution asked
// for goes against the decision log (or the protocol) and was not forced.
var ErrContradiction = errors.New("recovery: the resolution contradicts the decision log")

// ErrNotPrepared is wrapped by Resolve's error when no participant lists
// the branch as prepared.
var ErrNotPrepared = errors.New("recovery: the branch is not prepared on any participant that could be listed")

// ErrAmbiguous is wrapped by Resolve's error when the XID is prepared on
// participants of different servers: the caller must name one.
var ErrAmbiguous = errors.New("recovery: the branch is prepared on more than one participant")

// ResolveOptions qualify a manual resolution.
type ResolveOptions struct {
	// Participant, if set, is the only participant looked at.
	Participant string
	// Force acts even against the decision log; the resolution is then
	// recorded as a heuristic outcome.
	Force bool
	// Reason is the operator's reason, kept with a forced resolution.
	Reason string
}

// Resolution is what a manual resolution of one branch found and did.
type Resolution struct {
	Participant string
	XID         xa.XID
	Action      xa.Outcome
	// Logged: a commit decision exists for the branch's transaction.
	Logged bool
	// Contradiction says how the action goes against the decision log or
	// the protocol; "" when it does not.
	Contradiction string
	// Forced: done despite a contradiction, and recorded as a heuristic
	// outcome.
	Forced bool
	// Fenced: the rollback of an undecided branch recorded its
	// transaction's abort first (presumed abort taken by hand), so that
	// its coordinator can no longer commit it.
	Fenced bool
	// Done: the branch was committed or rolled back.
	Done bool
}

// Resolve commits or rolls back one prepared branch by hand (xactl commit
// and rollback), judging it as a scan would:
//
//   - committing a branch whose transaction has no commit decision,
//     rolling back one that has, rolling back one younger than the grace
//     period, one of another decision log or older than this log, one
//     whose decision may be in a delegated store that is not configured,
//     touching a branch that is not ours, or resolving one so that its
//     transaction's manual resolutions would disagree, is a contradiction:
//     refused (ErrContradiction) unless opts.Force, and recorded as a
//     heuristic outcome when forced;
//   - rolling back an undecided branch of this log takes the fence first,
//     as presumed abort does: a coordinator that decides commit meanwhile
//     wins, and the rollback is refused.
//
// Participants on one server list the same branches: the branch is
// resolved once, through the participant its commit record names.
func (s *Scanner) Resolve(ctx context.Context, x xa.XID, action xa.Outcome, opts ResolveOptions) (Resolution, error) {
	res := Resolution{XID: x, Action: action}
	if action != xa.OutcomeCommit && action != xa.OutcomeRollback {
		return res, fmt.Errorf("recovery: resolve: action %v", action)
	}
	if opts.Participant != "" && s.participant(opts.Participant) == nil {
		return res, fmt.Errorf("recovery: resolve: participant %q is not configured", opts.Participant)
	}
	st, err := s.resolveStores(ctx, opts.Participant)
	if err != nil {
		return res, err
	}
	// The decision, read before the listing (as a scan does).
	ref, ours := xa.ParseOwned(x)
	var rec xa.CommitRecord
	var aborted bool
	if ours {
		if rec, res.Logged, aborted, err = s.lookup(ctx, st, ref.ID); err != nil {
			return res, err
		}
	}
	h, err := s.holder(ctx, st, x, opts.Participant)
	if err != nil {
		return res, err
	}
	res.Participant = h.rm.Name()
	var from xa.Origin
	for _, br := range rec.Branches {
		if br.XID.Equal(x) && st.sharesServer(s, h.rm, br.RM) {
			res.Participant, from = br.RM, br.Origin
			h.rm = s.participant(br.RM)
		}
	}

	// Is it a contradiction? The scan's judgement says.
	if res.Contradiction, err = s.contradiction(ctx, st, x, ref, ours, h.prep, res.Participant, rec, res.Logged, aborted, action); err != nil {
		return res, err
	}
	if res.Contradiction != "" && !opts.Force {
		return res, fmt.Errorf("%w: refusing to %s %s: %s", ErrContradiction, verb(action), x, res.Contradiction)
	}

	// A rollback of an undecided branch of this log is a presumed abort,
	// forced or not (a forced one is typically inside the grace period,
	// its coordinator alive): fence, so that the coordinator can no
	// longer record a commit and commit the other branches. A forced
	// rollback claims what it can when a delegated decision table is not
	// configured here (the operator overrides that contradiction).
	if ours && ref.Log == s.ident.ID && action == xa.OutcomeRollback && !res.Logged && !aborted {
		if err := s.resolveFence(ctx, st, &res, h, ref, opts.Force); err != nil {
			return res, err
		}
	}

	hr := xa.HeuristicRecord{RM: res.Participant, XID: x, Action: action, Forced: true, Time: time.Now(), Reason: opts.Reason}
	// A forced commit of a branch of ours without a commit decision is
	// recorded first: the scanner reads the record after its fence and
	// leaves the transaction's other branches prepared instead of
	// presuming abort (which would mix the outcome). Then the abort is
	// looked up again: if a scan recorded one in between, it may be
	// rolling the other branches back, and the commit is refused.
	handCommit := ours && res.Contradiction != "" && action == xa.OutcomeCommit && !res.Logged
	if handCommit {
		if err := s.cfg.Log.LogHeuristic(ctx, hr); err != nil {
			return res, fmt.Errorf("recovery: recording the forced commit of %s before it (nothing committed): %w", x, err)
		}
		if !aborted {
			_, nowAborted, err := s.cfg.Log.LookupAbort(ctx, ref.ID)
			if err == nil && nowAborted {
				err = fmt.Errorf("%w: refusing to commit %s: recovery recorded its transaction's abort meanwhile and may be rolling back its other branches", ErrContradiction, x)
			}
			if err != nil {
				if cerr := s.cfg.Log.ClearHeuristic(ctx, hr.RM, hr.XID); cerr != nil {
					err = errors.Join(err, fmt.Errorf("the heuristic record of the commit not made stays (xactl heuristic clear): %w", cerr))
				}
				return res, err
			}
		}
	}
	// Not Proven: an operator is told what the database answered, an
	// unknown XID included (the branch was listed a moment ago).
	err = xa.Phase2(ctx, scanRetry, xa.Phase2Call{Rollback: action == xa.OutcomeRollback}, func(ctx context.Context) error {
		if action == xa.OutcomeCommit {
			return h.rm.Commit(ctx, x, from)
		}
		return h.rm.Rollback(ctx, x, from)
	}).Err
	if err != nil {
		if handCommit {
			err = errors.Join(err, fmt.Errorf("its heuristic record stays: the commit may have happened; run it again, or clear the record (xactl heuristic clear)"))
		}
		return res, fmt.Errorf("%s %s on %s: %w", verb(action), x, res.Participant, err)
	}
	res.Done = true
	if res.Contradiction != "" {
		res.Forced = true
		if !handCommit {
			if err := s.cfg.Log.LogHeuristic(ctx, hr); err != nil {
				return res, fmt.Errorf("the branch was resolved (%s), but recording the heuristic outcome failed: %w", action, err)
			}
		}
	}
	return res, nil
}

// resolveStores compares the stores with the log's identity records, as a
// scan does: nothing is done on, or read from, a store that is not the one
// the log recorded under its name, forced or not. It refuses a named
// participant that is not.
func (s *Scanner) resolveStores(ctx context.Context, participant string) (*scanState, error) {
	st := newScanState(false)
	ids, err := s.checkIdentities(ctx)
	if err != nil {
		return nil, err
	}
	st.ids = ids
	for name, err := range ids.tables {
		st.unfit[name] = err
	}
	for name, err := range ids.participants {
		st.unfit[name] = err
	}
	if err := ids.participants[participant]; err != nil {
		return nil, fmt.Errorf("recovery: resolve: refusing to act on participant %q: %w", participant, err)
	}
	for _, rm := range s.cfg.Participants {
		if ds, ok := xa.AsDecisionStore(rm); ok && st.unfit[rm.Name()] == nil {
			st.stores[rm.Name()] = ds
		}
	}
	return st, nil
}

// lookup reads the decisions of id: a commit decision in the log or in a
// decision store, and an abort record.
func (s *Scanner) lookup(ctx context.Context, st *scanState, id xa.GlobalID) (rec xa.CommitRecord, logged, aborted bool, err error) {
	rec, logged, err = s.cfg.Log.Lookup(ctx, id)
	if err != nil {
		return rec, false, false, fmt.Errorf("recovery: reading the decision log: %w", err)
	}
	for name, ds := range st.stores {
		if logged {
			break
		}
		if rec, logged, err = ds.Decision(ctx, id); err != nil {
			return rec, false, false, fmt.Errorf("recovery: reading the decisions stored in %s: %w", name, err)
		}
	}
	if _, aborted, err = s.cfg.Log.LookupAbort(ctx, id); err != nil {
		return rec, logged, false, fmt.Errorf("recovery: reading the decision log: %w", err)
	}
	return rec, logged, aborted, nil
}

// holder is a participant that lists a branch as prepared.
type holder struct {
	rm   xa.ResourceManager
	key  string
	prep xa.PreparedBranch
}

// holder finds the one participant (or server: participants on one server
// are one holder) that lists x as prepared, among the recorded stores.
func (s *Scanner) holder(ctx context.Context, st *scanState, x xa.XID, participant string) (holder, error) {
	var holders []holder
	var errs []error
	var unfit []error
	for _, rm := range s.cfg.Participants {
		if participant != "" && rm.Name() != participant {
			continue
		}
		if err := st.ids.participants[rm.Name()]; err != nil {
			unfit = append(unfit, err)
			continue
		}
		key := ""
		if sh, ok := rm.(SharedServer); ok {
			if k, err := sh.ServerKey(ctx); err == nil {
				key = k
			}
		}
		if key != "" && slices.ContainsFunc(holders, func(h holder) bool { return h.key == key }) {
			continue // listed through another participant of the same server
		}
		list, err := rm.Recover(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %s: %w", rm.Name(), err))
			continue
		}
		for _, p := range list {
			if p.XID.Equal(x) {
				holders = append(holders, holder{rm: rm, key: key, prep: p})
				break
			}
		}
	}
	switch {
	case len(holders) == 0 && len(unfit) > 0:
		return holder{}, fmt.Errorf("recovery: resolve: %s is not prepared on any participant that is the store the decision log recorded; "+
			"participants not looked at: %w", x, errors.Join(unfit...))
	case len(holders) == 0:
		return holder{}, fmt.Errorf("%w: %s (already resolved? see xactl list)%s", ErrNotPrepared, x, joinErrs(errs))
	case len(holders) > 1:
		names := make([]string, len(holders))
		for i, h := range holders {
			names[i] = h.rm.Name()
		}
		return holder{}, fmt.Errorf("%w: %s is prepared on %s: name one", ErrAmbiguous, x, strings.Join(names, " and "))
	}
	return holders[0], nil
}

// contradiction gathers the facts of the branch x, prepared as prep on
// participant, and says how action goes against the scan's judgement of
// it (Contradiction). Unlike a scan, it takes no lease into account: the
// fence decides a race, as in a scan.
func (s *Scanner) contradiction(ctx context.Context, st *scanState, x xa.XID, ref xa.BranchRef, ours bool, prep xa.PreparedBranch,
	participant string, rec xa.CommitRecord, logged, aborted bool, action xa.Outcome) (string, error) {
	if !ours {
		return Contradiction(Facts{}, action, nil), nil
	}
	age, known := prep.Age(s.cfg.Now())
	f := s.facts(st, ref, ours, age, known)
	// Delegations are read again, after the listing.
	delegations, err := s.cfg.Log.Delegations(ctx)
	if err != nil {
		return "", fmt.Errorf("recovery: reading the decision log's delegations: %w", err)
	}
	for _, d := range delegations {
		f.Delegated = append(f.Delegated, s.delegatedTable(st, d.Participant, nil))
	}
	hs, err := s.cfg.Log.Heuristics(ctx)
	if err != nil {
		return "", fmt.Errorf("recovery: reading the decision log's heuristic records: %w", err)
	}
	var byHand []xa.HeuristicRecord
	for i, hr := range hs {
		if !bytes.Equal(hr.XID.Gtrid, x.Gtrid) {
			continue
		}
		byHand = append(byHand, hr)
		if hr.Action == xa.OutcomeCommit && !hr.XID.Equal(x) {
			f.HandCommit = &hs[i]
		}
	}
	f.Committed, f.Aborted = logged, aborted
	f.Lists = slices.ContainsFunc(rec.Branches, func(br xa.BranchRecord) bool { return br.RM == participant && br.XID.Equal(x) })
	f.Mismatched = st.ids.participants[participant]
	return Contradiction(f, action, byHand), nil
}

// resolveFence takes the fence for the rollback of h's undecided branch
// (forced: claiming what can be claimed), and checks that the branch is
// still prepared after it.
func (s *Scanner) resolveFence(ctx context.Context, st *scanState, res *Resolution, h holder, ref xa.BranchRef, forced bool) error {
	x := res.XID
	b := &Branch{Participant: res.Participant, Prepared: h.prep, ID: ref.ID, Log: ref.Log}
	b.Age, _ = h.prep.Age(s.cfg.Now())
	_, committed, err := s.takeFence(ctx, st, b, forced)
	switch {
	case committed:
		res.Logged = true
		return fmt.Errorf("%w: refusing to roll back %s: its coordinator just recorded a commit; recovery will commit it", ErrContradiction, x)
	case err != nil:
		return err
	}
	res.Fenced = true
	// The listing is older than the fence: the coordinator may have
	// finished the transaction in between (committed every branch and
	// forgotten its record before the abort was recorded). Then the abort
	// record is inert and there is nothing to roll back; saying "rolled
	// back" would be false.
	listed, err := stillListed(ctx, h.rm, x)
	switch {
	case err != nil:
		return fmt.Errorf("recovery: the abort of %s is recorded, but listing %s again failed (nothing rolled back yet; run it again): %w",
			x, res.Participant, err)
	case !listed:
		return fmt.Errorf("%w: %s finished before the abort was recorded (its coordinator committed or rolled it back): nothing rolled back",
			ErrNotPrepared, x)
	}
	return nil
}

// sharesServer reports whether the participant named name is rm or lists
// the same server as rm.
func (st *scanState) sharesServer(s *Scanner, rm xa.ResourceManager, name string) bool {
	if rm.Name() == name {
		return true
	}
	other := s.participant(name)
	if other == nil {
		return false
	}
	a, ok1 := rm.(SharedServer)
	b, ok2 := other.(SharedServer)
	if !ok1 || !ok2 {
		return false
	}
	ctx := context.Background()
	ka, err1 := a.ServerKey(ctx)
	kb, err2 := b.ServerKey(ctx)
	return err1 == nil && err2 == nil && ka != "" && ka == kb
}

// verb names an action for messages.
func verb(o xa.Outcome) string {
	if o == xa.OutcomeRollback {
		return "roll back"
	}
	return "commit"
}

func logName(id xa.LogID) string {
	if id == 0 {
		return "(none: the XID names no log)"
	}
	return id.String()
}

func ageText(d time.Duration, known bool) string {
	if !known {
		return "of unknown age"
	}
	return d.Round(time.Second).String()
}

func joinErrs(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("; and some participants could not be listed:")
	for _, e := range errs {
		b.WriteString(" ")
		b.WriteString(e.Error())
	}
	return b.String()
}
