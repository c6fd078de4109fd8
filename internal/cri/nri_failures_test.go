package cri

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// syncBuffer is a log sink safe for the hub's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureLog sends the hub's log to a buffer.
func (h *hub) captureLog() *syncBuffer {
	b := &syncBuffer{}
	h.log = slog.New(slog.NewTextHandler(b, nil))
	return b
}

func cpuUpdate(id string, shares uint64, ignore bool) *api.ContainerUpdate {
	return &api.ContainerUpdate{ContainerId: id, IgnoreFailure: ignore,
		Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(shares)}}}}
}

func (h *hub) cpuShares(t *testing.T, id string) int64 {
	t.Helper()
	st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	return st.Status.GetResources().GetLinux().GetCpuShares()
}

// Plugins' updates that fail during kubelet's UpdateContainerResources:
// one of another container never fails the call; one of the container
// itself fails it unless marked IgnoreFailure, and then the request alone
// is applied.
func TestNRIUpdateContainerPluginFailures(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	x, y := h.create(t, pod, "x"), h.create(t, pod, "y")
	h.startCtr(t, x)
	h.startCtr(t, y)
	logs := h.captureLog()
	update := func(shares int64) error {
		_, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: x, Linux: &runtimeapi.LinuxContainerResources{CpuShares: shares},
		})
		return err
	}
	// CPU shares of 1 are refused by oci.ApplyUpdate (below the minimum).
	tests := []struct {
		name    string
		updates []*api.ContainerUpdate
		wantErr string
		want    int64 // x's cpu shares after
	}{
		{"other container's update fails", []*api.ContainerUpdate{cpuUpdate(y, 1, false), cpuUpdate(x, 700, false)}, "", 700},
		{"other container's update fails, ignore_failure", []*api.ContainerUpdate{cpuUpdate(y, 1, true)}, "", 300},
		{"own update fails, ignore_failure", []*api.ContainerUpdate{cpuUpdate(x, 1, true)}, "", 300},
		{"own update fails", []*api.ContainerUpdate{cpuUpdate(x, 1, false)}, "an NRI plugin's UpdateContainer updates linux.resources.cpu.shares 1", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := update(900); err != nil {
				t.Fatal(err)
			}
			h.nri.mu.Lock()
			h.nri.updates = tc.updates
			h.nri.mu.Unlock()
			err := update(300)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errdefs.IsInvalidArgument(err) {
					t.Fatalf("UpdateContainerResources error = %v, want InvalidArgument with %q", err, tc.wantErr)
				}
				if got := h.cpuShares(t, x); got != 900 {
					t.Errorf("x cpu shares after a failed update = %d, want 900 untouched", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("UpdateContainerResources: %v", err)
			}
			if got := h.cpuShares(t, x); got != tc.want {
				t.Errorf("x cpu shares = %d, want %d", got, tc.want)
			}
		})
	}
	if got := h.cpuShares(t, y); got != 0 {
		t.Errorf("y cpu shares = %d, want untouched", got)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "nri_request=UpdateContainer") || !strings.Contains(out, "container_id="+y) {
		t.Errorf("failed update of y not logged at warn with the request and container:\n%s", out)
	}
}

