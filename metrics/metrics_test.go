package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.ObserveTx(xa.TxStats{Outcome: "committed", Logged: true, Prepare: time.Millisecond, Log: time.Millisecond, Commit: time.Millisecond, Total: 3 * time.Millisecond})
	m.ObserveTx(xa.TxStats{Outcome: "committed", OnePhase: true, Commit: time.Millisecond, Total: time.Millisecond})
	m.ObserveTx(xa.TxStats{Outcome: "aborted", Pending: 1})
	m.ObserveTx(xa.TxStats{Outcome: "heuristic", Logged: true})
	m.LogSynced(16, 2048, 2*time.Millisecond)
	m.ObserveScan(recovery.Report{Participants: []string{"maria", "pg", "idle"}, Branches: []recovery.Branch{
		{Participant: "maria", Verdict: recovery.Commit, Done: true},
		{Participant: "maria", Verdict: recovery.Wait},
		{Participant: "pg", Verdict: recovery.Rollback, Err: errors.New("down")},
		{Participant: "pg", Verdict: recovery.Foreign},
		{Participant: "idle", Verdict: recovery.OtherLog},
		{Participant: "idle", Verdict: recovery.Blocked},
	}, Aborted: []xa.GlobalID{{Node: "n"}}}, nil)

	want := `
# HELP xa_transactions_total Global transactions finished, by outcome (committed, aborted, unknown, heuristic: a database rolled back a branch whose commit was decided) and protocol (two_phase, last_resource, one_phase, none: nothing was prepared nor committed in one phase, as for a transaction aborted before any prepare).
# TYPE xa_transactions_total counter
xa_transactions_total{outcome="aborted",protocol="two_phase"} 1
xa_transactions_total{outcome="committed",protocol="one_phase"} 1
xa_transactions_total{outcome="committed",protocol="two_phase"} 1
xa_transactions_total{outcome="heuristic",protocol="two_phase"} 1
# HELP xa_in_doubt_branches Prepared branches of ours left unresolved after the last recovery scan (waiting, failed, anomalous, of another log, older than the log, or blocked), by participant.
# TYPE xa_in_doubt_branches gauge
xa_in_doubt_branches{participant="idle"} 2
xa_in_doubt_branches{participant="maria"} 1
xa_in_doubt_branches{participant="pg"} 1
# HELP xa_branches_left_to_recovery_total Branches whose phase 2 the coordinator gave up to recovery.
# TYPE xa_branches_left_to_recovery_total counter
xa_branches_left_to_recovery_total 1
# HELP xa_decision_log_records_total Records written to the decision log.
# TYPE xa_decision_log_records_total counter
xa_decision_log_records_total 16
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xa_transactions_total", "xa_in_doubt_branches",
		"xa_branches_left_to_recovery_total", "xa_decision_log_records_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.phase); n != 4 {
		t.Fatalf("phase histograms: %d series, want 4", n)
	}
	if got := testutil.ToFloat64(m.presumed); got != 1 {
		t.Fatalf("presumed aborts = %v", got)
	}
	if got := testutil.ToFloat64(m.recovered.WithLabelValues("rollback", "error")); got != 1 {
		t.Fatalf("failed rollbacks = %v", got)
	}
}

// TestSinkMetrics: the sink's collectors count records and checkpoints
// by outcome, observe the phases of committed checkpoints (and the abort
// of aborted ones), follow the pending checkpoints, and hold the lag of
// the partitions last set, all labelled with the sink's name; two sinks
// share a registry.
func TestSinkMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewSink(reg, "orders")
	other := NewSink(reg, "audit")
	var o sink.Observer = m
	o.RecordsWritten(100)
	o.RecordsWritten(50)
	o.PendingChanged(1)
	o.PendingChanged(2)
	o.CheckpointDone(sink.CheckpointStats{Checkpoint: 1, Records: 100, Committed: true, Write: time.Second, Prepare: 10 * time.Millisecond, Commit: 20 * time.Millisecond})
	o.PendingChanged(1)
	o.CheckpointDone(sink.CheckpointStats{Checkpoint: 2, Records: 50, Err: &sink.AbortError{Checkpoint: 2, Reason: sink.ErrTakenOver}, Commit: 5 * time.Millisecond})
	o.CheckpointDone(sink.CheckpointStats{Checkpoint: 3, Records: 7, Err: fmt.Errorf("checkpoint 3: %w", sink.ErrUnresolved)})
	// Aborted, though its abort's own trouble is an unresolved one: an
	// abort.
	o.CheckpointDone(sink.CheckpointStats{Checkpoint: 4, Records: 7, Err: &sink.AbortError{Checkpoint: 4, Reason: sink.ErrUnresolved}, Commit: 5 * time.Millisecond})
	o.PendingChanged(0)
	m.SetLag(map[string]int64{"orders/0": 12, "orders/1": 0})
	m.SetLag(map[string]int64{"orders/1": 3}) // orders/0 is no longer read here
	other.RecordsWritten(1)

	want := `
