// Package dbtest gives tests real database servers: a MySQL-protocol server
// (MariaDB here, MySQL 8 under Docker) and PostgreSQL.
//
// Where the servers come from, in order:
//
//  1. XA_MYSQL_DSN / XA_POSTGRES_DSN in the environment: those servers
//     (they cannot be restarted by tests; tests that need it skip).
//  2. XA_DBTEST=docker, or XA_DBTEST unset and a Docker engine answers:
//     testcontainers-go with MySQL 8.4 and PostgreSQL 16.
//  3. Otherwise throw-away servers started from the local binaries
//     (mariadbd, postgres) on free loopback ports in temporary directories;
//     PostgreSQL runs as user postgres when the tests run as root.
//
// Shared servers start once per test binary, on first use; every test gets
// its own database. Call Main from TestMain so that they stop when the
// tests end; a watchdog process also kills them and deletes their files if
// the test binary dies (panic, timeout, SIGKILL).
//
// With CI=true a database that cannot be had is a test failure, not a skip.
//
// Tests that stop, restart or kill a server take a private one
// (NewMySQLServer, NewPostgresServer) so they do not disturb other tests.
package dbtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/internal/testrig/localdb"
)

// Kind says which protocol a server speaks.
type Kind int

const (
	MySQL Kind = 1 + iota
	Postgres
)

func (k Kind) String() string {
	switch k {
	case MySQL:
		return "mysql"
	case Postgres:
		return "postgres"
	}
	return "Kind(invalid)"
}

// KindOf returns the kind of server that participants of the named kind
// (its name in the drivers registry) connect to. TestEveryKindHasAServer
// checks that every kind of the registry has one.
func KindOf(name string) (Kind, error) {
	for _, sk := range []Kind{MySQL, Postgres} {
		if sk.String() == name {
			return sk, nil
		}
	}
	return 0, fmt.Errorf("dbtest: no test server for participant kind %q", name)
}

// ForKind returns a fresh database on the shared server for participants
// of the named kind.
func ForKind(t testing.TB, name string) *DB {
	t.Helper()
	k, err := KindOf(name)
	if err != nil {
		t.Fatal(err)
	}
	return sharedServerFor(t, k).CreateDB(t)
}

// Server is one database server.
type Server struct {
	Kind Kind
	// Flavor is "mariadb", "mysql" or "postgres".
	Flavor string
	// Host and Port of the server's TCP listener.
	Host string
	Port int
	user string
	pass string

	ctl controller // nil for servers given by DSN
}

// controller stops and starts a server process or container.
type controller interface {
	stop(ctx context.Context) error  // clean shutdown
	kill(ctx context.Context) error  // SIGKILL: no shutdown work at all
	start(ctx context.Context) error // start again on the same data and port
	destroy()                        // kill and delete everything
	logTail() string                 // last lines of the server log, for failures
}

// DB is one database on a server, private to a test.
type DB struct {
	Server *Server
	Name   string
}

// DSN returns the driver DSN of db: a go-sql-driver/mysql DSN for MySQL, a
// postgres:// URL for PostgreSQL.
func (db *DB) DSN() string { return db.Server.DSN(db.Name) }

// DSN returns the DSN of database name on s ("" for none).
func (s *Server) DSN(name string) string {
	switch s.Kind {
	case MySQL:
		c := mysql.NewConfig()
		c.User, c.Passwd = s.user, s.pass
		c.Net, c.Addr = "tcp", fmt.Sprintf("%s:%d", s.Host, s.Port)
		c.DBName = name
		return c.FormatDSN()
	default:
		auth := s.user
		if s.pass != "" {
			auth += ":" + s.pass
		}
		return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", auth, s.Host, s.Port, name)
	}
}

// Restartable reports whether Stop, Start, Kill and Restart work.
func (s *Server) Restartable() bool { return s.ctl != nil }

// Stop shuts the server down cleanly.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.must(t, "stop", func(ctx context.Context) error { return s.ctl.stop(ctx) })
}

// Kill kills the server with SIGKILL: no shutdown work, as in a crash.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.must(t, "kill", func(ctx context.Context) error { return s.ctl.kill(ctx) })
}

// Start starts a stopped or killed server again on the same data and port,
// and waits until it accepts connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.must(t, "start", func(ctx context.Context) error { return s.ctl.start(ctx) })
}

// Restart stops the server cleanly and starts it again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}

func (s *Server) must(t testing.TB, what string, f func(context.Context) error) {
	t.Helper()
	if s.ctl == nil {
		t.Fatalf("dbtest: cannot %s %s server given by DSN", what, s.Flavor)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Fatalf("dbtest: %s %s: %v\n%s", what, s.Flavor, err, s.ctl.logTail())
	}
}

// LogTail returns the last lines of the server's log, when there is one.
func (s *Server) LogTail() string {
	if s.ctl == nil {
		return ""
	}
	return s.ctl.logTail()
}

var dbSeq atomic.Int64

