// Tests of xactl against real MariaDB and PostgreSQL servers. Each test
// calls cli.Main (or cli.MainContext) in-process with a configuration file
// of its own, makes real in-doubt branches with the drivers (standing for
// a coordinator that crashed between prepare and commit) and with raw SQL
// (other applications' branches), and checks the databases with direct SQL,
// never by asking xactl.
//
// Tests share the MariaDB server, whose XA RECOVER lists every test's
// branches: each test has its own node id and tags its foreign branches
// with it, and rolls back whatever it left prepared before its databases
// are dropped.
package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/cli"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Participant names in every configuration the tests write.
const (
	myName = "maria"
	pgName = "pg"
)

// result is one run of xactl.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("xactl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// xactl runs xactl in-process.
func xactl(t testing.TB, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(args, &out, &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

// want fails the test unless r ended with code.
func (r result) want(t testing.TB, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	return r
}

// json decodes r's stdout into v.
func (r result) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not the JSON expected: %v\n%s", err, r)
	}
}

// stderrHas fails the test unless stderr holds every one of subs.
func (r result) stderrHas(t testing.TB, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q: %s", s, r)
		}
	}
}

func (r result) stdoutHas(t testing.TB, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(r.stdout, s) {
			t.Fatalf("stdout lacks %q: %s", s, r)
		}
	}
}

// JSON shapes of the commands' --output json.

type branchJSON struct {
	Participant string `json:"participant"`
	XID         string `json:"xid"`
	Raw         string `json:"raw"`
	GlobalID    string `json:"global_id"`
	Node        string `json:"node"`
	AgeSeconds  *int64 `json:"age_seconds"`
	Log         string `json:"log"`
	Decision    string `json:"decision"`
	Heuristic   string `json:"heuristic"`
	Verdict     string `json:"verdict"`
	Action      string `json:"action"`
	Reason      string `json:"reason"`
	InDoubt     bool   `json:"in_doubt"`
	Done        bool   `json:"done"`
	Error       string `json:"error"`
}

type identityJSON struct {
	ID      string `json:"id"`
	Node    string `json:"node"`
	Created string `json:"created"`
	Timeout string `json:"timeout"`
	Grace   string `json:"grace"`
}

type unlistedJSON struct {
	Participant string `json:"participant"`
	Error       string `json:"error"`
}

type abortJSON struct {
	GlobalID string `json:"global_id"`
	Logged   string `json:"logged"`
	Reason   string `json:"reason"`
}

type heuristicJSON struct {
	Participant string `json:"participant"`
	XID         string `json:"xid"`
	Action      string `json:"action"`
	Forced      bool   `json:"forced"`
	Time        string `json:"time"`
	Reason      string `json:"reason"`
}

type listJSON struct {
	Log        *identityJSON   `json:"log"`
	LogInUse   bool            `json:"log_in_use"`
	Grace      string          `json:"grace"`
	Listed     []string        `json:"listed"`
	Unlisted   []unlistedJSON  `json:"unlisted"`
	Branches   []branchJSON    `json:"branches"`
	Heuristics []heuristicJSON `json:"heuristics"`
	Aborts     []abortJSON     `json:"aborts"`
	InDoubt    *int            `json:"in_doubt"`
	Errors     []string        `json:"errors"`
}

type keptJSON struct {
	GlobalID string `json:"global_id"`
	Reason   string `json:"reason"`
}

type recoverJSON struct {
	DryRun          bool           `json:"dry_run"`
	Log             *identityJSON  `json:"log"`
	Grace           string         `json:"grace"`
	Listed          []string       `json:"listed"`
	Unlisted        []unlistedJSON `json:"unlisted"`
	Branches        []branchJSON   `json:"branches"`
	Aborted         []string       `json:"aborted"`
	Forgotten       []string       `json:"forgotten"`
	ForgottenAborts []string       `json:"forgotten_aborts"`
	Kept            []keptJSON     `json:"kept"`
	InDoubt         *int           `json:"in_doubt"`
	Errors          []string       `json:"errors"`
}

// branch returns the view of the branch with XID text x (or raw
// identifier x) on participant p.
func findBranch(t testing.TB, bs []branchJSON, p, x string) branchJSON {
	t.Helper()
	for _, b := range bs {
		if b.Participant == p && (b.XID == x || (b.XID == "" && b.Raw == x)) {
			return b
		}
	}
	t.Fatalf("branch %s on %s not in the output: %+v", x, p, bs)
	return branchJSON{}
}

