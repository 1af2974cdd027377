package sqlsink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// crashAt makes s crash (abandon every session) at step of checkpoint n.
func crashAt(s *sqlsink.Sink, step string, n uint64) {
	sqlsink.SetHook(s, func(st string, h sqlsink.Handle) error {
		if st == step && h.Checkpoint == n {
			sqlsink.Abandon(s)
			return fmt.Errorf("%w at %s of checkpoint %d", errCrash, step, n)
		}
		return nil
	})
}

// TestCrashThenRestore: an instance is abandoned (its sessions closed,
// nothing more sent) at each step of its third checkpoint; a new instance
// restores and reads on; every record lands once in both targets.
func TestCrashThenRestore(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		for _, step := range []string{"flushed", "prepared", "decided", "phase2"} {
			t.Run(progress+"/"+step, func(t *testing.T) {
				t.Parallel()
				crashThenRestore(t, progress, step)
			})
		}
	}
}

func crashThenRestore(t *testing.T, progress, step string) {
	e := newEnvOn(t, progress)
	g := gen(1500, 3)

	a := e.open()
	crashAt(a, step, 3)
	err := e.run(a, gensource.New(g))
	if !errors.Is(err, errCrash) && !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("crashed instance: %v", err)
	}
	st, err := readStatus(e)
	if err != nil {
		t.Fatal(err)
	}
	my, pg := e.counts()
	t.Logf("after the crash at %s: %s %v, %s %v, progress %+v", step, tgMy, my, tgPg, pg, st.Partitions)
	switch step {
	case "phase2":
		// One branch committed, the other not yet: visible only
		// on one side until restore.
		if my.rows == pg.rows {
			t.Errorf("phase 2 was to be partial: %v and %v", my, pg)
		}
	case "decided":
		// Checkpoint 3 is decided (the positions say so) but no
		// branch of it is committed yet.
		if my.rows != 396 || pg.rows != 396 {
			t.Errorf("checkpoint 3 was to be decided, not committed: %v and %v", my, pg)
		}
		for _, p := range st.Partitions {
			if p.Checkpoint != 3 {
				t.Errorf("progress %+v: want checkpoint 3", p)
			}
		}
	default:
		// Checkpoint 3 holds nothing yet. Checkpoint 2 (198 records:
		// three partitions, 33 each per poll, two polls) is decided;
		// its phase two may still have been running on a target.
		for _, c := range []counts{my, pg} {
			if c.rows != 396 && c.rows != 198 {
				t.Errorf("checkpoints 1 and 2 were to be decided, no more: %v and %v", my, pg)
			}
		}
		for _, p := range st.Partitions {
			if p.Checkpoint != 2 {
				t.Errorf("progress %+v: want checkpoint 2", p)
			}
		}
	}

	b := e.open()
	obs := &tally{}
	opts := runOpts()
	opts.Observer = obs
	if err := b.Run(testCtx(t), gensource.New(g), opts); err != nil {
		t.Fatal(err)
	}
	e.settle(b)
	e.exactlyOnce(1500)
	if obs.aborted.Load() != 0 {
		t.Errorf("the restoring instance aborted %d checkpoints (%v)", obs.aborted.Load(), obs.lastErr.Load())
	}
}

// readStatus reads the progress without opening the targets.
func readStatus(e *env) (sqlsink.Status, error) {
	return sqlsink.ReadStatus(testCtx(e.t), e.progress(), e.name)
}

// TestZombie: instance A pauses in its second checkpoint, after writing
// (its branches are active: nothing for a restore to fence, only the
// epochs stop it) or after preparing (restore fences it with an abort
// marker); instance B takes the partitions over and writes everything; A
// resumes. Nothing A wrote lands, and A stops with ErrFenced.
func TestZombie(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		for _, step := range []string{"flushed", "prepared"} {
			t.Run(progress+"/"+step, func(t *testing.T) {
				t.Parallel()
				zombie(t, progress, step)
			})
		}
	}
}

