package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

var errPoison = errors.New("transfer made to fail in the middle")

// TestBankInvariant: many goroutines transfer between accounts in MariaDB
// and PostgreSQL; some transfers fail in the middle (after the MariaDB
// side wrote), and a recovery scanner runs all along with a grace period
// barely longer than the timeout. It may commit logged branches alongside
// the coordinator (harmless) but must roll back none. Afterwards the total over both databases
// is unchanged, every transfer reported committed is in both ledgers, no
// transfer is in one only, nothing is left prepared, and the scanner
// rolled back none of the live transactions (no abort beyond the poisoned
// ones).
func TestBankInvariant(t *testing.T) {
	t.Parallel()
	for _, last := range []bool{false, true} {
		name := "log"
		if last {
			name = "last-resource" // PostgreSQL takes the decisions
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testBankInvariant(t, last)
		})
	}
}

func testBankInvariant(t *testing.T, last bool) {
	b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 10)
	ctx := context.Background()
	my, pg := b.rms(last)
	timeout := 5 * time.Second
	b.timeout = timeout
	mgr, log := b.manager(timeout)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Nodes: []string{b.node}, Grace: timeout + time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var scans, recovered atomic.Int64
	_, stopScan, err := sc.Start(ctx, 50*time.Millisecond, func(rep recovery.Report, err error) {
		scans.Add(1)
		for _, br := range rep.Branches {
			switch {
			case br.Done && br.Verdict == recovery.Rollback:
				t.Errorf("the scanner rolled back %s of a live transaction", br.Prepared.XID)
			case br.Done:
				// Committing a logged decision next to its live
				// coordinator is harmless: both drive it to commit.
				recovered.Add(1)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	const workers, perWorker = 16, 40
	var mu sync.Mutex
	var committed []string
	var poisoned, aborted, otherErr atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(7, uint64(w)))
			// Go on until the scanner has run beside the workload a few
			// times, however fast the transfers are.
			for i := 0; i < perWorker || scans.Load() < 4 && i < 20*perWorker; i++ {
				tr := bank.Random(r, b.accounts)
				poison := r.IntN(8) == 0
				res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
					if err := bank.Do(ctx, tx, my, pg, tr); err != nil {
						return err
					}
					if poison {
						return errPoison
					}
					return nil
				})
				switch {
				case err == nil:
					mu.Lock()
					committed = append(committed, res.ID.String())
					mu.Unlock()
				case errors.Is(err, errPoison) && errors.Is(err, xa.ErrAborted):
					poisoned.Add(1)
				case errors.Is(err, xa.ErrAborted):
					aborted.Add(1)
					t.Logf("aborted: %v", err)
				default:
					otherErr.Add(1)
					t.Logf("error: %v", err)
				}
			}
		}(w)
	}
	wg.Wait()
	stopScan()
	t.Logf("%d committed, %d poisoned, %d aborted, %d other errors, %d scans (%d logged branches committed alongside the coordinator)",
		len(committed), poisoned.Load(), aborted.Load(), otherErr.Load(), scans.Load(), recovered.Load())
	if poisoned.Load() == 0 || len(committed) < workers*perWorker/2 {
		t.Fatalf("the workload did not exercise both paths: %d committed, %d poisoned", len(committed), poisoned.Load())
	}
	if aborted.Load()+otherErr.Load() > 0 {
		t.Errorf("%d transfers aborted or failed for no reason of the test's: false aborts", aborted.Load()+otherErr.Load())
	}
	if scans.Load() < 3 {
		t.Errorf("the scanner ran only %d times", scans.Load())
	}
	b.check(committed)
	// A record whose branch the scanner committed alongside its
	// coordinator is the scanner's to forget (the coordinator's "unknown
	// XID" on it is no acknowledgement on its own session), once a listing
	// taken after the record was read lacks its branches: a scan or two
	// after the workload, as the periodic scanner would run.
	recs, _ := log.Commits(ctx)
	for i := 0; i < 3 && len(recs) > 0; i++ {
		if _, err := sc.Scan(ctx); err != nil {
			t.Fatal(err)
		}
		recs, _ = log.Commits(ctx)
	}
	if len(recs) != 0 {
		t.Errorf("%d decision records left after every transaction finished and three more scans", len(recs))
	}
	if last {
		// The decisions stored in PostgreSQL: one per two-phase
		// transfer, pruned by a scan once its branches are gone. Other
		// tests share the MariaDB server, and a branch of theirs
		// committed between the two readings of UnlistedPrepared makes
		// a scan keep records once: a few scans, as the periodic
		// scanner would run them, must prune everything.
		const scans = 15
		var kept []recovery.KeptRecord
		for range scans {
			rep, err := sc.Scan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kept = rep.Kept
			if decs, _ := pg.Decisions(ctx); len(decs) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if decs, _ := pg.Decisions(ctx); len(decs) != 0 {
			t.Errorf("%d stored decisions left after %d scans; the last kept %d: %+v", len(decs), scans, len(kept), kept)
		}
	} else if log.SyncCount() == 0 {
		t.Error("the log was never written")
	}
}

