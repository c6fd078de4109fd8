// Package trace times the phases of one CRI call: where its time goes.
// The CRI interceptor starts a trace for every unary call (Start); every
// Mark(ctx, phase) after it, in the handler or in the functions it calls
// with that ctx (the runtime backends included), observes the time since
// the previous mark (or the start) as phase in
// crin_cri_phase_seconds{rpc,phase}. The phases of one call thus never
// overlap and add up to the call's time up to its last mark; the rest of
// the RPC's latency (crin_cri_request_duration_seconds) is the interceptor
// and whatever follows the last mark. Split divides the time since the
// previous mark with phases measured elsewhere (the shim's own work and
// the OCI runtime command it ran). bench/cmd/crilat prints the mean per phase. Where no trace was
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
		t.split(before(phase), time.Now())
	}
}

// Phase is a phase measured elsewhere (by a shim), for Split.
type Phase struct {
	Name string
	D    time.Duration
}

// Split ends several phases at once: of the time since the previous
// mark, the last parts are tail's phases (measured elsewhere, in order),
// the rest before them is phase before. A tail longer than the time since
// the mark is cut to fit, its first phases first.
func Split(ctx context.Context, before string, tail ...Phase) {
	if t, ok := ctx.Value(key{}).(*phases); ok {
		t.split(append([]Phase{{Name: before}}, tail...), time.Now())
	}
}

func before(phase string) []Phase { return []Phase{{Name: phase}} }

// split observes ps[0] as the time since the last mark minus the others,
// each capped so that none is negative.
func (t *phases) split(ps []Phase, now time.Time) {
	t.mu.Lock()
	total := now.Sub(t.last)
	t.last = now
	t.mu.Unlock()
	left := max(total, 0)
	for i := len(ps) - 1; i > 0; i-- {
		ps[i].D = min(max(ps[i].D, 0), left)
		left -= ps[i].D
	}
	ps[0].D = left
	for _, p := range ps {
		t.h.WithLabelValues(t.rpc, p.Name).Observe(p.D.Seconds())
	}
}
