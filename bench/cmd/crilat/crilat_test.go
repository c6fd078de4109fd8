package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseRollup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    Mem
		wantErr bool
	}{
		{
			name: "kernel format",
			in: "55d0c8a4b000-7ffd6a1f5000 ---p 00000000 00:00 0                          [rollup]\n" +
				"Rss:               26612 kB\nPss:               25086 kB\nPss_Dirty:          9000 kB\n" +
				"Pss_Anon:          8000 kB\nShared_Clean:       1000 kB\n",
			want: Mem{RSS: 26612, PSS: 25086},
		},
		{name: "no pss", in: "Rss: 10 kB\n", wantErr: true},
		{name: "bad number", in: "Rss: x kB\nPss: 1 kB\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRollup([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseRollup error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseRollup (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want StepStats
	}{
		{"hundred", d, StepStats{Step: "s", P50: 50, P90: 90, P99: 99, Mean: 50.5, Max: 100}},
		{"one", []time.Duration{3 * time.Millisecond}, StepStats{Step: "s", P50: 3, P90: 3, P99: 3, Mean: 3, Max: 3}},
		{"empty", nil, StepStats{Step: "s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Samples are checked in TestSummarizeKeepsOrder.
			got := summarize("s", tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(StepStats{}, "Samples")); diff != "" {
				t.Errorf("summarize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareTable(t *testing.T) {
	a := &Result{Name: "a", K: 2, Steps: []StepStats{{Step: "total", P50: 1, P90: 2, P99: 3}},
		Memory: Memory{DaemonIdle: Mem{RSS: 10, PSS: 9}, Shims: 4}}
	b := &Result{Name: "b", K: 2, Steps: []StepStats{{Step: "total", P50: 4, P90: 5, P99: 6}},
		Memory: Memory{DaemonIdle: Mem{RSS: 20, PSS: 19}, Shims: 2}}
	var out bytes.Buffer
	compare(&out, []*Result{a, b})
	for _, want := range []string{
		"| total | 1.0 | 2.0 | 3.0 | 4.0 | 5.0 | 6.0 |",
		"| daemon, idle | 10 | 9 | 20 | 19 |",
		"| shim processes for K pods | 4 |  | 2 |  |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("compare output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestParseTarget(t *testing.T) {
	common := runOptions{image: "img", logDir: "/logs", n: 5}
	for _, tc := range []struct {
		name    string
		spec    string
		want    runOptions
		wantErr bool
	}{
		{
			name: "all keys",
			spec: "name=ctd,socket=/s/c.sock,pid=42,shim=containerd-shim,pause=r/pause:1",
			want: runOptions{name: "ctd", socket: "/s/c.sock", pid: 42, shimComm: "containerd-shim",
				pauseImage: "r/pause:1", image: "img", logDir: "/logs/ctd", n: 5},
		},
		{name: "no socket", spec: "name=a", wantErr: true},
		{name: "bad pid", spec: "name=a,socket=/s,pid=x", wantErr: true},
		{name: "unknown key", spec: "name=a,socket=/s,colour=red", wantErr: true},
		{name: "not key=value", spec: "name=a,socket", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTarget(common, tc.spec)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseTarget error = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(runOptions{})); diff != "" {
				t.Errorf("parseTarget (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAdded(t *testing.T) {
	base := &Result{Name: "nri-0", Steps: []StepStats{
		{Step: "RunPodSandbox", P50: 10, P90: 20, Samples: []float64{10, 12, 30}},
		{Step: "total", P50: 100, P90: 200, Samples: []float64{100, 90, 300}},
	}}
	four := &Result{Name: "nri-4", Steps: []StepStats{
		{Step: "RunPodSandbox", P50: 12, P90: 19, Samples: []float64{13, 13, 31}},
		{Step: "total", P50: 110, P90: 260, Samples: []float64{104, 96, 280}},
	}}
	noSamples := &Result{Name: "old", Steps: []StepStats{{Step: "total", P50: 90, P90: 190}}}
	var out bytes.Buffer
	if err := added(&out, []*Result{base, four, noSamples}, "nri-0"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| step (ms) | nri-4 Δp50 | nri-4 Δp90 | nri-4 paired Δ | old Δp50 | old Δp90 | old paired Δ |",
		// paired: 3, 1, 1 -> median 1; 4, 6, -20 -> median 4
		"| RunPodSandbox | +2.0 | -1.0 | +1.0 | - | - | - |",
		"| total | +10.0 | +60.0 | +4.0 | -10.0 | -10.0 | - |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("added output lacks %q:\n%s", want, out.String())
		}
	}
	if err := added(&out, []*Result{four}, "nri-0"); !errdefs.IsNotFound(err) {
		t.Errorf("added with unknown baseline: error %v, want NotFound", err)
	}
}

func TestSummarizeKeepsOrder(t *testing.T) {
	got := summarize("s", []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if diff := cmp.Diff([]float64{3, 1, 2}, got.Samples); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
}

func TestPrintStats(t *testing.T) {
	a := &StatsResult{Name: "a", Runtime: "crind 1", Pods: 2, Containers: 4, Calls: 3, Order: "serial", LayersAfterMs: 1500, LayersSeen: 4,
		Counts:     map[string]int{"ListContainerStats": 4, "ImageFsInfo": 1},
		RPCs:       []StepStats{{Step: "ListContainerStats", Mean: 1.25, P50: 1, P99: 3}},
		DaemonIdle: Mem{RSS: 10, PSS: 9}, DaemonLoaded: Mem{RSS: 12, PSS: 11}, Shims: 6, ShimsTotal: Mem{RSS: 60, PSS: 30},
		DaemonCPUPerRoundMs: 1.5, ShimsCPUPerRoundMs: 0.25, DaemonIdleCPUMsPerSec: 3}
	b := &StatsResult{Name: "b", Runtime: "containerd 2", Pods: 2, Containers: 4, Calls: 3, LayersAfterMs: -1, LayersSeen: 1,
		RPCs: []StepStats{{Step: "ListContainerStats", Mean: 4, P50: 5, P99: 6}}}
	var out bytes.Buffer
	printStats(&out, []*StatsResult{a, b})
	for _, want := range []string{
		"4 containers, 3 calls per RPC (serial),",
		"every writable layer reported 1.5 s after the last start; last list sizes: ListContainerStats 4, ImageFsInfo 1",
		"only 1 of 4 writable layers reported",
		"| RPC (ms) | a mean | a p50 | a p99 | b mean | b p50 | b p99 |",
		"| ListContainerStats | 1.25 | 1.00 | 3.00 | 4.00 | 5.00 | 6.00 |",
		"| daemon, 4 containers running | 12 | 11 | 0 | 0 |",
		"| shim processes | 6 |  | 0 |  |",
		"| CPU ms per round (4 calls) | a | b |",
		"| total | 1.75 | 0.00 |",
		"| idle: daemon, ms per s | 3.00 | 0.00 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printStats output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{
			name: "plain",
			in:   "1234 (crind) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 40 0 0 20 0 9 0 100 1000 200",
			want: 2900 * time.Millisecond,
		},
		{
			name: "name with spaces and parentheses",
			in:   "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 1",
			want: 70 * time.Millisecond,
		},
		{name: "short", in: "7 (x) R 1 2", wantErr: true},
		{name: "no name", in: "7 x R", wantErr: true},
		{name: "bad number", in: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 a 4 0", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStatCPU error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseStatCPU = %v, want %v", got, tc.want)
			}
		})
	}
}
