package cri

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// newInfralessHub is a hub whose runtime, like the oci backend, lets pods
// go without an infra container.
func newInfralessHub(t *testing.T) *hub {
	t.Helper()
	h := newHub(t)
	h.rt.mu.Lock()
	h.rt.withoutInfra = true
	h.rt.mu.Unlock()
	return h
}

// infralessPodConfig is podConfig with the PID namespace kubelet gives a
// pod that does not share one (mode POD, the zero value, shares it).
func infralessPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_CONTAINER
	return cfg
}

func (h *hub) runInfralessPod(t *testing.T, name string) string {
	t.Helper()
	resp, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: infralessPodConfig(name)})
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", name, err)
	}
	return resp.PodSandboxId
}

// createInfraless creates a container that does not share the PID
// namespace in a pod from runInfralessPod.
func (h *hub) createInfraless(t *testing.T, pod, name string) string {
	t.Helper()
	cfg := ctrConfig(name)
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
	}}
	resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, Config: cfg, SandboxConfig: infralessPodConfig("p"),
	})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", name, err)
	}
	return resp.ContainerId
}

func (h *hub) runtimeHas(id string) bool {
	h.rt.mu.Lock()
	defer h.rt.mu.Unlock()
	_, ok := h.rt.ctrs[id]
	return ok
}

// podRecord is pod id's store record, or nil.
func (h *hub) podRecord(t *testing.T, id string) *store.Sandbox {
	t.Helper()
	sbs, err := h.opts.Store.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sbs {
		if r.ID == id {
			return r
		}
	}
	return nil
}

func (h *hub) podState(t *testing.T, id string) runtimeapi.PodSandboxState {
	t.Helper()
	st, err := h.PodSandboxStatus(t.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	return st.GetStatus().GetState()
}

// TestPodWithoutInfra runs a pod that does not share its PID namespace on
// a runtime that lets it go without an infra container: the runtime never
// sees the pod, plugins see pid 0, the pod stays READY across a restart
// with its container running, and stop and removal leave nothing.
func TestPodWithoutInfra(t *testing.T) {
	h := newInfralessHub(t)
	var runView *api.PodSandbox
	h.nri.during = map[string]func(*api.PodSandbox, *api.Container){
		"RunPodSandbox": func(p *api.PodSandbox, _ *api.Container) { runView = proto.Clone(p).(*api.PodSandbox) },
	}
	pod := h.runInfralessPod(t, "web")
	if h.runtimeHas(pod) {
		t.Fatalf("the runtime has a container for pod %s: an infra container was made", short(pod))
	}
	if runView == nil || runView.GetPid() != 0 {
		t.Errorf("NRI RunPodSandbox pod pid = %d, want 0 (no infra process)", runView.GetPid())
	}
	if rec := h.podRecord(t, pod); rec == nil || !rec.NoInfra || rec.Pid != 0 {
		t.Fatalf("pod record %+v; want no_infra, pid 0", rec)
	}
	ctr := h.createInfraless(t, pod, "app")
	h.startCtr(t, ctr)

	h.start(t, true) // a crind restart
	if got := h.podState(t, pod); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after a restart: %v, want READY", got)
	}
	h.startCtr(t, h.createInfraless(t, pod, "late")) // containers still join it

	h.nri.take()
	if _, err := h.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if got := h.podState(t, pod); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod after StopPodSandbox: %v, want NOTREADY", got)
	}
	evs := h.nri.take()
	if i := slices.Index(evs, "StopPodSandbox "+short(pod)); i < 0 || i != len(evs)-1 {
		t.Errorf("NRI events of the stop: %q; want StopPodSandbox last, after the containers' StopContainer", evs)
	}
	if _, err := h.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if left := h.leftovers(t); len(left) > 0 {
		t.Errorf("left after RemovePodSandbox: %q", left)
	}
}

// TestSharedPIDPodKeepsInfra: a pod sharing one PID namespace still gets
// its infra process (its PID 1), and it dying makes the pod NOTREADY.
func TestSharedPIDPodKeepsInfra(t *testing.T) {
	h := newInfralessHub(t)
	cfg := podConfig("shared")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	resp, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	pod := resp.PodSandboxId
	if !h.runtimeHas(pod) {
		t.Fatalf("a pod sharing its PID namespace has no infra container")
	}
	h.rt.exit(pod, 137)
	waitFor(t, "pod NOTREADY after its infra exited", func() bool {
		return h.podState(t, pod) == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	})
}

// TestPodWithoutInfraRollsBack fails the NRI hook of a pod without an
// infra process: nothing is left and a retry works.
func TestPodWithoutInfraRollsBack(t *testing.T) {
	h := newInfralessHub(t)
	h.nri.fail["RunPodSandbox"] = errInjected
	if _, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: infralessPodConfig("web")}); err == nil {
		t.Fatal("RunPodSandbox succeeded; want the injected error")
	}
	if left := h.leftovers(t); len(left) > 0 {
		t.Errorf("left after the failed RunPodSandbox: %q", left)
	}
	delete(h.nri.fail, "RunPodSandbox")
	id := h.runInfralessPod(t, "web")
	if left := h.leftovers(t, id); len(left) > 0 {
		t.Errorf("left beside the retried pod: %q", left)
	}
}

// TestRecoverPodWithoutInfra: on restart a half-made pod without an
// infra process is undone (its pins too), and a ready one whose pins are
// gone (the node rebooted) is NOTREADY, while one whose pins are there
// stays READY.
func TestRecoverPodWithoutInfra(t *testing.T) {
	h := newInfralessHub(t)
	pins := func(id string) string {
		p, err := fakePinner{}.New(h.env.NSDir(id), []string{"ipc"}, "")
		if err != nil {
			t.Fatal(err)
		}
		return p["ipc"]
	}
	put := func(id, name string, st store.SandboxState, ipc string) {
		cfg := infralessPodConfig(name)
		raw, err := proto.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec := &store.Sandbox{ID: id, Name: name, State: st, Config: raw, RuntimeHandler: "runc", NoInfra: true,
			IPCNS: ipc, CgroupParent: "/crin/" + id, PodDir: filepath.Join(h.opts.RootDir, "pods", id)}
		if err := h.opts.Store.Reserve(store.KindSandbox, name, id); err != nil {
			t.Fatal(err)
		}
		if err := h.opts.Store.PutSandbox(rec); err != nil {
			t.Fatal(err)
		}
	}
	half, kept, lost := newID(), newID(), newID()
	put(half, "half", store.SandboxCreating, pins(half))
	put(kept, "kept", store.SandboxReady, pins(kept))
	put(lost, "lost", store.SandboxReady, filepath.Join(h.env.NSDir(lost), "ipc"))

	h.start(t, true)
	if h.podRecord(t, half) != nil {
		t.Errorf("the half-made pod's record is still there")
	}
	if _, err := os.Stat(h.env.NSDir(half)); !os.IsNotExist(err) {
		t.Errorf("the half-made pod's pins are still there (%v)", err)
	}
	if got := h.podState(t, kept); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod with its pins: %v, want READY", got)
	}
	if got := h.podState(t, lost); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod whose pins are gone: %v, want NOTREADY", got)
	}
}
