package sqllog_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// prepare prepares branch i of transaction id (of log's node) on rm, with a
// row k = 1, and returns its XID.
func prepare(t *testing.T, rm *memrm.RM, log xa.LogIdentity, id xa.GlobalID, i, k int) xa.XID {
	t.Helper()
	ctx := context.Background()
	x := xa.BranchRef{ID: id, Index: i, Log: log.ID}.XID()
	b, err := rm.Start(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(*memrm.Branch).Put(ctx, k, 1); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Prepare(ctx); err != nil || v != xa.VotePrepared {
		t.Fatalf("prepare: %v %v", v, err)
	}
	return x
}

// TestTakeoverResolvesADeadNode: three nodes share a log database. Node n1
// (whose clock is three minutes behind) dies (its process stops renewing its lease) with a decided transaction
// (commit record, both branches prepared) and an undecided one (both
// prepared, seconds old, far younger than the grace period); node n3 is
// alive with an undecided transaction of its own. Node n2's Takeover finds
// n1's lease expired by the database's clock (not before), takes it over
// at a new epoch, commits the decided branches and rolls back the
// undecided ones at once (no grace: n1 can no longer log a decision),
// releases the log clean, and never touches n3's.
func TestTakeoverResolvesADeadNode(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			const ttl = time.Second
			// n1's clock is three minutes behind the database's (and
			// n2's): its transactions began "before its log was
			// created" by their stamps, not by the database's clock.
			n1Clock := func() time.Time { return time.Now().Add(-3 * time.Minute) }
			store := func(holder string, clock func() time.Time) *sqllog.Store {
				return newStore(t, db, d, sqllog.Options{Holder: holder, LeaseTTL: ttl, Clock: clock})
			}
			s1, s2, s3 := store("n1-proc", n1Clock), store("n2-proc", nil), store("n3-proc", nil)
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			l2, err := s2.Create(ctx, newIdent(t, "n2"))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			l3, err := s3.Create(ctx, newIdent(t, "n3"))
			if err != nil {
				t.Fatal(err)
			}
			defer l3.Close()
			db0, db1 := memrm.NewDB(), memrm.NewDB()
			rm0, rm1 := memrm.New("maria", db0, nil), memrm.New("pg", db1, nil)

			now := time.Now()
			decided, _ := xa.NewGlobalID("n1", n1Clock())
			undecided, _ := xa.NewGlobalID("n1", n1Clock())
			live, _ := xa.NewGlobalID("n3", now)
			rec := xa.CommitRecord{ID: decided, Logged: now}
			for i, rm := range []*memrm.RM{rm0, rm1} {
				x := prepare(t, rm, l1.Identity(), decided, i, 1)
				rec.Branches = append(rec.Branches, xa.BranchRecord{RM: rm.Name(), XID: x})
				prepare(t, rm, l1.Identity(), undecided, i, 2)
				prepare(t, rm, l3.Identity(), live, i, 3)
			}
			if err := l1.LogCommit(ctx, rec); err != nil {
				t.Fatal(err)
			}
			died := time.Now()
			sqllog.Abandon(l1) // SIGKILL: no release, no more renewals

			var mu sync.Mutex
			var reports []recovery.TakeoverReport
			tk, err := recovery.NewTakeover(recovery.TakeoverConfig{Store: s2.Peers("n2", nil), Participants: []xa.ResourceManager{rm0, rm1},
				Interval: 100 * time.Millisecond, Report: func(r recovery.TakeoverReport) {
					mu.Lock()
					reports = append(reports, r)
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { tk.Run(rctx); close(done) }()
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				n := len(reports)
				mu.Unlock()
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no takeover within 30 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			<-done
			r := reports[0]
			t.Logf("takeover of %s: lease expired %v before, taken %v after the death, resolved in %v (%d scans): %d committed, %d rolled back, released %v, err %v",
				r.Node, r.ExpiredFor, r.Taken.Sub(died).Round(time.Millisecond), r.Resolved.Round(time.Millisecond), r.Scans, r.Committed, r.RolledBack, r.Released, r.Err)
			if len(reports) != 1 || r.Node != "n1" || r.Previous != "n1-proc" || !r.Released || r.Err != nil {
				t.Fatalf("reports %+v; want one, of n1, released clean", reports)
			}
			if r.Taken.Sub(died) < ttl-100*time.Millisecond {
				t.Fatalf("n1's log was taken %v after it died, before its lease (%v) could have expired", r.Taken.Sub(died), ttl)
			}
			if r.Committed != 2 || r.RolledBack != 2 || r.Aborted != 1 {
				t.Fatalf("the takeover committed %d and rolled back %d branches (%d aborts recorded); want 2, 2, 1", r.Committed, r.RolledBack, r.Aborted)
			}
			for i, mdb := range []*memrm.DB{db0, db1} {
				if _, c := mdb.Get(1); !c {
					t.Errorf("participant %d: the decided transaction's row is not committed", i)
				}
				if _, c := mdb.Get(2); c {
					t.Errorf("participant %d: the undecided transaction's row is committed", i)
				}
				p := mdb.Prepared()
				if len(p) != 1 || !p[0].Equal(xa.BranchRef{ID: live, Index: i, Log: l3.Identity().ID}.XID()) {
					t.Errorf("participant %d: prepared %v; want n3's live branch only", i, p)
				}
			}
			logs, err := s2.Logs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range logs {
				t.Logf("%s: %s by %s (%s) epoch %d, clean %v, %d commits, %d aborts", st.Identity.Node, st.State, st.Holder, st.Kind, st.Epoch, st.Clean, st.Commits, st.Aborts)
				switch st.Identity.Node {
				case "n1":
					if st.State != sqllog.StateFree || !st.Clean || st.Commits != 0 || st.Aborts != 1 || st.Epoch != 2 {
						t.Errorf("n1's log after the takeover: %+v", st)
					}
				case "n3":
					if st.State != sqllog.StateHeld || st.Holder != "n3-proc" || st.Epoch != 1 {
						t.Errorf("n3's log was touched: %+v", st)
					}
				}
			}
			evs, err := s2.Events(ctx, "n1", 0)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(evs, func(e sqllog.Event) bool { return e.Action == "takeover" })
			if i < 0 || evs[i].Holder != "n2-proc" || evs[i].Previous != "n1-proc" {
				t.Fatalf("no takeover by n2-proc recorded: %+v", evs)
			}
			t.Logf("recorded: %s", evs[i].Reason)
		})
	}
}

// TestLatePrepareAfterACleanRelease is the model's finding 5
// (docs/model.md, finding 5): n1's process is paused past its
// lease, n2 takes n1's log over, finds nothing in doubt and releases it
// clean; n1's process resumes, prepares a branch (prepares carry no
// epoch; its decision write would be refused), and dies for good. No node
// holds n1's log, and it was released clean: without a rescan the branch
// would stay prepared, holding its locks, until an operator acts. With
// Options.RescanReleased, n2 looks at the log again and rolls it back.
func TestLatePrepareAfterACleanRelease(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			const ttl = time.Second
			s1 := newStore(t, db, d, sqllog.Options{Holder: "n1-proc", LeaseTTL: ttl})
			s2 := newStore(t, db, d, sqllog.Options{Holder: "n2-proc", LeaseTTL: ttl, RescanReleased: 500 * time.Millisecond})
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			sqllog.Abandon(l1) // paused: no more renewals
			db0, db1 := memrm.NewDB(), memrm.NewDB()
			rm0, rm1 := memrm.New("maria", db0, nil), memrm.New("pg", db1, nil)
			reports := make(chan recovery.TakeoverReport, 100)
			tk, err := recovery.NewTakeover(recovery.TakeoverConfig{Store: s2.Peers("n2", nil), Participants: []xa.ResourceManager{rm0, rm1},
				Interval: 100 * time.Millisecond, Report: func(r recovery.TakeoverReport) { reports <- r }})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { tk.Run(rctx); close(done) }()
			defer func() { stop(); <-done }()
			select {
			case r := <-reports:
				if !r.Released || r.Err != nil {
					t.Fatalf("first takeover of n1's log: %+v; want released clean", r)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no takeover of n1's expired log within 30 s")
			}
			// n1's process resumes and prepares after the clean release.
			late, _ := xa.NewGlobalID("n1", time.Now())
			for i, rm := range []*memrm.RM{rm0, rm1} {
				prepare(t, rm, l1.Identity(), late, i, 5)
			}
			deadline := time.Now().Add(20 * time.Second)
			for len(db0.Prepared())+len(db1.Prepared()) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("branches prepared after n1's log was released clean are still prepared 20 s later: %v %v",
						db0.Prepared(), db1.Prepared())
				}
				time.Sleep(50 * time.Millisecond)
			}
			for i, mdb := range []*memrm.DB{db0, db1} {
				if _, c := mdb.Get(5); c {
					t.Errorf("participant %d: the late branch's row is committed", i)
				}
			}
		})
	}
}

