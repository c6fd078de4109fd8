package serving

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/crin-dev/crin/internal/trace"
)

// Metrics are the per-RPC metrics of the CRI server and the panic counter
// of every server crind runs. A nil *Metrics records nothing.
type Metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
	panics  *prometheus.CounterVec
	phases  *prometheus.HistogramVec // crin_cri_phase_seconds, see package trace
}

// NewMetrics registers the CRI server's metrics on reg. It panics, as
// prometheus.Registerer.MustRegister does, when reg already holds them.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "crin", Subsystem: "cri", Name: "request_duration_seconds",
			Help:    "Latency of CRI requests by RPC.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"rpc"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "cri", Name: "request_errors_total",
			Help: "CRI requests that returned an error, by RPC and gRPC code.",
		}, []string{"rpc", "code"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Name: "panics_total",
			Help: "Requests that panicked and were failed alone, by server (cri, stream, admin, metrics) and RPC or route.",
		}, []string{"server", "rpc"}),
	}
	reg.MustRegister(m.latency, m.errors, m.panics)
	m.phases = trace.Histogram(reg)
	return m
}

// phasesOrNil is the phase histogram of m, nil without metrics.
func (m *Metrics) phasesOrNil() *prometheus.HistogramVec {
	if m == nil {
		return nil
	}
	return m.phases
}

func (m *Metrics) observe(rpc string, d time.Duration, code codes.Code) {
	if m == nil {
		return
	}
	m.latency.WithLabelValues(rpc).Observe(d.Seconds())
	if code != codes.OK {
		m.errors.WithLabelValues(rpc, code.String()).Inc()
	}
}

func (m *Metrics) panicked(server, rpc string) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(server, rpc).Inc()
}
