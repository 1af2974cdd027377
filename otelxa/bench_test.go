package otelxa_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/otelxa"
	"github.com/xadb/xa/xa"
)

// BenchmarkTransaction measures a two-phase transaction over two in-memory
// participants without a tracer (off), with OpenTelemetry's no-op provider
// (noop: what an application gets without an SDK), and with the SDK
// recording every span (sdk, no exporter). Compare allocs/op and ns/op
// within one run: -bench Transaction -benchmem.
func BenchmarkTransaction(b *testing.B) {
	for _, c := range []struct {
		name   string
		tracer xa.Tracer
	}{
		{"off", nil},
		{"noop", otelxa.New(noop.NewTracerProvider())},
		{"sdk", otelxa.New(sdktrace.NewTracerProvider())},
	} {
		b.Run(c.name, func(b *testing.B) {
			ra, rb := memrm.New("a", memrm.NewDB(), nil), memrm.New("b", memrm.NewDB(), nil)
			mgr, err := xa.NewManager(xa.Config{Node: "bench", Log: memrm.NewLog("bench"), Tracer: c.tracer})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
					for _, rm := range []*memrm.RM{ra, rb} {
						s, err := tx.Enlist(ctx, rm)
						if err != nil {
							return err
						}
						if err := s.(*memrm.Branch).Put(ctx, i, i); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
