package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// openRM opens an RM on db with the start-up check, closed when t ends.
func openRM(t testing.TB, dsn string, tweak ...func(*Config)) *RM {
	t.Helper()
	cfg := Config{Name: "mysql-test", DSN: dsn, Init: true}
	if testing.Verbose() && os.Getenv("XA_TEST_LOG") != "" {
		cfg.Logger = testLogger(t)
	}
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rm, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { rm.Close() })
	return rm
}

// rawDB opens a plain go-sql-driver handle (multi statements allowed) for
// setting up and inspecting what the RM did, closed when t ends.
func rawDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c.MultiStatements = true
	c.InterpolateParams = true
	c.Logger = &gomysql.NopLogger{}
	connector, err := gomysql.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// setup returns a fresh database with table kv (k INT PRIMARY KEY, v INT)
// and a raw handle on it.
func setup(t testing.TB) (*dbtest.DB, *sql.DB) {
	t.Helper()
	db := dbtest.MySQLDB(t)
	raw := rawDB(t, db.DSN())
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	return db, raw
}

var xidSeq atomic.Int64

// newXID returns a fresh XID of this project's scheme.
func newXID(t testing.TB) xa.XID {
	t.Helper()
	g, err := xa.NewGlobalID("mysqltest", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return g.Branch(int(xidSeq.Add(1) % 10000))
}

func getV(t testing.TB, db *sql.DB, k int) (int, bool) {
	t.Helper()
	var v int
	err := db.QueryRowContext(context.Background(), "SELECT v FROM kv WHERE k = ?", k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

// recoverList returns XA RECOVER of raw as literals.
func recoverList(t testing.TB, db *sql.DB) []xa.PreparedBranch {
	t.Helper()
	ps, err := recoverOn(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// conn returns the branch's *Conn.
func conn(b xa.Branch) *Conn { return b.Session().(*Conn) }

func sessionID(t testing.TB, c *Conn) uint64 {
	t.Helper()
	var id uint64
	if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func inProcessList(t testing.TB, db *sql.DB, id uint64) bool {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// waitGone waits until session id has left the process list.
func waitGone(t testing.TB, db *sql.DB, id uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for inProcessList(t, db, id) {
		if time.Now().After(deadline) {
			t.Fatalf("session %d still in the process list", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantKind(t testing.TB, err error, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v: want kind %v", err, kind)
	}
	var xe *xa.Error
	if !errors.As(err, &xe) {
		t.Fatalf("error %v (%T) is not an *xa.Error", err, err)
	}
}

func wantMySQLErr(t testing.TB, err error, number uint16) {
	t.Helper()
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != number {
		t.Fatalf("error %v: want server error %d", err, number)
	}
}

// wire is a test network for go-sql-driver (a DSN "user@<name>(addr)/db"):
// plain TCP that counts the commands the client sends and can cut a
// connection right after the server answered the next command, as a lost
// reply would.
type wire struct {
	name     string
	commands atomic.Int64
	mu       sync.Mutex
	cutNext  bool
	cuts     atomic.Int64
	next     wireFault  // what happens to the next command, if anything
	held     []net.Conn // server sides kept open after a hold
}

// wireFault is what a wire does to the next command.
type wireFault struct {
	hold    bool   // swallow the reply and fail the client's side, but keep the server's side open
	errno   uint16 // non-zero: answer the client with this server error instead of the server's reply
	deliver bool   // with errno: send the command to the server first (and swallow its reply)
}

var wireSeq atomic.Int64

func newWire(t testing.TB) *wire {
	w := &wire{name: fmt.Sprintf("xatest%d", wireSeq.Add(1))}
	gomysql.RegisterDialContext(w.name, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c, w: w}, nil
	})
	return w
}

// dsn rewrites a tcp DSN to go through w.
func (w *wire) dsn(t testing.TB, dsn string) string {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c.Net = w.name
	return c.FormatDSN()
}

// armCut makes the next command on any connection of w the last: the
// command reaches the server, the server's reply is swallowed and the
// connection is closed.
func (w *wire) armCut() {
	w.mu.Lock()
	w.cutNext = true
	w.mu.Unlock()
}

// armHold makes the next command's reply lost while the server's session
// lives on: the command reaches the server, its reply is swallowed, the
// client sees its connection fail, and the server's side stays open (the
// session idle on the server, as behind a network partition) until
// release.
func (w *wire) armHold() {
	w.mu.Lock()
	w.next = wireFault{hold: true}
	w.mu.Unlock()
}

// armAnswer makes the client get server error errno for the next command.
// With deliver, the command reaches the server and runs, and its real
// reply is swallowed (as if the server had answered the error after doing
// the work); without, the server never sees it.
func (w *wire) armAnswer(errno uint16, deliver bool) {
	w.mu.Lock()
	w.next = wireFault{errno: errno, deliver: deliver}
	w.mu.Unlock()
}

// release closes the server sides kept open by holds: the server sees the
// sessions disconnect.
func (w *wire) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.held {
		c.Close()
	}
	w.held = nil
}

type wireConn struct {
	net.Conn
	w       *wire
	pending int // bytes of the current client packet still to come
	cut     atomic.Bool
	held    atomic.Bool
	mu      sync.Mutex
	inject  []byte // bytes the client reads before anything from the server
}

func (c *wireConn) Write(b []byte) (int, error) {
	// Count packets with sequence id 0: each starts a command.
	commands := 0
	for p := b; len(p) > 0; {
		if c.pending > 0 {
			n := min(c.pending, len(p))
			c.pending -= n
			p = p[n:]
			continue
		}
		if len(p) < 4 {
			break // headers are written whole by go-sql-driver
		}
		l := int(p[0]) | int(p[1])<<8 | int(p[2])<<16
		if p[3] == 0 {
			commands++
		}
		c.pending = l
		p = p[4:]
	}
	c.w.commands.Add(int64(commands))
	if c.cut.Load() {
		return 0, net.ErrClosed
	}
	cut := false
	var fault wireFault
	if commands > 0 {
		c.w.mu.Lock()
		cut, c.w.cutNext = c.w.cutNext, false
		fault, c.w.next = c.w.next, wireFault{}
		c.w.mu.Unlock()
	}
	if fault.errno != 0 && !fault.deliver {
		c.answer(fault.errno)
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	if err != nil || !cut && fault == (wireFault{}) {
		return n, err
	}
	// Let the server execute and answer; swallow the answer.
	buf := make([]byte, 64<<10)
	for {
		c.Conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Conn.Read(buf); err != nil {
			break
		}
	}
	c.Conn.SetReadDeadline(time.Time{})
	switch {
	case fault.errno != 0:
		c.answer(fault.errno)
	case fault.hold:
		c.held.Store(true)
		c.cut.Store(true)
		c.w.mu.Lock()
		c.w.held = append(c.w.held, c.Conn)
		c.w.mu.Unlock()
		c.w.cuts.Add(1)
	default:
		c.cut.Store(true)
		c.Conn.Close()
		c.w.cuts.Add(1)
	}
	return n, nil
}

// answer queues a server error packet (the reply to a command, sequence
// id 1) for the client to read.
func (c *wireConn) answer(errno uint16) {
	msg := "Query execution was interrupted (injected by the test wire)"
	payload := append([]byte{0xff, byte(errno), byte(errno >> 8), '#'}, "70100"+msg...)
	pkt := append([]byte{byte(len(payload)), byte(len(payload) >> 8), byte(len(payload) >> 16), 1}, payload...)
	c.mu.Lock()
	c.inject = append(c.inject, pkt...)
	c.mu.Unlock()
}

func (c *wireConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.inject) > 0 {
		n := copy(b, c.inject)
		c.inject = c.inject[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	if c.cut.Load() {
		return 0, io.ErrUnexpectedEOF
	}
	return c.Conn.Read(b)
}

// Close closes the connection, but for one held open for the server.
func (c *wireConn) Close() error {
	if c.held.Load() {
		return nil
	}
	return c.Conn.Close()
}

// closedPortDSN returns a DSN to a loopback port nobody listens on.
func closedPortDSN(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := gomysql.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = "root", "tcp", addr, "x"
	c.Timeout = 2 * time.Second
	return c.FormatDSN()
}

func flavorOf(db *dbtest.DB) string { return db.Server.Flavor }

func isMariaDB(db *dbtest.DB) bool { return strings.EqualFold(flavorOf(db), "mariadb") }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// retry calls f until it returns something other than an ErrRetryable
// error, for at most 10 s, and returns that.
func retry(t testing.TB, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if !xa.Retryable(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// privateConn returns a connection of raw that is closed, never pooled,
// when t ends: a test session may be left with a branch on it.
func privateConn(t testing.TB, raw *sql.DB) *sql.Conn {
	t.Helper()
	c, err := raw.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Raw(func(any) error { return driver.ErrBadConn })
		c.Close()
	})
	return c
}

// waitLockWait waits until session id waits for a lock.
//
// MariaDB serves information_schema.INNODB_TRX from a cache that it
// refreshes only when the last read is at least 0.1 s old: polling faster
// sees the same stale snapshot forever.
func waitLockWait(t testing.TB, db *sql.DB, id uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := db.Query("SELECT trx_state, trx_mysql_thread_id, COALESCE(trx_query, '') FROM information_schema.INNODB_TRX")
			for rows.Next() {
				var st, q string
				var tid uint64
				rows.Scan(&st, &tid, &q)
				t.Logf("trx %s %d %s", st, tid, q)
			}
			rows.Close()
			t.Fatalf("session %d never waited for a lock", id)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// prepareDetached prepares branch x with raw SQL (stmt, args) on a session
// of its own, as another application would, closes that session and waits
// until the server has detached the branch. The branch is rolled back
// when t ends, so that the test database can be dropped.
func prepareDetached(t testing.TB, raw *sql.DB, x xa.XID, stmt string, args ...any) {
	t.Helper()
	ctx := context.Background()
	s, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	if err := s.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	lit := xidLiteral(x)
	_, err = s.ExecContext(ctx, "XA START "+lit+"; "+stmt+"; XA END "+lit+"; XA PREPARE "+lit, args...)
	s.Raw(func(any) error { return driver.ErrBadConn })
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, raw, id)
	t.Cleanup(func() { raw.Exec("XA ROLLBACK " + lit) })
}

// rollbackListedAtEnd rolls back every branch XA RECOVER lists when t
// ends, once the test's sessions have closed (register it after the
// sessions' database handle and before the sessions): a prepared branch
// would keep the test database from being dropped.
func rollbackListedAtEnd(t testing.TB, raw *sql.DB) {
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			ps, err := recoverOn(context.Background(), raw)
			if err != nil || len(ps) == 0 {
				return
			}
			for _, p := range ps {
				raw.Exec("XA ROLLBACK " + p.Raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

var errBadConnForTest = driver.ErrBadConn
