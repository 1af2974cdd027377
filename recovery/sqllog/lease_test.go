package sqllog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// newIdent returns a fresh identity for node, with a 30 s timeout.
func newIdent(t *testing.T, node string) xa.LogIdentity {
	t.Helper()
	ident, err := xa.NewLogIdentity(node, 30*time.Second, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ident
}

// record returns a two-branch commit record of a transaction of l's node
// begun at begun.
func record(t *testing.T, l *sqllog.Log, begun time.Time) xa.CommitRecord {
	t.Helper()
	id, err := xa.NewGlobalID(l.Identity().Node, begun)
	if err != nil {
		t.Fatal(err)
	}
	rec := xa.CommitRecord{ID: id, Logged: begun}
	for i, rm := range []string{"maria", "pg"} {
		rec.Branches = append(rec.Branches, xa.BranchRecord{RM: rm, XID: xa.BranchRef{ID: id, Index: i, Log: l.Identity().ID}.XID()})
	}
	return rec
}

// TestOpenNeverCreates: a database without the tables, or without the
// node's log, is no log (ErrNoLog), for the owner and for xactl; a second
// Create for a node is refused (ErrExist) and changes nothing; tables of
// another schema version are refused (ErrSchema).
func TestOpenNeverCreates(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s := newStore(t, db, d, sqllog.Options{})
			if _, err := s.Open(ctx, "n1"); !errors.Is(err, sqllog.ErrNoLog) {
				t.Fatalf("Open of an empty database: %v; want ErrNoLog", err)
			}
			if _, err := s.Observe(ctx, "n1"); !errors.Is(err, sqllog.ErrNoLog) {
				t.Fatalf("Observe of an empty database: %v; want ErrNoLog", err)
			}
			if v, err := s.Version(ctx); !errors.Is(err, sqllog.ErrNoLog) {
				t.Fatalf("Version of an empty database: %d, %v; want ErrNoLog", v, err)
			}
			ident := newIdent(t, "n1")
			l, err := s.Create(ctx, ident)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, err := s.Open(ctx, "n2"); !errors.Is(err, sqllog.ErrNoLog) {
				t.Fatalf("Open of a node without a log: %v; want ErrNoLog", err)
			}
			if _, err := s.Create(ctx, newIdent(t, "n1")); !errors.Is(err, sqllog.ErrExist) {
				t.Fatalf("a second Create for n1: %v; want ErrExist", err)
			}
			o, err := s.Observe(ctx, "n1")
			if err != nil {
				t.Fatal(err)
			}
			if got := o.Identity(); got.ID != ident.ID || got.Node != "n1" {
				t.Fatalf("after the refused Create, n1's log is %v, want %v", got.ID, ident.ID)
			}
			if _, err := db.Exec(`UPDATE xa_log_schema SET version = 99`); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Observe(ctx, "n1"); !errors.Is(err, sqllog.ErrSchema) {
				t.Fatalf("Observe of tables of version 99: %v; want ErrSchema", err)
			}
		})
	}
}

// TestLeaseIsExclusive: a second process opening a node's log while the
// first holds its lease waits, then fails with ErrLeaseHeld naming the
// holder; once the first closes (releases), the second takes it at the
// next epoch.
func TestLeaseIsExclusive(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s1 := newStore(t, db, d, sqllog.Options{Holder: "first"})
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			e1, _ := l1.Epoch()
			s2 := newStore(t, db, d, sqllog.Options{Holder: "second", LeaseWait: 300 * time.Millisecond})
			if _, err := s2.Open(ctx, "n1"); !errors.Is(err, sqllog.ErrLeaseHeld) || !strings.Contains(err.Error(), "first") {
				t.Fatalf("a second Open while the lease is held: %v; want ErrLeaseHeld naming the holder", err)
			}
			if _, err := s2.TakeOverNode(ctx, "n1", sqllog.TakeoverOptions{Manual: true}); !errors.Is(err, sqllog.ErrLeaseHeld) {
				t.Fatalf("a takeover of a live lease: %v; want ErrLeaseHeld", err)
			}
			if err := l1.Close(); err != nil {
				t.Fatal(err)
			}
			l2, err := s2.Open(ctx, "n1")
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if e2, _ := l2.Epoch(); e2 != e1+1 {
				t.Fatalf("epoch after a release and a new Open: %d, want %d", e2, e1+1)
			}
		})
	}
}

