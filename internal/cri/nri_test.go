package cri

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestNRIHookOrder(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)
	if _, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256},
	}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	// The fake runtime ends the process at the stop signal, so the exit
	// monitor and StopContainer race to deliver NRI StopContainer.
	if _, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatalf("second StopContainer: %v", err)
	}
	if _, err := h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	for range 2 {
		if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
	}
	if _, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	p := short(pod)
	want := []string{
		"RunPodSandbox " + p,
		"CreateContainer app", "PostCreateContainer app",
		"StartContainer app", "PostStartContainer app",
		"UpdateContainer app", "PostUpdateContainer app",
		"StopContainer app", "RemoveContainer app",
		"StopPodSandbox " + p, "RemovePodSandbox " + p,
	}
	if diff := cmp.Diff(want, h.nri.take()); diff != "" {
		t.Errorf("NRI events (-want +got):\n%s", diff)
	}
	if got := h.nri.seen["StopContainer"]; got.GetState() != api.ContainerState_CONTAINER_STOPPED || got.GetExitCode() != 128+15 {
		t.Errorf("StopContainer saw state %v exit %d, want STOPPED 143", got.GetState(), got.GetExitCode())
	}
}

func TestNRIStopPodSandboxStopsEachContainerOnce(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "web")
	a := h.create(t, pod, "a")
	h.create(t, pod, "b")
	h.startCtr(t, a)
	h.nri.take()
	// b never started: it still gets StopContainer (plugins saw it created).
	if _, err := h.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	got := h.nri.take()
	count := func(ev string) int {
		n := 0
		for _, e := range got {
			if e == ev {
				n++
			}
		}
		return n
	}
	for _, ev := range []string{"StopContainer a", "StopContainer b", "RemoveContainer a", "RemoveContainer b",
		"StopPodSandbox " + short(pod), "RemovePodSandbox " + short(pod)} {
		if n := count(ev); n != 1 {
			t.Errorf("%q delivered %d times, want once; events: %v", ev, n, got)
		}
	}
	if i, j := slices.Index(got, "StopContainer b"), slices.Index(got, "StopPodSandbox "+short(pod)); i > j {
		t.Errorf("StopPodSandbox before the containers' StopContainer: %v", got)
	}
}

// Plugins may change an update (theirs for the container supersedes the
// fields it sets) and update other containers; StopContainer's updates
// go to the other containers.
func TestNRIUpdatesFromEvents(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	x, y := h.create(t, pod, "x"), h.create(t, pod, "y")
	h.startCtr(t, x)
	h.startCtr(t, y)
	mem := func(v int64) *api.ContainerUpdate {
		return &api.ContainerUpdate{Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(v)}}}}
	}
	own, other := mem(100<<20), mem(200<<20)
	own.ContainerId, other.ContainerId = x, y
	h.nri.updates = []*api.ContainerUpdate{own, other}
	if _, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: x, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256, MemoryLimitInBytes: 1 << 30},
	}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	limit := func(id string) (shares uint64, mem int64) {
		h.rt.mu.Lock()
		defer h.rt.mu.Unlock()
		r := h.rt.ctrs[id].res
		if r == nil || r.Memory == nil || r.Memory.Limit == nil {
			return 0, 0
		}
		if r.CPU != nil && r.CPU.Shares != nil {
			shares = *r.CPU.Shares
		}
		return shares, *r.Memory.Limit
	}
	if s, m := limit(x); s != 256 || m != 100<<20 {
		t.Errorf("x: cpu shares %d memory %d, want the request's 256 and the plugin's 100MiB", s, m)
	}
	if _, m := limit(y); m != 200<<20 {
		t.Errorf("y: memory %d, want the plugin's 200MiB", m)
	}
	st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: x})
	if got := st.Status.GetResources().GetLinux().GetMemoryLimitInBytes(); got != 100<<20 {
		t.Errorf("x status memory limit = %d, want 100MiB", got)
	}

	// Stopping x: its plugins' update for y applies, the one for x itself not.
	own, other = mem(300<<20), mem(400<<20)
	own.ContainerId, other.ContainerId = x, y
	h.nri.updates = []*api.ContainerUpdate{own, other}
	if _, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: x}); err != nil {
		t.Fatal(err)
	}
	if _, m := limit(y); m != 400<<20 {
		t.Errorf("y after x stopped: memory %d, want 400MiB", m)
	}
	if _, m := limit(x); m != 100<<20 {
		t.Errorf("x after it stopped: memory %d, want it untouched (100MiB)", m)
	}
}

