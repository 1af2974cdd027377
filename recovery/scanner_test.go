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

// oldLog returns an in-memory log for node created age ago.
func oldLog(t *testing.T, node string, age time.Duration) *memrm.Log {
	t.Helper()
	ident, err := xa.NewLogIdentity(node, 0, 0, time.Now().Add(-age))
	if err != nil {
		t.Fatal(err)
	}
	return memrm.NewLogFor(ident)
}

// prepared leaves branch i of g prepared on rm, as a crashed coordinator
// would.
func prepared(t *testing.T, rm *memrm.RM, g xa.GlobalID, i int) xa.XID {
	t.Helper()
	ctx := context.Background()
	b, err := rm.Start(ctx, g.Branch(i))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(*memrm.Branch).Put(ctx, i, i); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	return g.Branch(i)
}

// A record that names a participant the scanner does not know is kept and
// reported from the first scan on, even while its known branch is still
// prepared; its known branch is committed; foreign branches and other
// nodes' are left alone.
func TestScannerKeepsRecordOfUnknownParticipant(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := memrm.New("maria", db, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	g, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x := prepared(t, rm, g, 0)
	other, _ := xa.NewGlobalID("n2", time.Now().Add(-time.Hour))
	prepared(t, rm, other, 0)
	// A record of a transaction logged an hour ago (the log's clock is
	// set back for the write, which refuses decisions past the timeout).
	log.SetClock(func() time.Time { return g.Begun })
	if err := log.LogCommit(ctx, xa.CommitRecord{ID: g, Logged: g.Begun, Branches: []xa.BranchRecord{
		{RM: "maria", XID: x}, {RM: "oracle", XID: g.Branch(1)},
	}}); err != nil {
		t.Fatal(err)
	}
	log.SetClock(time.Now)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: log, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		rep, err := sc.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Kept) != 1 || !rep.Kept[0].Unseen || !strings.Contains(rep.Kept[0].Reason, `"oracle" is not configured`) {
			t.Fatalf("pass %d: kept = %+v", pass, rep.Kept)
		}
		if len(rep.Forgotten) != 0 {
			t.Fatalf("pass %d: forgot %v", pass, rep.Forgotten)
		}
		if pass == 1 {
			verdicts := map[recovery.Verdict]int{}
			for _, b := range rep.Branches {
				verdicts[b.Verdict]++
			}
			if verdicts[recovery.Commit] != 1 || verdicts[recovery.OtherNode] != 1 {
				t.Fatalf("verdicts %v", verdicts)
			}
		}
	}
	if v, ok := db.Get(0); !ok || v != 0 {
		t.Fatal("the known branch was not committed")
	}
	if len(db.Prepared()) != 1 {
		t.Fatalf("prepared now %v; want only the other node's branch", db.Prepared())
	}
}

// preparedRef leaves branch r prepared on rm.
func preparedRef(t *testing.T, rm *memrm.RM, r xa.BranchRef) xa.XID {
	t.Helper()
	ctx := context.Background()
	b, err := rm.Start(ctx, r.XID())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(*memrm.Branch).Put(ctx, r.Index, r.Index); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	return r.XID()
}

func verdictOf(t *testing.T, rep recovery.Report, x xa.XID) recovery.Branch {
	t.Helper()
	for _, b := range rep.Branches {
		if b.Prepared.XID.Equal(x) {
			return b
		}
	}
	t.Fatalf("branch %s not in the report", x)
	return recovery.Branch{}
}

// Presumed abort only for branches of the scanner's own log that began
// after the log was created: a branch of another log (a new empty log
// dir, another node's log, a second process with the same node id), of no
// log, or older than the log is reported and left prepared, however old.
func TestPresumedAbortOnlyOfOwnLog(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := memrm.New("maria", db, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	other := oldLog(t, "n1", 2*time.Hour) // same node, another log
	begun := time.Now().Add(-time.Hour)
	g := func() xa.GlobalID { id, _ := xa.NewGlobalID("n1", begun); return id }
	own := preparedRef(t, rm, xa.BranchRef{ID: g(), Log: log.Identity().ID})
	foreignLog := preparedRef(t, rm, xa.BranchRef{ID: g(), Log: other.Identity().ID})
	noLog := preparedRef(t, rm, xa.BranchRef{ID: g()})
	old, _ := xa.NewGlobalID("n1", time.Now().Add(-3*time.Hour))
	predates := preparedRef(t, rm, xa.BranchRef{ID: old, Log: log.Identity().ID})

	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		x    xa.XID
		want recovery.Verdict
		why  string
	}{
		{own, recovery.Rollback, ""},
		{foreignLog, recovery.OtherLog, "belongs to decision log " + other.Identity().ID.String()},
		{noLog, recovery.OtherLog, "names no decision log"},
		{predates, recovery.Predates, "before this log was created"},
	} {
		b := verdictOf(t, rep, c.x)
		if b.Verdict != c.want || !strings.Contains(b.Reason, c.why) {
			t.Errorf("%s: verdict %v (%q), want %v (%q)", c.x, b.Verdict, b.Reason, c.want, c.why)
		}
	}
	if got := db.Prepared(); len(got) != 3 {
		t.Fatalf("prepared after the scan: %v; want the three branches of other logs", got)
	}
	if rep.InDoubt() != 3 {
		t.Fatalf("InDoubt = %d, want 3", rep.InDoubt())
	}
	// The abort was recorded before the rollback.
	if _, ok, _ := log.LookupAbort(ctx, verdictOf(t, rep, own).ID); !ok || len(rep.Aborted) != 1 {
		t.Fatalf("no abort record for the presumed abort (report: %v)", rep.Aborted)
	}
}

