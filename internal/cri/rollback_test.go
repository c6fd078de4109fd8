package cri

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// leftovers lists what the hub holds beyond the pods and containers in
// keep: runtime containers, prepared rootfs dirs, store records, name
// reservations, pending cleanups, namespace pin dirs, network namespace
// pins and pod dirs.
func (h *hub) leftovers(t *testing.T, keep ...string) []string {
	t.Helper()
	var out []string
	h.rt.mu.Lock()
	for id := range h.rt.ctrs {
		if !slices.Contains(keep, id) {
			out = append(out, "runtime container "+short(id))
		}
	}
	h.rt.mu.Unlock()
	h.images.mu.Lock()
	for id := range h.images.rootfs {
		if !slices.Contains(keep, id) {
			out = append(out, "rootfs "+short(id))
		}
	}
	h.images.mu.Unlock()
	st := h.opts.Store
	sbs, err := st.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sbs {
		if !slices.Contains(keep, r.ID) {
			out = append(out, "pod record "+short(r.ID)+" "+string(r.State))
		}
	}
	cs, err := st.Containers()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cs {
		if !slices.Contains(keep, r.ID) {
			out = append(out, "container record "+short(r.ID)+" "+string(r.State))
		}
	}
	for _, k := range []store.Kind{store.KindSandbox, store.KindContainer} {
		res, err := st.Reservations(k)
		if err != nil {
			t.Fatal(err)
		}
		for name, id := range res {
			if !slices.Contains(keep, id) {
				out = append(out, fmt.Sprintf("%s name %q", k, name))
			}
		}
	}
	cl, err := st.Cleanups()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cl {
		out = append(out, "pending cleanup "+c.Key())
	}
	for _, d := range []struct{ what, dir string }{
		{"namespace pins", filepath.Dir(h.env.NSDir("x"))},
		{"netns", h.Service.opts.NetNSDir},
		{"pod dir", filepath.Join(h.Service.opts.RootDir, "pods")},
	} {
		ents, err := os.ReadDir(d.dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !slices.Contains(keep, e.Name()) {
				out = append(out, d.what+" "+short(e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}

var errInjected = fmt.Errorf("injected: %w", errdefs.ErrUnavailable)

// TestRunPodSandboxRollsBack fails RunPodSandbox at each step it takes
// and checks that the error reaches the client with its class and that
// nothing of the pod is left, so the same request can be retried.
func TestRunPodSandboxRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(h *hub)
		clear  func(h *hub)
	}{
		{
			name:   "infra create",
			inject: func(h *hub) { h.rt.createErr = errInjected },
			clear:  func(h *hub) { h.rt.createErr = nil },
		},
		{
			name:   "infra start",
			inject: func(h *hub) { h.rt.startErr = errInjected },
			clear:  func(h *hub) { h.rt.startErr = nil },
		},
		{
			name:   "infra start whose reply is lost",
			inject: func(h *hub) { h.rt.startErr, h.rt.startRuns = errInjected, true },
			clear:  func(h *hub) { h.rt.startErr, h.rt.startRuns = nil, false },
		},
		{
			name:   "NRI RunPodSandbox",
			inject: func(h *hub) { h.nri.fail["RunPodSandbox"] = errInjected },
			clear:  func(h *hub) { delete(h.nri.fail, "RunPodSandbox") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			h.rt.mu.Lock()
			tc.inject(h)
			h.rt.mu.Unlock()
			_, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")})
			if !errors.Is(err, errInjected) || classify(err) != codes.Unavailable {
				t.Fatalf("RunPodSandbox: %v (%v); want the injected error, Unavailable", err, classify(err))
			}
			if left := h.leftovers(t); len(left) > 0 {
				t.Errorf("left after the failed RunPodSandbox: %q", left)
			}
			if l, _ := h.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{}); len(l.GetItems()) > 0 {
				t.Errorf("ListPodSandbox shows %d pods", len(l.GetItems()))
			}
			h.rt.mu.Lock()
			tc.clear(h)
			h.rt.mu.Unlock()
			id := h.runPod(t, "web")
			if left := h.leftovers(t, id); len(left) > 0 {
				t.Errorf("left beside the retried pod: %q", left)
			}
		})
	}
}

// TestCreateContainerRollsBack does the same for CreateContainer.
func TestCreateContainerRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(h *hub)
		clear  func(h *hub)
	}{
		{
			name:   "rootfs",
			inject: func(h *hub) { h.images.prepareErr = errInjected },
			clear:  func(h *hub) { h.images.prepareErr = nil },
		},
		{
			name:   "runtime create",
			inject: func(h *hub) { h.rt.createErr = errInjected },
			clear:  func(h *hub) { h.rt.createErr = nil },
		},
		{
			name:   "NRI CreateContainer",
			inject: func(h *hub) { h.nri.fail["CreateContainer"] = errInjected },
			clear:  func(h *hub) { delete(h.nri.fail, "CreateContainer") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			pod := h.runPod(t, "web")
			h.rt.mu.Lock()
			h.images.mu.Lock()
			tc.inject(h)
			h.images.mu.Unlock()
			h.rt.mu.Unlock()
			_, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{
				PodSandboxId: pod, Config: ctrConfig("app"), SandboxConfig: podConfig("web"),
			})
			if !errors.Is(err, errInjected) || classify(err) != codes.Unavailable {
				t.Fatalf("CreateContainer: %v (%v); want the injected error, Unavailable", err, classify(err))
			}
			if left := h.leftovers(t, pod); len(left) > 0 {
				t.Errorf("left after the failed CreateContainer: %q", left)
			}
			if l, _ := h.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{}); len(l.GetContainers()) > 0 {
				t.Errorf("ListContainers shows %d containers", len(l.GetContainers()))
			}
			h.rt.mu.Lock()
			h.images.mu.Lock()
			tc.clear(h)
			h.images.mu.Unlock()
			h.rt.mu.Unlock()
			id := h.create(t, pod, "app")
			if left := h.leftovers(t, pod, id); len(left) > 0 {
				t.Errorf("left beside the retried container: %q", left)
			}
		})
	}
}

