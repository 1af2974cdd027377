package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// A decision is trusted only from the store that made it (docs/sink.md,
// "Identity"). The sink finds its decisions and its branches by names —
// the progress target's, each target's — and a name may, on another day,
// reach another database: a progress target that answers "no decision"
// would have its restore fence and roll back branches another progress
// store decided commit; a target that lists nothing would hide prepared
// branches whose decisions are then forgotten.
//
// So Bind (xactl sink setup), an explicit act, binds each target to the
// sink's progress store, in a row of xa_sink_bindings in the target itself
// and a copy in the progress store:
//
//	xa_sink_bindings (sink, target, target_id, progress_id, participant_id, target_where, progress_where, bound)
//
// target_id is random, made when the target is first bound; progress_id
// is the progress target's own target_id: the progress store is the
// target whose row names itself. participant_id is the target's
// participant identity (xa.Identified) when its resource manager has one.
// Every instance start and every restore (and Status) checks that the
// progress target is the store the targets name, and that each target is
// the store the progress store recorded under its name; a mismatch is an
// *xa.IdentityError (errors.Is(err, xa.ErrIdentity)) that says what was
// expected, what answered and how to fix the configuration, and nothing
// is done.

// binding is one row of xa_sink_bindings.
type binding struct {
	sink, target string
	// targetID is the identity of the store target names; progressID the
	// identity of the sink's progress store (its own targetID).
	targetID, progressID string
	// participantID is the target's participant identity when it was
	// bound ("": none).
	participantID string
	// where and progressWhere describe the two stores, for operators.
	where, progressWhere string
	bound                time.Time
}

func (b binding) identity() xa.StoreIdentity { return xa.StoreIdentity{ID: b.targetID, Where: b.where} }

func (b binding) progress() xa.StoreIdentity {
	return xa.StoreIdentity{ID: b.progressID, Where: b.progressWhere}
}

// storeOf returns the store on target name (the progress store for the
// progress target).
func (s *Sink) storeOf(name string) store {
	if name == s.progress {
		return s.st
	}
	return s.tstores[name]
}

// participantID returns the participant identity of target name, "" when
// its resource manager has none (it does not implement xa.Identified).
func (s *Sink) participantID(name string) (xa.StoreIdentity, error) {
	idf, ok := s.targets[name].rm.(xa.Identified)
	if !ok {
		return xa.StoreIdentity{}, nil
	}
	return idf.Identity()
}

// RemovedTarget is a target the progress store recorded for the sink
// (Bind) that the configuration no longer has: its prepared branches are
// neither listed nor resolved, and the decisions they may need are kept
// (restore forgets no decision while one is recorded). Put it back into
// the configuration, or, once it holds no prepared branch of the sink,
// forget it (ForgetTarget).
type RemovedTarget struct {
	Name  string
	Where string
	Bound time.Time
}

// BindResult says what Bind did.
type BindResult struct {
	// Bound are the targets bound now; Kept those bound already.
	Bound, Kept []string
	// Removed are the targets recorded and no longer configured.
	Removed []RemovedTarget
}

// readBindings reads the sink's rows in the progress store and each
// target's own row.
func (s *Sink) readBindings(ctx context.Context) (prog map[string]binding, own map[string]binding, ownOK map[string]bool, err error) {
	prog, err = s.st.bindings(ctx, s.cfg.Name)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sink: reading the bindings in the progress target %s: %w", s.progress, err)
	}
	own, ownOK = map[string]binding{}, map[string]bool{}
	for _, name := range s.names {
		rows := prog
		if name != s.progress {
			if rows, err = s.tstores[name].bindings(ctx, s.cfg.Name); err != nil {
				return nil, nil, nil, fmt.Errorf("sink: reading the binding of target %s: %w", name, err)
			}
		}
		own[name], ownOK[name] = rows[name]
	}
	return prog, own, ownOK, nil
}

