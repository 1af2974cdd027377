package rmtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // raw SQL on the MySQL side
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/xa"
)

// Run runs the conformance suite against target. Tests run in parallel
// with each other on the shared server; the restart tests take a private
// server.
func Run(t *testing.T, target Target) {
	s := &suite{target: target}
	tests := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"CommitPrepared", s.testCommitPrepared},
		{"RollbackPrepared", s.testRollbackPrepared},
		{"RollbackActive", s.testRollbackActive},
		{"OnePhase", s.testOnePhase},
		{"EmptyBranchVotesReadOnly", s.testEmptyBranch},
		{"ReadOnlyBranch", s.testReadOnlyBranch},
		{"BinaryXID", s.testBinaryXID},
		{"XIDLimits", s.testXIDLimits},
		{"UnknownXID", s.testUnknownXID},
		{"DuplicateXID", s.testDuplicateXID},
		{"ForeignBranchUntouched", s.testForeignUntouched},
		{"SurvivesDisconnect", s.testSurvivesDisconnect},
		{"SurvivesRestart", func(t *testing.T) { s.testSurvivesRestart(t, false) }},
		{"SurvivesKill9", func(t *testing.T) { s.testSurvivesRestart(t, true) }},
		{"DeadlockAbortsCleanly", s.testDeadlock},
		{"CancelBlockedStatement", s.testCancelBlocked},
		{"StartContextBoundsWork", s.testStartCtxBoundsWork},
		{"TransactionControlRefused", s.testTransactionControl},
		{"PoolNotPoisoned", s.testPoolNotPoisoned},
		{"CloseDetachesPreparedBranch", s.testCloseDetaches},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t)
		})
	}
}

type suite struct {
	target Target
}

var seq atomic.Int64

// xid returns a fresh XID of ours for test t.
func (s *suite) xid(t testing.TB) xa.XID {
	t.Helper()
	g, err := xa.NewGlobalID(fmt.Sprintf("rmtest%d", seq.Add(1)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return g.Branch(0)
}

func (s *suite) postgres() bool { return s.target.Kind == "postgres" }

// env is one database with table kv and a resource manager on it.
type env struct {
	t   testing.TB
	s   *suite
	db  Database
	rm  xa.ResourceManager
	ctx context.Context
}

func (s *suite) newEnv(t testing.TB) *env {
	t.Helper()
	return s.envOn(t, s.target.Database(t))
}

func (s *suite) envOn(t testing.TB, db Database) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, s: s, db: db, ctx: ctx}
	ddl := "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)"
	if !s.postgres() {
		ddl += " ENGINE=InnoDB"
	}
	r := e.raw()
	if err := r.exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	r.close()
	e.rm = s.target.Open(t, db.DSN())
	return e
}

// raw returns a plain connection to the database, outside any XA branch.
func (e *env) raw() rawConn {
	e.t.Helper()
	if e.s.postgres() {
		c, err := pgx.Connect(e.ctx, e.db.DSN())
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { c.Close(context.Background()) })
		return pgRaw{c}
	}
	db, err := sql.Open("mysql", e.db.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return myRaw{db, conn}
}

type rawConn interface {
	exec(ctx context.Context, q string) error
	value(ctx context.Context, k int) (int, bool, error)
	close()
}

type pgRaw struct{ c *pgx.Conn }

func (r pgRaw) close() { r.c.Close(context.Background()) }

