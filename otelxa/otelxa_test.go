package otelxa_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/metrics"
	"github.com/xadb/xa/otelxa"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// rig is a manager over two in-memory participants, traced into an
// in-memory exporter, with metrics and a log handler that keeps each
// record's context.
type rig struct {
	exp     *tracetest.InMemoryExporter
	tp      *sdktrace.TracerProvider
	a, b    *memrm.RM
	log     *memrm.Log
	mgr     *xa.Manager
	metrics *metrics.Metrics
	reg     *prometheus.Registry
	records *recordHandler
}

func newRig(t *testing.T, last bool) *rig {
	t.Helper()
	r := &rig{exp: tracetest.NewInMemoryExporter(), reg: prometheus.NewRegistry(), records: &recordHandler{}}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.exp))
	t.Cleanup(func() { r.tp.Shutdown(context.Background()) })
	r.a = memrm.New("a", memrm.NewDB(), nil)
	r.b = memrm.New("b", memrm.NewDB(), nil)
	if last {
		r.b.EnableLastResource()
	}
	r.log = memrm.NewLog("oteltest")
	r.metrics = metrics.New(r.reg)
	var err error
	r.mgr, err = xa.NewManager(xa.Config{Node: "oteltest", Log: r.log, Tracer: otelxa.New(r.tp),
		Observer: r.metrics, Logger: slog.New(r.records)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// transfer writes to both participants (or fails before any prepare).
func (r *rig) transfer(ctx context.Context, fail error) (xa.Result, error) {
	return r.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		for _, rm := range []*memrm.RM{r.a, r.b} {
			s, err := tx.Enlist(ctx, rm)
			if err != nil {
				return err
			}
			if err := s.(*memrm.Branch).Put(ctx, 1, 1); err != nil {
				return err
			}
		}
		// Work of the application's own, traced in the transaction's
		// context: a child of the transaction's span.
		_, s := r.tp.Tracer("app").Start(ctx, "app.work")
		s.End()
		return fail
	})
}

// tree returns the spans by name, and checks that each of the named
// children has parent as its parent.
func spansByName(exp *tracetest.InMemoryExporter) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A committed transaction is a span under the caller's, with a child per
// prepare, the decision-log write and each branch's commit, and the
// application's own spans; the global id, participants, protocol and
// outcome are attributes; the log record and the metrics see the
// transaction's context.
func TestSpanTreeCommitted(t *testing.T) {
	r := newRig(t, false)
	ctx, root := r.tp.Tracer("test").Start(context.Background(), "request")
	res, err := r.transfer(ctx, nil)
	root.End()
	if err != nil || !res.Committed {
		t.Fatalf("transfer: %+v, %v", res, err)
	}
	spans := spansByName(r.exp)
	txs := spans[xa.SpanTransaction]
	if len(txs) != 1 {
		t.Fatalf("transaction spans: %d, want 1 (spans: %v)", len(txs), names(r.exp))
	}
	txSpan := txs[0]
	if txSpan.Parent.SpanID() != root.SpanContext().SpanID() {
		t.Fatal("the transaction's span is not a child of the caller's")
	}
	for key, want := range map[string]string{
		xa.AttrGlobalID: res.ID.String(), xa.AttrProtocol: xa.ProtocolTwoPhase, xa.AttrOutcome: "committed", xa.AttrNode: "oteltest",
	} {
		if got := attr(txSpan, key).AsString(); got != want {
			t.Errorf("transaction span %s = %q, want %q", key, got, want)
		}
	}
	if got := attr(txSpan, xa.AttrParticipants).AsStringSlice(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("participants = %v", got)
	}
	want := map[string][]string{
		xa.SpanPrepare:     {"a", "b"},
		xa.SpanDecisionLog: {""},
		xa.SpanCommit:      {"a", "b"},
		"app.work":         {""},
	}
	for name, parts := range want {
		var got []string
		for _, s := range spans[name] {
			if s.Parent.SpanID() != txSpan.SpanContext.SpanID() {
				t.Errorf("%s is not a child of the transaction's span", name)
			}
			got = append(got, attr(s, xa.AttrParticipant).AsString())
		}
		slices.Sort(got)
		if !slices.Equal(got, parts) {
			t.Errorf("%s spans for participants %q, want %q", name, got, parts)
		}
	}
	for _, s := range spans[xa.SpanPrepare] {
		if v := attr(s, xa.AttrVote).AsString(); v != "prepared" {
			t.Errorf("prepare vote %q", v)
		}
	}
	// The log record of the transaction's end carries its span and id.
	rec, ok := r.records.find("transaction finished")
	if !ok {
		t.Fatal("no 'transaction finished' record")
	}
	if sc := trace.SpanContextFromContext(rec.ctx); sc.SpanID() != txSpan.SpanContext.SpanID() {
		t.Error("the log record was not written with the transaction's context")
	}
	if !strings.Contains(rec.attrs, res.ID.String()) {
		t.Errorf("the log record does not carry the global id: %s", rec.attrs)
	}
	// Metrics: protocol two_phase; the trace id as an exemplar.
	if n := txCount(r, "committed", xa.ProtocolTwoPhase); n != 1 {
		t.Errorf("committed two_phase transactions: %v", n)
	}
}

