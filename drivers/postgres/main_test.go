package postgres

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// TestMain runs the tests against real servers (internal/testrig/dbtest). The
// tests mostly wait on the database, so unless -parallel is given they run
// at least eight at a time even on a machine with fewer CPUs.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && runtime.GOMAXPROCS(0) < 8 {
		flag.Set("test.parallel", "8") //nolint:errcheck // the flag exists
	}
	dbtest.Main(m)
}

// testCtx returns a context that ends with the test (or after a minute).
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openRM opens a resource manager on dsn, closed when t ends.
func openRM(t testing.TB, dsn string) *RM {
	t.Helper()
	rm, err := Open(testCtx(t), Config{Name: "pg", DSN: dsn, MaxConns: 8, Init: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(rm.Close)
	return rm
}

// setup returns a fresh database with table kv (k INT PRIMARY KEY, v INT)
// and a resource manager on it.
func setup(t testing.TB) (*dbtest.DB, *RM) {
	t.Helper()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	return db, openRM(t, db.DSN())
}

// mustExec runs statements on db on a fresh plain connection.
func mustExec(t testing.TB, db *dbtest.DB, stmts ...string) {
	t.Helper()
	if err := db.Server.Exec(testCtx(t), db.Name, stmts...); err != nil {
		t.Fatal(err)
	}
}

// raw returns a plain pgx connection to db, closed when t ends.
func raw(t testing.TB, db *dbtest.DB) *pgx.Conn {
	t.Helper()
	return rawDSN(t, db.DSN())
}

func rawDSN(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(testCtx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// value reads row k of kv from a fresh connection.
func value(t testing.TB, db *dbtest.DB, k int) (int, bool) {
	t.Helper()
	var v int
	err := raw(t, db).QueryRow(testCtx(t), "SELECT v FROM kv WHERE k = $1", k).Scan(&v)
	if err == pgx.ErrNoRows {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

func wantValue(t testing.TB, db *dbtest.DB, k, want int) {
	t.Helper()
	if v, ok := value(t, db, k); !ok || v != want {
		t.Fatalf("row %d = %d (present %v), want %d", k, v, ok, want)
	}
}

func wantAbsent(t testing.TB, db *dbtest.DB, k int) {
	t.Helper()
	if v, ok := value(t, db, k); ok {
		t.Fatalf("row %d = %d, want no row", k, v)
	}
}

var xidSeq atomic.Int64

// newXID returns a fresh XID of ours.
func newXID(t testing.TB) xa.XID {
	t.Helper()
	g, err := xa.NewGlobalID(fmt.Sprintf("pgtest%d", xidSeq.Add(1)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return g.Branch(0)
}

// start starts a branch and returns it with its session.
func start(t testing.TB, rm *RM, ctx context.Context, x xa.XID) (*branch, *Conn) {
	t.Helper()
	b, err := rm.Start(ctx, x)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b.(*branch), b.Session().(*Conn)
}

func exec(t testing.TB, c *Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func prepare(t testing.TB, b xa.Branch, want xa.Vote) {
	t.Helper()
	v, err := b.Prepare(testCtx(t))
	if v != want || (want != xa.VoteAbort && err != nil) {
		t.Fatalf("Prepare = %v, %v; want %v", v, err, want)
	}
}

// listed reports whether pg_prepared_xacts holds gid.
func listed(t testing.TB, db *dbtest.DB, gid string) bool {
	t.Helper()
	var n int
	if err := raw(t, db).QueryRow(testCtx(t), "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", gid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
