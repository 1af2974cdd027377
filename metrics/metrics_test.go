package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xadb/xa/recovery"
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
# HELP xa_transactions_total Global transactions finished, by outcome (committed, aborted, unknown, heuristic: a database rolled back a branch whose commit was decided) and protocol (two_phase, one_phase).
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
