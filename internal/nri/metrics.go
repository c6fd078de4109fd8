package nri

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CallResult classifies the outcome of one plugin call.
type CallResult int

// Outcomes of a plugin call.
const (
	// CallOK: the plugin answered without error.
	CallOK CallResult = iota
	// CallError: the plugin answered with an error or a rejection, or the
	// connection failed.
	CallError
	// CallTimeout: the plugin did not answer within its request timeout.
	CallTimeout
)

// Metrics observes plugin calls. Implementations must be safe for
// concurrent use and must not block.
type Metrics interface {
	// ObservePluginCall records one call of event (an NRI RPC name such as
	// "CreateContainer") to plugin ("NN-name").
	ObservePluginCall(plugin, event string, latency time.Duration, result CallResult)
}

// NopMetrics discards observations; it is the default.
type NopMetrics struct{}

// ObservePluginCall does nothing.
func (NopMetrics) ObservePluginCall(string, string, time.Duration, CallResult) {}

// PrometheusMetrics exports per plugin and event: calls, errors, timeouts
// and a latency histogram.
type PrometheusMetrics struct {
	calls    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	timeouts *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

var _ Metrics = (*PrometheusMetrics)(nil)

// NewPrometheusMetrics creates the collectors and registers them on reg.
// It fails if reg already holds collectors with the same names.
func NewPrometheusMetrics(reg prometheus.Registerer) (*PrometheusMetrics, error) {
	labels := []string{"plugin", "event"}
	pm := &PrometheusMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "nri", Name: "plugin_calls_total",
			Help: "NRI plugin calls by plugin and event.",
		}, labels),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "nri", Name: "plugin_errors_total",
			Help: "NRI plugin calls that failed (error, rejection or lost connection).",
		}, labels),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "nri", Name: "plugin_timeouts_total",
			Help: "NRI plugin calls that exceeded the request timeout.",
		}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "crin", Subsystem: "nri", Name: "plugin_call_seconds",
			Help:    "NRI plugin call latency.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
		}, labels),
	}
	for _, c := range []prometheus.Collector{pm.calls, pm.errors, pm.timeouts, pm.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register nri metrics: %w", err)
		}
	}
	return pm, nil
}

// ObservePluginCall records one call.
func (pm *PrometheusMetrics) ObservePluginCall(plugin, event string, latency time.Duration, result CallResult) {
	pm.calls.WithLabelValues(plugin, event).Inc()
	pm.latency.WithLabelValues(plugin, event).Observe(latency.Seconds())
	switch result {
	case CallError:
		pm.errors.WithLabelValues(plugin, event).Inc()
	case CallTimeout:
		pm.timeouts.WithLabelValues(plugin, event).Inc()
	}
}
