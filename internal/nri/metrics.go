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

// LifecycleMetrics is an optional part of Metrics, found by type
// assertion: it observes the restarts of pre-installed plugins.
// Implementations must be safe for concurrent use and must not block.
type LifecycleMetrics interface {
	// ObservePluginBackoff records the delay before plugin is launched
	// again after a failure; 0 when it is ready.
	ObservePluginBackoff(plugin string, backoff time.Duration)
	// ObservePluginRestart records a launch after a failure.
	ObservePluginRestart(plugin string)
}

// PanicMetrics is an optional part of Metrics, found by type assertion: it
// counts panics recovered in the Runtime service crin serves to plugins.
type PanicMetrics interface {
	// ObservePanic records a panic in method (a ttrpc method name).
	ObservePanic(method string)
}

// NopMetrics discards observations; it is the default.
type NopMetrics struct{}

// ObservePluginCall does nothing.
func (NopMetrics) ObservePluginCall(string, string, time.Duration, CallResult) {}

// PrometheusMetrics exports per plugin and event: calls, errors, timeouts
// and a latency histogram; per pre-installed plugin: restarts and the
// current backoff; and the panics recovered in the Runtime service.
type PrometheusMetrics struct {
	calls    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	timeouts *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	restarts *prometheus.CounterVec
	backoff  *prometheus.GaugeVec
	panics   *prometheus.CounterVec
}

var (
	_ Metrics          = (*PrometheusMetrics)(nil)
	_ LifecycleMetrics = (*PrometheusMetrics)(nil)
	_ PanicMetrics     = (*PrometheusMetrics)(nil)
)

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
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "nri", Name: "plugin_restarts_total",
			Help: "Launches of a pre-installed NRI plugin after it failed to start, to synchronize, or later.",
		}, []string{"plugin"}),
		backoff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "crin", Subsystem: "nri", Name: "plugin_backoff_seconds",
			Help: "Delay before a failed pre-installed NRI plugin is launched again; 0 while it is ready.",
		}, []string{"plugin"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "nri", Name: "runtime_service_panics_total",
			Help: "Panics recovered while serving a plugin's call of the NRI Runtime service.",
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{pm.calls, pm.errors, pm.timeouts, pm.latency, pm.restarts, pm.backoff, pm.panics} {
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

// ObservePluginBackoff sets the plugin's current backoff.
func (pm *PrometheusMetrics) ObservePluginBackoff(plugin string, backoff time.Duration) {
	pm.backoff.WithLabelValues(plugin).Set(backoff.Seconds())
}

// ObservePluginRestart counts a launch after a failure.
func (pm *PrometheusMetrics) ObservePluginRestart(plugin string) {
	pm.restarts.WithLabelValues(plugin).Inc()
}

// ObservePanic counts a recovered panic.
func (pm *PrometheusMetrics) ObservePanic(method string) {
	pm.panics.WithLabelValues(method).Inc()
}
