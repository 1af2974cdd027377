// Package otelxa traces the transaction manager, recovery and the
// exactly-once sink with OpenTelemetry, through its API only: the
// application brings the SDK (a TracerProvider with its exporters and
// sampler); with none set, nothing is recorded and the cost is a check per
// transaction.
//
//	tracer := otelxa.New(tp) // tp: the application's provider; nil: otel.GetTracerProvider()
//	mgr, _ := xa.NewManager(xa.Config{..., Tracer: tracer})
//	scanner, _ := recovery.New(recovery.Config{..., Tracer: tracer})
//	s.Run(ctx, src, sink.RunOptions{Observer: otelxa.SinkObserver(tp, "orders", m)})
//
// A global transaction is a span (xa.SpanTransaction) from Begin to its
// end, the parent of its prepares, decision-log write, last-resource
// commit and each branch's phase 2 (xa.SpanPrepare ...), with the global
// id, participants, protocol and outcome as attributes (xa.Attr...). The
// transaction's context (xa.Tx.Context) carries its span, so statements
// traced by the drivers' hooks (postgres.Config.Tracer,
// mysql.Config.Connector) and by the application nest under it.
package otelxa

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadb/xa/xa"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/xadb/xa"

// New returns an xa.Tracer recording spans with tp, or with the global
// provider (otel.GetTracerProvider) when tp is nil.
func New(tp trace.TracerProvider) xa.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tracer{t: tp.Tracer(ScopeName)}
}

type tracer struct{ t trace.Tracer }

// Start starts a span; it returns a nil xa.Span when the span records
// nothing (no SDK, or not sampled), so that xa skips the rest.
func (t tracer) Start(ctx context.Context, name string) (context.Context, xa.Span) {
	ctx, s := t.t.Start(ctx, name)
	if !s.IsRecording() {
		return ctx, nil
	}
	return ctx, &span{t: t.t, s: s}
}

type span struct {
	t trace.Tracer
	s trace.Span
}

func (s *span) Start(ctx context.Context, name string) (context.Context, xa.Span) {
	return tracer{t: s.t}.Start(trace.ContextWithSpan(ctx, s.s), name)
}

func (s *span) SetAttributes(attrs ...slog.Attr) { s.s.SetAttributes(convert(attrs)...) }

func (s *span) End(err error) {
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// convert turns slog attributes into OpenTelemetry ones: strings, integers,
// booleans, floats, durations (as their text) and string slices; anything
// else as its text.
func convert(attrs []slog.Attr) []attribute.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		v := a.Value.Resolve()
		switch v.Kind() {
		case slog.KindString:
			out = append(out, attribute.String(a.Key, v.String()))
		case slog.KindInt64:
			out = append(out, attribute.Int64(a.Key, v.Int64()))
		case slog.KindUint64:
			out = append(out, attribute.Int64(a.Key, int64(v.Uint64())))
		case slog.KindBool:
			out = append(out, attribute.Bool(a.Key, v.Bool()))
		case slog.KindFloat64:
			out = append(out, attribute.Float64(a.Key, v.Float64()))
		default:
			if ss, ok := v.Any().([]string); ok {
				out = append(out, attribute.StringSlice(a.Key, ss))
				continue
			}
			out = append(out, attribute.String(a.Key, v.String()))
		}
	}
	return out
}