// TestFenceRefusedByTheDatabase: a holder that has not noticed its lease
// was taken over (paused past it, or cut off) writes a batch: the database
// refuses it in the batch's statement, because the log's epoch moved on;
// the coordinator hears xa.ErrFenced, never success, and nothing is
// logged. The holder learns it from the refusal.
func TestFenceRefusedByTheDatabase(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s1 := newStore(t, db, d, sqllog.Options{Holder: "zombie", LeaseTTL: time.Minute})
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			defer l1.Close()
			if err := l1.LogCommit(ctx, record(t, l1, time.Now())); err != nil {
				t.Fatal(err)
			}
			expire(t, db, d, l1)
			s2 := newStore(t, db, d, sqllog.Options{Holder: "survivor", LeaseTTL: time.Minute})
			l2, err := s2.TakeOverNode(ctx, "n1", sqllog.TakeoverOptions{Reason: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if _, lost := l1.Epoch(); lost {
				t.Fatal("the zombie knows of the takeover before writing: the database's refusal would not be tested")
			}
			var wg sync.WaitGroup
			errs := make([]error, 16)
			recs := make([]xa.CommitRecord, 16)
			for i := range errs {
				recs[i] = record(t, l1, time.Now())
				wg.Go(func() { errs[i] = l1.LogCommit(ctx, recs[i]) })
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, xa.ErrFenced) || xa.OutcomeUnknown(err) {
					t.Fatalf("the zombie's LogCommit %d after the takeover: %v; want xa.ErrFenced", i, err)
				}
				if _, ok, err := l2.Lookup(ctx, recs[i].ID); ok || err != nil {
					t.Fatalf("a refused commit record is in the log (%v, %v)", ok, err)
				}
			}
			t.Logf("refused: %v", errs[0])
			if _, lost := l1.Epoch(); !lost {
				t.Fatal("the zombie did not learn from the refusal that it lost the log")
			}
			if p, why, err := l1.Presumption(ctx); err != nil || p != recovery.PresumeNever {
				t.Fatalf("the zombie's recovery may presume abort: %v %q %v", p, why, err)
			}
			if p, _, err := l2.Presumption(ctx); err != nil || p != recovery.PresumeNow {
				t.Fatalf("the taker's presumption: %v, %v; want now", p, err)
			}
		})
	}
}

// TestTakeoverWaitsForWritesInFlight: a takeover's new epoch waits for
// every write that holds the log's row under the old one (a batch in
// flight), and every write after it is refused: a commit is either in the
// log before the takeover's epoch, or refused.
func TestTakeoverWaitsForWritesInFlight(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s1 := newStore(t, db, d, sqllog.Options{Holder: "old", LeaseTTL: time.Minute})
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			defer l1.Close()
			expire(t, db, d, l1)
			// A write in flight: the row share-locked, not committed.
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			lock := `SELECT epoch FROM xa_log_logs WHERE log_id = ? LOCK IN SHARE MODE`
			if d == sqllog.Postgres {
				lock = `SELECT epoch FROM xa_log_logs WHERE log_id = $1 FOR SHARE`
			}
			var e int64
			if err := tx.QueryRowContext(ctx, lock, l1.Identity().ID.String()).Scan(&e); err != nil {
				t.Fatal(err)
			}
			s2 := newStore(t, db, d, sqllog.Options{Holder: "new", LeaseTTL: time.Minute})
			took := make(chan error, 1)
			var l2 *sqllog.Log
			go func() {
				var err error
				l2, err = s2.TakeOverNode(ctx, "n1", sqllog.TakeoverOptions{})
				took <- err
			}()
			select {
			case err := <-took:
				t.Fatalf("the takeover did not wait for the write in flight: %v", err)
			case <-time.After(500 * time.Millisecond):
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-took; err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if e2, _ := l2.Epoch(); e2 != e+1 {
				t.Fatalf("the taker's epoch: %d, want %d", e2, e+1)
			}
		})
	}
}

// TestNodeClockOff: a node whose clock is five minutes behind (or ahead
// of) the database's stamps its transactions' begin with it. The log
// checks their deadline by the database's clock, with the offset measured
// at the lease's acquisition: a transaction in time is logged, one past
// its timeout is refused (xa.ErrDecisionTooLate), however wrong the
// node's clock.
func TestNodeClockOff(t *testing.T) {
	for _, kind := range kinds {
		for _, skew := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
			t.Run(kind+"/"+skew.String(), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				db, d, _ := newDB(t, kind)
				clock := func() time.Time { return time.Now().Add(skew) }
				s := newStore(t, db, d, sqllog.Options{Clock: clock})
				l, err := s.Create(ctx, newIdent(t, "n1"))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				if err := l.LogCommit(ctx, record(t, l, clock())); err != nil {
					t.Fatalf("a transaction in time, begun by a clock %v off: %v", skew, err)
				}
				late := record(t, l, clock().Add(-31*time.Second))
				if err := l.LogCommit(ctx, late); !errors.Is(err, xa.ErrDecisionTooLate) {
					t.Fatalf("a transaction past its 30 s timeout, by a clock %v off: %v; want ErrDecisionTooLate", skew, err)
				}
			})
		}
	}
}

