package sqlsink_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// lines is a log sink that keeps what was written (safe for concurrent
// use).
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCommitUnknownXIDProvenByDecision: checkpoint 3 is decided, and
// before the sink commits its PostgreSQL branch that branch is committed
// from another session (as an earlier commit attempt whose reply was
// lost would have done). The sink's COMMIT PREPARED then answers
// "unknown XID", which the phase-2 kernel counts as committed because the
// decision row proves that nothing else can have ended the branch
// (xa.Phase2Call.Proven): phase two is finished, nothing is left to
// restore, every record lands once. Without the proof the sink would
// leave the branch to restore ("phase two left to restore") and report
// its outcome unknown.
func TestCommitUnknownXIDProvenByDecision(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, tgMy)
	logged := &lines{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(tlog{t}, logged), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := e.open()
	var committed atomic.Bool
	sqlsink.SetHook(s, func(step string, h sqlsink.Handle) error {
		if step != "decided" || h.Checkpoint != 3 || committed.Swap(true) {
			return nil
		}
		ctx := testCtx(t)
		c, err := pgxConnect(ctx, e.pg.DSN())
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		gid := h.Ref(tgPg).XID().String()
		if _, err := c.Exec(ctx, fmt.Sprintf("COMMIT PREPARED '%s'", strings.ReplaceAll(gid, "'", "''"))); err != nil {
			return fmt.Errorf("committing %s from another session: %w", gid, err)
		}
		return nil
	})
	obs := &tally{}
	opts := runOpts()
	opts.Observer = obs
	if err := s.Run(testCtx(t), gensource.New(gen(1500, 3)), opts); err != nil {
		t.Fatal(err)
	}
	if !committed.Load() {
		t.Fatal("checkpoint 3 was never decided: the test did not run its case")
	}
	e.settle(s)
	e.exactlyOnce(1500)
	if strings.Contains(logged.String(), "phase two left to restore") {
		t.Errorf("the branch the database no longer knew was left to restore, though its decision proves it committed:\n%s", logged.String())
	}
	if n := obs.aborted.Load(); n != 0 {
		t.Errorf("%d checkpoints aborted (%v)", n, obs.lastErr.Load())
	}
}
