package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// skewed returns a clock ahead of this machine's by more than any grace.
func skewed() func() time.Time { return func() time.Time { return time.Now().Add(time.Hour) } }

// stallingLog holds the coordinator's first decision write: it calls
// before (with the decision not yet written) and after (with it durable)
// around it, as a stalled fsync or a GC pause would let a scanner run.
type stallingLog struct {
	e2eLog
	before, after func()
	once          sync.Once
}

func (l *stallingLog) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	first := false
	l.once.Do(func() { first = true })
	if first && l.before != nil {
		l.before()
	}
	err := l.e2eLog.LogCommit(ctx, rec)
	if first && l.after != nil {
		l.after()
	}
	return err
}

// TestScanBetweenPrepareAndDecision is the interleaving the review
// reproduced against real servers: both branches prepared, the decision
// write stalls, and a scanner whose clock runs ahead scans in between. It
// records the abort first and rolls back what it can; the coordinator's
// decision is then refused by the log, it rolls back the rest and reports
// aborted. Before the fence the decision was written after the rollback,
// "unknown XID" on phase 2 read as committed, and the caller was told
// committed with rows absent (or half of them). The other order — the
// decision lands first — commits both, with the scanner's help.
func TestScanBetweenPrepareAndDecision(t *testing.T) {
	t.Parallel()
	for _, scanFirst := range []bool{true, false} {
		name := "scan-first"
		if !scanFirst {
			name = "decision-first"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 2)
			ctx := context.Background()
			my, pg := b.rms()
			log := b.openLog()
			t.Cleanup(func() { log.Close() })
			sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Now: skewed()})
			if err != nil {
				t.Fatal(err)
			}
			var rep recovery.Report
			scan := func() {
				var err error
				if rep, err = sc.Scan(ctx); err != nil {
					t.Error(err)
				}
			}
			sl := &stallingLog{e2eLog: log}
			if scanFirst {
				sl.before = scan
			} else {
				sl.after = scan
			}
			mgr, err := xa.NewManager(xa.Config{Node: b.node, Log: sl, Timeout: b.timeout,
				Phase2Attempts: testPhase2Attempts, Phase2Timeout: testPhase2Timeout})
			if err != nil {
				t.Fatal(err)
			}
			res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
				return bank.Do(ctx, tx, my, pg, bank.Transfer{From: 0, To: 1, Amount: 10, ToPostgres: true})
			})
			t.Logf("told: %+v, %v", res, err)
			for _, br := range rep.Branches {
				t.Logf("scan: %s %s verdict=%v done=%v err=%v", br.Participant, br.Prepared.XID, br.Verdict, br.Done, br.Err)
			}
			var committed []string
			switch {
			case scanFirst:
				if !errors.Is(err, xa.ErrAborted) || !errors.Is(err, xa.ErrAbortRecorded) {
					t.Fatalf("the scan recorded an abort first: told %v, want aborted because of the recorded abort", err)
				}
				// The scan's abort is recorded; whether it or the
				// coordinator (aborting at once) rolled the MariaDB branch
				// back is a race either may win.
				if _, ok, err := log.LookupAbort(ctx, res.ID); err != nil || !ok {
					t.Fatalf("no abort recorded after the scan claimed the decision's key (%v)", err)
				}
			default:
				if err != nil || !res.Committed {
					t.Fatalf("the decision landed first: told %v, want committed", err)
				}
				if len(rep.Aborted) != 0 {
					t.Fatalf("the scan recorded an abort after the decision: %v", rep.Aborted)
				}
				committed = []string{res.ID.String()}
			}
			log.Close()
			b.recoverAll(0)
			b.check(committed)
		})
	}
}

// TestClockAheadScannerUnderLoad: a scanner whose clock runs ahead by more
// than the grace period (an hour) scans every few milliseconds beside a
// busy coordinator for a minute (XA_FENCE_SECONDS to change), half of the
// transfers taking the decision in PostgreSQL as the last resource. It
// presumes abort of nearly every MariaDB branch it sees. Spurious aborts
// are allowed and counted; what must hold is that every transfer the
// caller was told is committed is in both databases, none is in one only,
// and the totals are unchanged.
func TestClockAheadScannerUnderLoad(t *testing.T) {
	t.Parallel()
	seconds := 60
	if s := os.Getenv("XA_FENCE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("XA_FENCE_SECONDS=%q: %v", s, err)
		}
		seconds = n
	}
	b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 20)
	ctx := context.Background()
	// Transactions linger where a stalled disk or a GC pause would hold
	// them: some decision writes stall, and some PostgreSQL commits and
	// prepares (deferred triggers run there) take a while.
	conn, err := pgx.Connect(ctx, b.pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE FUNCTION jitter() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF random() < 0.25 THEN PERFORM pg_sleep(random() * 0.15); END IF; RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER jitter AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jitter()",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	my, pg := b.rms()
	_, pgLast := b.rms(true)
	log := b.openLog()
	t.Cleanup(func() { log.Close() })
	mgr, err := xa.NewManager(xa.Config{Node: b.node, Log: &jitterLog{e2eLog: log}, Timeout: b.timeout,
		Phase2Attempts: testPhase2Attempts, Phase2Timeout: testPhase2Timeout})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pgLast}, Log: log, Now: skewed()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	defer stop()
	var scans, fenced, rolledBack, lostRace atomic.Int64
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		for runCtx.Err() == nil {
			rep, err := sc.Scan(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			scans.Add(1)
			fenced.Add(int64(len(rep.Aborted)))
			for _, br := range rep.Branches {
				switch {
				case br.Verdict == recovery.Rollback && br.Done && br.Reason == "":
					rolledBack.Add(1)
				case br.Verdict == recovery.Commit && br.Done:
					lostRace.Add(1)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	const workers = 8
	var mu sync.Mutex
	var committed []string
	var abortedByFence, abortedOther, unknown atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(11, uint64(w)))
			for i := 0; runCtx.Err() == nil; i++ {
				tr := bank.Random(r, b.accounts)
				p := pg
				if i%2 == 1 {
					p = pgLast
				}
				res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error { return bank.Do(ctx, tx, my, p, tr) })
				switch {
				case err == nil:
					mu.Lock()
					committed = append(committed, res.ID.String())
					mu.Unlock()
				case errors.Is(err, xa.ErrAbortRecorded):
					abortedByFence.Add(1)
				case errors.Is(err, xa.ErrAborted):
					abortedOther.Add(1)
				case xa.OutcomeUnknown(err):
					unknown.Add(1)
				default:
					t.Errorf("an error of no known kind: %v", err)
				}
			}
		}(w)
	}
	wg.Wait()
	<-scanDone
	t.Logf("%ds: %d told committed, %d aborted by the fence (spurious), %d aborted otherwise (deadlocks, timeouts), %d outcome unknown; "+
		"the skewed scanner ran %d scans, recorded %d presumed aborts, rolled back %d branches itself, lost the race to a commit %d times",
		seconds, len(committed), abortedByFence.Load(), abortedOther.Load(), unknown.Load(),
		scans.Load(), fenced.Load(), rolledBack.Load(), lostRace.Load())
	if len(committed) == 0 || abortedByFence.Load() == 0 || lostRace.Load() == 0 {
		t.Fatalf("the run did not exercise the race both ways: %d committed, %d coordinators lost to a recorded abort, %d scans lost to a commit",
			len(committed), abortedByFence.Load(), lostRace.Load())
	}
	log.Close()
	b.recoverAll(0)
	b.check(committed)
}

