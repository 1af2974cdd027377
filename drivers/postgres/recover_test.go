package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// Recover lists this database's prepared transactions with their prepare
// time, owner and database; gids that are not XIDs (another application's,
// or almost ours) come with a zero XID and are never touched.
func TestRecover(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)

	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	before := time.Now()
	prepare(t, b, xa.VotePrepared)

	ours := x.String()
	foreign := []string{
		"someone-else",
		strings.Replace(ours, ":", "::", 1),  // almost ours: an empty part
		"0" + ours,                           // almost ours: leading zero in the formatID
		strings.TrimSuffix(ours, ":0") + ":", // almost ours: empty bqual written plain
		"1:Zm9v:~Zm9v",                       // a plain part written encoded is not canonical
		"it's-quoted\\",
	}
	// XIDs, but not ours: another TM's, and almost ours (bqual not a
	// branch index, formatID not ours).
	others := []string{"7:other-tm:1", ours + "x", "1" + strings.TrimPrefix(ours, fmt.Sprint(xa.FormatID))}
	for i, gid := range append(foreign, others...) {
		c := raw(t, db)
		lit := quoteLiteral(gid)
		if _, err := c.PgConn().Exec(ctx, fmt.Sprintf("BEGIN; INSERT INTO kv VALUES (%d, 0); PREPARE TRANSACTION %s", 100+i, lit)).ReadAll(); err != nil {
			t.Fatalf("prepare foreign %q: %v", gid, err)
		}
		t.Cleanup(func() {
			raw(t, db).PgConn().Exec(context.Background(), "ROLLBACK PREPARED "+lit).ReadAll() //nolint:errcheck
		})
	}
	// Another database's prepared transaction is not listed.
	db2, rm2 := setup(t)
	x2 := newXID(t)
	b2, s2 := start(t, rm2, ctx, x2)
	exec(t, s2, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b2, xa.VotePrepared)
	defer b2.Rollback(ctx) //nolint:errcheck

	ps, err := rm.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byRaw := map[string]xa.PreparedBranch{}
	for _, p := range ps {
		byRaw[p.Raw] = p
	}
	if want := 1 + len(foreign) + len(others); len(ps) != want {
		t.Errorf("Recover listed %d branches, want %d: %+v", len(ps), want, ps)
	}
	p, ok := byRaw[ours]
	switch {
	case !ok:
		t.Fatalf("our branch %s not listed", ours)
	case !p.XID.Equal(x):
		t.Errorf("our branch parsed as %v", p.XID)
	case p.Prepared.Before(before.Add(-time.Minute)) || p.Prepared.After(time.Now().Add(time.Minute)):
		t.Errorf("Prepared = %v, want about %v", p.Prepared, before)
	case p.Owner != "postgres" || p.Database != db.Name:
		t.Errorf("Owner, Database = %q, %q; want postgres, %q", p.Owner, p.Database, db.Name)
	}
	if _, ok := byRaw[x2.String()]; ok || db2.Name == db.Name {
		t.Error("another database's branch listed")
	}
	for _, gid := range foreign {
		p, ok := byRaw[gid]
		if !ok {
			t.Errorf("foreign %q not listed", gid)
			continue
		}
		if !p.XID.IsZero() {
			t.Errorf("foreign %q parsed as XID %v", gid, p.XID)
		}
		if p.Prepared.IsZero() {
			t.Errorf("foreign %q without prepare time", gid)
		}
	}
	for _, gid := range others {
		if p := byRaw[gid]; p.XID.IsZero() {
			t.Errorf("%q not parsed as an XID", gid)
		} else if _, _, owned := xa.Owned(p.XID); owned {
			t.Errorf("%q taken for ours", gid)
		}
	}

	// Our own traffic leaves them alone.
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, gid := range append(foreign, others...) {
		if !listed(t, db, gid) {
			t.Errorf("foreign %q was touched", gid)
		}
	}
}

// Binary XID bytes (0x00, 0xFF, quotes, backslashes) round-trip through
// prepare, Recover and commit from a new resource manager.
func TestBinaryXID(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	x := xa.XID{FormatID: 0x7fffffff, Gtrid: []byte{0x00, 0xff, '\'', '\\', '"', ';', ' ', 0x80}, Bqual: []byte("'; COMMIT; --")}
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b, xa.VotePrepared)
	rm2 := openRM(t, db.DSN())
	ps, err := rm2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		if p.XID.Equal(x) && p.Raw == x.String() {
			found = true
		}
	}
	if !found {
		t.Fatalf("%v not recovered: %+v", x, ps)
	}
	if err := rm2.Commit(ctx, x, xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 1)
	// Invalid XIDs are refused before any SQL.
	for _, bad := range []xa.XID{{}, {FormatID: -1, Gtrid: []byte("g")}, {FormatID: 1, Gtrid: make([]byte, 65)}} {
		if _, err := rm.Start(ctx, bad); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Start(%v) = %v, want ErrInvalidXID", bad, err)
		}
		if err := rm.Commit(ctx, bad, xa.Origin{}); !errors.Is(err, xa.ErrInvalidXID) {
			t.Errorf("Commit(%v) = %v, want ErrInvalidXID", bad, err)
		}
	}
}

// Prepared branches survive their session's end, a clean restart and
// kill -9, and a new resource manager commits them afterwards.
func TestPreparedSurvives(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t)
	db := srv.CreateDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	ctx := testCtx(t)
	prepareOne := func(k int) xa.XID {
		rm, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), Init: true})
		if err != nil {
			t.Fatal(err)
		}
		defer rm.Close() // the session and the whole pool go away
		x := newXID(t)
		b, err := rm.Start(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, b.Session().(*Conn), "INSERT INTO kv VALUES ($1, $1)", k)
		prepare(t, b, xa.VotePrepared)
		return x
	}
	disconnected := prepareOne(1)
	restarted := prepareOne(2)
	srv.Restart(t)
	killed := prepareOne(3)
	srv.Kill(t)
	srv.Start(t)

	rm := openRM(t, db.DSN())
	ps, err := rm.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("recovered %d branches, want 3: %+v", len(ps), ps)
	}
	for k, x := range []xa.XID{disconnected, restarted, killed} {
		wantAbsent(t, db, k+1)
		if err := rm.Commit(ctx, x, xa.Origin{}); err != nil {
			t.Fatalf("Commit of branch %d: %v", k+1, err)
		}
		wantValue(t, db, k+1, k+1)
	}
}
