package sqlsink_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink/sqlsink"
	"github.com/xadb/xa/xa"
)

// TestReplayWrongProgress (review of issue 18, item 2: replay): the
// configuration's progress target reaches another database (its DSN
// changed; an operator ran xactl sink setup there, by mistake), which
// holds none of the sink's dead letters. A replay, a dry run or one of a
// selected dead letter must refuse with the identity error that an
// instance start, a restore and Status give — not answer from the wrong
// store that the sink has no dead letters to replay (xactl: "No dead
// letters of sink ... to replay", exit 0) or that a dead letter is not
// there.
func TestReplayWrongProgress(t *testing.T) {
	t.Parallel()
	e := replayEnv(t, tgPg)
	ctx := testCtx(t)
	sel := e.fractionID()
	wrong := e.withPG(anotherPG(t))
	if err := sqlsink.Setup(ctx, wrong.progress()); err != nil {
		t.Fatal(err)
	}
	s := wrong.open()
	for _, c := range []struct {
		name string
		opts sqlsink.ReplayOptions
	}{
		{"all", sqlsink.ReplayOptions{All: true}},
		{"dry run", sqlsink.ReplayOptions{All: true, DryRun: true}},
		{"selected", sqlsink.ReplayOptions{Select: []sqlsink.DeadLetterID{sel}}},
	} {
		rep, err := s.Replay(ctx, c.opts)
		t.Logf("%s, on another progress database: %d results, missing %v, err %v", c.name, len(rep.Results), rep.Missing, err)
		if !errors.Is(err, xa.ErrIdentity) {
			t.Errorf("%s: a replay on another progress store: %d results, missing %v, err %v; want an identity error",
				c.name, len(rep.Results), rep.Missing, err)
		}
	}
	if got := e.deadLetters(); len(got) != 3 {
		t.Fatalf("dead letters %q; want the 3 untouched", got)
	}
}

// TestReplayDeadline (review of issue 18, item 2): replay
// A holds its transaction open after deleting the dead-letter row (an
// operator's Ctrl-Z, a paused host); replay B of the same dead letter,
// given a deadline of 3 s (xactl's --op-timeout), waits for A's row lock.
// B must stop at its deadline with an error, the dead letter not
// replayed by it, rather than wait for A for ever (PostgreSQL has no
// lock timeout; MariaDB's is 50 s). Once A goes on, it replays the dead
// letter once. Run with the progress target on each database.
func TestReplayDeadline(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run("progress="+progress, func(t *testing.T) {
			t.Parallel()
			testReplayDeadline(t, progress)
		})
	}
}

func testReplayDeadline(t *testing.T, progress string) {
	e := replayEnv(t, progress)
	ctx := testCtx(t)
	e.fixTable()
	sel := []sqlsink.DeadLetterID{e.fractionID()}
	a, b := e.open(), e.open()
	held, release := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	sqlsink.SetHook(a, func(step string, h sqlsink.Handle) error {
		if step == "flushed" {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	defer rel.Do(func() { close(release) })
	var wg sync.WaitGroup
	var repA sqlsink.ReplayReport
	var errA error
	wg.Go(func() { repA, errA = a.Replay(ctx, sqlsink.ReplayOptions{Select: sel}) })
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("replay A did not reach its flush")
	}
	bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	type result struct {
		rep sqlsink.ReplayReport
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		rep, err := b.Replay(bctx, sqlsink.ReplayOptions{Select: sel})
		done <- result{rep, err}
	}()
	var rb result
	select {
	case rb = <-done:
		t.Logf("replay B, deadline 3 s, returned after %v: %q, err %v", time.Since(start).Round(100*time.Millisecond), outcomes(rb.rep), rb.err)
		if rb.err == nil {
			t.Errorf("replay B past its deadline: %q, no error; want an error", outcomes(rb.rep))
		}
		if rb.rep.Count(sqlsink.Replayed) != 0 {
			t.Errorf("replay B says it replayed the dead letter A holds: %q", outcomes(rb.rep))
		}
	case <-time.After(20 * time.Second):
		t.Errorf("replay B, given a deadline of 3 s, is still waiting for replay A's lock after 20 s")
	}
	rel.Do(func() { close(release) })
	wg.Wait()
	if rb.err == nil && rb.rep.Results == nil {
		rb = <-done
		t.Logf("replay B, once A went on: %q, err %v", outcomes(rb.rep), rb.err)
	}
	if errA != nil {
		t.Fatalf("replay A: %v", errA)
	}
	t.Logf("replay A: %q", outcomes(repA))
	e.settle(a)
	if my, pg, _, _ := e.fractionRows(); my != 1 || pg != 1 {
		t.Fatalf("the fraction's row %d times in %s, %d in %s; want once in each", my, tgMy, pg, tgPg)
	}
	if got := e.deadLetters(); len(got) != 2 {
		t.Fatalf("dead letters %q; want the 2 others", got)
	}
}

// TestReplayPhaseTwoLeft (review of issue 18, item 2): the replay's
// transaction is decided, and PostgreSQL goes down before its branch
// there commits: phase two is left to restore (the branch prepared, its
// row not visible) and Commit returns nil. Before, the replay said
// Replayed ("its rows landed"; xactl exit 0) while its row in PostgreSQL
// had not landed. It now says Decided, with the target in the reason
// (xactl exits 3, in-doubt branches remain). Once PostgreSQL is back, a
// restore lands the row once.
func TestReplayPhaseTwoLeft(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t)
	if !srv.Restartable() {
		t.Skip("the PostgreSQL server cannot be stopped here")
	}
	e := replayEnvOf(t, newEnvWith(t, dbtest.MySQLDB(t), srv.CreateDB(t), tgMy))
	ctx := testCtx(t)
	e.fixTable()
	sel := []sqlsink.DeadLetterID{e.fractionID()}
	s := e.open()
	var stopped bool
	sqlsink.SetHook(s, func(step string, h sqlsink.Handle) error {
		if step == "decided" && !stopped {
			stopped = true
			srv.Stop(t)
		}
		return nil
	})
	rep, err := s.Replay(ctx, sqlsink.ReplayOptions{Select: sel})
	t.Logf("replay, PostgreSQL stopped after the decision: %q, err %v", outcomes(rep), err)
	srv.Start(t)
	my, pg, _, _ := e.fractionRows()
	t.Logf("once PostgreSQL is back, before a restore: the fraction's row %d times in %s, %d in %s", my, tgMy, pg, tgPg)
	if err == nil && rep.Count(sqlsink.Replayed) == 1 && pg == 0 {
		t.Errorf("the replay said replayed, no error, while its row in %s had not landed (its branch left prepared)", tgPg)
	}
	if err != nil || rep.Count(sqlsink.Decided) != 1 || !strings.Contains(rep.Results[0].Reason, tgPg) {
		t.Errorf("replay: %q (%+v), err %v; want the dead letter decided, its commit on %s left to restore", outcomes(rep), rep.Results, err, tgPg)
	}
	e.settle(e.open())
	if my, pg, _, _ := e.fractionRows(); my != 1 || pg != 1 {
		t.Fatalf("after a restore: the fraction's row %d times in %s, %d in %s; want once in each", my, tgMy, pg, tgPg)
	}
}
