package mysql

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// Rollback of a prepared branch with the context the branch was started
// with: Rollback ends the branch's work context first (which consumes the
// guard's standing callback on it), then sends XA ROLLBACK under that same
// context. When the context ends while XA ROLLBACK waits (the server holds
// commits), the command must be interrupted and Rollback return
// ErrRetryable within about a second, as it does for any other context.
// Commit under that context (work still running) is bounded by it too.
func TestRollbackUnderStartContextBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	rollbackListedAtEnd(t, raw)
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	rm := openRM(t, db.DSN())

	for i, how := range []string{"another context", "Start's context", "Commit, Start's context"} {
		t.Run(how, func(t *testing.T) {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			b, err := rm.Start(sctx, newXID(t))
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, 1)", i+1)
			if v, err := b.Prepare(ctx); v != xa.VotePrepared {
				t.Fatalf("Prepare: %v %v", v, err)
			}
			release := holdCommits(t, raw)
			rctx := sctx
			if how == "another context" {
				var rcancel context.CancelFunc
				rctx, rcancel = context.WithCancel(ctx)
				defer rcancel()
				time.AfterFunc(300*time.Millisecond, rcancel)
			} else {
				time.AfterFunc(300*time.Millisecond, cancel)
			}
			t0 := time.Now()
			done := make(chan error, 1)
			go func() {
				if how == "Commit, Start's context" {
					done <- b.Commit(rctx)
					return
				}
				done <- b.Rollback(rctx)
			}()
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				release()
				err = <-done
				t.Fatalf("Rollback still waiting 5 s after its context ended (returned %v once commits were released)", err)
			}
			took := time.Since(t0)
			release()
			if !xa.Retryable(err) || took > 1500*time.Millisecond {
				t.Fatalf("after %v: %v, want ErrRetryable within about a second", took, err)
			}
			if how == "Commit, Start's context" {
				if err := b.Commit(ctx); err != nil {
					t.Fatalf("second Commit: %v", err)
				}
				return
			}
			if err := b.Rollback(ctx); err != nil {
				t.Fatalf("second Rollback: %v", err)
			}
		})
	}
}

// A context that ends at any moment around a statement's end must never
// interrupt what the session runs next under other contexts: the branch's
// XA END / XA PREPARE and XA COMMIT, or, after the session went back to
// the pool (one connection), statements and commands of the next branch,
// which reuses the very same context value for Start. Run with -race.
func TestGuardStaleContextStress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 0), (2, 0)")
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 1 })
	n := 150
	if testing.Short() {
		n = 40
	}
	rng := rand.New(rand.NewPCG(1, 2))
	interrupted, committed := 0, 0
	for i := range n {
		// The caller's context: Start's context in half the rounds.
		actx, acancel := context.WithCancel(ctx)
		startCtx := ctx
		if i%2 == 0 {
			startCtx = actx
		}
		b, err := rm.Start(startCtx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		c := conn(b)
		delay := time.Duration(rng.IntN(1500)) * time.Microsecond
		time.AfterFunc(delay, acancel)
		_, err = c.ExecContext(actx, "UPDATE kv SET v = v + 1 WHERE k = 1")
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: statement: %v", i, err)
			}
			interrupted++
		}
		if startCtx == actx {
			// The branch's work ended with actx: nothing more to do.
			if err := b.Rollback(ctx); err != nil {
				t.Fatalf("round %d: Rollback: %v", i, err)
			}
			acancel()
			continue
		}
		// More work, under another context, while actx may still end.
		if _, err := c.ExecContext(ctx, "UPDATE kv SET v = v + 1 WHERE k = 2"); err != nil {
			t.Fatalf("round %d: statement under another context: %v", i, err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := b.Prepare(pctx)
		pcancel()
		if v != xa.VotePrepared {
			t.Fatalf("round %d: Prepare: %v %v", i, v, err)
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatalf("round %d: Commit: %v", i, err)
		}
		committed++
		acancel()
	}
	t.Logf("%d rounds, %d statements interrupted, %d committed", n, interrupted, committed)
}

// A context the application defines as a struct value holding a slice is
// a valid context.Context that Go cannot compare with ==. The guard must
// not panic when one bounds two statements in a row.
type taggedCtx struct {
	context.Context
	tags []string
}

func TestNonComparableContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 1)")
	rm := openRM(t, db.DSN())
	for _, how := range []string{"statement context", "Start's context"} {
		t.Run(how, func(t *testing.T) {
			sctx := taggedCtx{ctx, []string{"a"}}
			var start context.Context = ctx
			if how == "Start's context" {
				start = sctx
			}
			b, err := rm.Start(start, newXID(t))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Rollback(ctx)
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			for range 2 {
				if _, err := conn(b).ExecContext(sctx, "UPDATE kv SET v = v + 1 WHERE k = 1"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// XA PREPARE runs under Prepare's context alone: a context that bounded
// the branch's statements (a statement's own, or Start's) ending while
// XA PREPARE waits (the server holds prepares) does not interrupt it, and
// the branch is prepared once the server lets it through.
func TestEndedStatementContextSparesPrepare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	rollbackListedAtEnd(t, raw)
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 1 })
	for i, how := range []string{"statement context", "Start's context"} {
		t.Run(how, func(t *testing.T) {
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			startCtx := ctx
			if how == "Start's context" {
				startCtx = actx
			}
			b, err := rm.Start(startCtx, newXID(t))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn(b).ExecContext(actx, "INSERT INTO kv VALUES (?, 1)", i+1); err != nil {
				t.Fatal(err)
			}
			release := holdCommits(t, raw)
			type vote struct {
				v   xa.Vote
				err error
			}
			done := make(chan vote, 1)
			go func() {
				v, err := b.Prepare(ctx)
				done <- vote{v, err}
			}()
			time.Sleep(300 * time.Millisecond) // XA PREPARE waits
			cancel()
			time.Sleep(500 * time.Millisecond) // a kill would land now
			release()
			r := <-done
			if v, err := r.v, r.err; v != xa.VotePrepared {
				t.Fatalf("Prepare: %v %v", v, err)
			}
			if err := b.Commit(ctx); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if _, ok := getV(t, raw, i+1); !ok {
				t.Fatal("not committed")
			}
		})
	}
}
