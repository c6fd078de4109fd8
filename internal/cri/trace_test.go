package cri

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// phaseSums reads crin_cri_phase_seconds from reg: sum and count per
// "rpc/phase".
func phaseSums(t *testing.T, reg *prometheus.Registry) map[string][2]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "crin_cri_phase_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["rpc"]+"/"+labels["phase"]] = [2]float64{m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())}
		}
	}
	return out
}

func TestPhaseTraceMarks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	start := time.Unix(1000, 0)
	ctx := withTrace(t.Context(), m.phases, "CreateContainer", start)
	tr := ctx.Value(traceKey{}).(*phaseTrace)
	// Each phase is the time since the previous mark, so they add up.
	tr.mark("spec_build", start.Add(3*time.Millisecond))
	tr.mark("runtime_create", start.Add(10*time.Millisecond))
	tr.mark("spec_build", start.Add(11*time.Millisecond))
	got := phaseSums(t, reg)
	want := map[string][2]float64{
		"CreateContainer/spec_build":     {0.004, 2},
		"CreateContainer/runtime_create": {0.007, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	for k, w := range want {
		g := got[k]
		if g[1] != w[1] || g[0] < w[0]-1e-9 || g[0] > w[0]+1e-9 {
			t.Errorf("%s: sum %g count %g, want sum %g count %g", k, g[0], g[1], w[0], w[1])
		}
	}
}

func TestMetricsTrace(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	tests := []struct {
		name    string
		metrics *Metrics
		outer   string // trace already in ctx, "" for none
		want    string // rpc the marks count for, "" for no trace
	}{
		{name: "no metrics", metrics: nil},
		{name: "new trace", metrics: m, want: "StopContainer"},
		{name: "nested keeps the outer", metrics: m, outer: "StopPodSandbox", want: "StopPodSandbox"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.outer != "" {
				ctx = tc.metrics.trace(ctx, tc.outer)
			}
			ctx = tc.metrics.trace(ctx, "StopContainer")
			tr, ok := ctx.Value(traceKey{}).(*phaseTrace)
			if tc.want == "" {
				if ok {
					t.Fatalf("trace %q without metrics", tr.rpc)
				}
				mark(ctx, "lookup") // a no-op, must not panic
				return
			}
			if !ok || tr.rpc != tc.want {
				t.Fatalf("trace %+v, want rpc %q", tr, tc.want)
			}
			mark(ctx, "lookup")
			if got := phaseSums(t, reg)[tc.want+"/lookup"]; got[1] < 1 {
				t.Errorf("%s/lookup not observed: %v", tc.want, got)
			}
		})
	}
}
