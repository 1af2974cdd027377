package mysql

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync"
	"testing"

	"github.com/xadb/xa/xa"
)

type ctxKey struct{}

// recorder keeps the statements a Config.Connector wrapper saw, with the
// value of ctxKey in their context.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) add(ctx context.Context, q string) {
	v, _ := ctx.Value(ctxKey{}).(string)
	r.mu.Lock()
	r.seen = append(r.seen, v+"|"+q)
	r.mu.Unlock()
}

func (r *recorder) saw(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.seen {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

type recConnector struct {
	driver.Connector
	rec  *recorder
	bare bool // hand out a connection that lacks go-sql-driver's interfaces
}

func (c recConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if c.bare {
		return bareConn{dc}, nil
	}
	return &recConn{mysqlDriverConn: dc.(mysqlDriverConn), rec: c.rec}, nil
}

type bareConn struct{ driver.Conn }

type recConn struct {
	mysqlDriverConn
	rec *recorder
}

func (c *recConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.rec.add(ctx, q)
	return c.mysqlDriverConn.ExecContext(ctx, q, args)
}

func (c *recConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.rec.add(ctx, q)
	return c.mysqlDriverConn.QueryContext(ctx, q, args)
}

// Config.Connector wraps the sessions' connector: the wrapper sees the
// branch's statements and XA commands with the caller's context values;
// a wrapper whose connections lack go-sql-driver's interfaces is refused
// with an error naming them.
func TestConnectorHook(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	rec := &recorder{}
	rm := openRM(t, db.DSN(), func(c *Config) {
		c.Connector = func(inner driver.Connector) driver.Connector { return recConnector{Connector: inner, rec: rec} }
	})
	ctx := context.WithValue(context.Background(), ctxKey{}, "traced")
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn(b).ExecContext(ctx, "INSERT INTO kv VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	if vote, err := b.Prepare(ctx); vote != xa.VotePrepared || err != nil {
		t.Fatalf("Prepare: %v, %v", vote, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"traced|XA START", "INSERT INTO kv VALUES (1, 1)", "traced|XA END"} {
		if !rec.saw(s) {
			t.Errorf("the wrapper did not see %q: %q", s, rec.seen)
		}
	}

	_, err = Open(context.Background(), Config{Name: "bare", DSN: db.DSN(), Connector: func(inner driver.Connector) driver.Connector {
		return recConnector{Connector: inner, bare: true}
	}})
	if err == nil || !strings.Contains(err.Error(), "ExecerContext") {
		t.Fatalf("Open with a wrapper that drops interfaces: %v, want an error naming them", err)
	}
}