// TestGroupCommit: concurrent LogCommit calls share database transactions,
// and with Options.Pipeline 2 batches overlap (the next is sent while the
// previous commits).
func TestGroupCommit(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s := newStore(t, db, d, sqllog.Options{Pipeline: 2})
			l, err := s.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			const writers, each = 64, 20
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for range writers {
				wg.Go(func() {
					for range each {
						rec := record(t, l, time.Now())
						if err := l.LogCommit(ctx, rec); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							return
						}
						l.Forget(ctx, rec.ID) //nolint:errcheck
					}
				})
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatal(errors.Join(errs...))
			}
			st := l.Stats()
			t.Logf("%d records in %d batches (%.1f per batch), at most %d batches in flight", st.Records, st.Batches, float64(st.Records)/float64(st.Batches), st.MaxInflight)
			if st.Records != writers*each || st.Batches*2 > st.Records {
				t.Fatalf("%d records in %d batches: concurrent commits did not share transactions", st.Records, st.Batches)
			}
			if st.MaxInflight < 2 {
				t.Fatalf("at most %d batch in flight: no pipelining", st.MaxInflight)
			}
			// The forgets ride along, or go on their own shortly after.
			deadline := time.Now().Add(5 * time.Second)
			for {
				recs, err := l.Commits(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM xa_log_decisions`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 && n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d records (%d rows) left after every forget", len(recs), n)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestNodeComesBackWithNewEpoch: a node's lease is taken over while it is
// paused; its next write is refused, and it learns it lost the log; the
// process that took the log over recovers and releases it; the node then
// takes it back at a new epoch by itself and its decisions are logged
// again.
func TestNodeComesBackWithNewEpoch(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, d, _ := newDB(t, kind)
			s1 := newStore(t, db, d, sqllog.Options{Holder: "node", LeaseTTL: time.Second})
			l1, err := s1.Create(ctx, newIdent(t, "n1"))
			if err != nil {
				t.Fatal(err)
			}
			defer l1.Close()
			e1, _ := l1.Epoch()
			expire(t, db, d, l1)
			s2 := newStore(t, db, d, sqllog.Options{Holder: "survivor", LeaseTTL: time.Second})
			l2, err := s2.TakeOverNode(ctx, "n1", sqllog.TakeoverOptions{Reason: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if err := l1.LogCommit(ctx, record(t, l1, time.Now())); !errors.Is(err, xa.ErrFenced) {
				t.Fatalf("LogCommit after the takeover: %v, want ErrFenced", err)
			}
			time.Sleep(1500 * time.Millisecond) // the node keeps trying; the taker holds on
			if _, lost := l1.Epoch(); !lost {
				t.Fatal("the node took its log back while the taker held it")
			}
			if err := l2.Release(ctx, true); err != nil {
				t.Fatal(err)
			}
			l2.Close()
			deadline := time.Now().Add(5 * time.Second)
			for {
				e, lost := l1.Epoch()
				if !lost && e > e1+1 {
					t.Logf("back at epoch %d (was %d, the taker's %d)", e, e1, e1+1)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the node did not take its log back: epoch %d lost %v", e, lost)
				}
				time.Sleep(50 * time.Millisecond)
			}
			rec := record(t, l1, time.Now())
			if err := l1.LogCommit(ctx, rec); err != nil {
				t.Fatalf("LogCommit after taking the log back: %v", err)
			}
			evs, err := s1.Events(ctx, "n1", 0)
			if err != nil {
				t.Fatal(err)
			}
			var actions []string
			for _, e := range evs {
				actions = append(actions, e.Action+"@"+e.Holder+e.Previous)
			}
			t.Logf("events: %v", actions)
			if len(evs) != 5 || evs[2].Action != "takeover" || evs[2].Holder != "survivor" || evs[2].Previous != "node" ||
				evs[3].Action != "release" || evs[4].Action != "acquire" || evs[4].Holder != "node" {
				t.Fatalf("events %v; want init, acquire by node, takeover by survivor, release, acquire by node", actions)
			}
		})
	}
}
