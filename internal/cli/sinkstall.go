package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/xadb/xa/sink/sqlsink"
)

// errStalled is the cause with which a stalled instance's run is ended
// once stall_exit has passed (docs/sink.md, "Liveness").
var errStalled = errors.New("stalled")

// waitingPartitions returns the partitions of ends whose records wait
// (a lag) while their position in the progress table has not moved for
// after (or that are not in it yet): nobody commits them.
func waitingPartitions(now time.Time, st sqlsink.Status, ends []partitionEnd, after time.Duration) []string {
	rows := map[string]sqlsink.PartitionStatus{}
	for _, p := range st.Partitions {
		rows[p.Partition] = p
	}
	var out []string
	for _, e := range ends {
		p, in := rows[e.Partition]
		n, ok := e.lag(p.Position)
		if !ok || n == 0 {
			continue
		}
		if !in || now.Sub(p.Updated) >= after {
			out = append(out, e.Partition)
		}
	}
	return out
}

// stallWatch tells an instance's stall from what it observes; it does no
// I/O. An instance is stalled when it has committed no checkpoint for
// after (since it started, if none) while partitions wait
// (waitingPartitions), and that has been seen for confirm at least (so
// that records arriving in a partition idle for long are not a stall
// before the next checkpoint could take them).
type stallWatch struct {
	after, exit, confirm time.Duration
	started              time.Time

	waitingFrom time.Time // when the condition was first seen; zero: not now
}

// stallState is what a check found.
type stallState struct {
	Stalled bool
	// Since is the last committed checkpoint (or the start): nothing
	// committed after it.
	Since   time.Time
	Waiting []string
	// Exit: stalled for exit (stall_exit) or longer.
	Exit bool
}

// check says whether the instance is stalled at now, given when it last
// committed a checkpoint (zero: never) and the partitions waiting.
func (w *stallWatch) check(now, lastCommit time.Time, waiting []string) stallState {
	since := lastCommit
	if since.IsZero() {
		since = w.started
	}
	if len(waiting) == 0 || now.Sub(since) < w.after {
		w.waitingFrom = time.Time{}
		return stallState{}
	}
	if w.waitingFrom.IsZero() {
		w.waitingFrom = now
	}
	if now.Sub(w.waitingFrom) < w.confirm {
		return stallState{}
	}
	return stallState{Stalled: true, Since: since, Waiting: waiting, Exit: w.exit > 0 && now.Sub(since) >= w.exit}
}

// stallWatcher runs a stallWatch for sink run: every period it reads the
// progress table and the source's ends, and on a stall warns, sets the
// metric xa_sink_stalled and, past stall_exit, ends the run with
// errStalled.
type stallWatcher struct {
	r      *reporter
	w      stallWatch
	period time.Duration
	logger *slog.Logger
	stop   context.CancelCauseFunc

	stalled bool
}

func (sw *stallWatcher) run(ctx context.Context) {
	t := time.NewTicker(sw.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sw.tick(ctx)
		}
	}
}

func (sw *stallWatcher) tick(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := sqlsink.ReadStatus(rctx, sw.r.c.ProgressTarget(sw.r.sc), sw.r.sc.Name)
	if err != nil {
		return // the progress line says why; a stall is judged on what is read
	}
	ends, err := sw.r.ends.ends(rctx)
	if err != nil {
		return
	}
	now := time.Now()
	sw.r.tr.mu.Lock()
	last := sw.r.tr.lastAt
	sw.r.tr.mu.Unlock()
	s := sw.w.check(now, last, waitingPartitions(now, st, ends, sw.w.after))
	name := sw.r.sc.Name
	switch {
	case s.Stalled && !sw.stalled:
		sw.logger.Warn(fmt.Sprintf("sink %s: stalled since %s: no checkpoint committed for %s while records wait in %s whose positions do not move (a group that does not settle, a database refusing, a lock); xactl sink status %s; the instance exits after stall_exit %s",
			name, s.Since.UTC().Format(time.RFC3339), now.Sub(s.Since).Round(time.Second), strings.Join(s.Waiting, ", "), name, sw.w.exit),
			"sink", name, "stalled_since", s.Since.UTC(), "partitions", s.Waiting)
	case !s.Stalled && sw.stalled:
		sw.logger.Warn(fmt.Sprintf("sink %s: no longer stalled", name), "sink", name)
	}
	sw.stalled = s.Stalled
	sw.r.m.SetStalled(s.Stalled)
	if s.Exit {
		sw.stop(fmt.Errorf("%w since %s: no checkpoint committed for %s (stall_exit %s) while records wait in %s", errStalled,
			s.Since.UTC().Format(time.RFC3339), now.Sub(s.Since).Round(time.Second), sw.w.exit, strings.Join(s.Waiting, ", ")))
	}
}