// TestStartContainerFailure: a start the runtime refuses is an error with
// its class, and the container is not reported running.
func TestStartContainerFailure(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")
	h.rt.mu.Lock()
	h.rt.startErr = errInjected
	h.rt.mu.Unlock()
	_, err := h.StartContainer(t.Context(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if !errors.Is(err, errInjected) || classify(err) != codes.Unavailable {
		t.Fatalf("StartContainer: %v; want the injected error", err)
	}
	st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("a container whose start failed is reported running")
	}
}

// TestHalfMadeRecordsAreUndone seeds the records a crind that died in the
// middle of RunPodSandbox and CreateContainer leaves, restarts the hub and
// checks that they are undone, runtime containers and names included.
func TestHalfMadeRecordsAreUndone(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "web")
	id := h.create(t, pod, "app")

	// A half-made pod and a half-made container, as if crind had died
	// right after writing them and creating their runtime containers.
	st := h.opts.Store
	sbs, _ := st.Sandboxes()
	half := *sbs[0]
	half.ID, half.Name, half.State = "halfpod0000", "half_default_half-uid_0", store.SandboxCreating
	if err := st.Reserve(store.KindSandbox, half.Name, half.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSandbox(&half); err != nil {
		t.Fatal(err)
	}
	cs, _ := st.Containers()
	halfCtr := *cs[0]
	halfCtr.ID, halfCtr.Name, halfCtr.State = "halfctr0000", "half_app", store.ContainerCreating
	if err := st.Reserve(store.KindContainer, halfCtr.Name, halfCtr.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.PutContainer(&halfCtr); err != nil {
		t.Fatal(err)
	}
	h.rt.mu.Lock()
	h.rt.ctrs[half.ID] = &fakeCtr{exit: make(chan struct{})}
	h.rt.ctrs[halfCtr.ID] = &fakeCtr{exit: make(chan struct{})}
	h.rt.mu.Unlock()

	h.start(t, false)
	if left := h.leftovers(t, pod, id); len(left) > 0 {
		t.Errorf("left after recovery: %q", left)
	}
	if _, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id}); err != nil {
		t.Errorf("the whole container is gone too: %v", err)
	}
}

