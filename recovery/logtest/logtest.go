// Package logtest is the conformance suite of decision logs: the contract
// of xa.DecisionLog and xa.RecoveryLog that every log must meet for the
// protocol of docs/protocol.md to hold. A log's own tests run it:
//
//	func TestConformance(t *testing.T) {
//		logtest.Run(t, logtest.Harness{
//			New:    func(t *testing.T, ident xa.LogIdentity, now func() time.Time) xa.RecoveryLog { ... },
//			Reopen: func(t *testing.T, l xa.RecoveryLog) xa.RecoveryLog { ... },
//		})
//	}
//
// It checks the identity, commit records (Lookup, Commits, Forget), the
// fence between commit and abort records both ways, also with many
// goroutines racing LogCommit and LogAbort for the same ids, repeated
// aborts, ErrDecisionTooLate, delegations and participant records with
// their identities, heuristic records kept by
// participant and XID, abort retention on the log's clock, durability
// across a reopen, and, for a log held under a lease, that a takeover
// fences the previous holder's decisions.
//
// The suite owns the log's clock: Harness.New must make the log read time
// only from the now function it is given.
//
// It imports nothing but the standard library and package xa, so that logs
// outside this module can run it.
package logtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// Harness says how to make and reopen the logs under test.
type Harness struct {
	// New returns a new, empty log with identity ident whose clock is
	// now. It registers the log's cleanup with t.
	New func(t *testing.T, ident xa.LogIdentity, now func() time.Time) xa.RecoveryLog

	// Reopen closes l cleanly and opens it again with the same clock, as
	// a restarted process would, and returns the reopened log. Nil for a
	// log that does not outlive its process: the checks after a reopen
	// are then skipped.
	Reopen func(t *testing.T, l xa.RecoveryLog) xa.RecoveryLog

	// TakeOver, for a log held under a lease (recovery/sqllog), takes l's
	// log over as another process does when l's lease has expired (a new
	// holder at a new epoch), without telling l, and returns the log as
	// the new holder has it. The suite then checks that the database
	// refuses l's decision writes with xa.ErrFenced and that nothing of
	// them is logged, and that the new holder sees what l logged before.
	// Nil for a log without a lease: the check is skipped.
	TakeOver func(t *testing.T, l xa.RecoveryLog) xa.RecoveryLog
}

// Clock is a settable clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock that says t until it is moved.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Start is where the suite's clocks start.
var Start = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

// Node is the node of the suite's logs and transactions.
const Node = "logtest"

// Timeout is the timeout in the identities of the suite's logs.
const Timeout = 30 * time.Second

// env is one subtest's log with its clock.
type env struct {
	t     *testing.T
	h     Harness
	clock *Clock
	ident xa.LogIdentity
	log   xa.RecoveryLog
	ctx   context.Context
}

func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	c := NewClock(Start)
	ident, err := xa.NewLogIdentity(Node, Timeout, 0, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, h: h, clock: c, ident: ident, ctx: context.Background()}
	e.log = h.New(t, ident, c.Now)
	if e.log == nil {
		t.Fatal("Harness.New returned nil")
	}
	return e
}

// reopen reopens the log and reports whether it could (false: the log is
// not durable and the caller skips its checks after a reopen).
func (e *env) reopen() bool {
	e.t.Helper()
	if e.h.Reopen == nil {
		return false
	}
	e.log = e.h.Reopen(e.t, e.log)
	if e.log == nil {
		e.t.Fatal("Harness.Reopen returned nil")
	}
	return true
}

