package otelxa

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadb/xa/sink"
)

// Span names and attributes of the sink's checkpoints.
const (
	SpanCheckpoint        = "xa.sink.checkpoint"
	SpanCheckpointWrite   = "xa.sink.write"
	SpanCheckpointPrepare = "xa.sink.prepare"
	SpanCheckpointCommit  = "xa.sink.commit"
	SpanCheckpointAbort   = "xa.sink.abort"

	AttrSink       = "xa.sink.name"
	AttrCheckpoint = "xa.sink.checkpoint"
	AttrRecords    = "xa.sink.records"
	AttrCommitted  = "xa.sink.committed"
)

// SinkObserver returns a sink.Observer that records a span per finished
// checkpoint of the sink named name (SpanCheckpoint, from its first record
// to its end), with a child per phase (write, prepare, commit; or abort),
// timed from the checkpoint's statistics, and passes every call on to next
// (nil: none), for example the sink's metrics. tp nil: the global provider.
func SinkObserver(tp trace.TracerProvider, name string, next sink.Observer) sink.Observer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if next == nil {
		next = sink.NopObserver{}
	}
	return &sinkObserver{t: tp.Tracer(ScopeName), name: name, next: next}
}

type sinkObserver struct {
	t    trace.Tracer
	name string
	next sink.Observer
}

func (o *sinkObserver) RecordsWritten(n int) { o.next.RecordsWritten(n) }
func (o *sinkObserver) PendingChanged(n int) { o.next.PendingChanged(n) }

func (o *sinkObserver) CheckpointDone(c sink.CheckpointStats) {
	o.next.CheckpointDone(c)
	end := time.Now()
	start := end.Add(-(c.Write + c.Prepare + c.Commit))
	ctx, s := o.t.Start(context.Background(), SpanCheckpoint, trace.WithTimestamp(start), trace.WithAttributes(
		attribute.String(AttrSink, o.name),
		attribute.Int64(AttrCheckpoint, int64(c.Checkpoint)),
		attribute.Int(AttrRecords, c.Records),
		attribute.Bool(AttrCommitted, c.Committed),
	))
	if !s.IsRecording() {
		return
	}
	at := start
	phase := func(name string, d time.Duration, err error) {
		if d <= 0 {
			return
		}
		_, p := o.t.Start(ctx, name, trace.WithTimestamp(at))
		at = at.Add(d)
		if err != nil {
			p.SetStatus(codes.Error, err.Error())
		}
		p.End(trace.WithTimestamp(at))
	}
	phase(SpanCheckpointWrite, c.Write, nil)
	phase(SpanCheckpointPrepare, c.Prepare, nil)
	if c.Committed {
		phase(SpanCheckpointCommit, c.Commit, nil)
	} else {
		phase(SpanCheckpointAbort, c.Commit, c.Err)
	}
	if c.Err != nil {
		s.RecordError(c.Err)
		if !c.Committed {
			s.SetStatus(codes.Error, c.Err.Error())
		}
	}
	s.End(trace.WithTimestamp(end))
}
