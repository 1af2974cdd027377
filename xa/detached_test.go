package xa

import (
	"context"
	"testing"
	"time"
)

type ctxKey struct{}

// neverEnding reports a deadline but never ends (Done is nil): detached
// must still drop the deadline.
type neverEnding struct{ context.Context }

func (neverEnding) Deadline() (time.Time, bool) { return time.Now(), true }

// detached keeps values and drops cancellation and deadlines; a context
// without either is returned as it is.
func TestDetached(t *testing.T) {
	plain := context.WithValue(context.Background(), ctxKey{}, "v")
	if got := detached(plain); got != plain {
		t.Fatalf("detached(a context that never ends) = %v, want it unchanged", got)
	}
	cctx, cancel := context.WithTimeout(plain, time.Hour)
	cancel()
	for _, ctx := range []context.Context{cctx, neverEnding{plain}} {
		d := detached(ctx)
		if d.Done() != nil || d.Err() != nil {
			t.Fatalf("detached(%v) can end: Done %v, Err %v", ctx, d.Done(), d.Err())
		}
		if _, ok := d.Deadline(); ok {
			t.Fatalf("detached(%v) has a deadline", ctx)
		}
		if d.Value(ctxKey{}) != "v" {
			t.Fatalf("detached(%v) lost the value", ctx)
		}
	}
}
