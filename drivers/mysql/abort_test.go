package mysql

import (
	"context"
	"errors"
	"testing"

	"github.com/xadb/xa/xa"
)

// Fact 5 with a real deadlock between two branches: the victim's
// statement fails with 1213 (ErrRolledBack), the branch refuses further
// work without I/O, Prepare votes VoteAbort with ErrRolledBack and the
// server's reason, having sent XA ROLLBACK itself, and the victim's
// session goes back to the pool clean. The other branch commits.
func TestDeadlockVotesAbort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	mustExec(t, raw, "INSERT INTO kv VALUES (1, 0), (2, 0)")
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()), func(c *Config) { c.MaxConns = 2 })
	xa1, xa2 := newXID(t), newXID(t)
	b1, _ := rm.Start(ctx, xa1)
	b2, _ := rm.Start(ctx, xa2)
	id1, id2 := sessionID(t, conn(b1)), sessionID(t, conn(b2))
	mustExec(t, conn(b1), "UPDATE kv SET v = 1 WHERE k = 1")
	mustExec(t, conn(b2), "UPDATE kv SET v = 2 WHERE k = 2")
	errc := make(chan error, 1)
	go func() {
		_, err := conn(b1).ExecContext(ctx, "UPDATE kv SET v = 1 WHERE k = 2")
		errc <- err
	}()
	waitLockWait(t, raw, id1)
	_, err2 := conn(b2).ExecContext(ctx, "UPDATE kv SET v = 2 WHERE k = 1")
	err1 := <-errc
	victim, survivor, verr := b2, b1, err2
	vid, vx := id2, xa2
	if err2 == nil {
		victim, survivor, verr = b1, b2, err1
		vid, vx = id1, xa1
	} else if err1 != nil {
		t.Fatalf("both failed: %v / %v", err1, err2)
	}
	wantKind(t, verr, xa.ErrRolledBack)
	wantMySQLErr(t, verr, 1213)

	before := w.commands.Load()
	_, err := conn(victim).ExecContext(ctx, "SELECT 1")
	if !errors.Is(err, xa.ErrRolledBack) {
		t.Fatalf("statement on a rollback-only branch: %v", err)
	}
	if w.commands.Load() != before {
		t.Fatal("statement on a rollback-only branch was sent")
	}
	vote, err := victim.Prepare(ctx)
	if vote != xa.VoteAbort {
		t.Fatalf("victim voted %v, %v", vote, err)
	}
	wantKind(t, err, xa.ErrRolledBack)
	wantMySQLErr(t, err, 1213)
	if sent := w.commands.Load() - before; sent != 1 {
		t.Fatalf("Prepare of a rollback-only branch sent %d commands, want 1 (XA ROLLBACK)", sent)
	}
	if listedIn(recoverList(t, raw), vx) {
		t.Fatal("victim listed as prepared")
	}
	if v, err := survivor.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	if err := survivor.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The victim's session went back to the pool clean: reused, and a
	// new branch works on it.
	found := false
	var bs []xa.Branch
	for range 2 {
		b, err := rm.Start(ctx, newXID(t))
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
		if sessionID(t, conn(b)) == vid {
			found = true
			mustExec(t, conn(b), "UPDATE kv SET v = 9 WHERE k = 1")
			if err := b.(xa.OnePhaseCommitter).CommitOnePhase(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, b := range bs {
		b.Rollback(ctx)
	}
	if !found {
		t.Fatalf("victim's session %d not reused", vid)
	}
	if v, _ := getV(t, raw, 1); v != 9 {
		t.Fatalf("k=1 is %d", v)
	}
}

// A lost reply to XA END+PREPARE (the server prepared the branch, the
// client never heard): VoteAbort with ErrOutcomeUnknown, the session is
// gone, Origin still names it, and the TM's rollback by XID finishes the
// branch once that session has left.
func TestLostPrepareReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()))
	x := newXID(t)
	b, _ := rm.Start(ctx, x)
	id := sessionID(t, conn(b))
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	w.armCut()
	vote, err := b.Prepare(ctx)
	if vote != xa.VoteAbort {
		t.Fatalf("vote %v, %v", vote, err)
	}
	wantKind(t, err, xa.ErrOutcomeUnknown)
	if w.cuts.Load() != 1 {
		t.Fatal("the wire did not cut")
	}
	o := b.(xa.OriginReporter).Origin()
	if o.Session != id {
		t.Fatalf("Origin %+v, want session %d", o, id)
	}
	waitGone(t, raw, id)
	if !listedIn(recoverList(t, raw), x) {
		t.Fatal("the server did not prepare the branch (the test means to lose the reply, not the command)")
	}
	if err := retry(t, func() error { return rm.Rollback(ctx, x, o) }); err != nil {
		t.Fatal(err)
	}
	if listedIn(recoverList(t, raw), x) {
		t.Fatal("still prepared after rollback")
	}
	if _, ok := getV(t, raw, 1); ok {
		t.Fatal("rolled-back row present")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// Lost replies to XA COMMIT, XA COMMIT ONE PHASE and XA ROLLBACK are
// ErrOutcomeUnknown; the branch's fate is then settled by XID.
func TestLostPhase2Reply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	w := newWire(t)
	rm := openRM(t, w.dsn(t, db.DSN()))

	// Commit: the server committed; RM.Commit then answers ErrUnknownXID
	// (only the decision log can say that means committed).
	x := newXID(t)
	b, _ := rm.Start(ctx, x)
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	o := b.(xa.OriginReporter).Origin()
	w.armCut()
	wantKind(t, b.Commit(ctx), xa.ErrOutcomeUnknown)
	err := retry(t, func() error { return rm.Commit(ctx, x, o) })
	wantKind(t, err, xa.ErrUnknownXID)
	if _, ok := getV(t, raw, 1); !ok {
		t.Fatal("commit lost")
	}

	// Rollback of a prepared branch.
	x = newXID(t)
	b, _ = rm.Start(ctx, x)
	mustExec(t, conn(b), "INSERT INTO kv VALUES (2, 2)")
	b.Prepare(ctx)
	o = b.(xa.OriginReporter).Origin()
	w.armCut()
	wantKind(t, b.Rollback(ctx), xa.ErrOutcomeUnknown)
	if err := retry(t, func() error { return rm.Rollback(ctx, x, o) }); err != nil {
		t.Fatal(err)
	}
	if _, ok := getV(t, raw, 2); ok {
		t.Fatal("rolled-back row present")
	}

	// One phase.
	b, _ = rm.Start(ctx, newXID(t))
	mustExec(t, conn(b), "INSERT INTO kv VALUES (3, 3)")
	w.armCut()
	wantKind(t, b.(xa.OnePhaseCommitter).CommitOnePhase(ctx), xa.ErrOutcomeUnknown)
	if _, ok := getV(t, raw, 3); !ok {
		t.Fatal("one-phase commit the server performed is missing")
	}
}

// The session dies while the branch is active (KILL CONNECTION from
// outside): the next statement reports ErrRolledBack, Prepare votes
// VoteAbort with ErrRolledBack, Rollback is nil; the server rolled it back.
func TestSessionLostWhileActive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	rm := openRM(t, db.DSN())
	x := newXID(t)
	b, _ := rm.Start(ctx, x)
	id := sessionID(t, conn(b))
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	mustExec(t, raw, "KILL CONNECTION ?", id)
	waitGone(t, raw, id)
	_, err := conn(b).ExecContext(ctx, "INSERT INTO kv VALUES (2, 2)")
	wantKind(t, err, xa.ErrRolledBack)
	vote, err := b.Prepare(ctx)
	if vote != xa.VoteAbort {
		t.Fatal(vote, err)
	}
	wantKind(t, err, xa.ErrRolledBack)
	if err := b.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := getV(t, raw, 1); ok {
		t.Fatal("work of a lost session committed")
	}
	if listedIn(recoverList(t, raw), x) {
		t.Fatal("listed")
	}
}
