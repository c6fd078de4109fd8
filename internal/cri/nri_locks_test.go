package cri

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// holdRuntime makes the fake runtime's Start and Update wait until the
// returned release is called.
func (h *hub) holdRuntime(t *testing.T) (blocked <-chan string, release func()) {
	t.Helper()
	b, bl := make(chan struct{}), make(chan string, 8)
	h.rt.mu.Lock()
	h.rt.block, h.rt.blocked = b, bl
	h.rt.mu.Unlock()
	var done bool
	release = func() {
		if done {
			return
		}
		done = true
		h.rt.mu.Lock()
		h.rt.block = nil
		h.rt.mu.Unlock()
		close(b)
	}
	t.Cleanup(release)
	return bl, release
}

// promptly fails the test when fn does not return within 2 seconds.
func promptly(t *testing.T, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("%s waited for a runtime call in progress", what)
	}
}

// A slow runtime start or update of a container holds no lock that status,
// list, NRI Snapshot (a plugin's Synchronize) or a plugin's update of the
// same container needs.
func TestRuntimeCallsDoNotBlockReaders(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	readers := func(phase string) {
		t.Helper()
		promptly(t, phase+": ContainerStatus", func() error {
			_, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			return err
		})
		promptly(t, phase+": ListContainers", func() error {
			_, err := h.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		})
		promptly(t, phase+": Snapshot", func() error {
			_, _, err := h.NRIEngine().Snapshot(ctx)
			return err
		})
	}

	blocked, release := h.holdRuntime(t)
	started := make(chan error, 1)
	go func() {
		_, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		started <- err
	}()
	if got := <-blocked; got != "start "+id {
		t.Fatalf("runtime call held = %q, want the start", got)
	}
	readers("during the runtime start")
	// A plugin's update of the starting container goes through too (the
	// fake holds the update as well: release it from here).
	upd := make(chan []*api.ContainerUpdate, 1)
	go func() {
		failed, _ := h.NRIEngine().UpdateContainers(ctx, []*api.ContainerUpdate{{ContainerId: id,
			Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(300))}}}}})
		upd <- failed
	}()
	select {
	case got := <-blocked:
		if got != "update "+id {
			t.Fatalf("runtime call held = %q, want the plugin's update", got)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a plugin's UpdateContainers waited for the container's runtime start")
	}
	release()
	if err := <-started; err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if failed := <-upd; len(failed) != 0 {
		t.Fatalf("UpdateContainers failed: %v", failed)
	}

	blocked, release = h.holdRuntime(t)
	updated := make(chan error, 1)
	go func() {
		_, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256},
		})
		updated <- err
	}()
	if got := <-blocked; got != "update "+id {
		t.Fatalf("runtime call held = %q, want the update", got)
	}
	readers("during the runtime update")
	release()
	if err := <-updated; err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Status.GetResources().GetLinux().GetCpuShares() != 256 {
		t.Errorf("after the held calls: state %v cpu shares %d, want RUNNING and 256",
			st.Status.State, st.Status.GetResources().GetLinux().GetCpuShares())
	}
}

// Two updates of one container never interleave: each reads the resources
// the previous one recorded.
func TestUpdatesOfOneContainerAreSerialized(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	id := h.create(t, h.runPod(t, "web"), "app")
	h.startCtr(t, id)
	blocked, release := h.holdRuntime(t)
	first := make(chan error, 1)
	go func() {
		_, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256},
		})
		first <- err
	}()
	<-blocked
	second := make(chan []*api.ContainerUpdate, 1)
	go func() {
		failed, _ := h.NRIEngine().UpdateContainers(context.WithoutCancel(ctx), []*api.ContainerUpdate{{ContainerId: id,
			Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(int64(64 << 20))}}}}})
		second <- failed
	}()
	select {
	case got := <-blocked:
		t.Fatalf("%s reached the runtime while another update of the container was in it", got)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if failed := <-second; len(failed) != 0 {
		t.Fatalf("UpdateContainers failed: %v", failed)
	}
	st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if r := st.Status.GetResources().GetLinux(); r.GetCpuShares() != 256 || r.GetMemoryLimitInBytes() != 64<<20 {
		t.Errorf("resources = cpu shares %d memory %d, want both updates (256, 64MiB)", r.GetCpuShares(), r.GetMemoryLimitInBytes())
	}
}