// gid returns a fresh global id begun at the clock's time plus d.
func (e *env) gid(d time.Duration) xa.GlobalID {
	e.t.Helper()
	id, err := xa.NewGlobalID(Node, e.clock.Now().Add(d))
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// commitRec returns a commit record of id with two branches on this log.
func (e *env) commitRec(id xa.GlobalID) xa.CommitRecord {
	rec := xa.CommitRecord{ID: id, Logged: e.clock.Now()}
	for i, rm := range []string{"maria", "pg"} {
		rec.Branches = append(rec.Branches, xa.BranchRecord{
			RM: rm, XID: xa.BranchRef{ID: id, Index: i, Log: e.ident.ID}.XID(),
			Origin: xa.Origin{Session: uint64(100 + i), Prepared: e.clock.Now()},
		})
	}
	return rec
}

func enc(t *testing.T, v interface{ MarshalBinary() ([]byte, error) }) string {
	t.Helper()
	b, err := v.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Run runs the suite, each check in a subtest with a new log.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("logtest: Harness.New is required")
	}
	tests := []struct {
		name string
		f    func(e *env)
	}{
		{"Identity", testIdentity},
		{"CommitLookupForget", testCommitLookupForget},
		{"AbortFencesCommit", testAbortFencesCommit},
		{"CommitFencesAbort", testCommitFencesAbort},
		{"RepeatedAbortIsNoOp", testRepeatedAbort},
		{"FenceRace", testFenceRace},
		{"DecisionTooLate", testDecisionTooLate},
		{"Delegations", testDelegations},
		{"Participants", testParticipants},
		{"HeuristicsByParticipantAndXID", testHeuristics},
		{"AbortRetention", testAbortRetention},
		{"FencedAfterTakeover", testFencedAfterTakeover},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(newEnv(t, h)) })
	}
}

func testIdentity(e *env) {
	check := func(when string) {
		e.t.Helper()
		got := e.log.Identity()
		w := e.ident
		if got.ID != w.ID || got.Node != w.Node || !got.Created.Equal(w.Created) || got.Timeout != w.Timeout || got.Grace != w.Grace {
			e.t.Fatalf("%s: Identity() = %+v, want %+v", when, got, w)
		}
	}
	check("new log")
	if e.reopen() {
		check("after reopen")
	}
}

// commitIDs returns the ids of Commits, checking that they come oldest
// first.
func (e *env) commitIDs(when string) []string {
	e.t.Helper()
	cs, err := e.log.Commits(e.ctx)
	if err != nil {
		e.t.Fatalf("%s: Commits: %v", when, err)
	}
	var ids []string
	for i, c := range cs {
		if i > 0 && c.Logged.Before(cs[i-1].Logged) {
			e.t.Errorf("%s: Commits not oldest first: %v before %v", when, cs[i-1].Logged, c.Logged)
		}
		ids = append(ids, c.ID.String())
	}
	return ids
}

func testCommitLookupForget(e *env) {
	if _, ok, err := e.log.Lookup(e.ctx, e.gid(0)); ok || err != nil {
		e.t.Fatalf("Lookup of an id never logged: %v, %v", ok, err)
	}
	var recs []xa.CommitRecord
	for i := range 3 {
		// Logged out of order, to check that Commits sorts.
		rec := e.commitRec(e.gid(0))
		rec.Logged = e.clock.Now().Add(time.Duration(2-i) * time.Millisecond)
		if err := e.log.LogCommit(e.ctx, rec); err != nil {
			e.t.Fatalf("LogCommit: %v", err)
		}
		recs = append(recs, rec)
	}
	check := func(when string, live []xa.CommitRecord, gone []xa.CommitRecord, goneMayReturn bool) {
		e.t.Helper()
		for _, rec := range live {
			got, ok, err := e.log.Lookup(e.ctx, rec.ID)
			if err != nil || !ok || enc(e.t, got) != enc(e.t, rec) {
				e.t.Fatalf("%s: Lookup(%v) = %+v, %v, %v; want the record logged", when, rec.ID, got, ok, err)
			}
		}
		for _, rec := range gone {
			if _, ok, err := e.log.Lookup(e.ctx, rec.ID); err != nil || ok && !goneMayReturn {
				e.t.Fatalf("%s: Lookup of forgotten %v = %v, %v", when, rec.ID, ok, err)
			}
		}
		ids := e.commitIDs(when)
		for _, rec := range live {
			if !slices.Contains(ids, rec.ID.String()) {
				e.t.Fatalf("%s: Commits %v lacks %v", when, ids, rec.ID)
			}
		}
		if !goneMayReturn && len(ids) != len(live) {
			e.t.Fatalf("%s: Commits = %v, want %d records", when, ids, len(live))
		}
	}
	check("after LogCommit", recs, nil, false)
	if ids := e.commitIDs("order"); len(ids) != 3 || ids[0] != recs[2].ID.String() || ids[2] != recs[0].ID.String() {
		e.t.Fatalf("Commits = %v, want oldest (by Logged) first", ids)
	}
	if err := e.log.Forget(e.ctx, recs[1].ID); err != nil {
		e.t.Fatalf("Forget: %v", err)
	}
	if err := e.log.Forget(e.ctx, e.gid(0)); err != nil {
		e.t.Fatalf("Forget of an id never logged: %v", err)
	}
	live, gone := []xa.CommitRecord{recs[0], recs[2]}, []xa.CommitRecord{recs[1]}
	check("after Forget", live, gone, false)
	if e.reopen() {
		// Forget need not be durable: the record may come back.
		check("after reopen", live, gone, true)
	}
}

