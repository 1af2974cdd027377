package mysql

import (
	"context"
	"strings"
	"testing"
	"time"

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
			err := rm.Commit(ctx, x, o)
			if isMariaDB(db) {
				wantKind(t, err, xa.ErrRolledBack)
				wantMySQLErr(t, err, erXARBRollback)
			} else if err != nil {
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

func TestRestartedSince(t *testing.T) {
	p := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return p.Add(d) }
	for _, c := range []struct {
		name                 string
		sent, got            time.Time
		uptime               int64
		prepared             time.Time
		restarted, ambiguous bool
	}{
		{"up long before the prepare", at(time.Minute), at(time.Minute), 3600, p, false, false},
		{"started 5 s after the prepare", at(10 * time.Second), at(10 * time.Second), 5, p, true, false},
		{"started about when prepared", at(3 * time.Second), at(3 * time.Second), 3, p, false, true},
		{"started 1 to 2 s before the prepare", at(3 * time.Second), at(3 * time.Second), 4, p, false, false},
		{"started within a second after the prepare", at(3 * time.Second), at(3 * time.Second), 2, p, false, true},
		{"started 2 to 3 s before the prepare", at(3 * time.Second), at(3 * time.Second), 5, p, false, false},
		{"no prepare time", at(time.Second), at(time.Second), 0, time.Time{}, false, false},
	} {
		r, a := restartedSince(c.sent, c.got, c.uptime, c.prepared)
		if r != c.restarted || a != c.ambiguous {
			t.Errorf("%s: restarted %v ambiguous %v, want %v %v", c.name, r, a, c.restarted, c.ambiguous)
		}
	}
}
