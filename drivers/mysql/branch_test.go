package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/xa"
)

// The whole life of a branch through the RM: work, prepare, commit on the
// same session; the other session sees nothing before the commit.
func TestBranchPrepareCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	x := newXID(t)
	b, err := rm.Start(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if !b.(xa.Idler).Idle() {
		t.Fatal("a fresh branch is not idle")
	}
	c := conn(b)
	if _, err := c.ExecContext(ctx, "INSERT INTO kv VALUES (?, ?)", 1, 10); err != nil {
		t.Fatal(err)
	}
	if b.(xa.Idler).Idle() {
		t.Fatal("a branch that ran a statement is idle")
	}
	var v int
	if err := c.QueryRowContext(ctx, "SELECT v FROM kv WHERE k = ?", 1).Scan(&v); err != nil || v != 10 {
		t.Fatalf("read own write: %d, %v", v, err)
	}
	if _, ok := getV(t, raw, 1); ok {
		t.Fatal("uncommitted row visible to another session")
	}
	id := sessionID(t, c)
	vote, err := b.Prepare(ctx)
	if err != nil || vote != xa.VotePrepared {
		t.Fatalf("Prepare: %v, %v", vote, err)
	}
	o := b.(xa.OriginReporter).Origin()
	var serverNow float64
	if err := raw.QueryRow("SELECT @@timestamp").Scan(&serverNow); err != nil {
		t.Fatal(err)
	}
	if d := time.Unix(0, int64(serverNow*1e9)).Sub(o.Prepared); o.Session != id || d < -time.Second || d > time.Minute {
		t.Fatalf("Origin = %+v, want session %d prepared just now by the server's clock (%v before the server's time now)", o, id, d)
	}
	if !listedIn(recoverList(t, raw), x) {
		t.Fatal("prepared branch not in XA RECOVER")
	}
	if _, err := c.ExecContext(ctx, "INSERT INTO kv VALUES (2, 2)"); !errors.Is(err, xa.ErrBranchDone) {
		t.Fatalf("statement after prepare: %v, want ErrBranchDone", err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := getV(t, raw, 1); !ok || v != 10 {
		t.Fatalf("after commit: %d, %v", v, ok)
	}
	if listedIn(recoverList(t, raw), x) {
		t.Fatal("committed branch still in XA RECOVER")
	}
	// Ended: Close is a no-op, Commit refuses.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx); !errors.Is(err, xa.ErrInvalidState) {
		t.Fatalf("second Commit: %v", err)
	}
}

// Branch.Rollback works from every state and the work is gone.
func TestBranchRollbackAnyState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	for _, st := range []string{"idle", "active", "prepared", "after a refused statement"} {
		t.Run(st, func(t *testing.T) {
			x := newXID(t)
			b, err := rm.Start(ctx, x)
			if err != nil {
				t.Fatal(err)
			}
			c := conn(b)
			switch st {
			case "active":
				mustExec(t, c, "INSERT INTO kv VALUES (100, 1)")
			case "prepared":
				mustExec(t, c, "INSERT INTO kv VALUES (100, 1)")
				if v, err := b.Prepare(ctx); v != xa.VotePrepared {
					t.Fatal(v, err)
				}
			case "after a refused statement":
				mustExec(t, c, "INSERT INTO kv VALUES (100, 1)")
				if _, err := c.ExecContext(ctx, "INSERT INTO kv VALUES (100, 1)"); errNumber(err) != 1062 {
					t.Fatalf("duplicate key: %v", err)
				}
			}
			if err := b.Rollback(ctx); err != nil {
				t.Fatalf("Rollback: %v", err)
			}
			if _, ok := getV(t, raw, 100); ok {
				t.Fatal("rolled-back row is there")
			}
			if listedIn(recoverList(t, raw), x) {
				t.Fatal("rolled-back branch in XA RECOVER")
			}
			if err := b.Rollback(ctx); err != nil {
				t.Fatalf("second Rollback: %v", err)
			}
		})
	}
}

