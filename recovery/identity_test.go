package recovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// idRM is an in-memory participant whose database carries an identity
// (xa.Identified) and, with a table id, a decision table with one
// (xa.DecisionTable).
type idRM struct {
	*memrm.RM
	id      xa.StoreIdentity
	tableID string
}

func (r idRM) Identity() (xa.StoreIdentity, error) { return r.id, nil }

func (r idRM) DecisionTableIdentity() (string, xa.StoreIdentity, error) {
	if r.tableID == "" {
		return "", xa.StoreIdentity{}, &xa.IdentityError{Store: "decision table", Why: "none"}
	}
	return "public.xa_decisions", xa.StoreIdentity{ID: r.tableID, Where: "table public.xa_decisions"}, nil
}

func storeID(t *testing.T, where string) xa.StoreIdentity {
	t.Helper()
	id, err := xa.NewStoreID()
	if err != nil {
		t.Fatal(err)
	}
	return xa.StoreIdentity{ID: id, Where: where}
}

// A commit record names a branch on pg; the configuration's pg now
// reaches another database, which lists nothing. Recovery must not read
// that as "pg's branch is finished": the record is kept (and reported),
// nothing is done on the other database, and once pg reaches the recorded
// database again its branch is committed and only then is the record
// forgotten. Without the identity check the first scan forgot the record,
// and the pg branch would later have been presumed aborted with maria's
// committed.
func TestScanActsOnlyOnTheRecordedParticipant(t *testing.T) {
	ctx := context.Background()
	log := oldLog(t, "n1", 2*time.Hour)
	maria := idRM{RM: memrm.New("maria", memrm.NewDB(), nil), id: storeID(t, "maria")}
	pgDB := memrm.NewDB()
	pg := idRM{RM: memrm.New("pg", pgDB, nil), id: storeID(t, "bank")}
	staging := idRM{RM: memrm.New("pg", memrm.NewDB(), nil), id: storeID(t, "staging")}
	for _, p := range []xa.ParticipantRecord{{Name: "maria", Identity: maria.id}, {Name: "pg", Identity: pg.id}} {
		if err := log.LogParticipant(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x0, x1 := prepared(t, maria.RM, g, 0), prepared(t, pg.RM, g, 1)
	log.SetClock(func() time.Time { return g.Begun })
	if err := log.LogCommit(ctx, xa.CommitRecord{ID: g, Logged: g.Begun, Branches: []xa.BranchRecord{{RM: "maria", XID: x0}, {RM: "pg", XID: x1}}}); err != nil {
		t.Fatal(err)
	}
	log.SetClock(time.Now)

	wrong, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{maria, staging}, Log: log, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		rep, err := wrong.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Forgotten) != 0 {
			t.Fatalf("pass %d: forgot %v with pg answering as another database", pass, rep.Forgotten)
		}
		var ie *xa.IdentityError
		if !errors.As(rep.Mismatched["pg"], &ie) || !ie.Expected.Same(pg.id) || !ie.Found.Same(staging.id) {
			t.Fatalf("pass %d: Mismatched = %v; want pg expected %s, found %s", pass, rep.Mismatched, pg.id, staging.id)
		}
		if len(rep.Kept) != 1 || !rep.Kept[0].Unseen || !strings.Contains(rep.Kept[0].Reason, `"pg" is not the database the log recorded`) {
			t.Fatalf("pass %d: kept = %+v", pass, rep.Kept)
		}
	}
	if _, ok, _ := log.Lookup(ctx, g); !ok {
		t.Fatal("the commit record is gone")
	}
	if len(pgDB.Prepared()) != 1 {
		t.Fatalf("pg's branch: %v; want it still prepared", pgDB.Prepared())
	}
	// A manual resolution on the other database is refused too.
	if _, err := wrong.Resolve(ctx, x1, xa.OutcomeRollback, recovery.ResolveOptions{Participant: "pg", Force: true}); !errors.Is(err, xa.ErrIdentity) {
		t.Fatalf("forced rollback on the other database: %v; want ErrIdentity", err)
	}

	right, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{maria, pg}, Log: log, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := right.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := pgDB.Get(1); !ok || v != 1 || len(pgDB.Prepared()) != 0 {
		t.Fatalf("pg's branch after recovery with the recorded database: %v %v, prepared %v; want committed", v, ok, pgDB.Prepared())
	}
	rep, err := right.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Forgotten) != 1 || len(rep.Mismatched) != 0 {
		t.Fatalf("second scan with the recorded database: forgot %v, mismatched %v; want the record forgotten", rep.Forgotten, rep.Mismatched)
	}
}

