package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseProm(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []promSample
		wantErr string
	}{
		{name: "comments, labels, no labels, timestamp", in: `# HELP x y
# TYPE crin_cri_phase_seconds histogram
crin_cri_phase_seconds_sum{phase="runtime_create",rpc="CreateContainer"} 0.5

go_goroutines 12
up{a="b"} 1 1700000000000
`, want: []promSample{
			{name: "crin_cri_phase_seconds_sum", labels: map[string]string{"phase": "runtime_create", "rpc": "CreateContainer"}, value: 0.5},
			{name: "go_goroutines", labels: map[string]string{}, value: 12},
			{name: "up", labels: map[string]string{"a": "b"}, value: 1},
		}},
		{name: "escapes and le", in: `h_bucket{le="+Inf",x="a\"b\\c\nd, e}"} 3e+00` + "\n", want: []promSample{
			{name: "h_bucket", labels: map[string]string{"le": "+Inf", "x": "a\"b\\c\nd, e}"}, value: 3},
		}},
		{name: "no value", in: "foo\n", wantErr: "no value"},
		{name: "bad value", in: "foo{a=\"b\"} x\n", wantErr: "value"},
		{name: "unterminated", in: "foo{a=\"b} 1\n", wantErr: "unterminated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProm(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d samples %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.name != w.name || g.value != w.value || len(g.labels) != len(w.labels) {
					t.Errorf("sample %d: %+v, want %+v", i, g, w)
					continue
				}
				for k, v := range w.labels {
					if g.labels[k] != v {
						t.Errorf("sample %d label %s: %q, want %q", i, k, g.labels[k], v)
					}
				}
			}
		})
	}
}

func TestPhaseDiff(t *testing.T) {
	parse := func(s string) []promSample {
		t.Helper()
		p, err := parseProm(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := parse(`crin_cri_request_duration_seconds_sum{rpc="CreateContainer"} 1
crin_cri_request_duration_seconds_count{rpc="CreateContainer"} 10
crin_cri_phase_seconds_sum{phase="runtime_create",rpc="CreateContainer"} 0.5
crin_cri_phase_seconds_sum{phase="spec_build",rpc="CreateContainer"} 0.1
crin_cri_request_duration_seconds_sum{rpc="StartContainer"} 1
crin_cri_request_duration_seconds_count{rpc="StartContainer"} 10
`)
	// 4 more CreateContainer calls of 50 ms on average: 30 ms runtime,
	// 10 ms spec, 2 ms of a phase new since; StartContainer not called.
	after := parse(`crin_cri_request_duration_seconds_sum{rpc="CreateContainer"} 1.2
crin_cri_request_duration_seconds_count{rpc="CreateContainer"} 14
crin_cri_phase_seconds_sum{phase="runtime_create",rpc="CreateContainer"} 0.62
crin_cri_phase_seconds_sum{phase="spec_build",rpc="CreateContainer"} 0.14
crin_cri_phase_seconds_sum{phase="nri_create",rpc="CreateContainer"} 0.008
crin_cri_phase_seconds_count{phase="nri_create",rpc="CreateContainer"} 4
crin_cri_request_duration_seconds_sum{rpc="StartContainer"} 1
crin_cri_request_duration_seconds_count{rpc="StartContainer"} 10
`)
	got := phaseDiff(before, after)
	if len(got) != 1 || got[0].RPC != "CreateContainer" || got[0].Calls != 4 {
		t.Fatalf("got %+v, want CreateContainer over 4 calls only", got)
	}
	r := got[0]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	want := []Phase{{"runtime_create", 30}, {"spec_build", 10}, {"nri_create", 2}}
	if len(r.Phases) != len(want) {
		t.Fatalf("phases %+v, want %+v", r.Phases, want)
	}
	for i, w := range want {
		if r.Phases[i].Phase != w.Phase || !near(r.Phases[i].MeanMs, w.MeanMs) {
			t.Errorf("phase %d: %+v, want %+v (largest first)", i, r.Phases[i], w)
		}
	}
	if !near(r.MeanMs, 50) || !near(r.RestMs, 8) {
		t.Errorf("mean %g rest %g, want 50 and 8", r.MeanMs, r.RestMs)
	}
}

func TestP50AndVerdict(t *testing.T) {
	if got := p50([]float64{5, 1, 3, 2}); got != 2 {
		t.Errorf("p50 = %g, want 2 (nearest rank)", got)
	}
	if !math.IsNaN(p50(nil)) {
		t.Error("p50 of nothing is not NaN")
	}
	if verdict(true) != "PASS" || verdict(false) != "MISS" {
		t.Error("verdict")
	}
}
