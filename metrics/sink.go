package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xadb/xa/sink"
)

// Sink holds the collectors of one exactly-once sink: records written and
// committed, checkpoints by outcome, their phases' durations, the
// checkpoints pending, and the lag per partition. Every series carries
// the label sink="<name>", so several sinks can share a registry. It
// implements sink.Observer:
//
//	m := metrics.NewSink(reg, "orders")
//	s.Run(ctx, src, sink.RunOptions{Observer: m})
//	m.SetLag(map[string]int64{"orders/0": 12}) // from the source's end offsets
//
// Its methods are safe for concurrent use.
type Sink struct {
	written     prometheus.Counter
	committed   prometheus.Counter
	checkpoints *prometheus.CounterVec
	phase       *prometheus.HistogramVec
	pending     prometheus.Gauge
	lastCommit  prometheus.Gauge
	lag         *prometheus.GaugeVec
	deadLetters prometheus.Counter
	stalled     prometheus.Gauge
}

var _ sink.Observer = (*Sink)(nil)

// Checkpoint outcomes (the outcome label of xa_sink_checkpoints_total).
const (
	OutcomeCommitted  = "committed"
	OutcomeAborted    = "aborted"
	OutcomeUnresolved = "unresolved"
)

// NewSink creates the collectors of the sink named name and registers them
// with reg.
func NewSink(reg prometheus.Registerer, name string) *Sink {
	lat := prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5ms .. 16s
	cl := prometheus.Labels{"sink": name}
	m := &Sink{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_sink_records_written_total", ConstLabels: cl,
			Help: "Records written into checkpoints (an aborted checkpoint's records are read and written again, and counted again).",
		}),
		committed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_sink_records_committed_total", ConstLabels: cl,
			Help: "Records of committed checkpoints: landed exactly once.",
		}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xa_sink_checkpoints_total", ConstLabels: cl,
			Help: "Checkpoints finished, by outcome: committed, aborted (rolled back; its records are read again), unresolved (the decision's fate is unknown: the instance stops and a restore settles it).",
		}, []string{"outcome"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "xa_sink_checkpoint_phase_duration_seconds", ConstLabels: cl, Buckets: lat,
			Help: "Duration of a checkpoint's phases: write (first record to pre-commit), prepare (flush and prepare every branch), commit (decision and phase two) of committed checkpoints; abort of aborted ones.",
		}, []string{"phase"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xa_sink_pending_checkpoints", ConstLabels: cl,
			Help: "Checkpoints prepared and waiting for, or in, their decision and phase two.",
		}),
		lastCommit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xa_sink_last_commit_timestamp_seconds", ConstLabels: cl,
			Help: "When the last checkpoint committed (Unix time; 0: none yet).",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xa_sink_lag_records", ConstLabels: cl,
			Help: "Records of a partition not yet committed: the source's end (Kafka: the high watermark) minus the position in the progress table.",
		}, []string{"partition"}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xa_sink_dead_letters_total", ConstLabels: cl,
			Help: "Bad records written to the dead-letter table by committed checkpoints (on_error: dead_letter).",
		}),
	}
	m.stalled = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "xa_sink_stalled", ConstLabels: cl,
		Help: "1 while the instance reports a stall: no checkpoint committed for stall_after while records wait in partitions whose positions do not move (a frozen group, a database refusing, a lock); else 0.",
	})
	reg.MustRegister(m.written, m.committed, m.checkpoints, m.phase, m.pending, m.lastCommit, m.lag, m.deadLetters, m.stalled)
	return m
}

// DeadLetters counts n bad records written to the dead-letter table by a
// committed checkpoint (sqlsink.Config.DeadLettersCommitted).
func (m *Sink) DeadLetters(n int) { m.deadLetters.Add(float64(n)) }

// SetStalled sets xa_sink_stalled: 1 while the instance reports a stall.
func (m *Sink) SetStalled(stalled bool) {
	v := 0.0
	if stalled {
		v = 1
	}
	m.stalled.Set(v)
}

// RecordsWritten implements sink.Observer.
func (m *Sink) RecordsWritten(n int) { m.written.Add(float64(n)) }

// PendingChanged implements sink.Observer.
func (m *Sink) PendingChanged(n int) { m.pending.Set(float64(n)) }

// CheckpointDone implements sink.Observer.
func (m *Sink) CheckpointDone(c sink.CheckpointStats) {
	observe := func(phase string, d time.Duration) {
		if d > 0 {
			m.phase.WithLabelValues(phase).Observe(d.Seconds())
		}
	}
	switch {
	case c.Committed:
		m.checkpoints.WithLabelValues(OutcomeCommitted).Inc()
		m.committed.Add(float64(c.Records))
		m.lastCommit.SetToCurrentTime()
		observe("write", c.Write)
		observe("prepare", c.Prepare)
		observe("commit", c.Commit)
	case errors.Is(c.Err, sink.ErrUnresolved) && !errors.Is(c.Err, sink.ErrAborted):
		m.checkpoints.WithLabelValues(OutcomeUnresolved).Inc()
	default:
		m.checkpoints.WithLabelValues(OutcomeAborted).Inc()
		observe("abort", c.Commit)
	}
}

// SetLag sets the lag of every partition in lags and drops the partitions
// not in it (no longer read by this instance).
func (m *Sink) SetLag(lags map[string]int64) {
	m.lag.Reset()
	for p, n := range lags {
		m.lag.WithLabelValues(p).Set(float64(n))
	}
}
