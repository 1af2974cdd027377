package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// Requirement 7 / facts 6 and 7 on MariaDB: while the preparing session is
// connected, phase 2 from another session is ErrRetryable, with the
// origin ("still connected") or without it (1397 but XA RECOVER lists the
// branch: attached elsewhere). Phase 2 on the preparing session works.
// Afterwards RM.Commit says ErrUnknownXID and RM.Rollback nil.
func TestPhase2FromAnotherSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	other := openRM(t, db.DSN()) // another process, as recovery would be
	x := newXID(t)
	b, _ := rm.Start(ctx, x)
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	o := b.(xa.OriginReporter).Origin()
	for _, r := range []*RM{rm, other} {
		err := r.Commit(ctx, x, o)
		wantKind(t, err, xa.ErrRetryable)
		if !strings.Contains(err.Error(), "still connected") {
			t.Fatalf("%v: want the reason", err)
		}
		wantKind(t, r.Rollback(ctx, x, o), xa.ErrRetryable)
		if isMariaDB(db) {
			err = r.Commit(ctx, x, xa.Origin{})
			wantKind(t, err, xa.ErrRetryable)
			wantMySQLErr(t, err, erXAERNota)
			wantKind(t, r.Rollback(ctx, x, xa.Origin{}), xa.ErrRetryable)
		}
	}
	if !listedIn(recoverList(t, raw), x) {
		t.Fatal("refused phase 2 changed the branch")
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The preparing session is still connected (pooled), but this RM
	// knows it ended the branch; another process only sees it connected.
	wantKind(t, rm.Commit(ctx, x, o), xa.ErrUnknownXID)
	if err := rm.Rollback(ctx, x, o); err != nil {
		t.Fatal(err)
	}
	wantKind(t, other.Commit(ctx, x, o), xa.ErrRetryable)
	wantKind(t, other.Commit(ctx, x, xa.Origin{}), xa.ErrUnknownXID)
	if err := other.Rollback(ctx, x, xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	if v, ok := getV(t, raw, 1); !ok || v != 1 {
		t.Fatal("not committed")
	}
}

// A detached read-only branch: MariaDB answers XA COMMIT and XA ROLLBACK
// from another session with 1402 XA_RBROLLBACK. RM.Commit reports
// ErrRolledBack (harmless: it wrote nothing), RM.Rollback nil.
func TestDetachedReadOnlyBranch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	for _, commit := range []bool{true, false} {
		x := newXID(t)
		b, _ := rm.Start(ctx, x)
		var n int
		if err := conn(b).QueryRowContext(ctx, "SELECT COUNT(*) FROM kv").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if v, err := b.Prepare(ctx); v != xa.VotePrepared {
			t.Fatal(v, err)
		}
		o := b.(xa.OriginReporter).Origin()
		b.Close()
		waitGone(t, raw, o.Session)
		if !listedIn(recoverList(t, raw), x) {
			t.Skip("this server forgets detached read-only branches at once")
		}
		if commit {
			// MariaDB answers 1402 (rolled back) to this XA COMMIT: the
			// branch holds nothing, so the commit is a no-op and RM.Commit
			// says so, instead of a heuristic rollback.
			if err := rm.Commit(ctx, x, o); err != nil {
				t.Fatal(err)
			}
		} else if err := rm.Rollback(ctx, x, o); err != nil {
			t.Fatal(err)
		}
		if listedIn(recoverList(t, raw), x) {
			t.Fatal("still listed")
		}
	}
}