// XIDs with every awkward byte go through XA START, PREPARE, XA RECOVER
// and COMMIT unchanged; 64-byte parts work; 65 bytes are refused.
func TestBinaryXIDRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	xids := []xa.XID{
		{FormatID: 0x7fffffff, Gtrid: []byte{0x00, 0xff, '\'', '\\', '"', ';', 0x00}, Bqual: []byte{'\\', 0x00, '\''}},
		{FormatID: 0, Gtrid: []byte("x'),X'00',1; XA COMMIT 'y"), Bqual: nil},
		{FormatID: 3, Gtrid: []byte(strings.Repeat("\xff", 64)), Bqual: []byte(strings.Repeat("\x00", 64))},
	}
	for i, x := range xids {
		b, err := rm.Start(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", i, i)
		if v, err := b.Prepare(ctx); v != xa.VotePrepared {
			t.Fatalf("%v: %v %v", x, v, err)
		}
		// Give phase 2 up to recovery: the session closes, the branch
		// stays prepared.
		o := b.(xa.OriginReporter).Origin()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		ps, err := rm.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found *xa.PreparedBranch
		for i := range ps {
			if ps[i].XID.Equal(x) {
				found = &ps[i]
			}
		}
		if found == nil {
			t.Fatalf("%v not recovered from %v", x, ps)
		}
		if found.Raw != xidLiteral(x) || !found.Prepared.IsZero() {
			t.Fatalf("recovered %+v", found)
		}
		if err := retry(t, func() error { return rm.Commit(ctx, found.XID, o) }); err != nil {
			t.Fatalf("Commit %v: %v", x, err)
		}
		if v, ok := getV(t, raw, i); !ok || v != i {
			t.Fatalf("row %d: %d %v", i, v, ok)
		}
	}
	long := xa.XID{FormatID: 1, Gtrid: []byte(strings.Repeat("g", 65))}
	if _, err := rm.Start(ctx, long); !errors.Is(err, xa.ErrInvalidXID) {
		t.Fatalf("65-byte gtrid: %v", err)
	}
}

// An invalid XID is refused before any SQL: the RM's server is not even
// reachable, and the error is ErrInvalidXID, not a connection error.
func TestInvalidXIDNothingSent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rm := openRM(t, closedPortDSN(t), func(c *Config) { c.SkipCheck, c.Init = true, false })
	bad := []xa.XID{
		{FormatID: 1, Gtrid: []byte(strings.Repeat("g", 65))},
		{FormatID: 1, Gtrid: []byte("g"), Bqual: []byte(strings.Repeat("q", 65))},
		{FormatID: -1, Gtrid: []byte("g")},
		{FormatID: 1},
	}
	for _, x := range bad {
		if _, err := rm.Start(ctx, x); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Start(%v): %v", x, err)
		} else {
			wantKind(t, err, xa.ErrInvalidXID)
		}
		if err := rm.Commit(ctx, x, xa.Origin{}); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Commit(%v): %v", x, err)
		}
		if err := rm.Rollback(ctx, x, xa.Origin{}); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Rollback(%v): %v", x, err)
		}
	}
	// The same calls with a valid XID do try the (absent) server.
	ok := xa.XID{FormatID: 1, Gtrid: []byte(strings.Repeat("g", 64))}
	if _, err := rm.Start(ctx, ok); err == nil || errors.Is(err, xa.ErrInvalidXID) {
		t.Fatalf("Start with a valid XID on a closed port: %v", err)
	}
}

// RowsAffected and LastInsertId are the statement's, not XA START's, when
// both go in one round trip; a multi-statement query reports its last.
func TestFirstStatementResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT) AUTO_INCREMENT=41")
	rm := openRM(t, db.DSN())
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback(ctx)
	res, err := conn(b).ExecContext(ctx, "INSERT INTO ai (v) VALUES (?), (?)", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 2 {
		t.Errorf("RowsAffected = %d, want 2", n)
	}
	if id, _ := res.LastInsertId(); id != 41 {
		t.Errorf("LastInsertId = %d, want 41", id)
	}
	res, err = conn(b).ExecContext(ctx, "INSERT INTO ai (v) VALUES (3); UPDATE ai SET v = v + 1")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 3 {
		t.Errorf("RowsAffected of a later multi-statement = %d, want 3", n)
	}
}