# HELP xa_sink_records_written_total Records written into checkpoints (an aborted checkpoint's records are read and written again, and counted again).
# TYPE xa_sink_records_written_total counter
xa_sink_records_written_total{sink="audit"} 1
xa_sink_records_written_total{sink="orders"} 150
# HELP xa_sink_records_committed_total Records of committed checkpoints: landed exactly once.
# TYPE xa_sink_records_committed_total counter
xa_sink_records_committed_total{sink="audit"} 0
xa_sink_records_committed_total{sink="orders"} 100
# HELP xa_sink_checkpoints_total Checkpoints finished, by outcome: committed, aborted (rolled back; its records are read again), unresolved (the decision's fate is unknown: the instance stops and a restore settles it).
# TYPE xa_sink_checkpoints_total counter
xa_sink_checkpoints_total{outcome="aborted",sink="orders"} 2
xa_sink_checkpoints_total{outcome="committed",sink="orders"} 1
xa_sink_checkpoints_total{outcome="unresolved",sink="orders"} 1
# HELP xa_sink_pending_checkpoints Checkpoints prepared and waiting for, or in, their decision and phase two.
# TYPE xa_sink_pending_checkpoints gauge
xa_sink_pending_checkpoints{sink="audit"} 0
xa_sink_pending_checkpoints{sink="orders"} 0
# HELP xa_sink_lag_records Records of a partition not yet committed: the source's end (Kafka: the high watermark) minus the position in the progress table.
# TYPE xa_sink_lag_records gauge
xa_sink_lag_records{partition="orders/1",sink="orders"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xa_sink_records_written_total", "xa_sink_records_committed_total",
		"xa_sink_checkpoints_total", "xa_sink_pending_checkpoints", "xa_sink_lag_records"); err != nil {
		t.Fatal(err)
	}
	// Phases: write, prepare and commit of the committed checkpoint, the
	// abort of the aborted one; nothing of the unresolved one.
	if n := testutil.CollectAndCount(m.phase); n != 4 {
		t.Errorf("phase histograms: %d series, want 4 (write, prepare, commit, abort)", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "xa_sink_checkpoint_phase_duration_seconds" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			phase := ""
			for _, l := range mm.GetLabel() {
				if l.GetName() == "phase" {
					phase = l.GetValue()
				}
			}
			sums[phase] = fmt.Sprintf("%d/%v", mm.GetHistogram().GetSampleCount(), mm.GetHistogram().GetSampleSum())
		}
	}
	if want := map[string]string{"write": "1/1", "prepare": "1/0.01", "commit": "1/0.02", "abort": "2/0.01"}; fmt.Sprint(sums) != fmt.Sprint(want) {
		t.Errorf("phase observations (count/sum): %v, want %v", sums, want)
	}
	if ts := testutil.ToFloat64(m.lastCommit); ts < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last commit timestamp %v, want about now", ts)
	}
	if ts := testutil.ToFloat64(other.lastCommit); ts != 0 {
		t.Errorf("a sink that never committed has last commit timestamp %v", ts)
	}
}

// The oldest branch in doubt per participant, and the grace, for the alert
// on branches in doubt past the grace period.
func TestInDoubtOldest(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.SetGrace(3 * time.Minute)
	m.ObserveScan(recovery.Report{Participants: []string{"maria", "pg"}, Branches: []recovery.Branch{
		{Participant: "maria", Verdict: recovery.Wait, Age: 20 * time.Second, AgeKnown: true},
		{Participant: "maria", Verdict: recovery.Blocked, Age: 10 * time.Minute, AgeKnown: true},
		{Participant: "maria", Verdict: recovery.Commit, Done: true, Age: time.Hour, AgeKnown: true},
		{Participant: "pg", Verdict: recovery.Foreign, Age: time.Hour, AgeKnown: true},
	}}, nil)
	want := `
# HELP xa_in_doubt_oldest_seconds Age of the oldest branch counted in xa_in_doubt_branches whose age is known, after the last recovery scan, by participant (0: none). Above xa_recovery_grace_seconds, recovery is not resolving it by itself.
# TYPE xa_in_doubt_oldest_seconds gauge
xa_in_doubt_oldest_seconds{participant="maria"} 600
xa_in_doubt_oldest_seconds{participant="pg"} 0
# HELP xa_recovery_grace_seconds The presumed-abort grace period of the scanner's decision log (set with SetGrace; xactl recover does).
# TYPE xa_recovery_grace_seconds gauge
xa_recovery_grace_seconds 180
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xa_in_doubt_oldest_seconds", "xa_recovery_grace_seconds"); err != nil {
		t.Fatal(err)
	}
}
