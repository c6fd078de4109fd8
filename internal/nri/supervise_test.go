package nri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/containerd/ttrpc"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crin-dev/crin/test/poll"
)

// TestSynchronizeHangDelaysNothing: a pre-installed plugin that never
// answers Synchronize (and whose sync budget is an hour) neither holds
// Start past the start-up wait nor any request; the events reach it
// queued, or would once it is ready.
func TestSynchronizeHangDelaysNothing(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.SyncTimeout = time.Hour
		c.StartupWait = 200 * time.Millisecond
	})
	e.install(pluginBin, "10-stuck", "hang=Synchronize")
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.start()
		ctx := context.Background()
		pod, ctr := testPod("pod1"), testCtr("pod1", "ctr1")
		if err := e.a.RunPodSandbox(ctx, pod); err != nil {
			t.Error(err)
		}
		if _, _, err := createIn(ctx, e.a, pod, ctr); err != nil {
			t.Error(err)
		}
		if _, err := e.a.UpdateContainer(ctx, pod, ctr, nil); err != nil {
			t.Error(err)
		}
		if err := e.a.StartContainer(ctx, pod, ctr); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("start-up and requests wait for a plugin stuck in Synchronize")
	}
	waitPlugin(t, e.a, "10-stuck", StateSynchronizing)
}

// TestRequiredPluginNotReadyFailsAtOnce: a required plugin that has not
// finished Synchronize fails the requests it must take part in, without
// waiting for it.
func TestRequiredPluginNotReadyFailsAtOnce(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.SyncTimeout = time.Hour
		c.StartupWait = 100 * time.Millisecond
		c.PluginOverrides = map[string]PluginConfig{"stuck": {Required: true}}
	})
	e.install(pluginBin, "10-stuck", "hang=Synchronize")
	e.start()
	waitPlugin(t, e.a, "10-stuck", StateSynchronizing)
	err := e.a.RunPodSandbox(context.Background(), testPod("pod1"))
	if !isRequiredMissing(err) {
		t.Errorf("RunPodSandbox error = %v, want %v", err, ErrRequiredPluginMissing)
	}
}

func isRequiredMissing(err error) bool { return errors.Is(err, ErrRequiredPluginMissing) }

// TestSynchronizeFailureBacksOff: a plugin whose Synchronize times out
// again and again is launched again after a delay that doubles, up to the
// cap, and its state, restarts and backoff show in Plugins and metrics.
func TestSynchronizeFailureBacksOff(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.SyncTimeout = 100 * time.Millisecond
		c.StartupWait = 100 * time.Millisecond
	})
	e.install(pluginBin, "10-stuck", "hang=Synchronize")
	reg := prometheus.NewRegistry()
	m, err := NewPrometheusMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e.start(WithMetrics(m), WithRestartBackoff(50*time.Millisecond, 400*time.Millisecond))
	// Every backoff is logged; sampling Plugins() could miss a short one.
	var seen []time.Duration
	poll.Until(t, time.Minute, "four backoffs of 10-stuck logged", func() (bool, string) {
		seen = e.loggedBackoffs("10-stuck")
		return len(seen) >= 4, fmt.Sprint(seen)
	})
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if !slices.Equal(seen[:4], want) {
		t.Fatalf("backoffs logged %v, want %v first", seen, want)
	}
	// From now on every backoff is the cap's.
	if pi := waitPlugin(t, e.a, "10-stuck", StateBackoff); pi.Backoff != 400*time.Millisecond || pi.LastError == "" || pi.NextAttempt.IsZero() {
		t.Errorf("backing off: %+v, want backoff 400ms, a last error and a next attempt", pi)
	}
	got := gather(t, reg)
	if n := got["crin_nri_plugin_restarts_total{plugin=10-stuck}"]; n < 3 {
		t.Errorf("crin_nri_plugin_restarts_total = %v, want >= 3", n)
	}
	if b := got["crin_nri_plugin_backoff_seconds{plugin=10-stuck}"]; b <= 0 {
		t.Errorf("crin_nri_plugin_backoff_seconds = %v, want > 0", b)
	}
}

// TestRuntimeServicePanicFailsOneCall: a panic serving a plugin's call
// becomes that call's Internal error and is counted.
func TestRuntimeServicePanicFailsOneCall(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewPrometheusMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(DefaultConfig(), &fakeEngine{}, WithMetrics(m), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	info := &ttrpc.UnaryServerInfo{FullMethod: "/nri.pkg.api.v1alpha1.Runtime/UpdateContainers"}
	_, err = a.recoverCalls(context.Background(), func(any) error { return nil }, info,
		func(context.Context, func(any) error) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Errorf("error = %v, want code Internal", err)
	}
	if n := gather(t, reg)["crin_nri_runtime_service_panics_total{method="+info.FullMethod+"}"]; n != 1 {
		t.Errorf("crin_nri_runtime_service_panics_total = %v, want 1", n)
	}
	rsp, err := a.recoverCalls(context.Background(), func(any) error { return nil }, info,
		func(context.Context, func(any) error) (any, error) { return "ok", nil })
	if rsp != "ok" || err != nil {
		t.Errorf("a call that does not panic: %v, %v", rsp, err)
	}
}