// Round trips, counted on the wire: one per statement with XA START riding
// along, one for XA END+PREPARE, one for COMMIT; none for a read-only
// branch; CONNECTION_ID() is read once per connection, not per branch.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()), func(c *Config) { c.MaxConns = 1 })
	count := func(f func()) int64 {
		t.Helper()
		before := w.commands.Load()
		f()
		return w.commands.Load() - before
	}
	start := func() xa.Branch {
		b, err := rm.Start(ctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Warm the pool: the connection's first use costs its set-up.
	b := start()
	b.Rollback(ctx)

	k := 0
	cases := []struct {
		name string
		want int64
		run  func()
	}{
		{"read-only branch", 0, func() {
			b := start()
			if v, err := b.Prepare(ctx); v != xa.VoteReadOnly || err != nil {
				t.Fatal(v, err)
			}
		}},
		{"exec, prepare, commit", 3, func() {
			b := start()
			k++
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
			if v, err := b.Prepare(ctx); v != xa.VotePrepared {
				t.Fatal(v, err)
			}
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"two statements, one phase", 3, func() {
			b := start()
			k++
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
			mustExec(t, conn(b), "UPDATE kv SET v = v + 1 WHERE k = ?", k)
			if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"query first: XA START on its own", 4, func() {
			b := start()
			rows, err := conn(b).QueryContext(ctx, "SELECT k FROM kv")
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if v, err := b.Prepare(ctx); v != xa.VotePrepared {
				t.Fatal(v, err)
			}
			if err := b.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"rollback of an active branch", 2, func() {
			b := start()
			k++
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
			if err := b.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		if got := count(c.run); got != c.want {
			t.Errorf("%s: %d commands, want %d", c.name, got, c.want)
		}
	}
	if n := w.commands.Load(); n == 0 {
		t.Fatal("the wire counted nothing")
	}
	if v, ok := getV(t, raw, 2); !ok || v != 3 {
		t.Fatalf("one-phase commit: %d %v", v, ok)
	}
}

// When go-sql-driver cannot interpolate the arguments (here: bigger than
// its max packet), it would use a server-side prepared statement, which
// cannot carry XA START: the RM sends XA START on its own and the
// statement still works.
func TestFirstStatementNotInterpolable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "CREATE TABLE blobs (k INT PRIMARY KEY, b LONGBLOB)")
	cfg, _ := gomysql.ParseDSN(db.DSN())
	cfg.MaxAllowedPacket = 4096
	w := newWire(t)
	rm := openRM(t, w.dsn(t, cfg.FormatDSN()))
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("z", 10000))
	before := w.commands.Load()
	res, err := conn(b).ExecContext(ctx, "INSERT INTO blobs VALUES (?, ?)", 1, big)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("RowsAffected = %d", n)
	}
	if sent := w.commands.Load() - before; sent < 3 {
		t.Fatalf("%d commands: want XA START, then prepare/send/execute", sent)
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw.QueryRow("SELECT LENGTH(b) FROM blobs WHERE k = 1").Scan(&n); err != nil || n != len(big) {
		t.Fatalf("blob: %d %v", n, err)
	}
}

// The first statement fails after XA START took effect: the branch is
// active (the error is the statement's) and still works.
func TestFirstStatementFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	for _, q := range []string{"INSERT INTO nosuchtable VALUES (1)", "SELEC 1", "COMMIT"} {
		b, err := rm.Start(ctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn(b).ExecContext(ctx, q)
		if err == nil {
			t.Fatalf("%s: no error", q)
		}
		if b.(xa.Idler).Idle() {
			t.Fatalf("%s: branch idle after XA START ran", q)
		}
		mustExec(t, conn(b), "INSERT INTO kv VALUES (7, 7)")
		if v, err := b.Prepare(ctx); v != xa.VotePrepared {
			t.Fatalf("%s: %v %v", q, v, err)
		}
		if err := b.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A duplicate XID is XA START's own error: the branch never started.
	x := newXID(t)
	b1, _ := rm.Start(ctx, x)
	mustExec(t, conn(b1), "INSERT INTO kv VALUES (8, 8)")
	b2, _ := rm.Start(ctx, x)
	_, err := conn(b2).ExecContext(ctx, "INSERT INTO kv VALUES (9, 9)")
	wantKind(t, err, xa.ErrDuplicateXID)
	wantMySQLErr(t, err, 1440)
	if !b2.(xa.Idler).Idle() {
		t.Fatal("branch with a refused XA START is not idle")
	}
	if v, err := b2.Prepare(ctx); v != xa.VoteReadOnly {
		t.Fatal(v, err)
	}
	if err := b1.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := getV(t, raw, 9); ok {
		t.Fatal("statement after a refused XA START ran")
	}
}

// One-phase commit: XA END + XA COMMIT ONE PHASE; never listed as
// prepared; an idle branch commits with no I/O.
func TestCommitOnePhase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	x := newXID(t)
	b, _ := rm.Start(ctx, x)
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := getV(t, raw, 1); !ok || v != 1 {
		t.Fatal("not committed")
	}
	if listedIn(recoverList(t, raw), x) {
		t.Fatal("one-phase branch listed")
	}
	b, _ = rm.Start(ctx, newXID(t))
	if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
		t.Fatal(err)
	}
	// After prepare, one phase is refused by the RM.
	b, _ = rm.Start(ctx, newXID(t))
	mustExec(t, conn(b), "INSERT INTO kv VALUES (2, 2)")
	b.Prepare(ctx)
	wantKind(t, b.(xa.OnePhaseCommitter).CommitOnePhase(ctx), xa.ErrInvalidState)
	if err := b.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// QueryRowContext reports the RM's own refusals through Row.Scan.
func TestQueryRowErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := setup(t)
	rm := openRM(t, db.DSN())
	b, _ := rm.Start(ctx, newXID(t))
	var v int
	err := conn(b).QueryRowContext(ctx, "XA RECOVER").Scan(&v)
	if !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("XA statement through QueryRow: %v", err)
	}
	err = conn(b).QueryRowContext(ctx, "SELECT v FROM kv WHERE k = 1").Scan(&v)
	if !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("no row: %v", err)
	}
	b.Prepare(ctx)
	err = conn(b).QueryRowContext(ctx, "SELECT 1").Scan(&v)
	if !errors.Is(err, xa.ErrBranchDone) {
		t.Fatalf("after prepare: %v", err)
	}
	b.Rollback(ctx)
}

