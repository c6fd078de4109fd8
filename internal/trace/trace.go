// Package trace times the phases of one CRI call: where its time goes.
// The CRI interceptor starts a trace for every unary call (Start); every
// Mark(ctx, phase) after it, in the handler or in the functions it calls
// with that ctx (the runtime backends included), observes the time since
// the previous mark (or the start) as phase in
// crin_cri_phase_seconds{rpc,phase}. The phases of one call thus never
// overlap and add up to the call's time up to its last mark; the rest of
// the RPC's latency (crin_cri_request_duration_seconds) is the interceptor
// and whatever follows the last mark. Split divides the time since the
// previous mark with a phase measured elsewhere (the OCI runtime command a
// shim ran). bench/cmd/crilat prints the mean per phase. Where no trace was
// started (no metrics, or a handler called directly, as in unit tests),
// Mark and Split do nothing.
package trace

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Histogram is crin_cri_phase_seconds, registered on reg.
func Histogram(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "crin", Subsystem: "cri", Name: "phase_seconds",
		Help:    "Time spent in each phase of a CRI call, by RPC and phase (phases of one call do not overlap).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"rpc", "phase"})
	reg.MustRegister(h)
	return h
}

// phases times the phases of one call.
type phases struct {
	h   *prometheus.HistogramVec
	rpc string

	mu   sync.Mutex
	last time.Time
}

type key struct{}

// Start starts timing the phases of rpc into h and returns ctx carrying
// the trace. A nil h starts nothing; a ctx that already carries a trace
// keeps it: its phases count for the outer call.
func Start(ctx context.Context, h *prometheus.HistogramVec, rpc string) context.Context {
	if h == nil {
		return ctx
	}
	if _, ok := ctx.Value(key{}).(*phases); ok {
		return ctx
	}
	return start(ctx, h, rpc, time.Now())
}

func start(ctx context.Context, h *prometheus.HistogramVec, rpc string, at time.Time) context.Context {
	return context.WithValue(ctx, key{}, &phases{h: h, rpc: rpc, last: at})
}

// Mark ends phase: the time since the previous mark of ctx's trace.
func Mark(ctx context.Context, phase string) {
	if t, ok := ctx.Value(key{}).(*phases); ok {
		t.split(phase, "", 0, time.Now())
	}
}

// Split ends two phases at once: of the time since the previous mark, the
// last d (measured elsewhere) is phase, the rest before.
func Split(ctx context.Context, before, phase string, d time.Duration) {
	if t, ok := ctx.Value(key{}).(*phases); ok {
		t.split(before, phase, d, time.Now())
	}
}

func (t *phases) split(before, phase string, d time.Duration, now time.Time) {
	t.mu.Lock()
	total := now.Sub(t.last)
	t.last = now
	t.mu.Unlock()
	d = min(max(d, 0), total)
	t.h.WithLabelValues(t.rpc, before).Observe((total - d).Seconds())
	if phase != "" {
		t.h.WithLabelValues(t.rpc, phase).Observe(d.Seconds())
	}
}