func (r pgRaw) exec(ctx context.Context, q string) error { _, err := r.c.Exec(ctx, q); return err }
func (r pgRaw) value(ctx context.Context, k int) (int, bool, error) {
	var v int
	err := r.c.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", k).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

type myRaw struct {
	db *sql.DB
	c  *sql.Conn
}

// close ends the session itself, not just its loan from the pool.
func (r myRaw) close() { r.c.Close(); r.db.Close() }

func (r myRaw) exec(ctx context.Context, q string) error {
	_, err := r.c.ExecContext(ctx, q)
	return err
}
func (r myRaw) value(ctx context.Context, k int) (int, bool, error) {
	var v int
	err := r.c.QueryRowContext(ctx, "SELECT v FROM kv WHERE k = ?", k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

// value reads row k with a fresh plain connection.
func (e *env) value(k int) (int, bool) {
	e.t.Helper()
	v, ok, err := e.raw().value(e.ctx, k)
	if err != nil {
		e.t.Fatal(err)
	}
	return v, ok
}

func (e *env) wantValue(k, want int) {
	e.t.Helper()
	if v, ok := e.value(k); !ok || v != want {
		e.t.Fatalf("row %d = %d (present %v), want %d", k, v, ok, want)
	}
}

func (e *env) wantAbsent(k int) {
	e.t.Helper()
	if v, ok := e.value(k); ok {
		e.t.Fatalf("row %d = %d, want no row", k, v)
	}
}

func (e *env) start(x xa.XID) xa.Branch {
	e.t.Helper()
	return e.startCtx(e.ctx, x)
}

func (e *env) startCtx(ctx context.Context, x xa.XID) xa.Branch {
	e.t.Helper()
	b, err := e.rm.Start(ctx, x)
	if err != nil {
		e.t.Fatalf("Start(%s): %v", x, err)
	}
	return b
}

func (e *env) put(b xa.Branch, k, v int) {
	e.t.Helper()
	if err := e.s.target.Put(e.ctx, b.Session(), k, v); err != nil {
		e.t.Fatalf("Put(%d, %d): %v", k, v, err)
	}
}

func (e *env) prepare(b xa.Branch, want xa.Vote) {
	e.t.Helper()
	v, err := b.Prepare(e.ctx)
	if v != want || (want != xa.VoteAbort && err != nil) {
		e.t.Fatalf("Prepare = %v, %v; want %v", v, err, want)
	}
}

// listed reports whether Recover lists x.
func (e *env) listed(rm xa.ResourceManager, x xa.XID) bool {
	e.t.Helper()
	ps, err := rm.Recover(e.ctx)
	if err != nil {
		e.t.Fatalf("Recover: %v", err)
	}
	for _, p := range ps {
		if p.XID.Equal(x) {
			return true
		}
	}
	return false
}

// originOf returns where b was prepared, for phase 2 from elsewhere.
func originOf(b xa.Branch) xa.Origin {
	if o, ok := b.(xa.OriginReporter); ok {
		return o.Origin()
	}
	return xa.Origin{}
}

// eventually retries f while it returns an ErrRetryable error.
func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if !xa.Retryable(err) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *suite) testCommitPrepared(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	e.put(b, 1, 10)
	e.prepare(b, xa.VotePrepared)
	if !e.listed(e.rm, x) {
		t.Fatal("prepared branch not listed by Recover")
	}
	e.wantAbsent(1) // not visible before commit
	if err := b.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantValue(1, 10)
	if e.listed(e.rm, x) {
		t.Fatal("committed branch still listed")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close after commit: %v", err)
	}
}

func (s *suite) testRollbackPrepared(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	e.put(b, 1, 10)
	e.prepare(b, xa.VotePrepared)
	if err := b.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantAbsent(1)
	if e.listed(e.rm, x) {
		t.Fatal("rolled back branch still listed")
	}
	// Rolling back a branch that is gone is success.
	if err := e.rm.Rollback(e.ctx, x, xa.Origin{}); err != nil {
		t.Fatalf("RM.Rollback of a finished branch: %v", err)
	}
}

func (s *suite) testRollbackActive(t *testing.T) {
	e := s.newEnv(t)
	b := e.start(s.xid(t))
	e.put(b, 1, 10)
	if err := b.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantAbsent(1)
	// The session went back clean: a new branch works.
	b2 := e.start(s.xid(t))
	e.put(b2, 1, 11)
	e.prepare(b2, xa.VotePrepared)
	if err := b2.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantValue(1, 11)
}

func (s *suite) testOnePhase(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	opc, ok := b.(xa.OnePhaseCommitter)
	if !ok {
		t.Skip("branch does not implement OnePhaseCommitter")
	}
	e.put(b, 1, 10)
	if err := opc.CommitOnePhase(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantValue(1, 10)
	if e.listed(e.rm, x) {
		t.Fatal("one-phase branch listed as prepared")
	}
}

func (s *suite) testEmptyBranch(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	if id, ok := b.(xa.Idler); ok && !id.Idle() {
		t.Fatal("a branch that ran nothing says it is not idle")
	}
	e.prepare(b, xa.VoteReadOnly)
	if e.listed(e.rm, x) {
		t.Fatal("empty branch left a prepared branch")
	}
}

func (s *suite) testReadOnlyBranch(t *testing.T) {
	e := s.newEnv(t)
	if err := e.raw().exec(e.ctx, "INSERT INTO kv VALUES (1, 5)"); err != nil {
		t.Fatal(err)
	}
	x := s.xid(t)
	b := e.start(x)
	v, ok, err := s.target.Get(e.ctx, b.Session(), 1)
	if err != nil || !ok || v != 5 {
		t.Fatalf("Get = %d, %v, %v", v, ok, err)
	}
	if id, ok := b.(xa.Idler); ok && id.Idle() {
		t.Fatal("a branch that ran a statement says it is idle")
	}
	vote, err := b.Prepare(e.ctx)
	switch {
	case err != nil:
		t.Fatalf("Prepare: %v", err)
	case vote == xa.VoteReadOnly:
		if e.listed(e.rm, x) {
			t.Fatal("read-only vote left a prepared branch")
		}
	case vote == xa.VotePrepared:
		if err := b.Commit(e.ctx); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("vote %v", vote)
	}
	e.wantValue(1, 5)
}

func (s *suite) testBinaryXID(t *testing.T) {
	e := s.newEnv(t)
	g := s.xid(t).Gtrid
	x := xa.XID{FormatID: 77, Gtrid: append([]byte{0x00, 0xff, '\'', '\\', '"', ';'}, g...), Bqual: []byte{0x00, '\'', 0xfe}}
	b := e.start(x)
	e.put(b, 1, 10)
	e.prepare(b, xa.VotePrepared)
	if !e.listed(e.rm, x) {
		t.Fatalf("binary XID %s not listed by Recover", x)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	rm2 := s.target.Open(t, e.db.DSN())
	eventually(t, "RM.Commit of binary XID", func() error { return rm2.Commit(e.ctx, x, xa.Origin{}) })
	e.wantValue(1, 10)
	if e.listed(rm2, x) {
		t.Fatal("committed binary branch still listed")
	}
}

func (s *suite) testXIDLimits(t *testing.T) {
	e := s.newEnv(t)
	g64 := []byte(strings.Repeat("g", 64))
	x := xa.XID{FormatID: 1, Gtrid: g64, Bqual: []byte(strings.Repeat("q", 64))}
	b := e.start(x)
	e.put(b, 1, 1)
	e.prepare(b, xa.VotePrepared)
	if !e.listed(e.rm, x) {
		t.Fatal("64-byte XID not listed")
	}
	if err := b.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantValue(1, 1)
	for _, bad := range []xa.XID{
		{FormatID: 1, Gtrid: append(g64, 'x')},
		{FormatID: 1, Gtrid: []byte("g"), Bqual: []byte(strings.Repeat("q", 65))},
		{FormatID: -1, Gtrid: []byte("g")},
		{FormatID: 1},
	} {
		_, err := e.rm.Start(e.ctx, bad)
		if !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Start(%d-byte gtrid, %d-byte bqual, fid %d) = %v, want ErrInvalidXID", len(bad.Gtrid), len(bad.Bqual), bad.FormatID, err)
		}
		if err := e.rm.Commit(e.ctx, bad, xa.Origin{}); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Commit(bad XID) = %v, want ErrInvalidXID", err)
		}
		if err := e.rm.Rollback(e.ctx, bad, xa.Origin{}); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Rollback(bad XID) = %v, want ErrInvalidXID", err)
		}
	}
}

func (s *suite) testUnknownXID(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	if err := e.rm.Commit(e.ctx, x, xa.Origin{}); !errors.Is(err, xa.ErrUnknownXID) {
		t.Fatalf("Commit of a never-prepared XID = %v, want ErrUnknownXID", err)
	}
	if err := e.rm.Rollback(e.ctx, x, xa.Origin{}); err != nil {
		t.Fatalf("Rollback of a never-prepared XID = %v, want nil", err)
	}
}

func (s *suite) testDuplicateXID(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b1 := e.start(x)
	e.put(b1, 1, 1)
	e.prepare(b1, xa.VotePrepared)
	defer b1.Rollback(e.ctx) //nolint:errcheck

	b2 := e.start(x)
	err := s.target.Put(e.ctx, b2.Session(), 2, 2)
	if err == nil {
		var v xa.Vote
		v, err = b2.Prepare(e.ctx)
		if err == nil {
			t.Fatalf("second branch with the same XID prepared (vote %v)", v)
		}
		if v != xa.VoteAbort {
			t.Fatalf("duplicate XID: vote %v with error %v", v, err)
		}
	} else {
		b2.Rollback(e.ctx) //nolint:errcheck
	}
	if !errors.Is(err, xa.ErrDuplicateXID) {
		t.Fatalf("duplicate XID error = %v, want ErrDuplicateXID", err)
	}
	e.wantAbsent(2)
	if !e.listed(e.rm, x) {
		t.Fatal("the first branch is gone after the duplicate was refused")
	}
}

// foreign prepares a branch of another application with raw SQL and
// returns its identifier as Recover should show it.
func (e *env) foreign(k int) (match func(xa.PreparedBranch) bool, cleanup func()) {
	e.t.Helper()
	r := e.raw()
	name := fmt.Sprintf("other-app-%d-%d", seq.Add(1), time.Now().UnixNano())
	if e.s.postgres() {
		// Almost ours: our prefix with a malformed id must not pass.
		gid := "2019622913:xa1.node." + name + ":0"
		for _, q := range []string{"BEGIN", fmt.Sprintf("INSERT INTO kv VALUES (%d, 1)", k), "PREPARE TRANSACTION '" + gid + "'"} {
			if err := r.exec(e.ctx, q); err != nil {
				e.t.Fatal(err)
			}
		}
		return func(p xa.PreparedBranch) bool { return p.Raw == gid }, func() {
			e.raw().exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") //nolint:errcheck
		}
	}
	// Binary bytes, a quote and formatID 1, as another TM might write.
	gt := append([]byte{0x00, 0xff, '\''}, name...)
	lit := fmt.Sprintf("X'%x',X'%x',1", gt, []byte{0x01, 0x80})
	for _, q := range []string{"XA START " + lit, fmt.Sprintf("INSERT INTO kv VALUES (%d, 1)", k), "XA END " + lit, "XA PREPARE " + lit} {
		if err := r.exec(e.ctx, q); err != nil {
			e.t.Fatal(err)
		}
	}
	// The other application goes away: MariaDB keeps the prepared branch
	// attached to its session until the session closes.
	r.close()
	x := xa.XID{FormatID: 1, Gtrid: gt, Bqual: []byte{0x01, 0x80}}
	return func(p xa.PreparedBranch) bool { return p.XID.Equal(x) }, func() {
		// The closed session may take a moment to let the branch go.
		r := e.raw()
		for i := 0; i < 50 && r.exec(context.Background(), "XA ROLLBACK "+lit) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (s *suite) testForeignUntouched(t *testing.T) {
	e := s.newEnv(t)
	match, cleanup := e.foreign(100)
	defer cleanup()
	find := func() (xa.PreparedBranch, bool) {
		ps, err := e.rm.Recover(e.ctx)
		if err != nil {
			t.Fatalf("Recover with a foreign branch: %v", err)
		}
		for _, p := range ps {
			if match(p) {
				return p, true
			}
		}
		return xa.PreparedBranch{}, false
	}
	p, ok := find()
	if !ok {
		t.Fatal("foreign branch not listed")
	}
	if _, _, owned := xa.Owned(p.XID); owned {
		t.Fatalf("foreign branch %q taken for ours", p.Raw)
	}
	// Our own traffic does not touch it.
	x := s.xid(t)
	b := e.start(x)
	e.put(b, 1, 1)
	e.prepare(b, xa.VotePrepared)
	if err := b.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.rm.Rollback(e.ctx, s.xid(t), xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := find(); !ok {
		t.Fatal("foreign branch disappeared")
	}
}

func (s *suite) testSurvivesDisconnect(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	e.put(b, 1, 10)
	e.prepare(b, xa.VotePrepared)
	from := originOf(b)
	// Drop the session and the whole pool, as a crashed process would.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if c, ok := e.rm.(io.Closer); ok {
		c.Close()
	} else if c, ok := e.rm.(interface{ Close() }); ok {
		c.Close()
	}
	rm2 := s.target.Open(t, e.db.DSN())
	if !e.listed(rm2, x) {
		t.Fatal("prepared branch not listed after its session closed")
	}
	e.wantAbsent(1)
	eventually(t, "Commit from a new session", func() error { return rm2.Commit(e.ctx, x, from) })
	e.wantValue(1, 10)
}

func (s *suite) testSurvivesRestart(t *testing.T, kill bool) {
	db, srv := s.target.PrivateDatabase(t)
	e := s.envOn(t, db)
	x1, x2 := s.xid(t), s.xid(t)
	for i, x := range []xa.XID{x1, x2} {
		b := e.start(x)
		e.put(b, i+1, 10*(i+1))
		e.prepare(b, xa.VotePrepared)
		b.Close() //nolint:errcheck
	}
	if kill {
		srv.Kill(t)
	} else {
		srv.Stop(t)
	}
	srv.Start(t)
	rm2 := s.target.Open(t, e.db.DSN())
	if !e.listed(rm2, x1) || !e.listed(rm2, x2) {
		t.Fatal("prepared branches not listed after restart")
	}
	eventually(t, "Commit after restart", func() error { return rm2.Commit(e.ctx, x1, xa.Origin{}) })
	eventually(t, "Rollback after restart", func() error { return rm2.Rollback(e.ctx, x2, xa.Origin{}) })
	e.wantValue(1, 10)
	e.wantAbsent(2)
}

func (s *suite) testDeadlock(t *testing.T) {
	e := s.newEnv(t)
	if err := e.raw().exec(e.ctx, "INSERT INTO kv VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	b1, b2 := e.start(s.xid(t)), e.start(s.xid(t))
	e.put(b1, 1, 1)
	e.put(b2, 2, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = s.target.Put(e.ctx, b1.Session(), 2, 1) }()
	time.Sleep(200 * time.Millisecond)
	go func() { defer wg.Done(); errs[1] = s.target.Put(e.ctx, b2.Session(), 1, 2) }()
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("want exactly one deadlock victim, got errors %v / %v", errs[0], errs[1])
	}
	victim, survivor := b1, b2
	if errs[1] != nil {
		victim, survivor = b2, b1
	}
	// The victim must abort cleanly: its vote is abort (rolled back),
	// or rolling it back works.
	v, err := victim.Prepare(e.ctx)
	if v != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) {
		t.Fatalf("victim Prepare = %v, %v; want abort, ErrRolledBack", v, err)
	}
	victim.Rollback(e.ctx) //nolint:errcheck // already rolled back
	e.prepare(survivor, xa.VotePrepared)
	if err := survivor.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	want := 1
	if survivor == b2 {
		want = 2
	}
	e.wantValue(1, want)
	e.wantValue(2, want)
	// The pool is healthy afterwards.
	b := e.start(s.xid(t))
	e.put(b, 3, 3)
	e.prepare(b, xa.VotePrepared)
	if err := b.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// lockRow holds a row lock on k from a plain connection until release.
func (e *env) lockRow(k int) (release func()) {
	e.t.Helper()
	r := e.raw()
	if err := r.exec(e.ctx, fmt.Sprintf("INSERT INTO kv VALUES (%d, 0)", k)); err != nil {
		e.t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", fmt.Sprintf("UPDATE kv SET v = -1 WHERE k = %d", k)} {
		if err := r.exec(e.ctx, q); err != nil {
			e.t.Fatal(err)
		}
	}
	return func() {
		if err := r.exec(e.ctx, "COMMIT"); err != nil {
			e.t.Errorf("lock holder could not commit: %v", err)
		}
	}
}

func (s *suite) testCancelBlocked(t *testing.T) {
	e := s.newEnv(t)
	release := e.lockRow(1)
	b := e.start(s.xid(t))
	ctx, cancel := context.WithCancel(e.ctx)
	time.AfterFunc(300*time.Millisecond, cancel)
	began := time.Now()
	err := s.target.Put(ctx, b.Session(), 1, 5)
	if err == nil {
		t.Fatal("blocked statement succeeded")
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("cancelled statement returned after %v", d)
	}
	if err := b.Rollback(e.ctx); err != nil {
		t.Fatalf("Rollback after cancel: %v", err)
	}
	release()
	e.wantValue(1, -1)
	b2 := e.start(s.xid(t))
	e.put(b2, 1, 7)
	e.prepare(b2, xa.VotePrepared)
	if err := b2.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantValue(1, 7)
}

func (s *suite) testStartCtxBoundsWork(t *testing.T) {
	e := s.newEnv(t)
	release := e.lockRow(1)
	defer release()
	ctx, cancel := context.WithTimeout(e.ctx, 500*time.Millisecond)
	defer cancel()
	b := e.startCtx(ctx, s.xid(t))
	began := time.Now()
	// The statement's own context has no deadline: the branch's does.
	if err := s.target.Put(e.ctx, b.Session(), 1, 5); err == nil {
		t.Fatal("blocked statement succeeded")
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("statement outlived the branch context by %v", d)
	}
	if err := b.Rollback(e.ctx); err != nil {
		t.Fatalf("Rollback after the branch context ended: %v", err)
	}
	// Later statements fail too.
	b2 := e.startCtx(ctx, s.xid(t))
	if err := s.target.Put(e.ctx, b2.Session(), 2, 5); err == nil {
		t.Fatal("statement ran on a branch whose context has ended")
	}
	b2.Rollback(e.ctx) //nolint:errcheck
}

func (s *suite) testTransactionControl(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	e.put(b, 1, 1)
	for _, q := range []string{"COMMIT", "ROLLBACK", "BEGIN", "  /* sneaky */ COMMIT"} {
		err := s.target.Exec(e.ctx, b.Session(), q)
		if err == nil {
			t.Fatalf("%q accepted on a branch session", q)
		}
		if !errors.Is(err, xa.ErrTransactionControl) && !errors.Is(err, xa.ErrInvalidState) {
			t.Errorf("%q: %v; want ErrTransactionControl or ErrInvalidState", q, err)
		}
	}
	e.wantAbsent(1) // nothing committed behind the TM's back
	e.put(b, 2, 2)
	e.prepare(b, xa.VotePrepared)
	e.wantAbsent(1)
	if err := b.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantValue(1, 1)
	e.wantValue(2, 2)
}

func (s *suite) testPoolNotPoisoned(t *testing.T) {
	e := s.newEnv(t)
	// Every way a branch can end, then many concurrent branches on the
	// same pool: none may inherit a session in a bad state.
	for i := 0; i < 5; i++ {
		x := s.xid(t)
		b := e.start(x)
		e.put(b, 1000+i, i)
		switch i % 5 {
		case 0:
			e.prepare(b, xa.VotePrepared)
			b.Commit(e.ctx) //nolint:errcheck
		case 1:
			e.prepare(b, xa.VotePrepared)
			b.Rollback(e.ctx) //nolint:errcheck
		case 2:
			b.Rollback(e.ctx) //nolint:errcheck
		case 3:
			e.prepare(b, xa.VotePrepared)
			b.Close() //nolint:errcheck
			eventually(t, "RM.Rollback after Close", func() error { return e.rm.Rollback(e.ctx, x, xa.Origin{}) })
		case 4:
			b.Close() //nolint:errcheck
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b, err := e.rm.Start(e.ctx, s.xid(t))
			if err != nil {
				errc <- err
				return
			}
			if err := s.target.Put(e.ctx, b.Session(), i, i); err != nil {
				errc <- fmt.Errorf("put %d: %w", i, err)
				b.Rollback(e.ctx) //nolint:errcheck
				return
			}
			if v, err := b.Prepare(e.ctx); v != xa.VotePrepared {
				errc <- fmt.Errorf("prepare %d: %v %w", i, v, err)
				return
			}
			if err := b.Commit(e.ctx); err != nil {
				errc <- fmt.Errorf("commit %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for i := 0; i < 40; i++ {
		e.wantValue(i, i)
	}
}

func (s *suite) testCloseDetaches(t *testing.T) {
	e := s.newEnv(t)
	x := s.xid(t)
	b := e.start(x)
	e.put(b, 1, 10)
	e.prepare(b, xa.VotePrepared)
	from := originOf(b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Another session (of the same pool) can finish it.
	eventually(t, "Commit after Close", func() error { return e.rm.Commit(e.ctx, x, from) })
	e.wantValue(1, 10)
}
