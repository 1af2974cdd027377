package postgres

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// A context the application defines as a struct value holding a slice is
// a valid context.Context that Go cannot compare with ==. A branch started
// with one runs statements under it without panicking.
type taggedCtx struct {
	context.Context
	tags []string
}

func TestNonComparableStartContext(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 0)")
	tctx := taggedCtx{ctx, []string{"a"}}
	b, c := start(t, rm, tctx, newXID(t))
	defer b.Rollback(ctx)
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	for range 2 {
		if _, err := c.Exec(tctx, "UPDATE kv SET v = v + 1 WHERE k = 1"); err != nil {
			t.Fatal(err)
		}
	}
}

// A statement's context that ends at any moment around the statement's
// end must not reach the branch's next statement, run under Start's
// context (which runs on the branch's life alone), nor its PREPARE
// TRANSACTION and COMMIT PREPARED. Run with -race.
func TestEndedStatementContextSparesNext(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 0), (2, 0)")
	rng := rand.New(rand.NewPCG(3, 4))
	interrupted := 0
	for i := range 100 {
		b, c := start(t, rm, ctx, newXID(t))
		exec(t, c, "UPDATE kv SET v = v + 1 WHERE k = 2")
		actx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, cancel)
		if _, err := c.Exec(actx, "UPDATE kv SET v = v + 1 WHERE k = 1"); err != nil {
			// The transaction is aborted: the branch votes abort.
			interrupted++
			if err := b.Rollback(ctx); err != nil {
				t.Fatalf("round %d: Rollback: %v", i, err)
			}
			cancel()
			continue
		}
		if _, err := c.Exec(ctx, "UPDATE kv SET v = v + 1 WHERE k = 2"); err != nil {
			t.Fatalf("round %d: statement under Start's context: %v", i, err)
		}
		if v, err := b.Prepare(ctx); v != xa.VotePrepared {
			t.Fatalf("round %d: Prepare: %v %v", i, v, err)
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatalf("round %d: Commit: %v", i, err)
		}
		cancel()
	}
	t.Logf("%d statements interrupted", interrupted)
}
