package trace

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sums reads crin_cri_phase_seconds from reg: sum and count per
// "rpc/phase".
func sums(t *testing.T, reg *prometheus.Registry) map[string][2]float64 {
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

func TestMarksAndSplit(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := Histogram(reg)
	at := time.Unix(1000, 0)
	ctx := start(t.Context(), h, "StartContainer", at)
	tr := ctx.Value(key{}).(*phases)
	// Each phase is the time since the previous mark, so they add up; a
	// split gives its measured part to its phase and the rest to before.
	tr.split(before("lookup"), at.Add(3*time.Millisecond))
	tr.split([]Phase{{Name: "shim"}, {"runc_run", 20 * time.Millisecond}}, at.Add(30*time.Millisecond))
	tr.split(before("lookup"), at.Add(31*time.Millisecond))
	tr.split([]Phase{{Name: "shim"}, {"runc_run", time.Hour}}, at.Add(32*time.Millisecond)) // capped at the time since the mark
	// Three at once: the tail is cut to fit from its last phase back.
	tr.split([]Phase{{Name: "call"}, {"work", 2 * time.Millisecond}, {"run", 5 * time.Millisecond}}, at.Add(40*time.Millisecond))
	tr.split([]Phase{{Name: "call"}, {"work", 2 * time.Millisecond}, {"run", 5 * time.Millisecond}}, at.Add(46*time.Millisecond))
	want := map[string][2]float64{
		"StartContainer/lookup":   {0.004, 2},
		"StartContainer/shim":     {0.007, 2},
		"StartContainer/runc_run": {0.021, 2},
		"StartContainer/call":     {0.001, 2},
		"StartContainer/work":     {0.003, 2},
		"StartContainer/run":      {0.010, 2},
	}
	got := sums(t, reg)
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

func TestStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := Histogram(reg)
	tests := []struct {
		name  string
		h     *prometheus.HistogramVec
		outer string // trace already in ctx, "" for none
		want  string // rpc the marks count for, "" for no trace
	}{
		{name: "no histogram", h: nil},
		{name: "new trace", h: h, want: "StopContainer"},
		{name: "nested keeps the outer", h: h, outer: "StopPodSandbox", want: "StopPodSandbox"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.outer != "" {
				ctx = Start(ctx, tc.h, tc.outer)
			}
			ctx = Start(ctx, tc.h, "StopContainer")
			tr, ok := ctx.Value(key{}).(*phases)
			if tc.want == "" {
				if ok {
					t.Fatalf("trace %q without a histogram", tr.rpc)
				}
				Mark(ctx, "lookup") // no-ops, must not panic
				Split(ctx, "a", Phase{"b", time.Second})
				return
			}
			if !ok || tr.rpc != tc.want {
				t.Fatalf("trace %+v, want rpc %q", tr, tc.want)
			}
			Mark(ctx, "lookup")
			if got := sums(t, reg)[tc.want+"/lookup"]; got[1] < 1 {
				t.Errorf("%s/lookup not observed: %v", tc.want, got)
			}
		})
	}
}