func hasBranch(bs []branchJSON, p, x string) bool {
	for _, b := range bs {
		if b.Participant == p && (b.XID == x || b.Raw == x) {
			return true
		}
	}
	return false
}

var nodeSeq atomic.Int64

// The identity of every test's decision log: a short grace, so that tests
// see presumed abort without waiting long. The default configuration
// lengthens it (recovery.grace: 10m) so that young branches wait there.
const (
	logTimeout = 500 * time.Millisecond
	logGrace   = time.Second
)

// env is one test's world: a MariaDB and a PostgreSQL database with table
// kv, resource managers on them playing the crashed coordinator, a node id
// and a decision log of the test's own.
type env struct {
	t      *testing.T
	ctx    context.Context
	node   string
	my, pg *dbtest.DB
	myRM   *xamysql.RM
	pgRM   *xapg.RM
	dir    string // the test's temporary directory
	logDir string
	logID  xa.LogID // the decision log's id, which our XIDs carry
	cfg    string   // path of the default configuration file (recovery.grace: 10m)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, dir: t.TempDir()}
	e.node = fmt.Sprintf("cli%d-%d", os.Getpid(), nodeSeq.Add(1))
	e.logDir = filepath.Join(e.dir, "log")
	e.my = dbtest.MySQLDB(t)
	e.pg = dbtest.PostgresDB(t)
	if err := e.my.Server.Exec(ctx, e.my.Name, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.myRM, err = xamysql.Open(ctx, xamysql.Config{Name: myName, DSN: e.my.DSN(), Init: true}); err != nil {
		t.Fatal(err)
	}
	if e.pgRM, err = xapg.Open(ctx, xapg.Config{Name: pgName, DSN: e.pg.DSN(), Init: true}); err != nil {
		e.myRM.Close()
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: this one runs before the databases
	// are dropped, which prepared branches would block.
	t.Cleanup(func() {
		e.myRM.Close()
		e.pgRM.Close()
		e.rollbackLeftovers()
	})
	e.createLog(e.logDir, e.node, logTimeout, logGrace)
	e.cfg = e.writeConfig("xactl.yaml", e.configText("10m"))
	return e
}

// createLog creates a decision log in dir, as the transaction manager's
// operator does before it first starts, and makes it the test's if dir is
// the test's log directory.
func (e *env) createLog(dir, node string, timeout, grace time.Duration) xa.LogIdentity {
	e.t.Helper()
	ident, err := xa.NewLogIdentity(node, timeout, grace, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := filelog.Create(dir, ident, filelog.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		e.t.Fatal(err)
	}
	if dir == e.logDir {
		e.logID = ident.ID
	}
	// Branches begin after the log was created, by its millisecond clock.
	time.Sleep(2 * time.Millisecond)
	return ident
}

// xid is branch i of g, of the test's decision log.
func (e *env) xid(g xa.GlobalID, i int) xa.XID {
	return xa.BranchRef{ID: g, Index: i, Log: e.logID}.XID()
}

// configText returns a configuration for the test's node, log and both
// databases; grace sets recovery.grace when not empty.
func (e *env) configText(grace string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node: %s\nlog:\n  dir: %s\nparticipants:\n", e.node, strconv.Quote(e.logDir))
	fmt.Fprintf(&b, "  - name: %s\n    driver: mysql\n    dsn: %s\n", myName, strconv.Quote(e.my.DSN()))
	fmt.Fprintf(&b, "  - name: %s\n    driver: postgres\n    dsn: %s\n", pgName, strconv.Quote(e.pg.DSN()))
	if grace != "" {
		fmt.Fprintf(&b, "recovery:\n  grace: %s\n", grace)
	}
	return b.String()
}

func (e *env) writeConfig(name, text string) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// graceConfig writes a configuration with recovery.grace set and returns
// its path.
func (e *env) graceConfig(grace string) string {
	e.t.Helper()
	return e.writeConfig("grace-"+grace+".yaml", e.configText(grace))
}

// logGraceConfig writes a configuration without recovery.grace: the log's
// grace (1 s) applies.
func (e *env) logGraceConfig() string {
	e.t.Helper()
	return e.writeConfig("log-grace.yaml", e.configText(""))
}

// run runs xactl with the default configuration.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return xactl(e.t, append([]string{"--config", e.cfg}, args...)...)
}

// runWith runs xactl with the configuration at cfg.
func (e *env) runWith(cfg string, args ...string) result {
	e.t.Helper()
	return xactl(e.t, append([]string{"--config", cfg}, args...)...)
}

// txn is one global transaction of the test's node whose two branches
// (maria: branch 0, pg: branch 1) are prepared and whose coordinator is
// gone: the sessions that prepared them are closed.
type txn struct {
	id       xa.GlobalID
	my, pg   xa.XID
	myOrigin xa.Origin
	k        int // the row each branch inserted (k, k)
}

// prepare makes a transaction that inserted row (k, k) in both databases
// and prepared both branches, as a coordinator that died before phase 2
// leaves it.
func (e *env) prepare(k int) txn {
	e.t.Helper()
	return e.prepareAt(k, time.Now())
}

// prepareAt is prepare with the transaction begun at begun (MariaDB does
// not say when a branch was prepared: its age comes from the global id).
func (e *env) prepareAt(k int, begun time.Time) txn {
	e.t.Helper()
	g, err := xa.NewGlobalID(e.node, begun)
	if err != nil {
		e.t.Fatal(err)
	}
	tx := txn{id: g, my: e.xid(g, 0), pg: e.xid(g, 1), k: k}

	mb, err := e.myRM.Start(e.ctx, tx.my)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := mb.Session().(*xamysql.Conn).ExecContext(e.ctx, "INSERT INTO kv (k, v) VALUES (?, ?)", k, k); err != nil {
		e.t.Fatal(err)
	}
	if v, err := mb.Prepare(e.ctx); v != xa.VotePrepared || err != nil {
		e.t.Fatalf("MariaDB prepare: %v, %v", v, err)
	}
	tx.myOrigin = mb.(xa.OriginReporter).Origin()
	if err := mb.Close(); err != nil {
		e.t.Fatal(err)
	}

	pb, err := e.pgRM.Start(e.ctx, tx.pg)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := pb.Session().(*xapg.Conn).Exec(e.ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k, k); err != nil {
		e.t.Fatal(err)
	}
	if v, err := pb.Prepare(e.ctx); v != xa.VotePrepared || err != nil {
		e.t.Fatalf("PostgreSQL prepare: %v, %v", v, err)
	}
	if err := pb.Close(); err != nil {
		e.t.Fatal(err)
	}
	return tx
}

// record is tx's commit record, as its coordinator wrote it.
func (tx txn) record() xa.CommitRecord {
	return xa.CommitRecord{ID: tx.id, Logged: time.Now(), Branches: []xa.BranchRecord{
		{RM: myName, XID: tx.my, Origin: tx.myOrigin},
		{RM: pgName, XID: tx.pg},
	}}
}

// logCommit writes commit records to the decision log, as the crashed
// coordinator did before it died.
func (e *env) logCommit(recs ...xa.CommitRecord) {
	e.t.Helper()
	// The coordinator decided in time: the log refuses a decision past its
	// transaction's begin plus the log's timeout (500 ms here) by the log's
	// clock, which is set back to each transaction's begin.
	var at time.Time
	l, err := filelog.Open(e.logDir, filelog.Options{Now: func() time.Time { return at }})
	if err != nil {
		e.t.Fatal(err)
	}
	defer l.Close()
	for _, r := range recs {
		at = r.ID.Begun
		if err := l.LogCommit(e.ctx, r); err != nil {
			e.t.Fatal(err)
		}
	}
}

// holdLog opens the decision log as a running transaction manager would
// and keeps it open until the returned function is called (or the test
// ends).
func (e *env) holdLog() (release func()) {
	e.t.Helper()
	l, err := filelog.Open(e.logDir, filelog.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { l.Close() }) }
	e.t.Cleanup(release)
	return release
}

// liveRecords returns the global ids of the commit records the decision
// log holds, read without taking the log.
func (e *env) liveRecords() []string {
	e.t.Helper()
	s, err := filelog.ReadSnapshot(e.logDir)
	if err != nil {
		e.t.Fatal(err)
	}
	recs, err := s.Commits(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.ID.String())
	}
	return out
}

