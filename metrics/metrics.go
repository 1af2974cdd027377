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
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// Metrics holds the collectors. Its methods are safe for concurrent use.
type Metrics struct {
	txs           *prometheus.CounterVec
	phase         *prometheus.HistogramVec
	pending       prometheus.Counter
	inDoubt       *prometheus.GaugeVec
	oldest        *prometheus.GaugeVec
	grace         prometheus.Gauge
	recovered     *prometheus.CounterVec
	presumed      prometheus.Counter
	scanErrors    prometheus.Counter
	logSyncs      prometheus.Counter
	logGroup      prometheus.Histogram
	logSyncTime   prometheus.Histogram
	logSyncedRecs prometheus.Counter
}

var _ xa.ContextObserver = (*Metrics)(nil)

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	lat := prometheus.ExponentialBuckets(0.0002, 2, 16) // 0.2ms .. 6.5s
	m := &Metrics{
		txs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xa_transactions_total", Help: "Global transactions finished, by outcome (committed, aborted, unknown, heuristic: a database rolled back a branch whose commit was decided) and protocol (two_phase, last_resource, one_phase, none: nothing was prepared nor committed in one phase, as for a transaction aborted before any prepare).",
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
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xa_in_doubt_oldest_seconds", Help: "Age of the oldest branch counted in xa_in_doubt_branches whose age is known, after the last recovery scan, by participant (0: none). Above xa_recovery_grace_seconds, recovery is not resolving it by itself.",
		}, []string{"participant"}),
		grace: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xa_recovery_grace_seconds", Help: "The presumed-abort grace period of the scanner's decision log (set with SetGrace; xactl recover does).",
		}),
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
	reg.MustRegister(m.txs, m.phase, m.pending, m.inDoubt, m.oldest, m.grace, m.recovered, m.presumed, m.scanErrors, m.logSyncs, m.logGroup, m.logSyncTime, m.logSyncedRecs)
	return m
}

// ObserveTx implements xa.Observer.
func (m *Metrics) ObserveTx(s xa.TxStats) { m.ObserveTxContext(context.Background(), s) }

// ObserveTxContext implements xa.ContextObserver: when ctx carries a
// sampled OpenTelemetry span (xa.Config.Tracer), the transaction counter
// and the total duration get its trace id as an exemplar (exposed with the
// OpenMetrics format), so that a dashboard leads from a metric to a trace.
func (m *Metrics) ObserveTxContext(ctx context.Context, s xa.TxStats) {
	proto := s.Protocol
	if proto == "" {
		// A TxStats made by hand, without the protocol.
		proto = xa.ProtocolTwoPhase
		if s.OnePhase {
			proto = xa.ProtocolOnePhase
		}
	}
	var ex prometheus.Labels
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsSampled() {
		ex = prometheus.Labels{"trace_id": sc.TraceID().String()}
	}
	c := m.txs.WithLabelValues(s.Outcome, proto)
	if ea, ok := c.(prometheus.ExemplarAdder); ok && ex != nil {
		ea.AddWithExemplar(1, ex)
	} else {
		c.Inc()
	}
	observe := func(name string, d time.Duration) {
		if d <= 0 {
			return
		}
		h := m.phase.WithLabelValues(name)
		if eo, ok := h.(prometheus.ExemplarObserver); ok && ex != nil && name == "total" {
			eo.ObserveWithExemplar(d.Seconds(), ex)
			return
		}
		h.Observe(d.Seconds())
	}
	observe("prepare", s.Prepare)
	observe("log", s.Log)
	observe("commit", s.Commit)
	observe("total", s.Total)
	if s.Pending > 0 {
		m.pending.Add(float64(s.Pending))
	}
}

// SetGrace records the presumed-abort grace period of the scanner whose
// scans ObserveScan receives (recovery.Scanner.Grace), for alerts on
// branches in doubt for longer (xa_in_doubt_oldest_seconds).
func (m *Metrics) SetGrace(d time.Duration) { m.grace.Set(d.Seconds()) }

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
	oldest := map[string]time.Duration{}
	for _, p := range rep.Participants {
		counts[p] = 0 // a participant with nothing in doubt reads 0
		oldest[p] = 0
	}
	inDoubt := func(b recovery.Branch) {
		counts[b.Participant]++
		if b.AgeKnown && b.Age > oldest[b.Participant] {
			oldest[b.Participant] = b.Age
		}
	}
	for _, b := range rep.Branches {
		switch b.Verdict {
		case recovery.Commit, recovery.Rollback:
			result := "ok"
			if !b.Done {
				result = "error"
				inDoubt(b)
			}
			m.recovered.WithLabelValues(b.Verdict.String(), result).Inc()
		case recovery.Wait, recovery.Anomaly, recovery.OtherLog, recovery.Predates, recovery.Blocked:
			inDoubt(b)
		}
	}
	m.presumed.Add(float64(len(rep.Aborted)))
	for p, n := range counts {
		m.inDoubt.WithLabelValues(p).Set(float64(n))
		m.oldest.WithLabelValues(p).Set(oldest[p].Seconds())
	}
}