// A transaction aborted before any prepare: no prepare span, protocol
// "none" on its span and in the metrics (it used to be counted as
// two_phase), the span failed with the reason.
func TestSpanTreeAbortedBeforePrepare(t *testing.T) {
	r := newRig(t, false)
	boom := errors.New("boom")
	if _, err := r.transfer(context.Background(), boom); !errors.Is(err, boom) {
		t.Fatalf("transfer: %v", err)
	}
	spans := spansByName(r.exp)
	if len(spans[xa.SpanPrepare]) != 0 || len(spans[xa.SpanDecisionLog]) != 0 {
		t.Errorf("prepare or decision spans for a transaction aborted before prepare: %v", names(r.exp))
	}
	if len(spans[xa.SpanRollback]) != 2 {
		t.Errorf("rollback spans: %d, want 2", len(spans[xa.SpanRollback]))
	}
	tx := spans[xa.SpanTransaction][0]
	if p := attr(tx, xa.AttrProtocol).AsString(); p != xa.ProtocolNone {
		t.Errorf("protocol %q, want none", p)
	}
	if o := attr(tx, xa.AttrOutcome).AsString(); o != "aborted" || tx.Status.Code != codes.Error {
		t.Errorf("outcome %q, status %v", o, tx.Status)
	}
	if n := txCount(r, "aborted", xa.ProtocolNone); n != 1 {
		t.Errorf(`xa_transactions_total{outcome="aborted",protocol="none"} = %v, want 1`, n)
	}
	if n := txCount(r, "aborted", xa.ProtocolTwoPhase); n != 0 {
		t.Errorf(`xa_transactions_total{outcome="aborted",protocol="two_phase"} = %v, want 0`, n)
	}
}

// With a last resource: its commit is a span of its own and no decision log
// is written.
func TestSpanTreeLastResource(t *testing.T) {
	r := newRig(t, true)
	res, err := r.transfer(context.Background(), nil)
	if err != nil || !res.Committed {
		t.Fatalf("transfer: %+v, %v", res, err)
	}
	spans := spansByName(r.exp)
	if len(spans[xa.SpanCommitLast]) != 1 || attr(spans[xa.SpanCommitLast][0], xa.AttrParticipant).AsString() != "b" {
		t.Errorf("commit-last spans: %v", names(r.exp))
	}
	if len(spans[xa.SpanDecisionLog]) != 0 {
		t.Errorf("a decision-log span with a last resource")
	}
	if p := attr(spans[xa.SpanTransaction][0], xa.AttrProtocol).AsString(); p != xa.ProtocolLastResource {
		t.Errorf("protocol %q", p)
	}
}

