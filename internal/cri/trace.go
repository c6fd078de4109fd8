package cri

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Phase tracing: where the time of a CRI call goes. The interceptor starts
// a trace for every unary call (Metrics.trace); every mark(ctx, phase)
// after it, in the handler or in the functions it calls with that ctx,
// observes the time since the previous mark (or the start) as phase in
// crin_cri_phase_seconds{rpc,phase}. The phases of one call thus never
// overlap and add up to the call's time up to its last mark; the rest of
// the RPC's latency (crin_cri_request_duration_seconds) is the interceptor
// and whatever follows the last mark. bench/cmd/crilat prints the mean per
// phase. Without metrics (nil *Metrics), or where no interceptor ran (a
// handler called directly, as in unit tests), mark does nothing.

// phaseHistogram is crin_cri_phase_seconds, registered on reg.
func phaseHistogram(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "crin", Subsystem: "cri", Name: "phase_seconds",
		Help:    "Time spent in each phase of a CRI call, by RPC and phase (phases of one call do not overlap).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"rpc", "phase"})
	reg.MustRegister(h)
	return h
}

// phaseTrace times the phases of one call.
type phaseTrace struct {
	h   *prometheus.HistogramVec
	rpc string

	mu   sync.Mutex
	last time.Time
}

type traceKey struct{}

// trace starts timing the phases of rpc and returns ctx carrying the
// trace. A ctx that already carries one keeps it: its phases count for the
// outer call.
func (m *Metrics) trace(ctx context.Context, rpc string) context.Context {
	if m == nil || m.phases == nil {
		return ctx
	}
	if _, ok := ctx.Value(traceKey{}).(*phaseTrace); ok {
		return ctx
	}
	return withTrace(ctx, m.phases, rpc, time.Now())
}

func withTrace(ctx context.Context, h *prometheus.HistogramVec, rpc string, start time.Time) context.Context {
	return context.WithValue(ctx, traceKey{}, &phaseTrace{h: h, rpc: rpc, last: start})
}

// mark ends phase: the time since the previous mark of ctx's trace.
func mark(ctx context.Context, phase string) {
	t, ok := ctx.Value(traceKey{}).(*phaseTrace)
	if !ok {
		return
	}
	t.mark(phase, time.Now())
}

func (t *phaseTrace) mark(phase string, now time.Time) {
	t.mu.Lock()
	d := now.Sub(t.last)
	t.last = now
	t.mu.Unlock()
	t.h.WithLabelValues(t.rpc, phase).Observe(d.Seconds())
}