// TestCrossDatabaseDeadlock: T1 locks a row in PostgreSQL then wants one in
// MariaDB; T2 holds that MariaDB row and wants T1's PostgreSQL row. Neither
// database sees the cycle; the global timeout breaks it: one transaction
// aborts at its timeout, the other then commits, both within their
// timeouts, balances intact.
func TestCrossDatabaseDeadlock(t *testing.T) {
	t.Parallel()
	b := newBank(t, dbtest.MySQLDB(t), dbtest.PostgresDB(t), 2)
	ctx := context.Background()
	my, pg := b.rms()
	timeout := 2 * time.Second
	mgr, _ := b.manager(timeout)

	t1Holds, t2Holds := make(chan struct{}), make(chan struct{})
	type result struct {
		err   error
		spent time.Duration
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // T1: PostgreSQL row 0, then MariaDB row 0.
		defer wg.Done()
		began := time.Now()
		_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
			p, err := pg.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			if _, err := p.Exec(ctx, "UPDATE accounts SET balance = balance + 5 WHERE id = 0"); err != nil {
				return err
			}
			close(t1Holds)
			<-t2Holds
			m, err := my.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			_, err = m.ExecContext(ctx, "UPDATE accounts SET balance = balance - 5 WHERE id = 0")
			return err
		})
		results[0] = result{err, time.Since(began)}
	}()
	go func() { // T2: MariaDB row 0, then PostgreSQL row 0.
		defer wg.Done()
		<-t1Holds
		time.Sleep(200 * time.Millisecond) // T1 is older: it times out first
		began := time.Now()
		_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
			m, err := my.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			if _, err := m.ExecContext(ctx, "UPDATE accounts SET balance = balance + 7 WHERE id = 0"); err != nil {
				return err
			}
			close(t2Holds)
			p, err := pg.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			_, err = p.Exec(ctx, "UPDATE accounts SET balance = balance - 7 WHERE id = 0")
			return err
		})
		results[1] = result{err, time.Since(began)}
	}()
	wg.Wait()
	for i, r := range results {
		t.Logf("T%d: %v after %v", i+1, r.err, r.spent)
		if r.spent > timeout+time.Second {
			t.Errorf("T%d took %v with a %v timeout", i+1, r.spent, timeout)
		}
	}
	if !errors.Is(results[0].err, xa.ErrAborted) || !errors.Is(results[0].err, xa.ErrTimeout) {
		t.Errorf("T1: %v; want aborted by the timeout", results[0].err)
	}
	if results[1].err != nil {
		t.Errorf("T2: %v; want committed once T1 let go", results[1].err)
	}
	st := b.check(nil)
	if st.MySQLTotal != 2*bank.Initial+7 || st.PGTotal != 2*bank.Initial-7 {
		t.Errorf("totals mysql %d, postgres %d: want T2's transfer only", st.MySQLTotal, st.PGTotal)
	}
}