// TestRPCCodes checks the code of each RPC's refusals on the hub: an
// empty id is InvalidArgument, an unknown one NotFound, stop and remove of
// what is gone succeed (the CRI asks for that), a name in use is
// AlreadyExists, and log reopening of a container that is not running is
// FailedPrecondition.
func TestRPCCodes(t *testing.T) {
	h := newHub(t)
	// With a streaming server, so Exec, Attach and PortForward look at
	// their ids (without one they are Unimplemented).
	h.opts.StreamAddress = "127.0.0.1:0"
	h.start(t, true)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	created := h.create(t, pod, "created")
	code := func(_ any, err error) codes.Code {
		if err == nil {
			return codes.OK
		}
		return classify(err)
	}
	// Calls that change or give access take only full ids: an unknown one
	// is NotFound (or success, for stop and remove).
	unknown := strings.Repeat("0f", 32)
	for _, tc := range []struct {
		name string
		got  codes.Code
		want codes.Code
	}{
		{"PodSandboxStatus empty", code(h.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{})), codes.InvalidArgument},
		{"PodSandboxStatus unknown", code(h.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nope"})), codes.NotFound},
		{"ContainerStatus empty", code(h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{})), codes.InvalidArgument},
		{"ContainerStatus unknown", code(h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})), codes.NotFound},
		{"StartContainer unknown", code(h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: unknown})), codes.NotFound},
		{"StopContainer unknown", code(h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: unknown})), codes.OK},
		{"RemoveContainer unknown", code(h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: unknown})), codes.OK},
		{"StopPodSandbox unknown", code(h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: unknown})), codes.OK},
		{"RemovePodSandbox unknown", code(h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: unknown})), codes.OK},
		{"RunPodSandbox same name", code(h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")})), codes.AlreadyExists},
		{"CreateContainer same name", code(h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("created"), SandboxConfig: podConfig("web")})), codes.AlreadyExists},
		{"CreateContainer unknown pod", code(h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: unknown, Config: ctrConfig("x"), SandboxConfig: podConfig("web")})), codes.NotFound},
		{"CreateContainer no config", code(h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod})), codes.InvalidArgument},
		{"RunPodSandbox unknown handler", code(h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("other"), RuntimeHandler: "nope"})), codes.InvalidArgument},
		{"ReopenContainerLog not running", code(h.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: created})), codes.FailedPrecondition},
		{"ExecSync not running", code(h.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: created, Cmd: []string{"true"}})), codes.FailedPrecondition},
		{"ContainerStats empty", code(h.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{})), codes.InvalidArgument},
		{"ContainerStats unknown", code(h.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: "nope"})), codes.NotFound},
		{"PodSandboxStats empty", code(h.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{})), codes.InvalidArgument},
		{"PodSandboxStats unknown", code(h.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: "nope"})), codes.NotFound},
		{"UpdateContainerResources empty", code(h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{})), codes.InvalidArgument},
		{"UpdateContainerResources unknown", code(h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: unknown, Linux: &runtimeapi.LinuxContainerResources{}})), codes.NotFound},
		{"UpdatePodSandboxResources unknown", code(h.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: unknown})), codes.NotFound},
		{"ReopenContainerLog unknown", code(h.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: unknown})), codes.NotFound},
		{"ExecSync empty", code(h.ExecSync(ctx, &runtimeapi.ExecSyncRequest{Cmd: []string{"true"}})), codes.InvalidArgument},
		{"ExecSync unknown", code(h.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: unknown, Cmd: []string{"true"}})), codes.NotFound},
		{"ExecSync no command", code(h.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: created})), codes.InvalidArgument},
		{"Exec unknown", code(h.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: unknown, Cmd: []string{"sh"}, Stdout: true})), codes.NotFound},
		{"Attach unknown", code(h.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: unknown, Stdout: true})), codes.NotFound},
		{"PortForward unknown", code(h.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: unknown, Port: []int32{80}})), codes.NotFound},
		{"CheckpointContainer unknown", code(h.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: unknown, Location: "/tmp/x.tar"})), codes.NotFound},
		{"ImageStatus empty", code(h.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{})), codes.InvalidArgument},
		{"PullImage empty", code(h.PullImage(ctx, &runtimeapi.PullImageRequest{})), codes.InvalidArgument},
		{"RemoveImage empty", code(h.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{})), codes.InvalidArgument},
		{"StartContainer twice", func() codes.Code {
			h.startCtr(t, created)
			return code(h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created}))
		}(), codes.FailedPrecondition},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Stop and remove twice: the second of each succeeds and changes
	// nothing.
	for range 2 {
		if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
	}
	for range 2 {
		if _, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatalf("RemovePodSandbox: %v", err)
		}
	}
	if left := h.leftovers(t); len(left) > 0 {
		t.Errorf("left after the pod was removed: %q", left)
	}
}