func testAbortFencesCommit(e *env) {
	id := e.gid(0)
	if a, ok, err := e.log.LookupAbort(e.ctx, id); ok || err != nil {
		e.t.Fatalf("LookupAbort of an id never aborted: %+v, %v, %v", a, ok, err)
	}
	// The log stamps the record with its own clock, not the caller's.
	if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: id, Logged: Start.Add(-time.Hour), Reason: "presumed abort"}); err != nil {
		e.t.Fatalf("LogAbort: %v", err)
	}
	stamped := e.clock.Now()
	e.clock.Advance(time.Second)
	err := e.log.LogCommit(e.ctx, e.commitRec(id))
	if !errors.Is(err, xa.ErrAbortRecorded) {
		e.t.Fatalf("LogCommit after LogAbort: %v, want ErrAbortRecorded", err)
	}
	check := func(when string) {
		e.t.Helper()
		a, ok, err := e.log.LookupAbort(e.ctx, id)
		if err != nil || !ok || a.ID.String() != id.String() || a.Reason != "presumed abort" || !a.Logged.Equal(stamped) {
			e.t.Fatalf("%s: LookupAbort = %+v, %v, %v; want the record, logged at %v by the log's clock", when, a, ok, err, stamped)
		}
		as, err := e.log.Aborts(e.ctx)
		if err != nil || len(as) != 1 || as[0].ID.String() != id.String() {
			e.t.Fatalf("%s: Aborts = %+v, %v", when, as, err)
		}
		if _, ok, err := e.log.Lookup(e.ctx, id); ok || err != nil {
			e.t.Fatalf("%s: the refused commit record is there (%v, %v)", when, ok, err)
		}
		if ids := e.commitIDs(when); len(ids) != 0 {
			e.t.Fatalf("%s: Commits = %v after a refused LogCommit", when, ids)
		}
	}
	check("after the refused LogCommit")
	if e.reopen() {
		check("after reopen")
		if err := e.log.LogCommit(e.ctx, e.commitRec(id)); !errors.Is(err, xa.ErrAbortRecorded) {
			e.t.Fatalf("LogCommit after reopen: %v, want ErrAbortRecorded", err)
		}
	}
}

func testCommitFencesAbort(e *env) {
	id := e.gid(0)
	rec := e.commitRec(id)
	if err := e.log.LogCommit(e.ctx, rec); err != nil {
		e.t.Fatalf("LogCommit: %v", err)
	}
	err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: id, Reason: "presumed abort"})
	if !errors.Is(err, xa.ErrCommitRecorded) {
		e.t.Fatalf("LogAbort after LogCommit: %v, want ErrCommitRecorded", err)
	}
	check := func(when string) {
		e.t.Helper()
		if a, ok, err := e.log.LookupAbort(e.ctx, id); ok || err != nil {
			e.t.Fatalf("%s: the refused abort record is there: %+v, %v, %v", when, a, ok, err)
		}
		if as, err := e.log.Aborts(e.ctx); len(as) != 0 || err != nil {
			e.t.Fatalf("%s: Aborts = %+v, %v", when, as, err)
		}
		if got, ok, err := e.log.Lookup(e.ctx, id); !ok || err != nil || enc(e.t, got) != enc(e.t, rec) {
			e.t.Fatalf("%s: Lookup = %v, %v", when, ok, err)
		}
	}
	check("after the refused LogAbort")
	if e.reopen() {
		check("after reopen")
		if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: id}); !errors.Is(err, xa.ErrCommitRecorded) {
			e.t.Fatalf("LogAbort after reopen: %v, want ErrCommitRecorded", err)
		}
	}
}