// Bind binds the sink's targets to its progress store (see the comment at
// the top of this file): the explicit act that makes the identities, run
// by xactl sink setup after Setup, and again whenever a target is added.
// It is idempotent. It writes each new target's row first, then its copy
// in the progress store, and records a participant identity that became
// available since. It refuses, with *xa.IdentityError values (joined),
// and writes nothing, when a target is bound to another progress store of
// the sink, when the progress store records another store under a
// target's name, when the progress target is another store's target, or
// when a target's participant identity changed.
func (s *Sink) Bind(ctx context.Context) (BindResult, error) {
	var res BindResult
	if err := s.check(); err != nil {
		return res, err
	}
	if err := s.st.setup(ctx); err != nil {
		return res, err
	}
	prog, own, ownOK, err := s.readBindings(ctx)
	if err != nil {
		return res, err
	}
	progressWhere, err := s.st.describe(ctx)
	if err != nil {
		return res, fmt.Errorf("sink: progress target %s: %w", s.progress, err)
	}
	progress := xa.StoreIdentity{Where: progressWhere}
	if progress.ID, err = s.progressID(prog, progress); err != nil {
		return res, err
	}
	progressID := progress.ID
	if progressID == "" { // a progress store set up for the sink now
		if progressID, err = xa.NewStoreID(); err != nil {
			return res, err
		}
	}
	var errs []error
	var writes []binding
	for _, name := range s.names {
		where, err := s.storeOf(name).describe(ctx)
		if err != nil {
			return res, fmt.Errorf("sink: target %s: %w", name, err)
		}
		pid, perr := s.participantID(name)
		if perr != nil {
			errs = append(errs, fmt.Errorf("sink: target %s: %w", name, perr))
			continue
		}
		o := own[name]
		rec, recOK := prog[name]
		if err := s.compare(name, o, ownOK[name], rec, recOK, progress, xa.StoreIdentity{Where: where}, pid); err != nil {
			errs = append(errs, err)
			continue
		}
		if !ownOK[name] {
			id := progressID
			if name != s.progress {
				if id, err = xa.NewStoreID(); err != nil {
					return res, err
				}
			}
			writes = append(writes, binding{sink: s.cfg.Name, target: name, targetID: id, progressID: progressID,
				participantID: pid.ID, where: where, progressWhere: progressWhere})
			res.Bound = append(res.Bound, name)
			continue
		}
		res.Kept = append(res.Kept, name)
		b := o
		if b.participantID == "" && pid.ID != "" {
			b.participantID = pid.ID // became available since: recorded now
			writes = append(writes, b)
		} else if _, recorded := prog[name]; !recorded {
			writes = append(writes, b) // its copy in the progress store is missing
		}
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	for _, b := range writes {
		if b.target != s.progress {
			if err := s.tstores[b.target].bind(ctx, b); err != nil {
				return res, fmt.Errorf("sink: binding target %s: %w", b.target, err)
			}
		}
		if err := s.st.bind(ctx, b); err != nil {
			return res, fmt.Errorf("sink: recording target %s in the progress target %s: %w", b.target, s.progress, err)
		}
	}
	res.Removed = s.removed(prog)
	return res, nil
}

// progressID returns the sink's progress id as the progress store's rows
// say ("" when it holds none: not bound yet), or refuses a store that is
// another progress store's target, or whose rows disagree.
func (s *Sink) progressID(prog map[string]binding, found xa.StoreIdentity) (string, error) {
	self, ok := prog[s.progress]
	if !ok {
		if len(prog) > 0 {
			return "", &xa.IdentityError{Store: s.progressStore(), Found: found,
				Why: fmt.Sprintf("it holds bindings of the sink's targets (%s) but none of itself: not a progress store the sink set up",
					strings.Join(slices.Sorted(maps.Keys(prog)), ", ")),
				Fix: "point the sink's progress target at the database set up as its progress store"}
		}
		return "", nil
	}
	found.ID = self.targetID
	if self.targetID != self.progressID {
		return "", &xa.IdentityError{Store: s.progressStore(), Expected: self.progress(), Found: found,
			Why: fmt.Sprintf("this database is bound as target %s of the sink, whose decisions are in another progress store", s.progress),
			Fix: fmt.Sprintf("point the sink's progress target (progress:) at the target whose database is %s", self.progressWhere)}
	}
	for _, b := range prog {
		if b.progressID != self.progressID {
			return "", &xa.IdentityError{Store: s.progressStore(), Expected: self.progress(), Found: b.progress(),
				Why: fmt.Sprintf("its record of target %s names another progress store", b.target),
				Fix: "the bindings are inconsistent: check xa_sink_bindings in the progress target"}
		}
	}
	return self.progressID, nil
}

func (s *Sink) progressStore() string {
	return fmt.Sprintf("progress target %s of sink %s", s.progress, s.cfg.Name)
}

// compare checks target name's own binding o (ownOK: there is one)
// against the progress store's record rec (recOK) and the progress
// store's id and description, and its participant identity now (pid).
func (s *Sink) compare(name string, o binding, ownOK bool, rec binding, recOK bool, progress, found xa.StoreIdentity, pid xa.StoreIdentity) error {
	store := fmt.Sprintf("target %s of sink %s", name, s.cfg.Name)
	if ownOK {
		found.ID = o.targetID
	}
	// What answered, in words (an identity without an id prints as
	// "none").
	answered := func(id xa.StoreIdentity) string {
		if id.Where == "" {
			return "it"
		}
		return "it (" + id.Where + ")"
	}
	switch {
	case ownOK && name != s.progress && o.progressID != progress.ID:
		return &xa.IdentityError{Store: s.progressStore(), Expected: o.progress(), Found: progress,
			Why: fmt.Sprintf("target %s is bound to another progress store of the sink than %s: the decisions of its branches are there, and this one would presume them aborted",
				name, answered(progress)),
			Fix: fmt.Sprintf("point the sink's progress target at %s (its participant's DSN and role); if that store is gone for good and no branch of the sink is prepared on %s, "+
				"delete the sink's row of xa_sink_bindings there (DELETE FROM xa_sink_bindings WHERE sink = '%s') and run xactl sink setup %s again",
				o.progressWhere, name, s.cfg.Name, s.cfg.Name)}
	case ownOK && recOK && o.targetID != rec.targetID:
		return &xa.IdentityError{Store: store, Expected: rec.identity(), Found: found,
			Why: "the progress store recorded another database under this target's name: the sink's branches and decisions are about that one",
			Fix: fmt.Sprintf("point participant %s at %s (check its DSN and role), or give this database another target name", name, rec.where)}
	case !ownOK && recOK:
		return &xa.IdentityError{Store: store, Expected: rec.identity(), Found: found,
			Why: fmt.Sprintf("%s holds no binding of the sink: it is not the database set up as this target, whose prepared branches the sink's restore would not see",
				answered(found)),
			Fix: fmt.Sprintf("point participant %s at %s (check its DSN, role and search_path); if that database is gone for good, take %s out of the sink's targets "+
				"and, once you know it held no prepared branch of the sink, forget it (xactl sink setup %s --forget-target %s)", name, rec.where, name, s.cfg.Name, name)}
	}
	if recorded := rec.participantID; recOK && recorded != "" && pid.ID != recorded {
		return &xa.IdentityError{Store: store, Expected: xa.StoreIdentity{ID: recorded, Where: rec.where}, Found: pid,
			Why: "the participant's identity differs from the one recorded when the target was bound: another database answers under its name",
			Fix: fmt.Sprintf("point participant %s at %s (check its DSN and role)", name, rec.where)}
	}
	return nil
}

// verify is the check of every instance start, restore and Status (see
// the comment at the top of this file). It returns the targets recorded
// and no longer configured.
func (s *Sink) verify(ctx context.Context) ([]RemovedTarget, error) {
	prog, own, ownOK, err := s.readBindings(ctx)
	if err != nil {
		return nil, err
	}
	if len(prog) == 0 {
		return nil, s.unbound(ctx, own, ownOK)
	}
	progressWhere, err := s.st.describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("sink: progress target %s: %w", s.progress, err)
	}
	progressID, err := s.progressID(prog, xa.StoreIdentity{Where: progressWhere})
	if err != nil {
		return nil, err
	}
	progress := xa.StoreIdentity{ID: progressID, Where: progressWhere}
	var errs []error
	for _, name := range s.names {
		rec, recOK := prog[name]
		if !recOK {
			errs = append(errs, &xa.IdentityError{Store: fmt.Sprintf("target %s of sink %s", name, s.cfg.Name),
				Why: "the progress store records no such target of the sink: it was added to the configuration and not set up",
				Fix: fmt.Sprintf("run xactl sink setup %s, which binds it", s.cfg.Name)})
			continue
		}
		var where string
		if !ownOK[name] {
			where, _ = s.storeOf(name).describe(ctx)
		}
		pid, perr := s.participantID(name)
		if perr != nil && rec.participantID != "" {
			errs = append(errs, fmt.Errorf("sink: target %s: %w", name, perr))
			continue
		}
		if err := s.compare(name, own[name], ownOK[name], rec, true, progress, xa.StoreIdentity{Where: where}, pid); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s.removed(prog), nil
}

// unbound explains a progress store that holds no binding of the sink:
// set-up never bound it, or it is not the sink's progress store (the
// targets name another).
func (s *Sink) unbound(ctx context.Context, own map[string]binding, ownOK map[string]bool) error {
	where, _ := s.st.describe(ctx)
	what := "it"
	if where != "" {
		what += " (" + where + ")"
	}
	e := &xa.IdentityError{Store: s.progressStore(), Found: xa.StoreIdentity{Where: where},
		Why: what + " holds no binding of the sink: the sink was not set up here (xactl sink setup binds its targets to its progress store)",
		Fix: fmt.Sprintf("run xactl sink setup %s if this is the sink's progress store", s.cfg.Name)}
	for _, name := range s.names {
		if ownOK[name] {
			o := own[name]
			e.Expected = o.progress()
			e.Why = fmt.Sprintf("%s holds no binding of the sink, and target %s is bound to the progress store %s: the sink's decisions are there, and this one would presume them aborted",
				what, name, o.progressWhere)
			e.Fix = fmt.Sprintf("point the sink's progress target at %s (its participant's DSN and role)", o.progressWhere)
			break
		}
	}
	return e
}

func (s *Sink) removed(prog map[string]binding) []RemovedTarget {
	var out []RemovedTarget
	for _, name := range slices.Sorted(maps.Keys(prog)) {
		if _, ok := s.targets[name]; !ok {
			out = append(out, RemovedTarget{Name: name, Where: prog[name].where, Bound: prog[name].bound})
		}
	}
	return out
}

// Verify checks the sink's identities as every instance start and
// restore does (see Bind): nil, or *xa.IdentityError values (joined)
// saying what was expected, what answered and how to fix the
// configuration. It also returns the targets recorded and no longer
// configured.
func (s *Sink) Verify(ctx context.Context) ([]RemovedTarget, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.verify(ctx)
}

// ForgetTarget deletes the progress store's record of a target the
// configuration no longer has, once the operator knows that it holds no
// prepared branch of the sink (its branches would otherwise lose the
// decisions restore keeps for them). It refuses a configured target.
func (s *Sink) ForgetTarget(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, ok := s.targets[name]; ok {
		return fmt.Errorf("%w: target %s is configured: remove it from the sink's targets first", ErrConfig, name)
	}
	return s.st.unbind(ctx, s.cfg.Name, name)
}