func zombie(t *testing.T, progress, step string) {
	e := newEnvOn(t, progress)
	g := gen(1200, 3)

	a := e.open()
	paused, resume := make(chan struct{}), make(chan struct{})
	sqlsink.SetHook(a, func(st string, h sqlsink.Handle) error {
		if st == step && h.Checkpoint == 2 {
			close(paused)
			<-resume
		}
		return nil
	})
	aDone := make(chan error, 1)
	go func() { aDone <- e.run(a, gensource.New(g)) }()
	select {
	case <-paused:
	case err := <-aDone:
		t.Fatalf("A ended before pausing: %v", err)
	}

	b := e.open()
	if err := e.run(b, gensource.New(g)); err != nil {
		t.Fatalf("B: %v", err)
	}
	before, _ := e.counts()
	close(resume)
	var errA error
	select {
	case errA = <-aDone:
	case <-time.After(30 * time.Second):
		t.Fatal("A did not stop after B's takeover")
	}
	if !errors.Is(errA, sink.ErrFenced) {
		t.Fatalf("A: %v, want ErrFenced", errA)
	}
	t.Logf("A stopped: %v", errA)
	e.settle(b)
	after, _ := e.counts()
	if after != before {
		t.Errorf("A's resumption changed the table: %v, then %v", before, after)
	}
	e.exactlyOnce(1200)
	st, err := readStatus(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Partitions {
		if p.Epoch != 2 {
			t.Errorf("partition %+v: want epoch 2 (A took it, then B)", p)
		}
	}
}

// failOnce returns a mapping that refuses record id once (the first time
// it sees it), and otherwise maps as the env's JSON mapping does.
func failOnce(t *testing.T, e *env, id int64, times int) sqlsink.MapFunc {
	t.Helper()
	base, err := sqlsink.JSONMapping(e.cfg.Tables)
	if err != nil {
		t.Fatal(err)
	}
	left := times
	return func(r sink.Record) ([]sqlsink.Row, error) {
		rows, err := base(r)
		if err == nil && rows[0].Values[0] == id && left != 0 {
			left--
			return nil, fmt.Errorf("refusing record %d", id)
		}
		return rows, err
	}
}

// TestAbortMappingError: a mapping error in the middle aborts the
// checkpoint; its records are read again and land once.
func TestAbortMappingError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.Map = failOnce(t, e, 777, 1)
	s := e.open()
	obs := &tally{}
	opts := runOpts()
	opts.Observer = obs
	if err := s.Run(testCtx(t), gensource.New(gen(1500, 3)), opts); err != nil {
		t.Fatal(err)
	}
	e.settle(s)
	e.exactlyOnce(1500)
	if obs.aborted.Load() != 1 {
		t.Errorf("%d checkpoints aborted, want 1", obs.aborted.Load())
	}
	t.Logf("aborted: %v", obs.lastErr.Load())
}

// TestAbortMappingErrorPersistent: a record the mapping always refuses
// stops the instance after MaxAborts; nothing of the failing checkpoint
// lands; an instance with a fixed mapping carries on from there.
func TestAbortMappingErrorPersistent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := e.cfg
	e.cfg.Map = failOnce(t, e, 1000, -1)
	s := e.open()
	opts := runOpts()
	opts.MaxAborts = 2
	err := s.Run(testCtx(t), gensource.New(gen(1500, 3)), opts)
	var me *sqlsink.MappingError
	if !errors.As(err, &me) || !errors.Is(err, sink.ErrAborted) {
		t.Fatalf("Run: %v, want a MappingError", err)
	}
	t.Logf("stopped: %v", err)
	my, pg := e.counts()
	if my.rows != pg.rows || my.rows >= 1500 || my.rows%3 != 0 || my.rows != my.distinct {
		t.Fatalf("after the stop: %v and %v", my, pg)
	}
	e.cfg = good
	if err := e.run(e.open(), gensource.New(gen(1500, 3))); err != nil {
		t.Fatal(err)
	}
	e.exactlyOnce(1500)
}

// TestAbortRefusedPrepare: PostgreSQL refuses PREPARE once (a deferred
// constraint trigger fails at commit time for record 1234, the first time
// only); the checkpoint aborts on both targets, MariaDB's prepared branch
// included, and is written again.
func TestAbortRefusedPrepare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.pg.Server.Exec(testCtx(t), e.pg.Name,
		"CREATE SEQUENCE refusals",
		`CREATE FUNCTION refuse_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.k = 1234 AND nextval('refusals') = 1 THEN
				RAISE EXCEPTION 'refusing record 1234 at prepare';
			END IF;
			RETURN NULL;
		END $$`,
		`CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION refuse_once()`); err != nil {
		t.Fatal(err)
	}
	s := e.open()
	obs := &tally{}
	opts := runOpts()
	opts.Observer = obs
	if err := s.Run(testCtx(t), gensource.New(gen(1500, 3)), opts); err != nil {
		t.Fatal(err)
	}
	e.settle(s)
	e.exactlyOnce(1500)
	if obs.aborted.Load() != 1 {
		t.Errorf("%d checkpoints aborted, want 1", obs.aborted.Load())
	}
	t.Logf("aborted: %v", obs.lastErr.Load())
}

var _ = context.Background