func TestNRISelfExitDeliversStopOnce(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)
	h.nri.take()
	h.rt.exit(id, 0)
	waitFor(t, "StopContainer after the exit", func() bool {
		h.nri.mu.Lock()
		defer h.nri.mu.Unlock()
		return slices.Contains(h.nri.events, "StopContainer app")
	})
	if _, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"StopContainer app", "RemoveContainer app"}, h.nri.take()); diff != "" {
		t.Errorf("NRI events (-want +got):\n%s", diff)
	}
}

func TestNRIStopDeliveredAcrossRestart(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)

	// crind restarts without NRI; the container exits meanwhile.
	h.start(t, false)
	h.rt.exit(id, 3)
	waitFor(t, "the exit to be recorded", func() bool {
		st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	// The next start attaches NRI: the missed StopContainer is delivered...
	h.start(t, true)
	if diff := cmp.Diff([]string{"StopContainer app"}, h.nri.take()); diff != "" {
		t.Errorf("events at attach (-want +got):\n%s", diff)
	}
	if got := h.nri.seen["StopContainer"].GetExitCode(); got != 3 {
		t.Errorf("StopContainer exit code = %d, want 3", got)
	}
	// ...and never again.
	h.start(t, true)
	if got := h.nri.take(); len(got) != 0 {
		t.Errorf("events at the second attach = %v, want none", got)
	}
}

func TestNRIRunPodSandboxHookFails(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	h.nri.fail["RunPodSandbox"] = errors.New("plugin 10-deny: no pods today")
	_, err := h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")})
	if err == nil || !strings.Contains(err.Error(), "no pods today") {
		t.Fatalf("RunPodSandbox error = %v, want the plugin's message", err)
	}
	ev := h.nri.take()
	if len(ev) != 2 || !strings.HasPrefix(ev[0], "RunPodSandbox") || !strings.HasPrefix(ev[1], "RemovePodSandbox") {
		t.Errorf("events = %v, want RunPodSandbox then RemovePodSandbox", ev)
	}
	list, _ := h.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	recs, _ := h.opts.Store.Sandboxes()
	names, _ := h.opts.Store.Reservations("sandbox")
	if len(list.Items) != 0 || len(recs) != 0 || len(names) != 0 || len(h.rt.ctrs) != 0 {
		t.Errorf("left behind: %d listed, %d records, %d names, %d runtime containers", len(list.Items), len(recs), len(names), len(h.rt.ctrs))
	}
	delete(h.nri.fail, "RunPodSandbox")
	h.runPod(t, "web") // the same name works again
}

func TestNRICreateContainerHookFails(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	h.nri.take()
	h.nri.fail["CreateContainer"] = errors.New("plugin 20-policy: image not allowed")
	_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("app")})
	if err == nil || !strings.Contains(err.Error(), "image not allowed") {
		t.Fatalf("CreateContainer error = %v, want the plugin's message", err)
	}
	if diff := cmp.Diff([]string{"CreateContainer app", "RemoveContainer app"}, h.nri.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	list, _ := h.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	recs, _ := h.opts.Store.Containers()
	if len(list.Containers) != 0 || len(recs) != 0 || len(h.images.rootfs) != 0 {
		t.Errorf("left behind: %d listed, %d records, %d rootfs", len(list.Containers), len(recs), len(h.images.rootfs))
	}
	if _, _, err := h.NRIEngine().Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ctrs, _ := h.NRIEngine().Snapshot(ctx); len(ctrs) != 0 {
		t.Errorf("Snapshot still has %d containers", len(ctrs))
	}
	delete(h.nri.fail, "CreateContainer")
	h.create(t, pod, "app") // the same name works again
}

func TestNRIStartHookFailsLeavesCreated(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	id := h.create(t, h.runPod(t, "web"), "app")
	h.nri.fail["StartContainer"] = errors.New("plugin 30-gate: not yet")
	if _, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err == nil || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("StartContainer error = %v, want the plugin's message", err)
	}
	st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("state = %v, want CREATED", st.Status.State)
	}
	delete(h.nri.fail, "StartContainer")
	h.startCtr(t, id)
}