// Recover lists every prepared branch, foreign ones too, with odd bytes
// and formatIDs; committing and rolling back other XIDs (including one
// that differs only in formatID, fact 1) leaves them alone.
func TestForeignBranchesUntouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	foreign := []xa.XID{
		{FormatID: 1, Gtrid: []byte{0x00, 0xff, '\'', '\\', 'X', '\''}, Bqual: []byte{0x00}},
		{FormatID: 0, Gtrid: []byte("plain-other-app")},
		{FormatID: 2147483647, Gtrid: []byte(strings.Repeat("\xfe", 64)), Bqual: []byte(strings.Repeat("'", 64))},
	}
	// Prepared with raw SQL by "another application", sessions closed.
	for i, x := range foreign {
		prepareDetached(t, raw, x, "INSERT INTO kv VALUES (?, 0)", 100+i)
	}
	mine := newXID(t)
	b, _ := rm.Start(ctx, mine)
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	b.Prepare(ctx)
	o := b.(xa.OriginReporter).Origin()
	b.Close()

	ps, err := rm.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range append(foreign, mine) {
		if !listedIn(ps, x) {
			t.Fatalf("%v not recovered: %+v", x, ps)
		}
	}
	// Other tests' branches on the shared server are listed too; what
	// matters is that no foreign branch passes for ours.
	for _, p := range ps {
		for _, x := range foreign {
			if p.XID.Equal(x) {
				if _, _, ok := xa.Owned(p.XID); ok {
					t.Fatalf("foreign %v taken for ours", p.XID)
				}
			}
		}
	}
	for _, x := range foreign {
		wrongFormat := x
		wrongFormat.FormatID ^= 1
		wantKind(t, rm.Commit(ctx, wrongFormat, xa.Origin{}), xa.ErrUnknownXID)
		if err := rm.Rollback(ctx, wrongFormat, xa.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := retry(t, func() error { return rm.Commit(ctx, mine, o) }); err != nil {
		t.Fatal(err)
	}
	wantKind(t, rm.Commit(ctx, newXID(t), xa.Origin{}), xa.ErrUnknownXID)
	if err := rm.Rollback(ctx, newXID(t), xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	ps = recoverList(t, raw)
	for _, x := range foreign {
		if !listedIn(ps, x) {
			t.Fatalf("foreign branch %v was touched", x)
		}
	}
	if listedIn(ps, mine) {
		t.Fatal("own branch not committed")
	}
}

// Server fact (contradicts fact 1 for detached branches): MariaDB 10.11
// commits a detached prepared branch named with the wrong formatID. The RM
// guards against it (TestForeignBranchesUntouched); this test keeps the
// server's behaviour on record, and fails if it changes.
func TestServerMatchesDetachedBranchWithoutFormatID(t *testing.T) {
	t.Parallel()
	db, raw := setup(t)
	if !isMariaDB(db) {
		t.Skip("MariaDB behaviour")
	}
	x := xa.XID{FormatID: 5, Gtrid: []byte("formatid-fact-" + newXID(t).String()[:20])}
	prepareDetached(t, raw, x, "INSERT INTO kv VALUES (1, 1)")
	wrong := x
	wrong.FormatID = 6
	if _, err := raw.Exec("XA COMMIT " + xidLiteral(wrong)); err != nil {
		t.Fatalf("MariaDB no longer commits a detached branch by the wrong formatID (%v): fact 1 holds now", err)
	}
	if _, ok := getV(t, raw, 1); !ok {
		t.Fatal("XA COMMIT with the wrong formatID answered OK without committing")
	}
	// Attached to a live session, the formatID does count.
	y := xa.XID{FormatID: 5, Gtrid: []byte("formatid-fact-attached")}
	s := privateConn(t, raw)
	lit := xidLiteral(y)
	mustExec(t, s, "XA START "+lit+"; INSERT INTO kv VALUES (2, 2); XA END "+lit+"; XA PREPARE "+lit)
	wrong = y
	wrong.FormatID = 6
	_, err := raw.Exec("XA COMMIT " + xidLiteral(wrong))
	wantMySQLErr(t, err, erXAERNota)
	mustExec(t, s, "XA ROLLBACK "+lit)
}

// restartedSince compares the second the server started in with
// Origin.Prepared, both on the server's clock; Origin.Prepared is never in
// the second the preparing session's server started in.
func TestRestartedSince(t *testing.T) {
	p := time.Date(2026, 1, 1, 12, 0, 0, 500_000_000, time.UTC) // 12:00:00.5
	sec := func(d int64) int64 { return p.Unix() + d }
	for _, c := range []struct {
		name                 string
		started              int64
		prepared             time.Time
		restarted, ambiguous bool
	}{
		{"up long before the prepare", sec(-3600), p, false, false},
		{"started two seconds before", sec(-2), p, false, false},
		{"started 5 s after the prepare", sec(5), p, true, false},
		{"started 1 s after the prepare's second", sec(1), p, true, false},
		{"started in the prepare's second: another process", sec(0), p, true, false},
		{"started in the second before: the prepare's server, or a restart in its first second", sec(-1), p, false, true},
		{"prepare dated to the end of the server's first second", sec(-1), p.Truncate(time.Second), false, true},
		{"no prepare time", sec(0), time.Time{}, false, false},
	} {
		r, a := restartedSince(c.started, c.prepared)
		if r != c.restarted || a != c.ambiguous {
			t.Errorf("%s: restarted %v ambiguous %v, want %v %v", c.name, r, a, c.restarted, c.ambiguous)
		}
	}
}

// Requirement (8b): without the PROCESS privilege the RM cannot see when
// InnoDB has detached a closed session's branch (fact 7: the process list
// drops the session first), so phase 2 from another session keeps the
// branch pending, even once the preparing session has left the process
// list: RM.Commit and RM.Rollback answer ErrRetryable, saying to GRANT
// PROCESS or that a restart makes it safe. After a restart they go ahead.
func TestPhase2PendingWithoutProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	rollbackListedAtEnd(t, raw)
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	openRM(t, db.DSN()) // the participant set up by an administrator, as xactl participant init does
	user := fmt.Sprintf("xa_np%d", userSeq.Add(1))
	mustExec(t, raw, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", user))
	mustExec(t, raw, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s.* TO '%s'@'%%'", db.Name, user))
	cfg, _ := gomysql.ParseDSN(db.DSN())
	cfg.User, cfg.Passwd = user, "pw"
	rm, other := openRM(t, cfg.FormatDSN()), openRM(t, cfg.FormatDSN())
	// A prepare within a second of the server's start cannot be told from
	// one before a restart within that second (restartedSince); without
	// PROCESS such a branch would stay pending after the restart too.
	waitUptime(t, raw, 2)

	type prepared struct {
		x      xa.XID
		o      xa.Origin
		k      int
		commit bool
	}
	var ps []prepared
	for k, commit := range []bool{true, false} {
		x := newXID(t)
		b, err := rm.Start(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
		if v, err := b.Prepare(ctx); v != xa.VotePrepared {
			t.Fatal(v, err)
		}
		p := prepared{x: x, o: b.(xa.OriginReporter).Origin(), k: k, commit: commit}
		b.Close()
		waitGone(t, raw, p.o.Session)
		ps = append(ps, p)
	}
	time.Sleep(200 * time.Millisecond) // InnoDB has detached them by now; the RM cannot know
	for range 3 {
		for _, p := range ps {
			for _, r := range []*RM{rm, other} {
				var err error
				if p.commit {
					err = r.Commit(ctx, p.x, p.o)
				} else {
					err = r.Rollback(ctx, p.x, p.o)
				}
				wantKind(t, err, xa.ErrRetryable)
				for _, want := range []string{"PROCESS", fmt.Sprintf("GRANT PROCESS ON *.* TO '%s'@'%%'", user), "restarts"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("%v: want it to say %q", err, want)
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	list := recoverList(t, raw)
	for _, p := range ps {
		if !listedIn(list, p.x) {
			t.Fatalf("%v not pending", p.x)
		}
	}
	fs, _ := other.Check(ctx)
	if f := findings(t, fs)["PROCESS privilege"]; !strings.Contains(f.Value, "stay pending") {
		t.Fatalf("the check does not say that branches stay pending: %+v", f)
	}

	srv.Restart(t)
	for _, p := range ps {
		err := retry(t, func() error {
			if p.commit {
				return other.Commit(ctx, p.x, p.o)
			}
			return other.Rollback(ctx, p.x, p.o)
		})
		if err != nil {
			t.Fatalf("after a restart: %v", err)
		}
		if _, ok := getV(t, raw, p.k); ok != p.commit {
			t.Fatalf("row %d present=%v, want %v", p.k, ok, p.commit)
		}
	}
}

// Requirement (8c): restart detection uses one clock, the server's. RMs
// whose host clock is an hour ahead or behind (the coordinator's, and the
// finisher's, which finishes the branch from another session) neither take
// a live preparing session for one of a restarted server (which would send
// XA COMMIT into the window of fact 7), nor a restarted server, whose new
// sessions took the preparing sessions' ids, for a live one (which would
// keep the branches pending until those sessions leave).
func TestRestartDetectionOneClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	type clocked struct {
		name string
		rm   *RM
	}
	skewed := func(name string, d time.Duration) clocked {
		return clocked{name, openRM(t, db.DSN(), func(c *Config) { c.now = func() time.Time { return time.Now().Add(d) } })}
	}
	coordinators := []clocked{skewed("an hour behind", -time.Hour), skewed("an hour ahead", time.Hour)}
	finishers := []clocked{skewed("an hour ahead", time.Hour), skewed("an hour behind", -time.Hour)}
	// Prepare more than a second after the server's start, so that the
	// restart is told by the start times alone (restartedSince), not by
	// the fallback for a prepare in the server's first second.
	waitUptime(t, raw, 2)

	type prepared struct {
		coordinator string
		finisher    clocked // the one that commits it after the restart
		x           xa.XID
		o           xa.Origin
		b           xa.Branch
		k           int
	}
	var ps []prepared
	for _, c := range coordinators {
		for _, f := range finishers {
			k := len(ps) + 1
			x := newXID(t)
			b, err := c.rm.Start(ctx, x)
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
			if v, err := b.Prepare(ctx); v != xa.VotePrepared {
				t.Fatal(v, err)
			}
			ps = append(ps, prepared{coordinator: c.name, finisher: f, x: x, o: b.(xa.OriginReporter).Origin(), b: b, k: k})
		}
	}
	// Live preparing sessions: the finishers wait, and send nothing.
	for _, p := range ps {
		for _, f := range finishers {
			err := f.rm.Commit(ctx, p.x, p.o)
			wantKind(t, err, xa.ErrRetryable)
			if !strings.Contains(err.Error(), "still connected") || errNumber(err) != 0 {
				t.Fatalf("branch of the coordinator %s, finisher %s: %v; want a wait for the live preparing session, with no XA COMMIT sent",
					p.coordinator, f.name, err)
			}
		}
	}
	// Restart: the sessions are gone, the branches stay prepared, and new
	// sessions take the preparing sessions' ids.
	srv.Restart(t)
	var ids []uint64
	for _, p := range ps {
		ids = append(ids, p.o.Session)
	}
	held := holdSessionIDs(t, raw, ids...)
	if len(held) == 0 {
		t.Fatal("no preparing session id was handed out again: the test cannot show that the finishers ignore it")
	}
	t.Logf("%d of the %d preparing sessions' ids now belong to new sessions", len(held), len(ids))
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, p := range ps {
		if err := retry(t, func() error { return p.finisher.rm.Commit(ctx, p.x, p.o) }); err != nil {
			t.Fatalf("branch of the coordinator %s, after a restart, committed by the finisher %s: %v", p.coordinator, p.finisher.name, err)
		}
		if _, ok := getV(t, raw, p.k); !ok {
			t.Fatalf("branch of the coordinator %s: not committed", p.coordinator)
		}
		p.b.Close()
	}
}

// waitUptime waits until the server has been up for at least seconds.
func waitUptime(t *testing.T, raw *sql.DB, seconds int) {
	t.Helper()
	for {
		var name string
		var up int
		if err := raw.QueryRow("SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &up); err != nil {
			t.Fatal(err)
		}
		if up >= seconds {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
