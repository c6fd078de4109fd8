package cri

import (
	"context"
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StartPodShim records the pod's shim as running, as the oci backend
// starts crin-shim.
func (f *fakeRuntime) StartPodShim(_ context.Context, podID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podShimStart++
	if f.podShimErr != nil {
		return f.podShimErr
	}
	if f.podShims == nil {
		f.podShims = map[string]bool{}
	}
	f.podShims[podID] = true
	return nil
}

// ReleasePodShim stops the pod's shim unless one of its containers is
// still in the runtime.
func (f *fakeRuntime) ReleasePodShim(_ context.Context, podID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.ctrs {
		if c.pod == podID {
			return nil
		}
	}
	delete(f.podShims, podID)
	return nil
}

func (f *fakeRuntime) shimRuns(podID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.podShims[podID]
}

// TestPodShimAhead: RunPodSandbox of a pod without an infra process
// starts its shim (while the network is set up), StopPodSandbox lets an
// unused one go, a failed RunPodSandbox leaves none, and a shim that
// cannot start ahead does not fail the pod.
func TestPodShimAhead(t *testing.T) {
	h := newInfralessHub(t)
	pod := h.runInfralessPod(t, "web")
	if !h.rt.shimRuns(pod) {
		t.Fatalf("no shim for pod %s after RunPodSandbox", short(pod))
	}
	if _, err := h.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if h.rt.shimRuns(pod) {
		t.Errorf("the unused shim of pod %s runs after StopPodSandbox", short(pod))
	}

	// One with a container keeps it until the container is removed.
	busy := h.runInfralessPod(t, "busy")
	h.startCtr(t, h.createInfraless(t, busy, "app"))
	if _, err := h.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: busy}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if !h.rt.shimRuns(busy) {
		t.Errorf("StopPodSandbox released the shim of pod %s, which holds a container", short(busy))
	}
	if _, err := h.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: busy}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if h.rt.shimRuns(busy) {
		t.Errorf("the shim of pod %s runs after RemovePodSandbox", short(busy))
	}

	h.nri.fail["RunPodSandbox"] = errInjected
	if _, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: infralessPodConfig("fails")}); err == nil {
		t.Fatal("RunPodSandbox succeeded; want the injected error")
	}
	delete(h.nri.fail, "RunPodSandbox")
	h.rt.mu.Lock()
	for id := range h.rt.podShims {
		if id != pod && id != busy {
			t.Errorf("a failed RunPodSandbox left the shim of pod %s", short(id))
		}
	}
	h.rt.podShimErr = errors.New("crin-shim: exec format error")
	h.rt.mu.Unlock()
	late := h.runInfralessPod(t, "late")
	if h.rt.shimRuns(late) {
		t.Errorf("pod %s has a shim though starting it failed", short(late))
	}

	// A pod sharing its PID namespace gets its shim with its infra process.
	h.rt.mu.Lock()
	h.rt.podShimErr, h.rt.podShimStart = nil, 0
	h.rt.mu.Unlock()
	cfg := podConfig("shared")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	if _, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg}); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	h.rt.mu.Lock()
	n := h.rt.podShimStart
	h.rt.mu.Unlock()
	if n != 0 {
		t.Errorf("StartPodShim called %d times for a pod with an infra process", n)
	}
}
