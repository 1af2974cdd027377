// Package metrics exports the transaction manager's Prometheus metrics:
// transactions by outcome, phase latencies, branches left to recovery,
// in-doubt branches found by recovery, and decision-log syncs with their
// group sizes. Nothing is global: create a Metrics with the registry of
// your choice and hand it to the pieces it observes:
//
//	m := metrics.New(reg)
//	xa.NewManager(xa.Config{Observer: m, ...})
//	filelog.Open(dir, filelog.Options{OnSync: m.LogSynced})
//	first, stop, err := scanner.Start(ctx, interval, m.ObserveScan)
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// Metrics holds the collectors. Its methods are safe for concurrent use.
type Metrics struct {
	txs           *prometheus.CounterVec
	phase         *prometheus.HistogramVec
	pending       prometheus.Counter
	inDoubt       *prometheus.GaugeVec
	recovered     *prometheus.CounterVec
	presumed      prometheus.Counter
	scanErrors    prometheus.Counter
	logSyncs      prometheus.Counter
	logGroup      prometheus.Histogram
	logSyncTime   prometheus.Histogram
	logSyncedRecs prometheus.Counter
}

var _ xa.Observer = (*Metrics)(nil)

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	lat := prometheus.ExponentialBuckets(0.0002, 2, 16) // 0.2ms .. 6.5s
	m := &Metrics{
		txs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xa_transactions_total", Help: "Global transactions finished, by outcome (committed, aborted, unknown, heuristic: a database rolled back a branch whose commit was decided) and protocol (two_phase, one_phase).",
		}, []string{"outcome", "protocol"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "xa_phase_duration_seconds", Help: "Duration of the protocol's phases: prepare, log (decision made durable), commit (phase 2), total (begin to finish).", Buckets: lat,
		}, []string{"phase"}),
		pending: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_branches_left_to_recovery_total", Help: "Branches whose phase 2 the coordinator gave up to recovery.",
		}),
		inDoubt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xa_in_doubt_branches", Help: "Prepared branches of ours left unresolved after the last recovery scan (waiting, failed, anomalous, of another log, older than the log, or blocked), by participant.",
		}, []string{"participant"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xa_recovery_actions_total", Help: "Branches resolved by recovery, by action (commit, rollback) and result (ok, error).",
		}, []string{"action", "result"}),
		presumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_recovery_presumed_aborts_total", Help: "Transactions whose abort recovery recorded (the fence) and then rolled back (presumed abort).",
		}),
		scanErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_recovery_scan_errors_total", Help: "Recovery scans, or parts of them, that failed (a participant or the log could not be read).",
		}),
		logSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_decision_log_syncs_total", Help: "fsyncs of the decision log.",
		}),
		logGroup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "xa_decision_log_group_size", Help: "Records made durable by one fsync (group commit).", Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		logSyncTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "xa_decision_log_sync_duration_seconds", Help: "Duration of one decision-log write and fsync.", Buckets: lat,
		}),
		logSyncedRecs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_decision_log_records_total", Help: "Records written to the decision log.",
		}),
	}
	reg.MustRegister(m.txs, m.phase, m.pending, m.inDoubt, m.recovered, m.presumed, m.scanErrors, m.logSyncs, m.logGroup, m.logSyncTime, m.logSyncedRecs)
	return m
}

// ObserveTx implements xa.Observer.
func (m *Metrics) ObserveTx(s xa.TxStats) {
	proto := "two_phase"
	if s.OnePhase {
		proto = "one_phase"
	}
	m.txs.WithLabelValues(s.Outcome, proto).Inc()
	for name, d := range map[string]time.Duration{"prepare": s.Prepare, "log": s.Log, "commit": s.Commit, "total": s.Total} {
		if d > 0 {
			m.phase.WithLabelValues(name).Observe(d.Seconds())
		}
	}
	if s.Pending > 0 {
		m.pending.Add(float64(s.Pending))
	}
}

// LogSynced observes one group sync of the decision log; it has the
// signature of filelog.Options.OnSync.
func (m *Metrics) LogSynced(records, bytes int, d time.Duration) {
	m.logSyncs.Inc()
	m.logGroup.Observe(float64(records))
	m.logSyncTime.Observe(d.Seconds())
	m.logSyncedRecs.Add(float64(records))
}

// ObserveScan records a recovery scan; it has the signature of the report
// callback of recovery.Scanner.Run.
func (m *Metrics) ObserveScan(rep recovery.Report, err error) {
	if err != nil {
		m.scanErrors.Inc()
		return
	}
	if len(rep.Errors) > 0 {
		m.scanErrors.Add(float64(len(rep.Errors)))
	}
	counts := map[string]int{}
	for _, p := range rep.Participants {
		counts[p] = 0 // a participant with nothing in doubt reads 0
	}
	for _, b := range rep.Branches {
		switch b.Verdict {
		case recovery.Commit, recovery.Rollback:
			result := "ok"
			if !b.Done {
				result = "error"
				counts[b.Participant]++
			}
			m.recovered.WithLabelValues(b.Verdict.String(), result).Inc()
		case recovery.Wait, recovery.Anomaly, recovery.OtherLog, recovery.Predates, recovery.Blocked:
			counts[b.Participant]++
		}
	}
	m.presumed.Add(float64(len(rep.Aborted)))
	for p, n := range counts {
		m.inDoubt.WithLabelValues(p).Set(float64(n))
	}
}