// Foreign branches, made with raw SQL as another application would.

// myForeign prepares a branch with a binary XID that is not ours, which
// inserted row (k, k), and returns its XID.
func (e *env) myForeign(k int) xa.XID {
	e.t.Helper()
	x := xa.XID{FormatID: 1, Gtrid: append([]byte{0x00, 0xff, '\''}, e.node...), Bqual: []byte{0x01}}
	e.myRawPrepare(x.Gtrid, x.Bqual, 1, k)
	return x
}

// myNearMiss prepares a branch whose XID has our format id and a gtrid that
// looks almost like ours (no valid transaction id), and returns its XID.
func (e *env) myNearMiss(k int) xa.XID {
	e.t.Helper()
	x := xa.XID{FormatID: xa.FormatID, Gtrid: []byte("xa1." + e.node + ".bad"), Bqual: []byte("0")}
	e.myRawPrepare(x.Gtrid, x.Bqual, int64(x.FormatID), k)
	return x
}

// myRawPrepare prepares a branch with XA statements on a connection of its
// own, then closes the connection (the branch stays prepared, detached).
func (e *env) myRawPrepare(gtrid, bqual []byte, formatID int64, k int) {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	lit := myLiteral(formatID, gtrid, bqual)
	for _, q := range []string{
		"XA START " + lit,
		fmt.Sprintf("INSERT INTO kv (k, v) VALUES (%d, %d)", k, k),
		"XA END " + lit,
		"XA PREPARE " + lit,
	} {
		if _, err := conn.ExecContext(e.ctx, q); err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
	}
}

