package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/xadb/xa/sink/sqlsink"
)

// TestSinkReplayExit: the exit code of xactl sink replay for each kind of
// report. A dead letter decided but left to restore on a target is in
// doubt (3), after a report that also counts replayed ones; one kept or
// missing is an error (1), and wins over decided ones; all replayed is 0.
// The end-to-end runs (TestSinkReplay) reach 0 and 1; the decided case
// needs a target that fails between the decision and its commit, which
// sqlsink TestReplayPhaseTwoLeft makes in-process.
func TestSinkReplayExit(t *testing.T) {
	code := func(err error) int {
		if err == nil {
			return ExitOK
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return ExitError
	}
	missing := sqlsink.ReplayReport{Missing: []sqlsink.DeadLetterID{{Incarnation: 1, Checkpoint: 2, Seq: 3}}}
	for _, tt := range []struct {
		name string
		v    sinkReplayView
		rerr error
		want int
		says string
	}{
		{"all replayed", sinkReplayView{Sink: "s", Replayed: 2}, nil, ExitOK, ""},
		{"nothing to replay", sinkReplayView{Sink: "s"}, nil, ExitOK, ""},
		{"decided, left to restore", sinkReplayView{Sink: "s", Replayed: 1, Decided: 2}, nil, ExitInDoubt, "2 dead letters decided"},
		{"kept", sinkReplayView{Sink: "s", Kept: 1, Decided: 1}, nil, ExitError, "1 dead letter kept"},
		{"missing", sinkReplayView{Sink: "s", ReplayReport: missing, Decided: 1}, nil, ExitError, "no dead letter"},
		{"stopped", sinkReplayView{Sink: "s", Decided: 1}, errors.New("connection refused"), ExitError, "replay stopped: connection refused"},
	} {
		err := tt.v.exit(tt.rerr)
		if got := code(err); got != tt.want || err != nil && !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: exit %d (%v), want %d saying %q", tt.name, got, err, tt.want, tt.says)
		}
	}
}