// TestRescanDoesNotHoldThroughAnOutage: a rescan of a log released clean
// (Options.RescanReleased) releases it again after one scan even while a
// participant cannot be listed: held through the outage, the log's node
// could not start meanwhile. The next rescan looks at that participant.
func TestRescanDoesNotHoldThroughAnOutage(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s1 := newStore(t, db, d, sqllog.Options{Holder: "n1-proc", LeaseTTL: time.Second})
			s2 := newStore(t, db, d, sqllog.Options{Holder: "n2-proc", LeaseTTL: time.Second, RescanReleased: 300 * time.Millisecond})
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			sqllog.Abandon(l1)
			var down atomic.Bool
			rm0 := memrm.New("maria", memrm.NewDB(), nil)
			rm1 := memrm.New("pg", memrm.NewDB(), func(op memrm.Op, _ xa.XID) memrm.Fault {
				if op == memrm.OpRecover && down.Load() {
					return memrm.Fail
				}
				return memrm.OK
			})
			reports := make(chan recovery.TakeoverReport, 100)
			tk, err := recovery.NewTakeover(recovery.TakeoverConfig{Store: s2.Peers("n2", nil), Participants: []xa.ResourceManager{rm0, rm1},
				Interval: 100 * time.Millisecond, Report: func(r recovery.TakeoverReport) { reports <- r }})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { tk.Run(rctx); close(done) }()
			defer func() { stop(); <-done }()
			next := func(what string) recovery.TakeoverReport {
				t.Helper()
				select {
				case r := <-reports:
					return r
				case <-time.After(15 * time.Second):
					t.Fatalf("no %s within 15 s", what)
				}
				return recovery.TakeoverReport{}
			}
			if r := next("takeover of n1's expired log"); !r.Released || r.Err != nil {
				t.Fatalf("first takeover: %+v; want released clean", r)
			}
			down.Store(true) // pg cannot be listed from now on
			for i := 0; i < 2; i++ {
				if r := next("rescan released during pg's outage"); !r.Released || r.Err != nil {
					t.Fatalf("rescan %d during the outage: %+v; want released clean after one scan", i+1, r)
				}
			}
		})
	}
}
