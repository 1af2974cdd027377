package sqlsink_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// replayEnv is an env whose sink has set three records aside as dead
// letters (on_error: dead_letter, k required): "not json" (a.ndjson@31),
// {"v": "no id"} (a.ndjson@68) and {"id": 1.5, ...} (b.ndjson@55, a
// fraction for the BIGINT k); the 4 good records landed.
func replayEnv(t *testing.T, progress string) *env {
	t.Helper()
	return replayEnvOf(t, newEnvOn(t, progress))
}

// replayEnvOf is replayEnv on the env e.
func replayEnvOf(t *testing.T, e *env) *env {
	t.Helper()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	lines := map[string][]string{
		a: {`{"id": 1, "v": "one"}`, `not json`, `{"id": 2, "v": "two"}`, `{"v": "no id"}`},
		b: {`{"id": 3, "v": "three"}`, `{"id": 1.5, "v": "a fraction"}`, `{"id": 4, "v": "four"}`},
	}
	for path, ls := range lines {
		if err := os.WriteFile(path, []byte(strings.Join(ls, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range e.cfg.Tables {
		e.cfg.Tables[i].Required = []string{"k"}
	}
	e.cfg.OnError = sqlsink.OnErrorDeadLetter
	src, err := filesource.New(filesource.Config{Files: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	s := e.open()
	if err := e.run(s, src); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := e.deadLetters(); len(got) != 3 {
		t.Fatalf("dead letters %q; want 3", got)
	}
	return e
}

// deadLetters returns the dead letters as "file@position value", sorted.
func (e *env) deadLetters() []string {
	e.t.Helper()
	dl, err := sqlsink.ReadDeadLetters(testCtx(e.t), e.progress(), e.name, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, d := range dl {
		out = append(out, filepath.Base(d.Partition)+"@"+d.Position+" "+string(d.Value))
	}
	slices.Sort(out)
	return out
}

// fixTable makes k a DOUBLE in both databases: the fraction fits now.
func (e *env) fixTable() {
	e.t.Helper()
	ctx := testCtx(e.t)
	if err := e.my.Server.Exec(ctx, e.my.Name, "ALTER TABLE events MODIFY k DOUBLE NOT NULL"); err != nil {
		e.t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "ALTER TABLE events ALTER COLUMN k TYPE double precision"); err != nil {
		e.t.Fatal(err)
	}
}

// fractionRows counts, in each database, the rows of the replayed
// fraction (k 1.5, from b.ndjson at 55) and all the rows.
func (e *env) fractionRows() (my, pg, myAll, pgAll int64) {
	e.t.Helper()
	ctx := testCtx(e.t)
	const q = "SELECT count(*) FROM events WHERE k = 1.5 AND pos = '55' AND v = 'a fraction'"
	var err error
	if my, err = e.myCount(ctx, q); err != nil {
		e.t.Fatal(err)
	}
	if pg, err = e.pgCount(ctx, q); err != nil {
		e.t.Fatal(err)
	}
	if myAll, err = e.myCount(ctx, "SELECT count(*) FROM events"); err != nil {
		e.t.Fatal(err)
	}
	if pgAll, err = e.pgCount(ctx, "SELECT count(*) FROM events"); err != nil {
		e.t.Fatal(err)
	}
	return my, pg, myAll, pgAll
}

func outcomes(rep sqlsink.ReplayReport) []string {
	var out []string
	for _, r := range rep.Results {
		out = append(out, filepath.Base(r.DeadLetter.Partition)+"@"+r.DeadLetter.Position+" "+string(r.Outcome))
	}
	slices.Sort(out)
	return out
}

// TestReplay (issue 18, item 2: replay): dead letters are replayed with
// the sink's current configuration once the operator fixed their cause.
// Before the fix, a dry run keeps all three with their reasons. After it
// (k made DOUBLE in both databases, k no longer required), a dry run says
// two would replay; the replay lands the fraction's row once in each
// database and deletes its dead letter in the same transaction; the
// record without an id, which the databases now refuse (k NOT NULL),
// stays a dead letter with the database's error, as does "not json"
// (still not JSON). A second replay changes nothing. A replay into an
// upsert table is refused without Force, and runs with it. Run with the
// progress target on each database.
func TestReplay(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run("progress="+progress, func(t *testing.T) {
			t.Parallel()
			testReplay(t, progress)
		})
	}
}

func testReplay(t *testing.T, progress string) {
	e := replayEnv(t, progress)
	ctx := testCtx(t)
	before := e.deadLetters()

	s := e.open()
	rep, err := s.Replay(ctx, sqlsink.ReplayOptions{All: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if rep.Count(sqlsink.Kept) != 3 {
		t.Fatalf("dry run before the fix: %q; want the 3 kept", outcomes(rep))
	}
	for _, r := range rep.Results {
		if r.Reason == "" {
			t.Errorf("kept without a reason: %+v", r)
		}
		t.Logf("before the fix, %s@%s: %s", filepath.Base(r.DeadLetter.Partition), r.DeadLetter.Position, r.Reason)
	}

	// The fix: the table takes fractions, k is no longer required.
	e.fixTable()
	for i := range e.cfg.Tables {
		e.cfg.Tables[i].Required = nil
	}
	s = e.open()
	rep, err = s.Replay(ctx, sqlsink.ReplayOptions{All: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.ndjson@31 kept", "a.ndjson@68 would replay", "b.ndjson@55 would replay"}
	if got := outcomes(rep); !slices.Equal(got, want) {
		t.Fatalf("dry run after the fix: %q; want %q", got, want)
	}
	if got := e.deadLetters(); !slices.Equal(got, before) {
		t.Fatalf("the dry run changed the dead letters: %q", got)
	}
	if my, pg, myAll, pgAll := e.fractionRows(); my+pg != 0 || myAll != 4 || pgAll != 4 {
		t.Fatalf("the dry run wrote rows: %d, %d (all: %d, %d)", my, pg, myAll, pgAll)
	}

	for round := range 2 {
		rep, err = s.Replay(ctx, sqlsink.ReplayOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("replay %d: %q", round+1, outcomes(rep))
		want := []string{"a.ndjson@31 kept", "a.ndjson@68 kept", "b.ndjson@55 replayed"}
		if round == 1 {
			want = want[:2]
		}
		if got := outcomes(rep); !slices.Equal(got, want) {
			t.Fatalf("replay %d: %q; want %q", round+1, got, want)
		}
		for _, r := range rep.Results {
			if r.Outcome == sqlsink.Kept {
				t.Logf("replay %d kept %s@%s: %s", round+1, filepath.Base(r.DeadLetter.Partition), r.DeadLetter.Position, r.Reason)
			}
		}
		if my, pg, myAll, pgAll := e.fractionRows(); my != 1 || pg != 1 || myAll != 5 || pgAll != 5 {
			t.Fatalf("after replay %d: the fraction's row %d times in %s, %d in %s (all rows: %d, %d); want once in each, 5 rows in each",
				round+1, my, tgMy, pg, tgPg, myAll, pgAll)
		}
		wantDL := []string{"a.ndjson@31 not json", "a.ndjson@68 {\"v\": \"no id\"}"}
		if got := e.deadLetters(); !slices.Equal(got, wantDL) {
			t.Fatalf("dead letters after replay %d: %q; want %q", round+1, got, wantDL)
		}
	}
	e.settle(s)

	// An upsert table: the record without an id maps to it now;
	// refused without Force, nothing written.
	e.cfg.Tables = append(e.cfg.Tables, sqlsink.Table{ID: "my.latest", Target: tgMy, Name: "latest", Upsert: true, Key: []string{"p"},
		Columns: []sqlsink.Column{{Name: "p", From: "$.v"}, {Name: "k", From: "$.id"}, {Name: "seq", From: "$.id"}}})
	s = e.open()
	if _, err := s.Replay(ctx, sqlsink.ReplayOptions{All: true}); !errors.Is(err, sqlsink.ErrReplayUpsert) {
		t.Fatalf("a replay into an upsert table without Force: %v; want ErrReplayUpsert", err)
	} else {
		t.Logf("without Force: %v", err)
	}
	if got := e.deadLetters(); len(got) != 2 {
		t.Fatalf("the refused replay changed the dead letters: %q", got)
	}
	// With Force it runs: both stay (still not JSON; k NULL refused by
	// the databases), nothing lands.
	rep, err = s.Replay(ctx, sqlsink.ReplayOptions{All: true, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := outcomes(rep), []string{"a.ndjson@31 kept", "a.ndjson@68 kept"}; !slices.Equal(got, want) {
		t.Fatalf("forced replay: %q; want %q", got, want)
	}
	if my, pg, myAll, pgAll := e.fractionRows(); my != 1 || pg != 1 || myAll != 5 || pgAll != 5 {
		t.Fatalf("after the forced replay: %d, %d (all rows: %d, %d); want 1, 1, 5, 5", my, pg, myAll, pgAll)
	}
}

// TestReplayCrash (issue 18, item 2: replay exactly once): a replay is
// crashed (every session closed at once, nothing more sent) at each step
// of its transaction — rows sent, prepared, decided, one branch committed
// — and run again in a new Sink: the fraction's row is in each database
// once, its dead letter is gone, and no prepared branch is left. Run with
// the progress target on each database.
func TestReplayCrash(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		for _, step := range []string{"flushed", "prepared", "decided", "phase2"} {
			t.Run(progress+"/"+step, func(t *testing.T) {
				t.Parallel()
				testReplayCrash(t, progress, step)
			})
		}
	}
}

func testReplayCrash(t *testing.T, progress, step string) {
	e := replayEnv(t, progress)
	ctx := testCtx(t)
	e.fixTable()
	sel := e.fractionID()

	a := e.open()
	crashAt(a, step, 1)
	_, err := a.Replay(ctx, sqlsink.ReplayOptions{Select: []sqlsink.DeadLetterID{sel}})
	if err == nil {
		t.Fatalf("the replay crashed at %s returned no error", step)
	}
	t.Logf("crashed at %s: %v", step, err)
	my, pg, _, _ := e.fractionRows()
	t.Logf("after the crash: the fraction's row %d times in %s, %d in %s; dead letters %q", my, tgMy, pg, tgPg, e.deadLetters())

	b := e.open()
	rep, err := b.Replay(ctx, sqlsink.ReplayOptions{Select: []sqlsink.DeadLetterID{sel}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replayed again: %q (missing: %v)", outcomes(rep), rep.Missing)
	e.settle(b)
	if my, pg, myAll, pgAll := e.fractionRows(); my != 1 || pg != 1 || myAll != 5 || pgAll != 5 {
		t.Fatalf("crash at %s, replay again: the fraction's row %d times in %s, %d in %s (all rows: %d, %d); want once in each",
			step, my, tgMy, pg, tgPg, myAll, pgAll)
	}
	if got := e.deadLetters(); len(got) != 2 || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "b.ndjson@55") }) {
		t.Fatalf("dead letters %q; want the fraction's gone, the 2 others there", got)
	}
}

// fractionID returns the key of the fraction's dead letter, without its
// incarnation (as an operator may give it).
func (e *env) fractionID() sqlsink.DeadLetterID {
	e.t.Helper()
	dl, err := sqlsink.ReadDeadLetters(testCtx(e.t), e.progress(), e.name, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range dl {
		if d.Position == "55" {
			return sqlsink.DeadLetterID{Checkpoint: d.Checkpoint, Seq: d.Seq}
		}
	}
	e.t.Fatal("no dead letter at b.ndjson@55")
	return sqlsink.DeadLetterID{}
}

// TestReplayConcurrent (issue 18, item 2): two replays of the same dead
// letter at once, in two Sinks: the first holds its transaction open after
// deleting the dead-letter row and writing the rows; the second's delete
// waits for it and, once the first commits, finds nothing: the rows land
// once, one replay says replayed and the other gone (or missing, had it
// read the table after the first committed).
func TestReplayConcurrent(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run("progress="+progress, func(t *testing.T) {
			t.Parallel()
			testReplayConcurrent(t, progress)
		})
	}
}

func testReplayConcurrent(t *testing.T, progress string) {
	e := replayEnv(t, progress)
	ctx := testCtx(t)
	e.fixTable()
	sel := []sqlsink.DeadLetterID{e.fractionID()}
	a, b := e.open(), e.open()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sqlsink.SetHook(a, func(step string, h sqlsink.Handle) error {
		if step == "flushed" {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	var wg sync.WaitGroup
	var repA, repB sqlsink.ReplayReport
	var errA, errB error
	wg.Go(func() { repA, errA = a.Replay(ctx, sqlsink.ReplayOptions{Select: sel}) })
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("replay A did not reach its flush")
	}
	wg.Go(func() { repB, errB = b.Replay(ctx, sqlsink.ReplayOptions{Select: sel}) })
	// B reads the dead letter (A has not committed) and its delete waits
	// for A's lock; A then commits.
	time.Sleep(time.Second)
	close(release)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("replays: %v, %v", errA, errB)
	}
	t.Logf("replay A: %q; replay B: %q (missing %v)", outcomes(repA), outcomes(repB), repB.Missing)
	if n := repA.Count(sqlsink.Replayed) + repB.Count(sqlsink.Replayed); n != 1 {
		t.Errorf("%d replays say replayed; want 1", n)
	}
	e.settle(b)
	if my, pg, _, _ := e.fractionRows(); my != 1 || pg != 1 {
		t.Fatalf("two replays at once: the fraction's row %d times in %s, %d in %s; want once in each", my, tgMy, pg, tgPg)
	}
	if got := e.deadLetters(); len(got) != 2 {
		t.Fatalf("dead letters %q; want the 2 others", got)
	}
}

// TestReplayWhileRunning (issue 18, item 2): a replay runs while an
// instance of the sink writes 3000 generated records over 3 partitions
// into the same tables: the replayed record and every generated one land
// once in each database (by partition and position), the dead letter is
// gone. Run with the progress target on each database.
func TestReplayWhileRunning(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run("progress="+progress, func(t *testing.T) {
			t.Parallel()
			testReplayWhileRunning(t, progress)
		})
	}
}

func testReplayWhileRunning(t *testing.T, progress string) {
	e := replayEnv(t, progress)
	ctx := testCtx(t)
	e.fixTable()
	sel := []sqlsink.DeadLetterID{e.fractionID()}
	runner, replayer := e.open(), e.open()
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = e.run(runner, gensource.New(gen(3000, 3))) })
	// Replay once the instance is writing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, err := e.myCount(ctx, "SELECT count(*) FROM events"); err != nil {
			t.Fatal(err)
		} else if n > 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the instance wrote nothing in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep, err := replayer.Replay(ctx, sqlsink.ReplayOptions{Select: sel})
	wg.Wait()
	if err != nil || runErr != nil {
		t.Fatalf("replay: %v; run: %v", err, runErr)
	}
	t.Logf("replay while running: %q", outcomes(rep))
	if rep.Count(sqlsink.Replayed) != 1 {
		t.Errorf("replay: %q; want the fraction replayed", outcomes(rep))
	}
	e.settle(replayer)
	const q = "SELECT count(*) FROM (SELECT DISTINCT p, pos FROM events) d"
	for _, c := range []struct {
		name  string
		count func(context.Context, string, ...any) (int64, error)
	}{{tgMy, e.myCount}, {tgPg, e.pgCount}} {
		all, err := c.count(ctx, "SELECT count(*) FROM events")
		if err != nil {
			t.Fatal(err)
		}
		distinct, err := c.count(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if all != 3005 || distinct != 3005 {
			t.Errorf("%s: %d rows, %d distinct records; want the 4 good records, the replayed one and the 3000 generated, once each", c.name, all, distinct)
		}
	}
	if my, pg, _, _ := e.fractionRows(); my != 1 || pg != 1 {
		t.Errorf("the fraction's row %d times in %s, %d in %s; want once in each", my, tgMy, pg, tgPg)
	}
	if got := e.deadLetters(); len(got) != 2 {
		t.Errorf("dead letters %q; want the 2 others", got)
	}
}