// jitterLog stalls one decision write in four for up to 150 ms.
type jitterLog struct {
	e2eLog
}

func (l *jitterLog) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	if rand.IntN(4) == 0 {
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
	}
	return l.e2eLog.LogCommit(ctx, rec)
}

// TestLastResourceCommitInFlight: PostgreSQL is the last resource and its
// one-phase commit is still running on the server (a deferred constraint
// trigger sleeps), so its decision row is not visible yet. A scanner with
// its clock ahead sees the MariaDB branch, prepared and "old", and no
// decision. It must not read "no row" as abort: its abort marker waits for
// the commit in flight. If that commit wins, the scanner commits; if it
// fails, the scanner's abort stands and the coordinator reports aborted.
// Either way both databases agree with what the caller was told.
func TestLastResourceCommitInFlight(t *testing.T) {
	t.Parallel()
	for _, commitFails := range []bool{false, true} {
		name := "commit-wins"
		if commitFails {
			name = "commit-fails"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 2)
			ctx := context.Background()
			// 0.7 s: within Phase2Timeout, which bounds the commit.
			body := "PERFORM pg_sleep(0.7); RETURN NULL;"
			if commitFails {
				body = "PERFORM pg_sleep(0.7); RAISE EXCEPTION 'refused at commit';"
			}
			conn, err := pgx.Connect(ctx, b.pg.DSN())
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				"CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " + body + " END $$",
				"CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()",
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			conn.Close(ctx)
			my, pg := b.rms(true)
			mgr, log := b.manager(b.timeout)
			sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Now: skewed()})
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				res xa.Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
					return bank.Do(ctx, tx, my, pg, bank.Transfer{From: 0, To: 1, Amount: 10, ToPostgres: true})
				})
				done <- result{res, err}
			}()
			// Wait until the commit is in flight: the MariaDB branch is
			// prepared and PostgreSQL is inside the trigger.
			deadline := time.Now().Add(10 * time.Second)
			for {
				rep, err := sc.Plan(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// Ours: the shared server lists other tests' branches too.
				if slices.ContainsFunc(rep.Branches, func(b recovery.Branch) bool {
					return b.Verdict != recovery.Foreign && b.Verdict != recovery.OtherNode
				}) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the MariaDB branch never appeared prepared")
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			began := time.Now()
			rep, err := sc.Scan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			scanTook := time.Since(began)
			r := <-done
			t.Logf("scan took %v; aborted %v; told %+v, %v", scanTook, rep.Aborted, r.res, r.err)
			for _, br := range rep.Branches {
				t.Logf("scan: %s %s verdict=%v done=%v err=%v", br.Participant, br.Prepared.XID, br.Verdict, br.Done, br.Err)
			}
			if scanTook < 250*time.Millisecond {
				t.Errorf("the scan took %v: it did not wait for the commit in flight", scanTook)
			}
			var committed []string
			if commitFails {
				if !errors.Is(r.err, xa.ErrAborted) {
					t.Fatalf("the commit failed: told %v, want aborted", r.err)
				}
				// The scan's abort is recorded; whether it or the
				// coordinator (aborting at once) rolled the MariaDB branch
				// back is a race either may win.
				if _, ok, err := log.LookupAbort(ctx, r.res.ID); err != nil || !ok {
					t.Fatalf("no abort recorded after the scan claimed the decision's key (%v)", err)
				}
			} else {
				if r.err != nil {
					t.Fatalf("the commit won: told %v, want committed", r.err)
				}
				if _, ok, _ := log.LookupAbort(ctx, r.res.ID); ok || len(rep.Aborted) != 0 {
					t.Fatalf("the scan recorded an abort of a committed transaction: %v", rep.Aborted)
				}
				committed = []string{r.res.ID.String()}
			}
			log.Close()
			b.recoverAll(0)
			b.check(committed)
		})
	}
}