// A plugin's update of another container during CreateContainer that
// fails names the plugin that owns the field (the merge's owners are keyed
// by that container's id); an unsolicited one names the request.
func TestNRIUpdateErrorsNameThePlugin(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	y := h.create(t, pod, "y")
	h.nri.createUpdates = []*api.ContainerUpdate{cpuUpdate(y, 1, false)}
	h.nri.claim = func(o *api.OwningPlugins, _ string) { _ = o.ClaimCPUShares(y, "40-squeeze") }
	_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("x")})
	if err == nil || !strings.Contains(err.Error(), y) || !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("CreateContainer error = %v, want FailedPrecondition naming %s", err, y)
	}
	h.nri.createUpdates, h.nri.claim = nil, nil

	logs := h.captureLog()
	h.nri.createUpdates = []*api.ContainerUpdate{cpuUpdate(y, 1, false)}
	h.nri.claim = func(o *api.OwningPlugins, _ string) { _ = o.ClaimCPUShares(y, "40-squeeze") }
	if _, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("x")}); err == nil {
		t.Fatal("CreateContainer succeeded with a failing required update")
	}
	if out := logs.String(); !strings.Contains(out, `nri plugin \"40-squeeze\" updates linux.resources.cpu.shares 1`) || !strings.Contains(out, "plugins=[40-squeeze]") {
		t.Errorf("create's failed update does not name the plugin:\n%s", out)
	}
	h.nri.createUpdates, h.nri.claim = nil, nil

	failed, err := h.NRIEngine().UpdateContainers(ctx, []*api.ContainerUpdate{cpuUpdate(y, 1, false)})
	if err != nil || len(failed) != 1 {
		t.Fatalf("UpdateContainers = %v, %v; want the update back as failed", failed, err)
	}
	if out := logs.String(); !strings.Contains(out, "an NRI plugin's UpdateContainers updates linux.resources.cpu.shares 1") {
		t.Errorf("unsolicited update's failure does not say where it came from:\n%s", out)
	}
}

// A failed runtime start whose process runs anyway (the reply was lost) is
// a running container with a monitor; one that did not start is killed and
// recorded exited with StartError, and plugins get StopContainer once.
func TestStartErrorSettles(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	set := func(err error, runs bool) {
		h.rt.mu.Lock()
		h.rt.startErr, h.rt.startRuns = err, runs
		h.rt.mu.Unlock()
	}

	t.Run("process runs", func(t *testing.T) {
		id := h.create(t, pod, "lost-reply")
		set(context.DeadlineExceeded, true)
		defer set(nil, false)
		if _, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("StartContainer = %v, want success: the process runs", err)
		}
		st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Status.StartedAt == 0 {
			t.Fatalf("state %v started %d, want RUNNING with a start time", st.Status.State, st.Status.StartedAt)
		}
		h.nri.take()
		h.rt.exit(id, 4) // the monitor watches it
		waitFor(t, "the exit", func() bool {
			st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.Status.ExitCode == 4
		})
		waitFor(t, "StopContainer", func() bool {
			h.nri.mu.Lock()
			defer h.nri.mu.Unlock()
			return slices.Contains(h.nri.events, "StopContainer lost-reply")
		})
	})

	t.Run("process does not run", func(t *testing.T) {
		id := h.create(t, pod, "broken")
		h.nri.take()
		set(errors.New("exec: no such file"), false)
		defer set(nil, false)
		if _, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("StartContainer = %v, want the runtime's error", err)
		}
		st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.Reason != "StartError" || !strings.Contains(st.Status.Message, "no such file") {
			t.Errorf("status %v reason %q message %q, want EXITED StartError with the runtime's message", st.Status.State, st.Status.Reason, st.Status.Message)
		}
		rst, err := h.rt.Status(ctx, id)
		if err != nil || rst.State != runtime.StateStopped {
			t.Errorf("runtime state %v (%v), want the created container killed", rst.State, err)
		}
		if diff := cmp.Diff([]string{"StartContainer broken", "StopContainer broken"}, h.nri.take()); diff != "" {
			t.Errorf("NRI events (-want +got):\n%s", diff)
		}
	})
}