// The log delegated decisions to pg's decision table T; the configuration
// now reaches another table (another schema on the search path, a new
// empty one). A maria branch with no decision, past the grace, must not be
// presumed aborted: T may hold its COMMIT row. Nothing is claimed in the
// other table and no abort is logged.
func TestPresumedAbortWaitsForTheRecordedDecisionTable(t *testing.T) {
	ctx := context.Background()
	log := oldLog(t, "n1", 2*time.Hour)
	mariaDB := memrm.NewDB()
	maria := idRM{RM: memrm.New("maria", mariaDB, nil), id: storeID(t, "maria")}
	pgDB := memrm.NewDB()
	pg := idRM{RM: memrm.New("pg", pgDB, nil).EnableLastResource(), id: storeID(t, "bank"), tableID: storeID(t, "").ID}
	recorded := storeID(t, "").ID
	if err := log.LogParticipant(ctx, xa.ParticipantRecord{Name: "pg", Identity: pg.id}); err != nil {
		t.Fatal(err)
	}
	if err := log.LogDelegation(ctx, xa.Delegation{Participant: "pg", Table: "app.xa_decisions", TableID: recorded}); err != nil {
		t.Fatal(err)
	}
	g, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x0 := xa.BranchRef{ID: g, Index: 0, Log: log.Identity().ID}.XID()
	b, err := maria.Start(ctx, x0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(*memrm.Branch).Put(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{maria, pg}, Log: log, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Branches) != 1 || rep.Branches[0].Verdict != recovery.Blocked || !strings.Contains(rep.Branches[0].Reason, "app.xa_decisions") {
		t.Fatalf("branches = %+v; want maria's blocked, naming the recorded table", rep.Branches)
	}
	if !errors.Is(rep.Mismatched["pg"], xa.ErrIdentity) {
		t.Fatalf("Mismatched = %v; want pg's decision table", rep.Mismatched)
	}
	if aborts, _ := log.Aborts(ctx); len(aborts) != 0 || pgDB.AbortMarkers() != 0 || len(mariaDB.Prepared()) != 1 {
		t.Fatalf("aborts %v, markers %d, maria prepared %v; want nothing done", aborts, pgDB.AbortMarkers(), mariaDB.Prepared())
	}
	if _, err := sc.Resolve(ctx, x0, xa.OutcomeRollback, recovery.ResolveOptions{}); !errors.Is(err, recovery.ErrContradiction) {
		t.Fatalf("rollback by hand: %v; want a contradiction", err)
	}

	// With the recorded table configured, presumed abort goes on.
	pg.tableID = recorded
	sc, err = recovery.New(recovery.Config{Participants: []xa.ResourceManager{maria, pg}, Log: log, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err = sc.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rep.Aborted) != 1 || len(mariaDB.Prepared()) != 0 {
		t.Fatalf("with the recorded table: aborted %v, maria prepared %v; want presumed abort", rep.Aborted, mariaDB.Prepared())
	}
}

// The clock stepped back after the log was created: a transaction begun
// now must still be presumed aborted once past the grace (before, its id
// was dated before the log's creation, and recovery left it alone for
// ever as "predates the log").
func TestClockBehindTheLog(t *testing.T) {
	ctx := context.Background()
	ident, err := xa.NewLogIdentity("n1", time.Second, 2*time.Minute, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	log := memrm.NewLogFor(ident)
	mgr, err := xa.NewManager(xa.Config{Node: "n1", Log: log, Timeout: time.Second, Phase2Attempts: 1, Phase2Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	myDB, pgDB := memrm.NewDB(), memrm.NewDB()
	my, pg := memrm.New("maria", myDB, nil), memrm.New("pg", pgDB, nil)
	log.Kill() // the decision cannot be written: both branches stay prepared
	_, err = mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		for i, rm := range []*memrm.RM{my, pg} {
			s, err := tx.Enlist(ctx, rm)
			if err != nil {
				return err
			}
			if err := s.(*memrm.Branch).Put(ctx, i, i); err != nil {
				return err
			}
		}
		return nil
	})
	if !xa.OutcomeUnknown(err) {
		t.Fatalf("Run = %v; want outcome unknown (the log is dead)", err)
	}
	log.Revive()
	later := time.Now().Add(2*time.Hour + 10*time.Minute)
	log.SetClock(func() time.Time { return later })
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rep.Branches {
		if b.Verdict != recovery.Rollback || !b.Done {
			t.Fatalf("branch %s: %v (%s); want presumed abort", b.Prepared.XID, b.Verdict, b.Reason)
		}
	}
	if len(rep.Branches) != 2 || len(myDB.Prepared())+len(pgDB.Prepared()) != 0 {
		t.Fatalf("branches %+v; want both rolled back", rep.Branches)
	}
}

// listHook is a participant that runs a function when it is listed: what
// happens elsewhere between the scan's identity check and its fence.
type listHook struct {
	idRM
	onList func()
}

func (r listHook) Recover(ctx context.Context) ([]xa.PreparedBranch, error) {
	r.onList()
	return r.idRM.Recover(ctx)
}

// A scan checks the decision tables the log delegated to when it starts,
// and reads the delegations again before it takes the fence (a delegation
// is durable before any branch it concerns is prepared). A delegation that
// appears in between — a coordinator whose clock runs behind the
// scanner's records its first last-resource delegation to pg while the
// scan lists maria — names table T, while this scanner's pg reaches
// another table (another role's search_path). The fence must not be taken
// in that table: it would say "no decision" for a commit stored in T, and
// maria's branch would be rolled back while pg commits. Before, the scan
// claimed its marker in the unchecked table, logged the abort and rolled
// maria back.
func TestFenceChecksADelegationRecordedDuringTheScan(t *testing.T) {
	ctx := context.Background()
	log := oldLog(t, "n1", 2*time.Hour)
	mariaDB, pgDB := memrm.NewDB(), memrm.NewDB()
	pg := idRM{RM: memrm.New("pg", pgDB, nil).EnableLastResource(), id: storeID(t, "bank"), tableID: storeID(t, "").ID}
	recorded := storeID(t, "").ID // the table the coordinator commits into
	maria := listHook{idRM: idRM{RM: memrm.New("maria", mariaDB, nil), id: storeID(t, "maria")}, onList: func() {
		if err := log.LogDelegation(ctx, xa.Delegation{Participant: "pg", Table: "app.xa_decisions", TableID: recorded}); err != nil {
			t.Error(err)
		}
	}}
	for _, p := range []xa.ParticipantRecord{{Name: "maria", Identity: maria.id}, {Name: "pg", Identity: pg.id}} {
		if err := log.LogParticipant(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x0 := xa.BranchRef{ID: g, Index: 0, Log: log.Identity().ID}.XID()
	preparedRef(t, maria.RM, xa.BranchRef{ID: g, Index: 0, Log: log.Identity().ID})
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{maria, pg}, Log: log, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if aborts, _ := log.Aborts(ctx); len(aborts) != 0 || pgDB.AbortMarkers() != 0 || len(mariaDB.Prepared()) != 1 {
		t.Fatalf("the fence was taken in a decision table that is not the delegated one: aborts %v, markers in it %d, maria prepared %v (branches %+v)",
			aborts, pgDB.AbortMarkers(), mariaDB.Prepared(), rep.Branches)
	}
	if len(rep.Branches) != 1 || rep.Branches[0].Verdict != recovery.Blocked || !strings.Contains(rep.Branches[0].Reason, "app.xa_decisions") {
		t.Fatalf("branches = %+v; want maria's blocked, naming the recorded table", rep.Branches)
	}
	// A forced rollback by hand claims nothing in the other table either.
	if _, err := sc.Resolve(ctx, x0, xa.OutcomeRollback, recovery.ResolveOptions{Force: true}); pgDB.AbortMarkers() != 0 {
		t.Fatalf("forced rollback: %v, markers %d; want nothing claimed in a table that is not the delegated one", err, pgDB.AbortMarkers())
	}
}

// decisionsHook is a decision store that runs a function before its
// decisions are read.
type decisionsHook struct {
	idRM
	before func()
}

func (r *decisionsHook) Decisions(ctx context.Context) ([]xa.CommitRecord, error) {
	r.before()
	return r.idRM.Decisions(ctx)
}

// The scan compares the participants with the log's records, then reads
// the decisions stored in last resources. A coordinator that records maria
// for the first time in between (a new log, or a participant new to it),
// prepares maria's branch and commits last in pg leaves a decision the
// scan reads, naming a participant whose record the scan did not see. This
// scanner's maria reaches a staging database, which lists nothing: the
// decision must not be forgotten on its strength (maria's real branch
// would then have no decision and be presumed aborted, with pg
// committed). Before, the scan forgot it.
func TestStoredDecisionNamingAParticipantRecordedDuringTheScan(t *testing.T) {
	ctx := context.Background()
	log := oldLog(t, "n1", 2*time.Hour)
	realMaria := idRM{RM: memrm.New("maria", memrm.NewDB(), nil), id: storeID(t, "maria")}
	staging := idRM{RM: memrm.New("maria", memrm.NewDB(), nil), id: storeID(t, "staging")}
	pgDB := memrm.NewDB()
	table := storeID(t, "").ID
	pgRM := idRM{RM: memrm.New("pg", pgDB, nil).EnableLastResource(), id: storeID(t, "bank"), tableID: table}
	if err := log.LogParticipant(ctx, xa.ParticipantRecord{Name: "pg", Identity: pgRM.id}); err != nil {
		t.Fatal(err)
	}
	if err := log.LogDelegation(ctx, xa.Delegation{Participant: "pg", Table: "public.xa_decisions", TableID: table}); err != nil {
		t.Fatal(err)
	}
	g, _ := xa.NewGlobalID("n1", time.Now())
	ref := xa.BranchRef{ID: g, Index: 0, Log: log.Identity().ID}
	pg := &decisionsHook{idRM: pgRM, before: func() {
		// The coordinator, while the scan runs.
		if err := log.LogParticipant(ctx, xa.ParticipantRecord{Name: "maria", Identity: realMaria.id}); err != nil {
			t.Error(err)
		}
		x0 := preparedRef(t, realMaria.RM, ref)
		b, err := pgRM.Start(ctx, xa.BranchRef{ID: g, Index: 1, Log: log.Identity().ID}.XID())
		if err != nil {
			t.Error(err)
			return
		}
		if err := b.(*memrm.Branch).Put(ctx, 1, 1); err != nil {
			t.Error(err)
		}
		if err := b.(xa.LastResource).CommitLast(ctx, xa.CommitRecord{ID: g, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: "maria", XID: x0}}}); err != nil {
			t.Error(err)
		}
	}}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{staging, pg}, Log: log, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := pgRM.Decision(ctx, g); !ok {
		t.Fatalf("the decision of %s, whose maria branch is prepared on the recorded database, was forgotten while maria reached a staging database (forgotten %v, kept %+v)",
			g, rep.Forgotten, rep.Kept)
	}
	if !errors.Is(rep.Mismatched["maria"], xa.ErrIdentity) {
		t.Fatalf("Mismatched = %v; want maria", rep.Mismatched)
	}
}