// A recovery scan is a span with what it did; the sink's checkpoints are
// spans with their phases.
func TestRecoveryAndSinkSpans(t *testing.T) {
	r := newRig(t, false)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{r.a, r.b}, Log: r.log, Tracer: otelxa.New(r.tp)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := spansByName(r.exp)
	if s := spans[recovery.SpanScan]; len(s) != 1 || !slices.Equal(attr(s[0], "xa.participants").AsStringSlice(), []string{"a", "b"}) {
		t.Fatalf("scan spans: %v", names(r.exp))
	}

	var calls []sink.CheckpointStats
	obs := otelxa.SinkObserver(r.tp, "orders", observerFunc(func(c sink.CheckpointStats) { calls = append(calls, c) }))
	obs.CheckpointDone(sink.CheckpointStats{Checkpoint: 7, Records: 100, Committed: true,
		Write: 30 * time.Millisecond, Prepare: 5 * time.Millisecond, Commit: 4 * time.Millisecond})
	obs.CheckpointDone(sink.CheckpointStats{Checkpoint: 8, Records: 3, Err: errors.New("refused"),
		Write: 30 * time.Millisecond, Prepare: 5 * time.Millisecond, Commit: 4 * time.Millisecond})
	if len(calls) != 2 {
		t.Fatalf("the next observer got %d calls", len(calls))
	}
	spans = spansByName(r.exp)
	cps := spans[otelxa.SpanCheckpoint]
	if len(cps) != 2 {
		t.Fatalf("checkpoint spans: %v", names(r.exp))
	}
	for _, name := range []string{otelxa.SpanCheckpointWrite, otelxa.SpanCheckpointPrepare} {
		if len(spans[name]) != 2 {
			t.Errorf("%s spans: %d, want 2", name, len(spans[name]))
		}
	}
	if len(spans[otelxa.SpanCheckpointCommit]) != 1 || len(spans[otelxa.SpanCheckpointAbort]) != 1 {
		t.Errorf("commit/abort spans: %v", names(r.exp))
	}
	for _, c := range cps {
		if d := c.EndTime.Sub(c.StartTime); d < 39*time.Millisecond || d > time.Second {
			t.Errorf("checkpoint %v lasted %v, want its phases' 39ms", attr(c, otelxa.AttrCheckpoint).AsInt64(), d)
		}
	}
	if cps[1].Status.Code != codes.Error {
		t.Error("the aborted checkpoint's span is not failed")
	}
}

// Without a provider of its own the global one is used: nothing is
// recorded, and transactions work.
func TestNoProvider(t *testing.T) {
	a := memrm.New("a", memrm.NewDB(), nil)
	mgr, err := xa.NewManager(xa.Config{Node: "oteltest", Log: memrm.NewLog("oteltest"), Tracer: otelxa.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mgr.Run(context.Background(), func(ctx context.Context, tx *xa.Tx) error {
		s, err := tx.Enlist(ctx, a)
		if err != nil {
			return err
		}
		return s.(*memrm.Branch).Put(ctx, 1, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// txCount reads xa_transactions_total{outcome, protocol}; when it has an
// exemplar, it must be a trace id.
func txCount(r *rig, outcome, protocol string) float64 {
	mfs, err := r.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xa_transactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] == outcome && labels["protocol"] == protocol {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// exemplarOf returns the trace_id exemplar of
// xa_transactions_total{outcome, protocol}.
func exemplarOf(r *rig, outcome, protocol string) string {
	mfs, _ := r.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "xa_transactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := 0
			for _, l := range m.GetLabel() {
				if (l.GetName() == "outcome" && l.GetValue() == outcome) || (l.GetName() == "protocol" && l.GetValue() == protocol) {
					ok++
				}
			}
			if ok == 2 && m.GetCounter().GetExemplar() != nil {
				for _, l := range m.GetCounter().GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" {
						return l.GetValue()
					}
				}
			}
		}
	}
	return ""
}

func names(exp *tracetest.InMemoryExporter) []string {
	var out []string
	for _, s := range exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}

type observerFunc func(sink.CheckpointStats)

func (f observerFunc) RecordsWritten(int)                    {}
func (f observerFunc) PendingChanged(int)                    {}
func (f observerFunc) CheckpointDone(c sink.CheckpointStats) { f(c) }

// recordHandler keeps every record with its context.
type recordHandler struct {
	mu   sync.Mutex
	recs []record
}

type record struct {
	ctx   context.Context
	msg   string
	attrs string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { b.WriteString(a.String() + " "); return true })
	h.mu.Lock()
	h.recs = append(h.recs, record{ctx: ctx, msg: r.Message, attrs: b.String()})
	h.mu.Unlock()
	return nil
}

func (h *recordHandler) find(msg string) (record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.msg == msg {
			return r, true
		}
	}
	return record{}, false
}