func testRepeatedAbort(e *env) {
	id := e.gid(0)
	first := e.clock.Now()
	if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: id, Reason: "first"}); err != nil {
		e.t.Fatalf("LogAbort: %v", err)
	}
	e.clock.Advance(time.Hour)
	if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: id, Reason: "second"}); err != nil {
		e.t.Fatalf("LogAbort of an id aborted already: %v, want nil", err)
	}
	check := func(when string) {
		e.t.Helper()
		as, err := e.log.Aborts(e.ctx)
		if err != nil || len(as) != 1 {
			e.t.Fatalf("%s: Aborts = %+v, %v; want one record", when, as, err)
		}
		// The first record stays: retention counts from it.
		if !as[0].Logged.Equal(first) || as[0].Reason != "first" {
			e.t.Fatalf("%s: abort record %+v; want the first one, logged at %v", when, as[0], first)
		}
	}
	check("after the second LogAbort")
	if e.reopen() {
		check("after reopen")
	}
}

// testFenceRace races LogCommit and LogAbort for the same ids from many
// goroutines: for each id exactly one kind wins (its calls return nil, the
// other kind's calls return the fence error), and the log's records, also
// after a reopen, are the winners'.
func testFenceRace(e *env) {
	const ids, each = 48, 4
	type result struct {
		commitOK, abortOK, commitFenced, abortFenced int
		other                                        []error
	}
	var mu sync.Mutex
	res := make([]result, ids)
	gids := make([]xa.GlobalID, ids)
	for i := range gids {
		gids[i] = e.gid(0)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ids {
		for k := range 2 * each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var err error
				commit := (k+i)%2 == 0
				if commit {
					err = e.log.LogCommit(e.ctx, e.commitRec(gids[i]))
				} else {
					err = e.log.LogAbort(e.ctx, xa.AbortRecord{ID: gids[i], Reason: "race"})
				}
				mu.Lock()
				defer mu.Unlock()
				r := &res[i]
				switch {
				case err == nil && commit:
					r.commitOK++
				case err == nil:
					r.abortOK++
				case commit && errors.Is(err, xa.ErrAbortRecorded):
					r.commitFenced++
				case !commit && errors.Is(err, xa.ErrCommitRecorded):
					r.abortFenced++
				default:
					r.other = append(r.other, err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	committed := map[string]bool{}
	both, wins := 0, [2]int{}
	for i, r := range res {
		if len(r.other) > 0 {
			e.t.Fatalf("id %d: unexpected errors: %v", i, r.other)
		}
		switch {
		case r.commitOK > 0 && r.abortOK > 0:
			both++
			e.t.Errorf("id %d: both won: %d LogCommit and %d LogAbort calls returned nil", i, r.commitOK, r.abortOK)
		case r.commitOK > 0:
			if r.commitFenced != 0 || r.abortFenced != each {
				e.t.Errorf("id %d: commit won, but %+v", i, r)
			}
			committed[gids[i].String()] = true
			wins[0]++
		case r.abortOK > 0:
			if r.abortFenced != 0 || r.commitFenced != each {
				e.t.Errorf("id %d: abort won, but %+v", i, r)
			}
			wins[1]++
		default:
			e.t.Errorf("id %d: nobody won: %+v", i, r)
		}
	}
	if both > 0 {
		e.t.Fatalf("%d of %d ids have both a commit and an abort acknowledged", both, ids)
	}
	e.t.Logf("commit won %d ids, abort won %d", wins[0], wins[1])
	check := func(when string) {
		e.t.Helper()
		for _, id := range gids {
			_, c, err1 := e.log.Lookup(e.ctx, id)
			_, a, err2 := e.log.LookupAbort(e.ctx, id)
			if err := errors.Join(err1, err2); err != nil {
				e.t.Fatalf("%s: %v", when, err)
			}
			if w := committed[id.String()]; c != w || a != !w {
				e.t.Fatalf("%s: %v: commit record %v, abort record %v; the winner was commit=%v", when, id, c, a, w)
			}
		}
	}
	check("after the race")
	if e.reopen() {
		check("after reopen")
	}
}

func testDecisionTooLate(e *env) {
	// Begun two seconds before the timeout passes: still in time.
	inTime := e.commitRec(e.gid(-Timeout + 2*time.Second))
	if err := e.log.LogCommit(e.ctx, inTime); err != nil {
		e.t.Fatalf("LogCommit within the timeout: %v", err)
	}
	// Begun more than Timeout ago by the log's clock.
	late := e.commitRec(e.gid(-Timeout - time.Second))
	err := e.log.LogCommit(e.ctx, late)
	if !errors.Is(err, xa.ErrDecisionTooLate) {
		e.t.Fatalf("LogCommit past Begun + Timeout: %v, want ErrDecisionTooLate", err)
	}
	// The clock moves on while the coordinator was paused.
	paused := e.commitRec(e.gid(0))
	e.clock.Advance(Timeout + time.Second)
	if err := e.log.LogCommit(e.ctx, paused); !errors.Is(err, xa.ErrDecisionTooLate) {
		e.t.Fatalf("LogCommit after the log's clock passed Begun + Timeout: %v, want ErrDecisionTooLate", err)
	}
	check := func(when string) {
		e.t.Helper()
		for _, rec := range []xa.CommitRecord{late, paused} {
			if _, ok, err := e.log.Lookup(e.ctx, rec.ID); ok || err != nil {
				e.t.Fatalf("%s: a refused record is there (%v, %v)", when, ok, err)
			}
		}
		if _, ok, err := e.log.Lookup(e.ctx, inTime.ID); !ok || err != nil {
			e.t.Fatalf("%s: the record logged in time is missing (%v, %v)", when, ok, err)
		}
	}
	check("after the refusals")
	if e.reopen() {
		check("after reopen")
	}
}

func testDelegations(e *env) {
	if ds, err := e.log.Delegations(e.ctx); len(ds) != 0 || err != nil {
		e.t.Fatalf("Delegations of a new log: %+v, %v", ds, err)
	}
	tableA := xa.Delegation{Participant: "maria", Table: "app.xa_decisions", TableID: strings.Repeat("a", 32)}
	tableB := xa.Delegation{Participant: "maria", Table: "public.xa_decisions", TableID: strings.Repeat("b", 32)}
	legacy := xa.Delegation{Participant: "pg"}
	t0 := e.clock.Now()
	if err := e.log.LogDelegation(e.ctx, tableA); err != nil {
		e.t.Fatalf("LogDelegation: %v", err)
	}
	e.clock.Advance(time.Minute)
	t1 := e.clock.Now()
	if err := e.log.LogDelegation(e.ctx, legacy); err != nil {
		e.t.Fatalf("LogDelegation without a table identity: %v", err)
	}
	e.clock.Advance(time.Minute)
	if err := e.log.LogDelegation(e.ctx, tableA); err != nil {
		e.t.Fatalf("LogDelegation again: %v", err)
	}
	if err := e.log.LogDelegation(e.ctx, xa.Delegation{Participant: "maria"}); err != nil {
		e.t.Fatalf("LogDelegation again, without the table identity: %v", err)
	}
	var ie *xa.IdentityError
	if err := e.log.LogDelegation(e.ctx, tableB); !errors.Is(err, xa.ErrIdentity) || !errors.As(err, &ie) {
		e.t.Fatalf("LogDelegation of another table for a participant delegated to already: %v; want an *xa.IdentityError", err)
	}
	check := func(when string, pg xa.Delegation, pgAt time.Time) {
		e.t.Helper()
		ds, err := e.log.Delegations(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i].Participant < ds[j].Participant })
		if len(ds) != 2 || ds[0].Participant != "maria" || !ds[0].Logged.Equal(t0) || !ds[0].SameTable(tableA) || ds[0].Table != tableA.Table ||
			ds[1].Participant != "pg" || !ds[1].Logged.Equal(pgAt) || ds[1].TableID != pg.TableID || ds[1].Table != pg.Table {
			e.t.Fatalf("%s: Delegations = %+v; want maria's table %s at %v (recording it again is a no-op, another table refused) and pg %+v at %v",
				when, ds, tableA.Table, t0, pg, pgAt)
		}
	}
	check("after LogDelegation", legacy, t1)
	if e.reopen() {
		check("after reopen", legacy, t1)
	}
	// A delegation recorded before decision tables had identities is
	// completed by one that names its table, and then holds to it.
	e.clock.Advance(time.Minute)
	t2 := e.clock.Now()
	pgTable := xa.Delegation{Participant: "pg", Table: "public.xa_decisions", TableID: strings.Repeat("c", 32)}
	if err := e.log.LogDelegation(e.ctx, pgTable); err != nil {
		e.t.Fatalf("LogDelegation completing one without a table: %v", err)
	}
	if err := e.log.LogDelegation(e.ctx, xa.Delegation{Participant: "pg", Table: "x.y", TableID: strings.Repeat("d", 32)}); !errors.Is(err, xa.ErrIdentity) {
		e.t.Fatalf("LogDelegation of another table after a completed one: %v; want ErrIdentity", err)
	}
	check("after completing a delegation", pgTable, t2)
	if e.reopen() {
		check("after completing a delegation and reopen", pgTable, t2)
	}
}

func testParticipants(e *env) {
	if ps, err := e.log.Participants(e.ctx); len(ps) != 0 || err != nil {
		e.t.Fatalf("Participants of a new log: %+v, %v", ps, err)
	}
	maria := xa.ParticipantRecord{Name: "maria", Identity: xa.StoreIdentity{ID: strings.Repeat("1", 32), Where: "MariaDB database bank on db1:3306"}}
	pg := xa.ParticipantRecord{Name: "pg", Identity: xa.StoreIdentity{ID: strings.Repeat("2", 32), Where: "PostgreSQL database bank"}}
	t0 := e.clock.Now()
	for _, p := range []xa.ParticipantRecord{maria, pg} {
		if err := e.log.LogParticipant(e.ctx, p); err != nil {
			e.t.Fatalf("LogParticipant(%s): %v", p.Name, err)
		}
	}
	e.clock.Advance(time.Minute)
	if err := e.log.LogParticipant(e.ctx, maria); err != nil {
		e.t.Fatalf("LogParticipant again: %v", err)
	}
	other := pg
	other.Identity = xa.StoreIdentity{ID: strings.Repeat("3", 32), Where: "PostgreSQL database staging"}
	var ie *xa.IdentityError
	if err := e.log.LogParticipant(e.ctx, other); !errors.Is(err, xa.ErrIdentity) || !errors.As(err, &ie) || !ie.Expected.Same(pg.Identity) || !ie.Found.Same(other.Identity) {
		e.t.Fatalf("LogParticipant of another store under a recorded name: %v; want an *xa.IdentityError expecting %s, finding %s", err, pg.Identity, other.Identity)
	}
	if err := e.log.LogParticipant(e.ctx, xa.ParticipantRecord{Name: "bad", Identity: xa.StoreIdentity{ID: "not-an-id"}}); err == nil || errors.Is(err, xa.ErrIdentity) {
		e.t.Fatalf("LogParticipant of a malformed identity: %v; want a plain error", err)
	}
	check := func(when string) {
		e.t.Helper()
		ps, err := e.log.Participants(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
		if len(ps) != 2 || ps[0].Name != "maria" || ps[0].Identity != maria.Identity || !ps[0].Logged.Equal(t0) ||
			ps[1].Name != "pg" || ps[1].Identity != pg.Identity || !ps[1].Logged.Equal(t0) {
			e.t.Fatalf("%s: Participants = %+v; want maria and pg as first recorded at %v", when, ps, t0)
		}
	}
	check("after LogParticipant")
	if e.reopen() {
		check("after reopen")
	}
}

func testHeuristics(e *env) {
	x := e.commitRec(e.gid(0)).Branches[0].XID
	y := e.commitRec(e.gid(0)).Branches[0].XID
	h := func(rm string, x xa.XID, a xa.Outcome, d time.Duration) xa.HeuristicRecord {
		return xa.HeuristicRecord{RM: rm, XID: x, Action: a, Forced: a == xa.OutcomeRollback, Time: e.clock.Now().Add(d), Reason: "operator " + rm}
	}
	// Two forced resolutions of one XID on two participants are two
	// records.
	hs := []xa.HeuristicRecord{
		h("maria", x, xa.OutcomeRollback, 3*time.Second),
		h("pg", x, xa.OutcomeCommit, 1*time.Second),
		h("maria", y, xa.OutcomeCommit, 2*time.Second),
	}
	for _, r := range hs {
		if err := e.log.LogHeuristic(e.ctx, r); err != nil {
			e.t.Fatalf("LogHeuristic: %v", err)
		}
	}
	check := func(when string, want []xa.HeuristicRecord) {
		e.t.Helper()
		got, err := e.log.Heuristics(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Time.Before(got[i-1].Time) {
				e.t.Errorf("%s: Heuristics not oldest first", when)
			}
		}
		var g, w []string
		for _, r := range got {
			g = append(g, enc(e.t, r))
		}
		for _, r := range want {
			w = append(w, enc(e.t, r))
		}
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			e.t.Fatalf("%s: Heuristics = %s; want %s", when, describe(got), describe(want))
		}
	}
	check("after LogHeuristic", hs)
	if err := e.log.ClearHeuristic(e.ctx, "maria", x); err != nil {
		e.t.Fatalf("ClearHeuristic: %v", err)
	}
	if err := e.log.ClearHeuristic(e.ctx, "oracle", y); err != nil {
		e.t.Fatalf("ClearHeuristic of a participant without records: %v", err)
	}
	want := hs[1:]
	check("after ClearHeuristic(maria, x)", want)
	if e.reopen() {
		check("after reopen", want)
	}
}

func describe(hs []xa.HeuristicRecord) string {
	var b strings.Builder
	b.WriteString("[")
	for i, h := range hs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s %v", h.RM, h.XID, h.Action)
	}
	b.WriteString("]")
	return b.String()
}

func testAbortRetention(e *env) {
	// Both began a timeout ago: their commit deadlines have passed, and
	// retention runs from their logging.
	old, young := e.gid(-Timeout), e.gid(-Timeout)
	if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: old}); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: young}); err != nil {
		e.t.Fatal(err)
	}
	if as, err := e.log.Aborts(e.ctx); err != nil || len(as) != 2 || as[0].ID.String() != old.String() {
		e.t.Fatalf("Aborts = %+v, %v; want two, oldest first", as, err)
	}
	// A second short of the retention, by the log's clock: kept.
	e.clock.Advance(xa.AbortRetention - time.Hour - time.Second)
	if err := e.log.ForgetAbort(e.ctx, old); err == nil {
		e.t.Fatalf("ForgetAbort of a record younger than %v succeeded", xa.AbortRetention)
	}
	if _, ok, err := e.log.LookupAbort(e.ctx, old); !ok || err != nil {
		e.t.Fatalf("the abort record refused to ForgetAbort is gone (%v, %v)", ok, err)
	}
	e.clock.Advance(2 * time.Second)
	if err := e.log.ForgetAbort(e.ctx, old); err != nil {
		e.t.Fatalf("ForgetAbort past the retention: %v", err)
	}
	if err := e.log.ForgetAbort(e.ctx, young); err == nil {
		e.t.Fatal("ForgetAbort of the younger record succeeded")
	}
	if err := e.log.ForgetAbort(e.ctx, e.gid(0)); err != nil {
		e.t.Fatalf("ForgetAbort of an id never aborted: %v", err)
	}
	check := func(when string, oldMayReturn bool) {
		e.t.Helper()
		if _, ok, err := e.log.LookupAbort(e.ctx, old); err != nil || ok && !oldMayReturn {
			e.t.Fatalf("%s: the forgotten abort record is there (%v, %v)", when, ok, err)
		}
		if _, ok, err := e.log.LookupAbort(e.ctx, young); !ok || err != nil {
			e.t.Fatalf("%s: the retained abort record is gone (%v, %v)", when, ok, err)
		}
		as, err := e.log.Aborts(e.ctx)
		if err != nil || len(as) == 0 || as[len(as)-1].ID.String() != young.String() || !oldMayReturn && len(as) != 1 {
			e.t.Fatalf("%s: Aborts = %+v, %v", when, as, err)
		}
	}
	check("after ForgetAbort", false)
	if e.reopen() {
		// ForgetAbort need not be durable.
		check("after reopen", true)
	}

	// A transaction whose commit deadline is later than its abort's
	// logging (its clock ran ahead, or the log's timeout is long): the
	// log would accept its commit record until the deadline, so the
	// fence is kept for AbortRetention past the deadline, not past the
	// logging.
	late := e.gid(time.Hour)
	if err := e.log.LogAbort(e.ctx, xa.AbortRecord{ID: late}); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(xa.AbortRetention + time.Hour + Timeout - time.Second)
	if err := e.log.ForgetAbort(e.ctx, late); err == nil {
		e.t.Fatalf("ForgetAbort of a record a second before its transaction's deadline + %v succeeded", xa.AbortRetention)
	}
	if _, ok, err := e.log.LookupAbort(e.ctx, late); !ok || err != nil {
		e.t.Fatalf("the abort record refused to ForgetAbort is gone (%v, %v)", ok, err)
	}
	e.clock.Advance(2 * time.Second)
	if err := e.log.ForgetAbort(e.ctx, late); err != nil {
		e.t.Fatalf("ForgetAbort past the deadline + retention: %v", err)
	}
}