// The fence, from the scanner's side: when the coordinator's commit
// record lands before the scanner's abort record, the scanner commits
// instead of rolling back; an abort recorded earlier makes the
// coordinator's record impossible.
func TestPresumedAbortLosesToLoggedCommit(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := memrm.New("maria", db, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x := preparedRef(t, rm, xa.BranchRef{ID: id, Log: log.Identity().ID})
	// The scanner reads the log (nothing), lists the branch, and then,
	// before it records its abort, the coordinator's decision lands.
	racing := &commitBeforeAbort{Log: log, rec: xa.CommitRecord{ID: id, Logged: id.Begun, Branches: []xa.BranchRecord{{RM: "maria", XID: x}}}}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: racing})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := verdictOf(t, rep, x); b.Verdict != recovery.Commit || !b.Done {
		t.Fatalf("verdict %v done %v err %v; want the branch committed", b.Verdict, b.Done, b.Err)
	}
	if v, ok := db.Get(0); !ok || v != 0 {
		t.Fatal("the branch was not committed")
	}
	if _, ok, _ := log.LookupAbort(ctx, id); ok {
		t.Fatal("an abort was recorded beside the commit")
	}
}

// commitBeforeAbort logs rec (with the log's clock set to its begin time)
// just before the first LogAbort.
type commitBeforeAbort struct {
	*memrm.Log
	rec  xa.CommitRecord
	done bool
}

func (l *commitBeforeAbort) LogAbort(ctx context.Context, a xa.AbortRecord) error {
	if !l.done {
		l.done = true
		l.SetClock(func() time.Time { return l.rec.ID.Begun })
		err := l.Log.LogCommit(ctx, l.rec)
		l.SetClock(time.Now)
		if err != nil {
			return err
		}
	}
	return l.Log.LogAbort(ctx, a)
}

// A log that delegated decisions to a participant's decision table: a
// scanner without that participant presumes nothing aborted (the decision
// may be there); with it, it fences the table before rolling back, and a
// last-resource commit afterwards is refused.
func TestPresumedAbortNeedsDelegatedStore(t *testing.T) {
	ctx := context.Background()
	maria, pgdb := memrm.NewDB(), memrm.NewDB()
	rm := memrm.New("maria", maria, nil)
	pg := memrm.New("pg", pgdb, nil).EnableLastResource()
	log := oldLog(t, "n1", 2*time.Hour)
	if err := log.LogDelegation(ctx, xa.Delegation{Participant: "pg"}); err != nil {
		t.Fatal(err)
	}
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x := preparedRef(t, rm, xa.BranchRef{ID: id, Log: log.Identity().ID})

	without, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := without.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := verdictOf(t, rep, x); b.Verdict != recovery.Blocked || !strings.Contains(b.Reason, `"pg"`) {
		t.Fatalf("without the delegated store: verdict %v (%q), want blocked naming pg", b.Verdict, b.Reason)
	}
	if len(maria.Prepared()) != 1 {
		t.Fatal("rolled back without the delegated store")
	}

	with, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm, pg}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = with.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := verdictOf(t, rep, x); b.Verdict != recovery.Rollback || !b.Done {
		t.Fatalf("with the delegated store: verdict %v done %v err %v", b.Verdict, b.Done, b.Err)
	}
	if pgdb.AbortMarkers() != 1 {
		t.Fatalf("%d abort markers in the delegated store, want 1", pgdb.AbortMarkers())
	}
	// The coordinator, late, commits its last resource with the decision:
	// refused, nothing committed.
	b, _ := pg.Start(ctx, xa.BranchRef{ID: id, Index: 1, Log: log.Identity().ID}.XID())
	b.(*memrm.Branch).Put(ctx, 7, 7) //nolint:errcheck
	err = b.(xa.LastResource).CommitLast(ctx, xa.CommitRecord{ID: id, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: "maria", XID: x}}})
	if !errors.Is(err, xa.ErrAbortRecorded) || xa.OutcomeUnknown(err) {
		t.Fatalf("CommitLast after the fence = %v, want ErrAbortRecorded", err)
	}
	if _, ok := pgdb.Get(7); ok {
		t.Fatal("the fenced last resource committed")
	}
}

