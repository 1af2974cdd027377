package postgres

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/xa"
)

type ctxKey struct{}

// queryRecorder is a pgx.QueryTracer keeping each statement with the
// value of ctxKey in its context.
type queryRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *queryRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	v, _ := ctx.Value(ctxKey{}).(string)
	r.mu.Lock()
	r.seen = append(r.seen, v+"|"+d.SQL)
	r.mu.Unlock()
	return ctx
}

func (r *queryRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *queryRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *queryRecorder) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	v, _ := ctx.Value(ctxKey{}).(string)
	r.mu.Lock()
	r.seen = append(r.seen, v+"|"+d.SQL)
	r.mu.Unlock()
}

func (r *queryRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Config.Tracer is pgx's tracer on the branch sessions: it sees the
// application's statements with their context, the first one (batched
// with BEGIN) through pgx.BatchTracer.
func TestTracerHook(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	rec := &queryRecorder{}
	rm := openRMWith(t, Config{DSN: db.DSN(), Tracer: rec})
	ctx := context.WithValue(testCtx(t), ctxKey{}, "traced")
	b, c := start(t, rm, ctx, newXID(t))
	if _, err := c.Exec(ctx, "INSERT INTO kv VALUES ($1, $2)", 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE kv SET v = $1 WHERE k = $2", 2, 1); err != nil {
		t.Fatal(err)
	}
	prepare(t, b, xa.VotePrepared)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, want := range []string{"traced|INSERT INTO kv", "traced|UPDATE kv"} {
		found := false
		for _, s := range rec.seen {
			if strings.HasPrefix(s, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("the tracer did not see %q: %q", want, rec.seen)
		}
	}
}