// When another goroutine is delivering a container's NRI StopContainer
// and the CRI call's context ends first, StopContainer and StopPodSandbox
// fail instead of reporting a stop plugins have not heard of, and
// StopPodSandbox sends no NRI StopPodSandbox before it.
func TestStopWaitsForDeliveryOrFails(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)
	slow := make(chan struct{})
	h.nri.during["StopContainer"] = func(*api.PodSandbox, *api.Container) {
		// Bounded, so that a hub that does wrong fails instead of hanging.
		select {
		case <-slow:
		case <-time.After(5 * time.Second):
		}
	}
	h.nri.take()
	h.rt.exit(id, 0) // the monitor starts delivering StopContainer, and hangs
	waitFor(t, "the monitor's delivery", func() bool {
		h.nri.mu.Lock()
		defer h.nri.mu.Unlock()
		return slices.Contains(h.nri.events, "StopContainer app")
	})

	tight, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := h.StopContainer(tight, &runtimeapi.StopContainerRequest{ContainerId: id}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("StopContainer during another delivery, ctx expired = %v, want DeadlineExceeded", err)
	}
	tight, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := h.StopPodSandbox(tight, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("StopPodSandbox during a delivery, ctx expired = %v, want DeadlineExceeded", err)
	}
	close(slow)
	if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"StopContainer app", "StopPodSandbox " + short(pod)}, h.nri.take()); diff != "" {
		t.Errorf("NRI events (-want +got):\n%s", diff)
	}
}

// An eviction is recorded before the container is signalled: a crind that
// dies during the grace period kills the container when it recovers, and
// the exit shows the eviction.
func TestEvictionSurvivesRestart(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	id := h.create(t, h.runPod(t, "web"), "app")
	h.startCtr(t, id)
	h.rt.mu.Lock()
	h.rt.ignoreTerm = true
	h.rt.mu.Unlock()
	if err := h.NRIEngine().EvictContainer(ctx, id, "node too hot"); err != nil {
		t.Fatal(err)
	}
	recs, _ := h.opts.Store.Containers()
	if len(recs) != 1 || !recs[0].Evicting || recs[0].EvictMessage != "node too hot" {
		t.Fatalf("record after EvictContainer: evicting %v message %q, want the eviction recorded", recs[0].Evicting, recs[0].EvictMessage)
	}
	// crind restarts during the 10 s grace period; the container ignored
	// its SIGTERM and still runs.
	h.start(t, true)
	waitFor(t, "the interrupted eviction to finish", func() bool {
		st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if st.Status.Reason != ReasonEvicted || st.Status.Message != "node too hot" || st.Status.ExitCode != 137 {
		t.Errorf("exit reason %q message %q code %d, want %s, the plugin's reason, 137", st.Status.Reason, st.Status.Message, st.Status.ExitCode, ReasonEvicted)
	}
	waitFor(t, "StopContainer", func() bool {
		h.nri.mu.Lock()
		defer h.nri.mu.Unlock()
		return slices.Contains(h.nri.events, "StopContainer app")
	})
	recs, _ = h.opts.Store.Containers()
	if recs[0].Evicting {
		t.Errorf("record still says evicting after the exit")
	}
	// Another restart has nothing to finish and delivers nothing again.
	h.start(t, true)
	if got := h.nri.take(); len(got) != 0 {
		t.Errorf("events after a second restart = %v, want none", got)
	}
}

// A failed RunPodSandbox tells plugins that saw it of its removal after
// the infra container is gone, as a normal removal does, with
// RemovePodSandbox only.
func TestNRIRunPodSandboxRollbackOrder(t *testing.T) {
	h := newHub(t)
	h.rt.mu.Lock()
	h.rt.onDelete = func(id string) {
		h.nri.mu.Lock()
		h.nri.events = append(h.nri.events, "runtime delete "+short(id))
		h.nri.mu.Unlock()
	}
	h.rt.mu.Unlock()
	h.nri.fail["RunPodSandbox"] = errors.New("plugin 10-deny: no")
	if _, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")}); err == nil {
		t.Fatal("RunPodSandbox succeeded")
	}
	ev := h.nri.take()
	if len(ev) != 3 {
		t.Fatalf("events = %v, want RunPodSandbox, the infra delete, RemovePodSandbox", ev)
	}
	p := strings.TrimPrefix(ev[0], "RunPodSandbox ")
	if diff := cmp.Diff([]string{"RunPodSandbox " + p, "runtime delete " + p, "RemovePodSandbox " + p}, ev); diff != "" {
		t.Errorf("rollback order (-want +got):\n%s", diff)
	}
}
