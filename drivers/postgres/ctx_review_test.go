package postgres

import (
	"context"
	"testing"
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
