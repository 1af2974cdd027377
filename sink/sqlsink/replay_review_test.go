package sqlsink_test

import (
	"errors"
	"testing"

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
