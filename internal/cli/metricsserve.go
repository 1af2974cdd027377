package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsRegistry returns a Prometheus registry of the run's own, with the
// Go and process collectors: Main may run more than once in a process
// (tests), and the default registry refuses a second registration of the
// same collectors with a panic.
func metricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveMetrics serves reg on addr (--metrics-addr) at /metrics until stop
// is called, and says where on stderr. An empty addr serves nothing.
func (g *globals) serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Shutdown
	fmt.Fprintf(g.stderr, "metrics on http://%s/metrics\n", ln.Addr())
	return func() { srv.Shutdown(context.Background()) }, nil //nolint:errcheck
}
