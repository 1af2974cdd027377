// Package localdb runs throw-away MariaDB and PostgreSQL servers from the
// local binaries, on free loopback ports, in temporary directories: for
// tests (through internal/dbtest) and for xalab demo and bench. PostgreSQL runs as
// user postgres when the caller is root (it refuses to run as root).
//
// Every server of a process lives under one directory that a watchdog
// process deletes, after killing the servers, when the process dies in any
// way; Cleanup does it at a normal exit.
package localdb

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// Kind says which server.
type Kind int

const (
	MySQL Kind = 1 + iota // MariaDB (or MySQL's mysqld)
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

// pgBinDirs are searched for the PostgreSQL server binaries.
var pgBinDirs = []string{"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error

	templateMu sync.Mutex
	templates  = map[Kind]string{}
)

// root is this process's directory for server data; a watchdog deletes it
// when the process dies.
func root() (string, error) {
	rootOnce.Do(func() {
		rootDir, rootErr = os.MkdirTemp("", "xa-localdb-")
		if rootErr != nil {
			return
		}
		// Let the postgres user traverse into it.
		rootErr = os.Chmod(rootDir, 0o755)
		if rootErr == nil {
			rootErr = startWatchdog(rootDir)
		}
	})
	return rootDir, rootErr
}

// Cleanup destroys every server this process started and deletes their
// files.
func Cleanup() {
	serversMu.Lock()
	all := servers
	servers = nil
	serversMu.Unlock()
	for _, s := range all {
		s.Destroy()
	}
	cleanupRoot()
}

var (
	serversMu sync.Mutex
	servers   []*Server
)

func cleanupRoot() {
	if rootDir != "" {
		os.RemoveAll(rootDir)
	}
}

// startWatchdog starts a detached shell that waits for this process to die
// and then kills every server whose pid file is under dir and deletes dir.
// It is what cleans up after a panic, a test timeout or a SIGKILL.
func startWatchdog(dir string) error {
	script := `
while kill -0 "$1" 2>/dev/null; do sleep 1; done
for f in "$2"/*/server.pid; do
  [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
done
sleep 1
rm -rf "$2"
`
	cmd := exec.Command("/bin/sh", "-c", script, "watchdog", strconv.Itoa(os.Getpid()), dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start watchdog: %w", err)
	}
	go cmd.Wait() //nolint:errcheck // reaped only; it outlives us by design
	return nil
}

// Server is a server process on this machine.
type Server struct {
	Kind   Kind
	Flavor string // "mariadb" or "postgres"
	Host   string
	Port   int
	User   string

	dir      string // instance directory: data/, server.log, server.pid
	bin      string
	args     []string
	cred     *syscall.Credential
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	destroyd bool
}

// Start initialises and starts a new server of kind k. settings are
// server variables (mariadbd --name=value, postgres -c name=value).
func Start(ctx context.Context, k Kind, settings map[string]string) (*Server, error) {
	r, err := root()
	if err != nil {
		return nil, err
	}
	tmpl, err := template(ctx, k)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(r, k.String()+"-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, data).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copy template: %v: %s", err, out)
	}
	if k == MySQL {
		if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o755); err != nil {
			return nil, err
		}
	}
	ls := &Server{Kind: k, dir: dir, Host: "127.0.0.1"}
	switch k {
	case MySQL:
		ls.Flavor, ls.User = "mariadb", "root"
		ls.bin, err = findBinary("mariadbd", "mysqld")
		if err != nil {
			return nil, err
		}
	case Postgres:
		ls.Flavor, ls.User = "postgres", "postgres"
		ls.bin, err = findPG("postgres")
		if err != nil {
			return nil, err
		}
		ls.cred, err = pgCredential()
		if err != nil {
			return nil, err
		}
		if ls.cred != nil {
			if err := chownR(dir, int(ls.cred.Uid), int(ls.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	// A free port can be taken between our probe and the server's bind:
	// retry with another one.
	for attempt := 0; ; attempt++ {
		ls.Port, err = freePort()
		if err != nil {
			return nil, err
		}
		ls.args = serverArgs(k, dir, ls.Port, settings)
		err = ls.Start(ctx)
		if err == nil || attempt == 2 || !strings.Contains(ls.LogTail(), "in use") {
			break
		}
	}
	if err != nil {
		tail := ls.LogTail()
		ls.Destroy()
		return nil, fmt.Errorf("%w\n%s", err, tail)
	}
	serversMu.Lock()
	servers = append(servers, ls)
	serversMu.Unlock()
	return ls, nil
}

// DSN returns the DSN of database name ("" for none): a go-sql-driver
// DSN for MySQL, a postgres:// URL for PostgreSQL.
func (ls *Server) DSN(name string) string {
	if ls.Kind == MySQL {
		c := mysql.NewConfig()
		c.User, c.Net, c.Addr, c.DBName = ls.User, "tcp", fmt.Sprintf("%s:%d", ls.Host, ls.Port), name
		return c.FormatDSN()
	}
	if name == "" {
		name = "postgres"
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", ls.User, ls.Host, ls.Port, name)
}

func serverArgs(k Kind, dir string, port int, settings map[string]string) []string {
	data := filepath.Join(dir, "data")
	var args []string
	switch k {
	case MySQL:
		args = []string{
			"--no-defaults",
			"--datadir=" + data,
			"--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--socket=" + filepath.Join(dir, "mysql.sock"),
			"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
			"--log-error=" + filepath.Join(dir, "server.log"),
			"--skip-name-resolve",
			"--max-connections=600",
			"--innodb-buffer-pool-size=64M",
			"--innodb-log-file-size=16M",
			// A temporary directory of its own: servers sharing /tmp
			// collide on internal temporary table names (stale files of a
			// killed server whose pid comes round again).
			"--tmpdir=" + filepath.Join(dir, "tmp"),
		}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		for _, name := range sortedKeys(settings) {
			args = append(args, "--"+name+"="+settings[name])
		}
	case Postgres:
		merged := map[string]string{
			"listen_addresses":          "127.0.0.1",
			"port":                      strconv.Itoa(port),
			"unix_socket_directories":   dir,
			"max_prepared_transactions": "200",
			"max_connections":           "300",
			"shared_buffers":            "32MB",
			"logging_collector":         "off",
		}
		for name, v := range settings {
			merged[name] = v
		}
		args = []string{"-D", data}
		for _, name := range sortedKeys(merged) {
			args = append(args, "-c", name+"="+merged[name])
		}
	}
	return args
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Start starts a stopped or killed server again on the same data and port
// and waits until it accepts connections.
func (ls *Server) Start(ctx context.Context) error {
	ls.mu.Lock()
	if ls.cmd != nil {
		ls.mu.Unlock()
		return errors.New("already running")
	}
	cmd := exec.Command(ls.bin, ls.args...)
	logf, err := os.OpenFile(filepath.Join(ls.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		ls.mu.Unlock()
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: ls.cred}
	if err := cmd.Start(); err != nil {
		logf.Close()
		ls.mu.Unlock()
		return fmt.Errorf("start %s: %w", ls.bin, err)
	}
	logf.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() //nolint:errcheck // exit is observed through exited
	ls.cmd, ls.exited = cmd, exited
	_ = os.WriteFile(filepath.Join(ls.dir, "server.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	ls.mu.Unlock()

	deadline := time.Now().Add(90 * time.Second)
	for {
		err := ls.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			ls.mu.Lock()
			ls.cmd = nil
			ls.mu.Unlock()
			return fmt.Errorf("%s exited during start-up", filepath.Base(ls.bin))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept connections in 90s: %v", filepath.Base(ls.bin), err)
		}
	}
}

func (ls *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	switch ls.Kind {
	case MySQL:
		c := mysql.NewConfig()
		c.User, c.Net, c.Addr = "root", "tcp", fmt.Sprintf("127.0.0.1:%d", ls.Port)
		db, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	default:
		conn, err := pgx.Connect(ctx, ls.DSN(""))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}
}

func (ls *Server) signal(ctx context.Context, sig syscall.Signal) error {
	ls.mu.Lock()
	cmd, exited := ls.cmd, ls.exited
	ls.mu.Unlock()
	if cmd == nil {
		return errors.New("not running")
	}
	// On SIGKILL everything dies, as in a crash of the machine: the
	// server and every process it forked (PostgreSQL backends call
	// setsid, so the process group does not reach them). They must be
	// gone before a restart, or PostgreSQL finds its old shared memory
	// still attached.
	var children []int
	if sig == syscall.SIGKILL {
		children = descendants(cmd.Process.Pid)
	}
	if err := syscall.Kill(cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	for _, pid := range children {
		syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // it may be gone already
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the server to exit: %w", ctx.Err())
	}
	for _, pid := range children {
		for alive(pid) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for server process %d to exit: %w", pid, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	ls.mu.Lock()
	ls.cmd = nil
	ls.mu.Unlock()
	return nil
}

// descendants lists the processes forked, directly or not, by pid.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(p); ok {
			parent[p] = pp
		}
	}
	var out []int
	frontier := []int{pid}
	for len(frontier) > 0 {
		next := frontier[0]
		frontier = frontier[1:]
		for p, pp := range parent {
			if pp == next {
				out = append(out, p)
				frontier = append(frontier, p)
			}
		}
	}
	return out
}

// ppid reads a process's parent from /proc/pid/stat.
func ppid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// alive reports whether pid still runs (a zombie does not: it holds no
// memory and no files).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// Stop shuts the server down cleanly (PostgreSQL: fast shutdown; active
// sessions end, prepared transactions stay).
func (ls *Server) Stop(ctx context.Context) error {
	// PostgreSQL: SIGINT is a fast shutdown (active sessions end, prepared
	// transactions stay). MariaDB: SIGTERM is a normal shutdown.
	sig := syscall.SIGTERM
	if ls.Kind == Postgres {
		sig = syscall.SIGINT
	}
	return ls.signal(ctx, sig)
}

// Kill kills the server with SIGKILL, as in a crash.
func (ls *Server) Kill(ctx context.Context) error { return ls.signal(ctx, syscall.SIGKILL) }

// Destroy kills the server and deletes its files.
func (ls *Server) Destroy() {
	ls.mu.Lock()
	if ls.destroyd {
		ls.mu.Unlock()
		return
	}
	ls.destroyd = true
	ls.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ls.Kill(ctx)
	os.RemoveAll(ls.dir)
}

// LogTail returns the last lines of the server's log.
func (ls *Server) LogTail() string {
	b, err := os.ReadFile(filepath.Join(ls.dir, "server.log"))
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return "server log tail:\n" + string(bytes.Join(lines, []byte("\n")))
}

// template returns an initialised data directory of kind k, made once per
// process and copied for every server.
func template(ctx context.Context, k Kind) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if t, ok := templates[k]; ok {
		return t, nil
	}
	r, err := root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(r, "template-"+k.String())
	switch k {
	case MySQL:
		bin, err := findBinary("mariadb-install-db", "mysql_install_db")
		if err != nil {
			return "", fmt.Errorf("%w (install it: apt-get install -y mariadb-server)", err)
		}
		tmp := filepath.Join(r, "template-tmp")
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return "", err
		}
		args := []string{"--no-defaults", "--datadir=" + dir, "--auth-root-authentication-method=normal",
			"--skip-test-db", "--innodb-log-file-size=16M", "--tmpdir=" + tmp}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v: %s", bin, err, tail(out))
		}
	case Postgres:
		bin, err := findPG("initdb")
		if err != nil {
			return "", err
		}
		cred, err := pgCredential()
		if err != nil {
			return "", err
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", err
		}
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				return "", err
			}
		}
		cmd := exec.CommandContext(ctx, bin, "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-N")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("initdb: %v: %s", err, tail(out))
		}
	}
	templates[k] = dir
	return dir, nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func findBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin"} {
			p := filepath.Join(d, n)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("none of %v found", names)
}

func findPG(name string) (string, error) {
	for _, d := range pgBinDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("PostgreSQL %s not found in %v or PATH", name, pgBinDirs)
}

// pgCredential returns the postgres user's credential when running as
// root (PostgreSQL refuses to run as root), else nil.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownR(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Exec runs statements on database name ("" for the default) on a fresh
// connection.
func (ls *Server) Exec(ctx context.Context, name string, stmts ...string) error {
	return ExecDSN(ctx, ls.Kind, ls.DSN(name), stmts...)
}

// ExecDSN runs statements one by one on a fresh connection to dsn, a
// server of kind k.
func ExecDSN(ctx context.Context, k Kind, dsn string, stmts ...string) error {
	if k == MySQL {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		for _, q := range stmts {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}
