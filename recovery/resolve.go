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

	// The decision, read before the listing (as a scan does).
	ref, ours := xa.ParseOwned(x)
	var rec xa.CommitRecord
	var aborted bool
	st := &scanState{records: map[string]xa.CommitRecord{}, aborts: map[string]xa.AbortRecord{},
		inStore: map[string]DecisionStore{}, stores: map[string]DecisionStore{}, fenced: map[string]error{}, unfit: map[string]error{}}
	// Nothing is done on, or read from, a store that is not the one the
	// log recorded under its name, forced or not.
	ids, err := s.checkIdentities(ctx)
	if err != nil {
		return res, err
	}
	for name, err := range ids.tables {
		st.unfit[name] = err
	}
	for name, err := range ids.participants {
		st.unfit[name] = err
	}
	if err := ids.participants[opts.Participant]; err != nil {
		return res, fmt.Errorf("recovery: resolve: refusing to act on participant %q: %w", opts.Participant, err)
	}
	for _, rm := range s.cfg.Participants {
		if ds, ok := store(rm); ok && st.unfit[rm.Name()] == nil {
			st.stores[rm.Name()] = ds
		}
	}
	if ours {
		rec, res.Logged, err = s.cfg.Log.Lookup(ctx, ref.ID)
		if err != nil {
			return res, fmt.Errorf("recovery: reading the decision log: %w", err)
		}
		for name, ds := range st.stores {
			if res.Logged {
				break
			}
			if rec, res.Logged, err = ds.Decision(ctx, ref.ID); err != nil {
				return res, fmt.Errorf("recovery: reading the decisions stored in %s: %w", name, err)
			}
		}
		if _, aborted, err = s.cfg.Log.LookupAbort(ctx, ref.ID); err != nil {
			return res, fmt.Errorf("recovery: reading the decision log: %w", err)
		}
	}

	// Who holds it? Participants on one server are one holder.
	type holder struct {
		rm   xa.ResourceManager
		key  string
		prep xa.PreparedBranch
	}
	var holders []holder
	var errs []error
	var unfit []error
	for _, rm := range s.cfg.Participants {
		if opts.Participant != "" && rm.Name() != opts.Participant {
			continue
		}
		if err := ids.participants[rm.Name()]; err != nil {
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
		return res, fmt.Errorf("recovery: resolve: %s is not prepared on any participant that is the store the decision log recorded; "+
			"participants not looked at: %w", x, errors.Join(unfit...))
	case len(holders) == 0:
		return res, fmt.Errorf("%w: %s (already resolved? see xactl list)%s", ErrNotPrepared, x, joinErrs(errs))
	case len(holders) > 1:
		names := make([]string, len(holders))
		for i, h := range holders {
			names[i] = h.rm.Name()
		}
		return res, fmt.Errorf("%w: %s is prepared on %s: name one", ErrAmbiguous, x, strings.Join(names, " and "))
	}
	h := holders[0]
	res.Participant = h.rm.Name()
	var from xa.Origin
	for _, br := range rec.Branches {
		if br.XID.Equal(x) && st.sharesServer(s, h.rm, br.RM) {
			res.Participant, from = br.RM, br.Origin
			h.rm = s.participant(br.RM)
		}
	}

	// Is it a contradiction?
	if !ours {
		res.Contradiction = "it is not a branch of this transaction manager (the decision log knows nothing of it)"
	} else {
		a, known := h.prep.Age(s.cfg.Now())
		delegations, err := s.cfg.Log.Delegations(ctx)
		if err != nil {
			return res, fmt.Errorf("recovery: reading the decision log's delegations: %w", err)
		}
		var missing []string
		for _, d := range delegations {
			if st.stores[d.Participant] == nil {
				if err := st.unfit[d.Participant]; err != nil {
					missing = append(missing, fmt.Sprintf("%s (%v)", d.Participant, err))
					continue
				}
				missing = append(missing, d.Participant)
			}
		}
		hs, err := s.cfg.Log.Heuristics(ctx)
		if err != nil {
			return res, fmt.Errorf("recovery: reading the decision log's heuristic records: %w", err)
		}
		var handCommit *xa.HeuristicRecord
		for i, hr := range hs {
			if bytes.Equal(hr.XID.Gtrid, x.Gtrid) && hr.Action == xa.OutcomeCommit && !hr.XID.Equal(x) {
				handCommit = &hs[i]
			}
		}
		switch {
		case action == xa.OutcomeCommit && aborted:
			res.Contradiction = "an abort is recorded for its transaction (presumed abort): its other branches are rolled back"
		case action == xa.OutcomeCommit && !res.Logged:
			res.Contradiction = s.noCommitReason(ref, handCommit, a, known)
		case action == xa.OutcomeRollback && res.Logged:
			res.Contradiction = "a commit is logged for its transaction: recovery will commit it"
		case action == xa.OutcomeRollback && aborted:
			// Fenced already: rolling back is what recovery does.
		case action == xa.OutcomeRollback && ref.Log != s.ident.ID:
			res.Contradiction = fmt.Sprintf("it belongs to decision log %s, not to this one (%s): its commit may be logged there", logName(ref.Log), s.ident.ID)
		case action == xa.OutcomeRollback && s.predates(ref.ID.Begun):
			res.Contradiction = "it began before this decision log was created: its commit may be logged in an earlier log"
		case action == xa.OutcomeRollback && (!known || a <= s.cfg.Grace):
			res.Contradiction = fmt.Sprintf("it is %s old, inside the %v grace period: its coordinator may still commit it", ageText(a, known), s.cfg.Grace)
		case action == xa.OutcomeRollback && len(missing) > 0:
			res.Contradiction = fmt.Sprintf("the decision log delegated decisions to %s, not configured here (or not the recorded table): its commit may be stored there", strings.Join(missing, ", "))
		}
		if res.Contradiction == "" {
			for _, hr := range hs {
				if bytes.Equal(hr.XID.Gtrid, x.Gtrid) && hr.Action != action {
					res.Contradiction = fmt.Sprintf("branch %s on %s of the same transaction was resolved by hand with %s: the outcome would be mixed", hr.XID, hr.RM, hr.Action)
					break
				}
			}
		}
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
		b := &Branch{Participant: res.Participant, Prepared: h.prep, ID: ref.ID, Log: ref.Log}
		b.Age, _ = h.prep.Age(s.cfg.Now())
		_, committed, err := s.takeFence(ctx, st, b, opts.Force)
		switch {
		case committed:
			res.Logged = true
			return res, fmt.Errorf("%w: refusing to roll back %s: its coordinator just recorded a commit; recovery will commit it", ErrContradiction, x)
		case err != nil:
			return res, err
		}
		res.Fenced = true
		// The listing is older than the fence: the coordinator may have
		// finished the transaction in between (committed every branch
		// and forgotten its record before the abort was recorded). Then
		// the abort record is inert and there is nothing to roll back;
		// saying "rolled back" would be false.
		listed, err := stillListed(ctx, h.rm, x)
		switch {
		case err != nil:
			return res, fmt.Errorf("recovery: the abort of %s is recorded, but listing %s again failed (nothing rolled back yet; run it again): %w",
				x, res.Participant, err)
		case !listed:
			return res, fmt.Errorf("%w: %s finished before the abort was recorded (its coordinator committed or rolled it back): nothing rolled back",
				ErrNotPrepared, x)
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
	if action == xa.OutcomeCommit {
		err = h.rm.Commit(ctx, x, from)
	} else {
		err = h.rm.Rollback(ctx, x, from)
	}
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

// noCommitReason says why committing a branch whose transaction has no
// commit decision here contradicts the log, as the scanner would judge
// the branch.
func (s *Scanner) noCommitReason(ref xa.BranchRef, hand *xa.HeuristicRecord, age time.Duration, known bool) string {
	switch {
	case ref.Log != s.ident.ID:
		return fmt.Sprintf("no commit is logged for it here: it belongs to decision log %s (node %s), not to this one (%s); "+
			"its decision, if any, is in that log: resolve it with that log", logName(ref.Log), ref.ID.Node, s.ident.ID)
	case s.predates(ref.ID.Begun):
		return "no commit is logged for it in this log, and it began before this log was created: its decision, if any, is in an earlier log"
	case hand != nil:
		return fmt.Sprintf("no commit is logged for its transaction, but branch %s on %s of it was committed by hand: "+
			"committing this one too matches that (recovery leaves it prepared, blocked, until then)", hand.XID, hand.RM)
	case !known || age <= s.cfg.Grace:
		return fmt.Sprintf("no commit is logged for its transaction yet: it is %s old, inside the %v grace period, and its coordinator "+
			"may still decide either way (recovery waits; see xactl list)", ageText(age, known), s.cfg.Grace)
	}
	return "no commit is logged for its transaction: presumed abort says roll it back"
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