func TestNRIOwnersPersisted(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	h.nri.claim = func(o *api.OwningPlugins, id string) {
		_ = o.ClaimMemLimit(id, "10-resources")
		_ = o.ClaimEnv(id, "FOO", "20-env")
	}
	id := h.create(t, h.runPod(t, "web"), "app")
	owners, err := h.NRIOwners(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 2 || !slices.Contains(mapValues(owners), "10-resources") || !slices.Contains(mapValues(owners), "20-env") {
		t.Fatalf("owners = %v, want the memory limit by 10-resources and env FOO by 20-env", owners)
	}
	h.start(t, true)
	after, err := h.NRIOwners(id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(owners, after); diff != "" {
		t.Errorf("owners after restart (-before +after):\n%s", diff)
	}
	st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]string
	if err := json.Unmarshal([]byte(st.Info["nriOwners"]), &shown); err != nil {
		t.Fatalf("verbose info nriOwners %q: %v", st.Info["nriOwners"], err)
	}
	if diff := cmp.Diff(owners, shown); diff != "" {
		t.Errorf("verbose nriOwners (-want +got):\n%s", diff)
	}
	if _, err := h.NRIOwners("nope"); !errdefs.IsNotFound(err) {
		t.Errorf("NRIOwners(unknown) = %v, want NotFound", err)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// A plugin's handler of one event of a pod asks the engine to evict,
// update and list containers of the same pod: none of that may wait for
// the event (the fake, like the adaptation, serializes a pod's events).
func TestNRIEngineCallsFromInsideAnEvent(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	victim := h.create(t, pod, "victim")
	h.startCtr(t, victim)
	// The update goes to a container the eviction leaves alone: the
	// victim's stop runs beside the event and may finish before it.
	kept := h.create(t, pod, "kept")
	h.startCtr(t, kept)
	h.nri.take()

	var failed []*api.ContainerUpdate
	var snapCtrs []*api.Container
	h.nri.during["CreateContainer"] = func(_ *api.PodSandbox, _ *api.Container) {
		if err := h.NRIEngine().EvictContainer(ctx, victim, "too hungry"); err != nil {
			t.Errorf("EvictContainer: %v", err)
		}
		failed, _ = h.NRIEngine().UpdateContainers(ctx, []*api.ContainerUpdate{
			cpuUpdate(kept, 512, false),
			{ContainerId: "gone", IgnoreFailure: true},
			{ContainerId: "gone-too"},
		})
		_, snapCtrs, _ = h.NRIEngine().Snapshot(ctx)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("new")})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CreateContainer deadlocked with the engine calls of its plugin")
	}
	if len(failed) != 1 || failed[0].GetContainerId() != "gone-too" {
		t.Errorf("failed updates = %v, want only gone-too (gone ignores failure)", failed)
	}
	var pendingSeen bool
	for _, c := range snapCtrs {
		pendingSeen = pendingSeen || (c.GetName() == "new" && c.GetState() == api.ContainerState_CONTAINER_CREATED)
	}
	if !pendingSeen {
		t.Errorf("Snapshot during CreateContainer does not show the container being created")
	}
	waitFor(t, "the eviction", func() bool {
		st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: victim})
		return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	st, _ := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: victim})
	if st.Status.Reason != ReasonEvicted || st.Status.Message != "too hungry" {
		t.Errorf("status reason %q message %q, want %q and the plugin's reason", st.Status.Reason, st.Status.Message, ReasonEvicted)
	}
	waitFor(t, "StopContainer of the victim", func() bool {
		h.nri.mu.Lock()
		defer h.nri.mu.Unlock()
		return slices.Contains(h.nri.events, "StopContainer victim")
	})
	ev := h.nri.take()
	if i, j := slices.Index(ev, "PostCreateContainer new"), slices.Index(ev, "StopContainer victim"); j < slices.Index(ev, "CreateContainer new") || i < 0 {
		t.Errorf("events = %v: StopContainer of the victim must come after the CreateContainer that evicted it", ev)
	}
	if err := h.NRIEngine().EvictContainer(ctx, "nope", "x"); !errdefs.IsNotFound(err) {
		t.Errorf("EvictContainer(unknown) = %v, want NotFound", err)
	}
}

