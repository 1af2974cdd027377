package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// holdCommits makes the server hold every commit and XA PREPARE (BACKUP
// STAGE BLOCK_COMMIT) until release is called or t ends. Use a private
// server: it stops every commit on it.
func holdCommits(t *testing.T, raw *sql.DB) (release func()) {
	t.Helper()
	s := privateConn(t, raw)
	mustExec(t, s, "BACKUP STAGE START; BACKUP STAGE BLOCK_COMMIT")
	released := false
	release = func() {
		if !released {
			released = true
			mustExec(t, s, "BACKUP STAGE END")
		}
	}
	t.Cleanup(release)
	return release
}

// undeliverableKill makes rm's KILL QUERY fail, so that a cancelled
// statement is cut off by closing its connection instead.
func undeliverableKill(rm *RM) { rm.side.Close() }

// Requirement (7): a one-phase commit that fails is reported aborted only
// when the server says the branch is not committed. Otherwise, and in
// particular when the XA ROLLBACK sent after the failure finds no branch
// (1397: committed, or rolled back, the server does not say which), the
// outcome is unknown. The cases:
//
//   - the server committed and the reply says it was interrupted (the
//     test wire answers 1317 in place of the server's OK, as for a KILL
//     QUERY landing after the commit point): unknown, and it is committed;
//   - the reply says interrupted and the command never reached the server:
//     XA ROLLBACK finds the branch and rolls it back: aborted;
//   - ctx ends while the commit waits (the server holds commits), KILL
//     QUERY interrupts it: the server rolled it back, but all it says is
//     1317 and then 1397: unknown;
//   - ctx ends while the commit waits and KILL QUERY cannot be delivered,
//     so the connection is closed under the command: unknown, and the
//     server commits it once it stops holding commits.
func TestCommitOnePhaseOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	rollbackListedAtEnd(t, raw)
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	for i, c := range []struct {
		name      string
		arm       func(w *wire)
		hold      bool // the server holds commits; ctx ends after 300 ms
		noKill    bool // KILL QUERY cannot be delivered
		want      error
		committed bool
	}{
		{"error answered after the commit", func(w *wire) { w.armAnswer(erQueryInterrupted, true) }, false, false, xa.ErrOutcomeUnknown, true},
		{"error answered, command never ran", func(w *wire) { w.armAnswer(erQueryInterrupted, false) }, false, false, xa.ErrRolledBack, false},
		{"ctx ended, KILL QUERY before the commit point", nil, true, false, xa.ErrOutcomeUnknown, false},
		{"ctx ended, KILL QUERY undeliverable, connection closed", nil, true, true, xa.ErrOutcomeUnknown, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWire(t)
			rm := openRM(t, w.dsn(t, db.DSN()))
			k := i + 1
			b, err := rm.Start(ctx, newXID(t))
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
			cctx := ctx
			release := func() {}
			if c.hold {
				release = holdCommits(t, raw)
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			if c.noKill {
				undeliverableKill(rm)
			}
			if c.arm != nil {
				c.arm(w)
			}
			err = b.(xa.OnePhaseCommitter).CommitOnePhase(cctx)
			release()
			t.Logf("CommitOnePhase: %v", err)
			wantKind(t, err, c.want)
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, ok := getV(t, raw, k)
				if ok == c.committed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("committed = %v, want %v", ok, c.committed)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// Requirement (8a): when the reply to XA PREPARE is lost, the branch may be
// prepared: Prepare votes VoteAbort with ErrOutcomeUnknown and Origin names
// the preparing session and a time on the server's clock no earlier than
// the prepare. RM.Rollback with that origin, from another RM, is
// ErrRetryable while that session is still there on the server, and rolls
// the branch back once it is gone. The cases:
//
//   - the reply is lost on the wire and the server's side of the
//     connection stays open (a partition): the session lives on, idle,
//     with the prepared branch attached;
//   - ctx ends while XA PREPARE waits (the server holds prepares) and KILL
//     QUERY cannot be delivered, so the connection is closed under the
//     command: the session lives on inside XA PREPARE until the server
//     stops holding it.
func TestLostPrepareReplyOrigin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	rollbackListedAtEnd(t, raw)
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	other := openRM(t, db.DSN())
	for i, c := range []string{"reply lost, session kept open", "ctx ended, KILL QUERY undeliverable, connection closed"} {
		t.Run(c, func(t *testing.T) {
			w := newWire(t)
			rm := openRM(t, w.dsn(t, db.DSN()))
			x := newXID(t)
			b, err := rm.Start(ctx, x)
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", i+1, 1)
			id := sessionID(t, conn(b))
			pctx := ctx
			var release func()
			if i == 0 {
				w.armHold()
				release = w.release
			} else {
				release = holdCommits(t, raw)
				undeliverableKill(rm)
				var cancel context.CancelFunc
				pctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			t.Cleanup(release)
			before := serverNow(t, raw)
			v, err := b.Prepare(pctx)
			t.Logf("Prepare: %v, %v", v, err)
			if v != xa.VoteAbort || !errors.Is(err, xa.ErrOutcomeUnknown) {
				t.Fatalf("Prepare = %v, %v; want VoteAbort with ErrOutcomeUnknown", v, err)
			}
			o := b.(xa.OriginReporter).Origin()
			if o.Session != id || o.Prepared.Before(before) || o.Prepared.After(serverNow(t, raw).Add(time.Second)) {
				t.Fatalf("Origin = %+v; want session %d, prepared after %v on the server's clock", o, id, before)
			}
			if !inProcessList(t, raw, id) {
				t.Fatal("the preparing session is gone already: the test shows nothing")
			}
			for range 3 {
				err := other.Rollback(ctx, x, o)
				wantKind(t, err, xa.ErrRetryable)
				if !strings.Contains(err.Error(), "still connected") {
					t.Fatalf("%v: want the reason", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			release()
			if err := retry(t, func() error { return other.Rollback(ctx, x, o) }); err != nil {
				t.Fatal(err)
			}
			if inProcessList(t, raw, id) {
				t.Fatal("rolled back while the preparing session is still there")
			}
			if listedIn(recoverList(t, raw), x) {
				t.Fatal("still prepared")
			}
			if _, ok := getV(t, raw, i+1); ok {
				t.Fatal("committed")
			}
		})
	}
}

// serverNow returns the server's clock.
func serverNow(t *testing.T, raw *sql.DB) time.Time {
	t.Helper()
	var ts float64
	if err := raw.QueryRow("SELECT @@timestamp").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, int64(ts*1e9))
}