// CreateDB creates a fresh database on s, dropped when t ends (unless the
// server is down by then).
func (s *Server) CreateDB(t testing.TB) *DB {
	t.Helper()
	name := fmt.Sprintf("t%d_%d_%s", os.Getpid(), dbSeq.Add(1), sanitize(t.Name()))
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.ToLower(name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Exec(ctx, "", "CREATE DATABASE "+name); err != nil {
		t.Fatalf("dbtest: create database on %s: %v", s.Flavor, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		drop := "DROP DATABASE IF EXISTS " + name
		if s.Kind == Postgres {
			drop += " WITH (FORCE)"
		}
		_ = s.Exec(ctx, "", drop) // best effort: prepared branches of a failed test may block it
	})
	return &DB{Server: s, Name: name}
}

// Exec runs statements on database name of s ("" for the server's default
// database) on a fresh connection.
func (s *Server) Exec(ctx context.Context, name string, stmts ...string) error {
	if s.Kind == MySQL {
		return localdb.ExecDSN(ctx, localdb.MySQL, s.DSN(name), stmts...)
	}
	if name == "" {
		name = "postgres"
	}
	return localdb.ExecDSN(ctx, localdb.Postgres, s.DSN(name), stmts...)
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Option configures a private server.
type Option func(*options)

type options struct {
	settings map[string]string
	durable  bool
}

// Setting sets a server variable at start-up (a postgres -c option, a
// mariadbd --name=value option).
func Setting(name, value string) Option {
	return func(o *options) {
		if o.settings == nil {
			o.settings = map[string]string{}
		}
		o.settings[name] = value
	}
}

// Durable starts the server with the databases' durable defaults instead
// of the fsync-light test settings: for benchmarks, where a commit must
// cost what it costs in production.
func Durable() Option {
	return func(o *options) { o.durable = true }
}

var (
	sharedMu sync.Mutex
	shared   = map[Kind]*sharedServer{}
	private  []*Server // stopped by Main when tests forget
)

type sharedServer struct {
	once sync.Once
	srv  *Server
	err  error
}

// MySQLDB returns a fresh database on the shared MySQL-protocol server.
func MySQLDB(t testing.TB) *DB {
	t.Helper()
	return sharedServerFor(t, MySQL).CreateDB(t)
}

// PostgresDB returns a fresh database on the shared PostgreSQL server.
func PostgresDB(t testing.TB) *DB {
	t.Helper()
	return sharedServerFor(t, Postgres).CreateDB(t)
}

// SharedServer returns the shared server of kind k, starting it on first
// use.
func SharedServer(t testing.TB, k Kind) *Server {
	t.Helper()
	return sharedServerFor(t, k)
}

func sharedServerFor(t testing.TB, k Kind) *Server {
	t.Helper()
	sharedMu.Lock()
	s := shared[k]
	if s == nil {
		s = &sharedServer{}
		shared[k] = s
	}
	sharedMu.Unlock()
	s.once.Do(func() {
		if dsn := envDSN(k); dsn != "" {
			s.srv, s.err = serverFromDSN(k, dsn)
			return
		}
		s.srv, s.err = startServer(k, nil, true)
	})
	if s.err != nil {
		unavailable(t, fmt.Errorf("%s server: %w", k, s.err))
	}
	return s.srv
}

// NewMySQLServer starts a private MySQL-protocol server that t may stop,
// kill and restart; it is destroyed when t ends.
func NewMySQLServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return newPrivate(t, MySQL, opts)
}

// NewPostgresServer starts a private PostgreSQL server that t may stop,
// kill and restart; it is destroyed when t ends.
func NewPostgresServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return newPrivate(t, Postgres, opts)
}

func newPrivate(t testing.TB, k Kind, opts []Option) *Server {
	t.Helper()
	if envDSN(k) != "" {
		t.Skipf("dbtest: %s given by DSN; this test needs a server it can restart", k)
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	srv, err := startServer(k, o.settings, !o.durable)
	if err != nil {
		unavailable(t, fmt.Errorf("private %s server: %w", k, err))
	}
	sharedMu.Lock()
	private = append(private, srv)
	sharedMu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dbtest: the private %s server's log ends with:\n%s", k, srv.LogTail())
		}
		srv.ctl.destroy()
	})
	return srv
}

func envDSN(k Kind) string {
	if k == MySQL {
		return os.Getenv("XA_MYSQL_DSN")
	}
	return os.Getenv("XA_POSTGRES_DSN")
}

// unavailable skips t, or fails it under CI=true.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("dbtest: database unavailable (CI=true makes this a failure): %v", err)
	}
	t.Skipf("dbtest: database unavailable, skipping: %v", err)
}

// testSettings make throw-away servers skip fsync: tests kill server
// processes, never the machine, and a killed process loses nothing the
// operating system already has. Benchmarks and the demo (internal/localdb
// directly) keep the durable defaults.
var testSettings = map[Kind]map[string]string{
	MySQL:    {"innodb-flush-log-at-trx-commit": "2"},
	Postgres: {"fsync": "off", "full_page_writes": "off"},
}

// startServer starts a server of kind k with settings, over testSettings
// when light is set, over the server's own defaults otherwise.
func startServer(k Kind, settings map[string]string, light bool) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	merged := map[string]string{}
	if light {
		for n, v := range testSettings[k] {
			merged[n] = v
		}
	}
	for n, v := range settings {
		merged[n] = v
	}
	if useDocker() {
		return startContainer(ctx, k, merged)
	}
	return startLocal(ctx, k, merged)
}

// Main runs the tests and then destroys every server this binary started.
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Shutdown()
	os.Exit(code)
}

// Shutdown destroys every server started by this process.
func Shutdown() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for _, s := range shared {
		if s.srv != nil && s.srv.ctl != nil {
			s.srv.ctl.destroy()
		}
	}
	for _, s := range private {
		s.ctl.destroy()
	}
	cleanupRoot()
}