func TestNRISnapshotViews(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)
	if got := h.nri.seen["CreateContainer"]; got.GetState() != api.ContainerState_CONTAINER_CREATED || got.GetName() != "app" || got.GetId() != id {
		t.Errorf("CreateContainer saw %v", got)
	}
	pods, ctrs, err := h.NRIEngine().Snapshot(ctx)
	if err != nil || len(pods) != 1 || len(ctrs) != 1 {
		t.Fatalf("Snapshot = %d pods, %d containers, %v; want 1, 1", len(pods), len(ctrs), err)
	}
	p, c := pods[0], ctrs[0]
	wantPod := &api.PodSandbox{
		Id: pod, Name: "web", Uid: "web-uid", Namespace: "default",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "pod web"},
		RuntimeHandler: "runc", Pid: p.GetPid(),
		Linux: &api.LinuxPodSandbox{
			CgroupParent: "/crin/" + pod, CgroupsPath: "/crin/" + pod + "/" + pod,
			PodResources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(int64(1 << 30))}, Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(512))}},
		},
	}
	ignoreSpec := protocmp.IgnoreFields(&api.LinuxPodSandbox{}, "namespaces", "resources")
	if diff := cmp.Diff(wantPod, p, protocmp.Transform(), ignoreSpec); diff != "" {
		t.Errorf("pod view (-want +got):\n%s", diff)
	}
	if p.GetPid() == 0 {
		t.Errorf("pod view has no infra pid")
	}
	if c.GetId() != id || c.GetPodSandboxId() != pod || c.GetName() != "app" ||
		c.GetState() != api.ContainerState_CONTAINER_RUNNING || c.GetPid() == 0 || c.GetStartedAt() == 0 || c.GetCreatedAt() == 0 ||
		c.GetLabels()["ctr"] != "app" || c.GetAnnotations()["note"] != "ctr app" {
		t.Errorf("container view = %v", c)
	}
	if diff := cmp.Diff(&api.Image{Name: "docker.io/library/busybox:latest", Digest: "sha256:d19e57", ConfigDigest: "sha256:c0nf19"},
		c.GetImage(), protocmp.Transform()); diff != "" {
		t.Errorf("image (-want +got):\n%s", diff)
	}

	// A restart shows plugins the same pods and containers.
	h.start(t, true)
	pods2, ctrs2, _ := h.NRIEngine().Snapshot(ctx)
	if diff := cmp.Diff(pods, pods2, protocmp.Transform()); diff != "" {
		t.Errorf("pods after restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(ctrs, ctrs2, protocmp.Transform()); diff != "" {
		t.Errorf("containers after restart (-before +after):\n%s", diff)
	}

	h.rt.exit(id, 3)
	waitFor(t, "the exit", func() bool {
		_, cs, _ := h.NRIEngine().Snapshot(ctx)
		return len(cs) == 1 && cs[0].GetState() == api.ContainerState_CONTAINER_STOPPED
	})
	_, cs, _ := h.NRIEngine().Snapshot(ctx)
	if c := cs[0]; c.GetExitCode() != 3 || c.GetStatusReason() != "Error" || c.GetFinishedAt() == 0 {
		t.Errorf("exited view: exit %d reason %q finished %d", c.GetExitCode(), c.GetStatusReason(), c.GetFinishedAt())
	}
}

func TestNRIUpdatePodSandboxResources(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	h.nri.take()
	req := &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: pod, Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2048}}
	h.nri.fail["UpdatePodSandbox"] = errors.New("plugin 10-x: no")
	if _, err := h.UpdatePodSandboxResources(ctx, req); err == nil || !strings.Contains(err.Error(), "no") {
		t.Fatalf("UpdatePodSandboxResources error = %v, want the plugin's", err)
	}
	shares := func() uint64 {
		pods, _, _ := h.NRIEngine().Snapshot(ctx)
		return pods[0].GetLinux().GetPodResources().GetCpu().GetShares().GetValue()
	}
	if got := shares(); got != 512 {
		t.Errorf("cpu shares after a refused update = %d, want 512", got)
	}
	delete(h.nri.fail, "UpdatePodSandbox")
	if _, err := h.UpdatePodSandboxResources(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := shares(); got != 2048 {
		t.Errorf("cpu shares = %d, want 2048", got)
	}
	// The infra container's limits follow the pod's (RunPodSandbox sized
	// it from the same fields).
	h.rt.mu.Lock()
	var infraShares uint64
	if c := h.rt.ctrs[pod]; c != nil && c.res != nil && c.res.CPU != nil && c.res.CPU.Shares != nil {
		infraShares = *c.res.CPU.Shares
	}
	h.rt.mu.Unlock()
	if infraShares != 2048 {
		t.Errorf("infra container's cpu shares after the update = %d, want 2048", infraShares)
	}
	p := short(pod)
	want := []string{"UpdatePodSandbox " + p, "UpdatePodSandbox " + p, "PostUpdatePodSandbox " + p}
	if diff := cmp.Diff(want, h.nri.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	h.start(t, true)
	if got := shares(); got != 2048 {
		t.Errorf("cpu shares after restart = %d, want 2048", got)
	}
	if _, err := h.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: strings.Repeat("0f", 32)}); !errdefs.IsNotFound(err) {
		t.Errorf("unknown pod: %v, want NotFound", err)
	}
}

// Without an adaptation nothing changes: the lifecycle works as before.
func TestNoNRI(t *testing.T) {
	h := newHub(t)
	h.start(t, false)
	ctx := context.Background()
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.startCtr(t, id)
	if _, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if owners, err := h.NRIOwners(id); !errdefs.IsNotFound(err) {
		t.Errorf("NRIOwners after removal = %v, %v; want NotFound", owners, err)
	}
}
