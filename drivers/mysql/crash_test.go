package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// Fact 6 on a private server: prepared branches survive the disconnect of
// their session, a clean restart and kill -9 (whether their session had
// closed or was still attached), and are then committed or rolled back by
// XID from new sessions. After a restart the preparing session's id may
// belong to a new, unrelated session: RM.Commit must not wait for it.
func TestPreparedSurvivesRestartAndCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	rm := openRM(t, db.DSN())

	type prepared struct {
		x xa.XID
		o xa.Origin
		b xa.Branch
		k int
	}
	k := 0
	prepare := func(keepSession bool) prepared {
		t.Helper()
		k++
		x := newXID(t)
		b, err := rm.Start(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
		if v, err := b.Prepare(ctx); v != xa.VotePrepared {
			t.Fatal(v, err)
		}
		p := prepared{x: x, o: b.(xa.OriginReporter).Origin(), b: b, k: k}
		if !keepSession {
			b.Close()
		}
		return p
	}
	finish := func(p prepared, commit bool) {
		t.Helper()
		var err error
		if commit {
			err = retry(t, func() error { return rm.Commit(ctx, p.x, p.o) })
		} else {
			err = retry(t, func() error { return rm.Rollback(ctx, p.x, p.o) })
		}
		if err != nil {
			t.Fatalf("%v after restart: %v", p.x, err)
		}
		if _, ok := getV(t, raw, p.k); ok != commit {
			t.Fatalf("row %d present=%v, want %v", p.k, ok, commit)
		}
	}
	wantListed := func(ps ...prepared) {
		t.Helper()
		list, err := rm.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if !listedIn(list, p.x) {
				t.Fatalf("%v lost: %v", p.x, list)
			}
		}
	}

	// Disconnect.
	d := prepare(false)
	waitGone(t, raw, d.o.Session)
	wantListed(d)
	finish(d, true)

	// Clean restart.
	a, b := prepare(false), prepare(false)
	attached := prepare(true)
	waitGone(t, raw, a.o.Session)
	waitGone(t, raw, b.o.Session)
	wantUnlisted(t, rm, 0) // detached and attached prepared branches are listed: no ghosts
	srv.Restart(t)
	wantUnlisted(t, rm, 0) // recovered branches are listed too
	wantListed(a, b, attached)
	// Make the preparing sessions' ids taken by new sessions.
	held := holdSessionIDs(t, raw, a.o.Session, b.o.Session, attached.o.Session)
	if len(held) == 0 {
		t.Fatal("no preparing session id was handed out again: the test cannot show that RM.Commit ignores it")
	}
	t.Logf("%d of the preparing sessions' ids now belong to new sessions", len(held))
	finish(a, true)
	finish(b, false)
	finish(attached, true)
	for _, c := range held {
		c.Close()
	}

	// kill -9.
	c, e := prepare(false), prepare(true)
	srv.Kill(t)
	srv.Start(t)
	wantListed(c, e)
	finish(c, true)
	finish(e, false)
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if ps := recoverList(t, raw); len(ps) != 0 {
		t.Fatalf("left prepared: %v", ps)
	}
}

// holdSessionIDs opens connections until the server has handed out each
// of ids (ids grow from 1 after a restart), and keeps those open.
func holdSessionIDs(t *testing.T, raw *sql.DB, ids ...uint64) []*sql.Conn {
	t.Helper()
	want := map[uint64]bool{}
	var top uint64
	for _, id := range ids {
		want[id] = true
		top = max(top, id)
	}
	var held []*sql.Conn
	deadline := time.Now().Add(30 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		c, err := raw.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var id uint64
		if err := c.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if want[id] {
			delete(want, id)
			held = append(held, c)
			continue
		}
		c.Raw(func(any) error { return errBadConnForTest })
		c.Close()
		if id > top {
			t.Logf("ids %v not handed out again (now at %d)", want, id)
			break
		}
	}
	return held
}

// wantUnlisted checks UnlistedPrepared, after letting the INNODB_TRX
// snapshot age enough to be refreshed.
func wantUnlisted(t *testing.T, rm *RM, want int) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	n, err := rm.UnlistedPrepared(context.Background())
	if err != nil || n != want {
		t.Fatalf("UnlistedPrepared = %d, %v; want %d", n, err, want)
	}
}