// Two participants on one server list the same branches: each branch is
// attributed to the participant its record names and resolved once, with
// no anomaly.
func TestSharedServerListedOnce(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB() // one server, two "databases"
	a := &sharedRM{RM: memrm.New("a", db, nil), key: "srv1"}
	b := &sharedRM{RM: memrm.New("b", db, nil), key: "srv1"}
	log := oldLog(t, "n1", 2*time.Hour)
	id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	xa0 := preparedRef(t, a.RM, xa.BranchRef{ID: id, Index: 0, Log: log.Identity().ID})
	xb1 := preparedRef(t, b.RM, xa.BranchRef{ID: id, Index: 1, Log: log.Identity().ID})
	log.SetClock(func() time.Time { return id.Begun })
	if err := log.LogCommit(ctx, xa.CommitRecord{ID: id, Logged: id.Begun, Branches: []xa.BranchRecord{{RM: "a", XID: xa0}, {RM: "b", XID: xb1}}}); err != nil {
		t.Fatal(err)
	}
	log.SetClock(time.Now)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{a, b}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Branches) != 2 {
		t.Fatalf("%d branches reported, want 2 (one listing per server)", len(rep.Branches))
	}
	for _, c := range []struct {
		x  xa.XID
		rm string
	}{{xa0, "a"}, {xb1, "b"}} {
		br := verdictOf(t, rep, c.x)
		if br.Participant != c.rm || br.Verdict != recovery.Commit || !br.Done {
			t.Errorf("%s: participant %s verdict %v done %v; want %s, commit, done", c.x, br.Participant, br.Verdict, br.Done, c.rm)
		}
	}
	rep, err = sc.Scan(ctx)
	if err != nil || len(rep.Forgotten) != 1 || rep.InDoubt() != 0 {
		t.Fatalf("second scan: forgotten %v, in doubt %d, err %v", rep.Forgotten, rep.InDoubt(), err)
	}
}

type sharedRM struct {
	*memrm.RM
	key string
}

func (s *sharedRM) ServerKey(context.Context) (string, error) { return s.key, nil }

// ghostRM is a participant whose server holds prepared transactions it
// does not list (MariaDB, fact 7): UnlistedPrepared reports n.
type ghostRM struct {
	*memrm.RM
	n int
}

func (g ghostRM) UnlistedPrepared(context.Context) (int, error) { return g.n, nil }

// The model's scanner counterexamples (docs/model.md): a record is not
// forgotten while this scan listed one of its branches (mut-forget-listed:
// here its commit from another session is refused, as MariaDB's is while
// the branch is attached), nor while the participant holds prepared
// transactions it does not list (mut-ignore-ghosts).
func TestRecordKeptWhileABranchMayRemain(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		faults memrm.Fault
		ghosts int
	}{
		{"listed", memrm.Fail, 0},
		{"ghosts", memrm.OK, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := memrm.NewDB()
			rm := memrm.New("maria", db, func(op memrm.Op, _ xa.XID) memrm.Fault {
				if op == memrm.OpCommitRM {
					return c.faults
				}
				return memrm.OK
			})
			log := oldLog(t, "n1", 2*time.Hour)
			id, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
			x := preparedRef(t, rm, xa.BranchRef{ID: id, Log: log.Identity().ID})
			log.SetClock(func() time.Time { return id.Begun })
			if err := log.LogCommit(ctx, xa.CommitRecord{ID: id, Logged: id.Begun, Branches: []xa.BranchRecord{{RM: "maria", XID: x}}}); err != nil {
				t.Fatal(err)
			}
			log.SetClock(time.Now)
			sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{ghostRM{rm, c.ghosts}}, Log: log})
			if err != nil {
				t.Fatal(err)
			}
			for pass := 1; pass <= 2; pass++ {
				rep, err := sc.Scan(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Forgotten) != 0 {
					t.Fatalf("pass %d: forgot %v while a branch may remain (%s)", pass, rep.Forgotten, c.name)
				}
			}
			if recs, _ := log.Commits(ctx); len(recs) != 1 {
				t.Fatalf("%d records, want the one kept", len(recs))
			}
		})
	}
}
