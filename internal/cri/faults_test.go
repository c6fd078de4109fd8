package cri

import (
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// dieOfShim ends a fake container the way the oci backend reports a dead
// shim: a stopped status with ReasonShimDied.
func (f *fakeRuntime) dieOfShim(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, err := f.get(id); err == nil && c.st.State != runtime.StateStopped {
		c.st.State, c.st.ExitCode = runtime.StateStopped, 255
		c.st.Reason, c.st.Message = runtime.ReasonShimDied, "crin-shim (pid 7) died"
		close(c.exit)
	}
}

func TestShimDeathRecorded(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)
	h.rt.dieOfShim(id)
	var st *runtimeapi.ContainerStatus
	waitFor(t, "the exit recorded", func() bool {
		resp, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		st = resp.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if st.ExitCode != 255 || st.Reason != runtime.ReasonShimDied || st.Message != "crin-shim (pid 7) died" {
		t.Errorf("exit %d reason %q message %q, want 255 ShimDied and the runtime's message", st.ExitCode, st.Reason, st.Message)
	}
}

func TestInfraDeathMarksPodNotReady(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "web")
	h.rt.exit(pod, 137)
	waitFor(t, "the pod NOTREADY", func() bool {
		resp, err := h.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	})
	recs, err := h.opts.Store.Sandboxes()
	if err != nil || len(recs) != 1 || recs[0].State != store.SandboxNotReady {
		t.Errorf("persisted pods %v (%v), want one notready", recs, err)
	}
	_, err = h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("late")})
	if !errdefs.IsFailedPrecondition(err) {
		t.Errorf("CreateContainer in a pod whose infra died: %v, want FailedPrecondition", err)
	}
	// A restart keeps it, and the pod can be stopped and removed.
	h.start(t, true)
	if _, err := h.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
}
