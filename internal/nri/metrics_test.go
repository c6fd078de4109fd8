package nri

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// gather returns every sample of the crin_nri_ families in reg as
// "name{label=value,...}" -> value; a histogram gives its sample count as
// name_count and the count of its last finite bucket as name_le_max.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "crin_nri_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := func(suffix string) string {
				return fmt.Sprintf("%s%s{%s}", mf.GetName(), suffix, strings.Join(labels, ","))
			}
			switch {
			case m.GetCounter() != nil:
				out[key("")] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key("")] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				out[key("_count")] = float64(h.GetSampleCount())
				if bs := h.GetBucket(); len(bs) > 0 {
					out[key("_le_max")] = float64(bs[len(bs)-1].GetCumulativeCount())
				}
			}
		}
	}
	return out
}

func TestPrometheusMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := NewPrometheusMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewPrometheusMetrics(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded")
	}
	e := newEnv(t, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	e.start(WithMetrics(pm))
	release := make(chan struct{})
	defer close(release)
	r := &recorder{
		policy: &api.FailurePolicy{KeepConnected: true},
		onStop: func(*api.PodSandbox) error { return errors.New("not now") },
		onCreate: func(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
			<-release // past the request timeout
			return nil, nil, nil
		},
	}
	if err := e.connect(r, "10", "metered"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-metered", StateReady)

	ctx := context.Background()
	pod := testPod("pod1")
	for range 2 {
		if err := e.a.RunPodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.a.StopPodSandbox(ctx, pod); err == nil {
		t.Fatal("StopPodSandbox succeeded, want the plugin's error")
	}
	if _, _, err := createIn(ctx, e.a, pod, testCtr("pod1", "ctr1")); err != nil {
		t.Fatalf("CreateContainer with a timed-out optional plugin: %v", err)
	}

	got := gather(t, reg)
	want := map[string]float64{
		"crin_nri_plugin_calls_total{event=RunPodSandbox,plugin=10-metered}":          2,
		"crin_nri_plugin_call_seconds_count{event=RunPodSandbox,plugin=10-metered}":   2,
		"crin_nri_plugin_call_seconds_le_max{event=RunPodSandbox,plugin=10-metered}":  2,
		"crin_nri_plugin_calls_total{event=StopPodSandbox,plugin=10-metered}":         1,
		"crin_nri_plugin_errors_total{event=StopPodSandbox,plugin=10-metered}":        1,
		"crin_nri_plugin_call_seconds_count{event=StopPodSandbox,plugin=10-metered}":  1,
		"crin_nri_plugin_call_seconds_le_max{event=StopPodSandbox,plugin=10-metered}": 1,
		"crin_nri_plugin_calls_total{event=CreateContainer,plugin=10-metered}":        1,
		"crin_nri_plugin_timeouts_total{event=CreateContainer,plugin=10-metered}":     1,
		"crin_nri_plugin_call_seconds_count{event=CreateContainer,plugin=10-metered}": 1,
		// 300ms is far below the last bucket (50µs * 2^17 = 6.5s).
		"crin_nri_plugin_call_seconds_le_max{event=CreateContainer,plugin=10-metered}": 1,
	}
	// Only the series of these three events: the handshake's are checked
	// for their presence alone.
	for k := range got {
		if !strings.Contains(k, "event=RunPodSandbox,") && !strings.Contains(k, "event=StopPodSandbox,") &&
			!strings.Contains(k, "event=CreateContainer,") {
			delete(got, k)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	all := gather(t, reg)
	for _, ev := range []string{"Configure", "Synchronize"} {
		if all["crin_nri_plugin_calls_total{event="+ev+",plugin=10-metered}"] != 1 {
			t.Errorf("no %s call counted: %v", ev, all)
		}
	}
}