// A statement prepared on the branch's session runs inside the branch (its
// rows commit and roll back with it), is parsed once by the server however
// often it runs, and is closed when the branch ends: the session goes back
// to the pool with no prepared statement left on the server. (The counts
// are the session's own status, read through the next branch, which gets
// the same session from a pool of one.)
func TestPreparedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN(), func(c *Config) { c.MaxConns = 1 })
	status := func(c *Conn, name string) int {
		var n string
		var v int
		if err := c.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE '"+name+"'").Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	closed := -1
	for _, commit := range []bool{true, false} {
		x := newXID(t)
		b, err := rm.Start(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		c := conn(b)
		if closed >= 0 {
			if n := status(c, "Com_stmt_close"); n != closed+1 {
				t.Fatalf("statements closed on the session: %d, want %d: the last branch left its statement open", n, closed+1)
			}
		}
		closed = status(c, "Com_stmt_close")
		prep0, exec0 := status(c, "Com_stmt_prepare"), status(c, "Com_stmt_execute")
		st, err := c.PrepareContext(ctx, "INSERT INTO kv VALUES (?, ?), (?, ?)")
		if err != nil {
			t.Fatal(err)
		}
		base := 100
		if !commit {
			base = 200
		}
		for i := 0; i < 3; i++ {
			k := base + 2*i
			if _, err := st.ExecContext(ctx, k, k, k+1, k+1); err != nil {
				t.Fatal(err)
			}
		}
		if p, e := status(c, "Com_stmt_prepare")-prep0, status(c, "Com_stmt_execute")-exec0; p != 1 || e != 3 {
			t.Fatalf("the server prepared %d and executed %d statements, want 1 and 3", p, e)
		}
		if _, ok := getV(t, raw, base); ok {
			t.Fatal("a prepared statement's row is visible outside the branch before the commit")
		}
		if v, err := b.Prepare(ctx); err != nil || v != xa.VotePrepared {
			t.Fatalf("Prepare: %v, %v", v, err)
		}
		if commit {
			err = b.Commit(ctx)
		} else {
			err = b.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := getV(t, raw, base+5); ok != commit {
			t.Fatalf("commit=%v: row present %v", commit, ok)
		}
		if _, err := st.ExecContext(ctx, 1, 1, 2, 2); !errors.Is(err, xa.ErrBranchDone) {
			t.Fatalf("statement after the branch ended: %v, want ErrBranchDone", err)
		}
	}
	b, err := rm.Start(ctx, newXID(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback(ctx) //nolint:errcheck
	if n := status(conn(b), "Com_stmt_close"); n != closed+1 {
		t.Fatalf("statements closed on the session: %d, want %d: the last branch left its statement open", n, closed+1)
	}
}