// testFencedAfterTakeover: once another process took the log over, the
// previous holder's commit, abort, delegation and participant writes are
// refused with xa.ErrFenced and leave nothing; what it logged before is
// the new holder's to read, and the new holder records aborts.
func testFencedAfterTakeover(e *env) {
	if e.h.TakeOver == nil {
		e.t.Skip("the log has no lease (Harness.TakeOver is nil)")
	}
	old := e.log
	before := e.commitRec(e.gid(0))
	if err := old.LogCommit(e.ctx, before); err != nil {
		e.t.Fatalf("LogCommit before the takeover: %v", err)
	}
	taker := e.h.TakeOver(e.t, old)
	if taker == nil {
		e.t.Fatal("Harness.TakeOver returned nil")
	}
	after := e.commitRec(e.gid(0))
	if err := old.LogCommit(e.ctx, after); !errors.Is(err, xa.ErrFenced) || xa.OutcomeUnknown(err) {
		e.t.Fatalf("the previous holder's LogCommit after the takeover: %v; want xa.ErrFenced (and not outcome unknown)", err)
	}
	aborted := e.gid(0)
	if err := old.LogAbort(e.ctx, xa.AbortRecord{ID: aborted, Reason: "stale"}); !errors.Is(err, xa.ErrFenced) {
		e.t.Fatalf("the previous holder's LogAbort after the takeover: %v; want xa.ErrFenced", err)
	}
	if err := old.LogDelegation(e.ctx, xa.Delegation{Participant: "pg"}); !errors.Is(err, xa.ErrFenced) {
		e.t.Fatalf("the previous holder's LogDelegation after the takeover: %v; want xa.ErrFenced", err)
	}
	p := xa.ParticipantRecord{Name: "maria", Identity: xa.StoreIdentity{ID: strings.Repeat("4", 32)}}
	if err := old.LogParticipant(e.ctx, p); !errors.Is(err, xa.ErrFenced) {
		e.t.Fatalf("the previous holder's LogParticipant after the takeover: %v; want xa.ErrFenced", err)
	}
	for _, l := range []xa.RecoveryLog{taker, old} {
		if _, ok, err := l.Lookup(e.ctx, after.ID); ok || err != nil {
			e.t.Fatalf("the refused commit record is there (%v, %v)", ok, err)
		}
		if _, ok, err := l.LookupAbort(e.ctx, aborted); ok || err != nil {
			e.t.Fatalf("the refused abort record is there (%v, %v)", ok, err)
		}
		if got, ok, err := l.Lookup(e.ctx, before.ID); !ok || err != nil || enc(e.t, got) != enc(e.t, before) {
			e.t.Fatalf("the commit record logged before the takeover is missing (%v, %v)", ok, err)
		}
		if ds, err := l.Delegations(e.ctx); len(ds) != 0 || err != nil {
			e.t.Fatalf("Delegations = %+v, %v; want none (the only one was refused)", ds, err)
		}
		if ps, err := l.Participants(e.ctx); len(ps) != 0 || err != nil {
			e.t.Fatalf("Participants = %+v, %v; want none (the only one was refused)", ps, err)
		}
	}
	if err := taker.LogAbort(e.ctx, xa.AbortRecord{ID: aborted, Reason: "presumed abort after a takeover"}); err != nil {
		e.t.Fatalf("the new holder's LogAbort: %v", err)
	}
	if err := taker.LogAbort(e.ctx, xa.AbortRecord{ID: before.ID, Reason: "presumed abort after a takeover"}); !errors.Is(err, xa.ErrCommitRecorded) {
		e.t.Fatalf("the new holder's LogAbort of a transaction the previous holder committed: %v; want xa.ErrCommitRecorded", err)
	}
}