// myLiteral is the XID as MariaDB's XA statements take it and as the
// driver shows it in PreparedBranch.Raw.
func myLiteral(formatID int64, gtrid, bqual []byte) string {
	return fmt.Sprintf("X'%s',X'%s',%d", hex.EncodeToString(gtrid), hex.EncodeToString(bqual), formatID)
}

// pgForeign prepares a transaction named gid that inserted row (k, k).
func (e *env) pgForeign(gid string, k int) {
	e.t.Helper()
	c := e.pgConn()
	defer c.Close(context.Background())
	for _, q := range []string{
		"BEGIN",
		fmt.Sprintf("INSERT INTO kv (k, v) VALUES (%d, %d)", k, k),
		"PREPARE TRANSACTION '" + gid + "'",
	} {
		if _, err := c.Exec(e.ctx, q); err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
	}
}

func (e *env) pgConn() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(e.ctx, e.pg.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// Direct SQL checks.

// myRow reports whether MariaDB's kv holds row k.
func (e *env) myRow(k int) bool {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM kv WHERE k = ?", k).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n > 0
}

// pgRow reports whether PostgreSQL's kv holds row k.
func (e *env) pgRow(k int) bool {
	e.t.Helper()
	c := e.pgConn()
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(e.ctx, "SELECT COUNT(*) FROM kv WHERE k = $1", k).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n > 0
}

// wantRows checks row k in both databases.
func (e *env) wantRows(k int, my, pg bool) {
	e.t.Helper()
	if got := e.myRow(k); got != my {
		e.t.Errorf("MariaDB row %d present = %v, want %v", k, got, my)
	}
	if got := e.pgRow(k); got != pg {
		e.t.Errorf("PostgreSQL row %d present = %v, want %v", k, got, pg)
	}
}

// myPrepared reports whether XA RECOVER lists x.
func (e *env) myPrepared(x xa.XID) bool {
	e.t.Helper()
	for _, r := range e.myRecover() {
		if r.formatID == int64(x.FormatID) && bytes.Equal(r.gtrid, x.Gtrid) && bytes.Equal(r.bqual, x.Bqual) {
			return true
		}
	}
	return false
}

type myXID struct {
	formatID     int64
	gtrid, bqual []byte
}

func (e *env) myRecover() []myXID {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(e.ctx, "XA RECOVER")
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []myXID
	for rows.Next() {
		var f, gl, bl int64
		var data []byte
		if err := rows.Scan(&f, &gl, &bl, &data); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, myXID{f, data[:gl], data[gl : gl+bl]})
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// pgPrepared reports whether the test's PostgreSQL database holds a
// prepared transaction named gid.
func (e *env) pgPrepared(gid string) bool {
	e.t.Helper()
	c := e.pgConn()
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(e.ctx, "SELECT COUNT(*) FROM pg_prepared_xacts WHERE database = current_database() AND gid = $1", gid).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n > 0
}

// wantPrepared checks that tx's branches are (or are not) prepared.
func (e *env) wantPrepared(tx txn, my, pg bool) {
	e.t.Helper()
	if got := e.myPrepared(tx.my); got != my {
		e.t.Errorf("MariaDB branch %s prepared = %v, want %v", tx.my, got, my)
	}
	if got := e.pgPrepared(tx.pg.String()); got != pg {
		e.t.Errorf("PostgreSQL branch %s prepared = %v, want %v", tx.pg, got, pg)
	}
}

// waitDetached waits until MariaDB has let go of the session that prepared
// a branch: gone from the process list and holding no InnoDB transaction.
// Until then the driver refuses phase 2 from another session (retryable),
// which is right but would make exit codes depend on timing.
func (e *env) waitDetached(txs ...txn) {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for _, tx := range txs {
		id := tx.myOrigin.Session
		if id == 0 {
			continue
		}
		for {
			// INNODB_TRX is a snapshot that MariaDB refreshes only when
			// nobody has read it for 0.1 s: do not poll it faster.
			time.Sleep(250 * time.Millisecond)
			var n int
			err := db.QueryRowContext(e.ctx, "SELECT (SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?) + (SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?)", id, id).Scan(&n)
			if err != nil {
				e.t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("MariaDB session %d did not let go of its branch", id)
			}
		}
	}
}

// rollbackLeftovers rolls back every branch the test left prepared: its
// node's and the foreign ones tagged with its node id on MariaDB, and
// everything in its PostgreSQL database.
func (e *env) rollbackLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if db, err := sql.Open("mysql", e.my.DSN()); err == nil {
		defer db.Close()
		for attempt := 0; attempt < 50; attempt++ {
			rows, err := db.QueryContext(ctx, "XA RECOVER")
			if err != nil {
				break
			}
			var mine []string
			for rows.Next() {
				var f, gl, bl int64
				var data []byte
				if rows.Scan(&f, &gl, &bl, &data) != nil {
					continue
				}
				// Ours and near misses: xa1.<node>.…; foreign: …'<node>.
				if g := data[:gl]; bytes.Contains(g, []byte("."+e.node+".")) || bytes.HasSuffix(g, []byte("'"+e.node)) {
					mine = append(mine, myLiteral(f, g, data[gl:gl+bl]))
				}
			}
			rows.Close()
			if len(mine) == 0 {
				break
			}
			for _, lit := range mine {
				_, err := db.ExecContext(ctx, "XA ROLLBACK "+lit)
				var me *gomysql.MySQLError
				if err != nil && !(errors.As(err, &me) && me.Number == 1397) {
					e.t.Logf("cleanup: XA ROLLBACK %s: %v", lit, err)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if c, err := pgx.Connect(ctx, e.pg.DSN()); err == nil {
		defer c.Close(context.Background())
		rows, err := c.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
		if err == nil {
			gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err == nil {
				for _, gid := range gids {
					if _, err := c.Exec(ctx, "ROLLBACK PREPARED '"+strings.ReplaceAll(gid, "'", "''")+"'"); err != nil {
						e.t.Logf("cleanup: ROLLBACK PREPARED %s: %v", gid, err)
					}
				}
			}
		}
	}
}

// ageBeyond sleeps until a branch prepared at from is older than d.
func ageBeyond(from time.Time, d time.Duration) {
	if left := time.Until(from.Add(d + 100*time.Millisecond)); left > 0 {
		time.Sleep(left)
	}
}

// innodbTrx describes MariaDB's InnoDB transactions, for failure messages.
func (e *env) innodbTrx() string {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	rows, err := db.QueryContext(e.ctx, "SELECT trx_id, trx_state, trx_mysql_thread_id, trx_started, NOW() FROM information_schema.INNODB_TRX")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, state, started, now string
		var thread int64
		if err := rows.Scan(&id, &state, &thread, &started, &now); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "trx %s %s thread %d started %s (now %s)\n", id, state, thread, started, now)
	}
	fmt.Fprintf(&b, "XA RECOVER: %d rows\n", len(e.myRecover()))
	var typ, name, status string
	if err := db.QueryRowContext(e.ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err == nil {
		if i := strings.Index(status, "TRANSACTIONS\n"); i >= 0 {
			status = status[i:]
		}
		b.WriteString(status)
	}
	return b.String()
}
