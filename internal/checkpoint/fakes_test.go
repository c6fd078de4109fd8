package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
)

// testImage is the image the fake hub's containers run ("busybox").
var testImage = &image.Image{ID: "sha256:c0nf19", RepoTags: []string{"docker.io/library/busybox:latest"}}

// fakeHub is the hub as a Manager sees it: pods and containers in maps.
// Its CreateContainer does what the real hub's does for a restore: it
// asks the Manager for the image (RestoreImage) and undoes what that made
// when it fails.
type fakeHub struct {
	m  *Manager
	mu sync.Mutex
	// pods and ctrs are what the hub knows; running the containers
	// running.
	pods    map[string]Pod
	ctrs    map[string]Container
	running map[string]bool
	// runtimes are the handlers' runtimes; "" is "runc".
	runtimes map[string]runtime.Runtime
	// restores maps a created container to the dir it restores from.
	restores map[string]string
	next     int
}

func (h *fakeHub) newID(prefix string) string {
	h.next++
	return fmt.Sprintf("%s%d", prefix, h.next)
}

func (h *fakeHub) Container(id string) (Container, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.ctrs[id]
	if !ok {
		return c, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	c.Runtime = h.runtimes[cmp.Or(c.Handler, "runc")]
	return c, nil
}

func (h *fakeHub) Running(id string) (runtime.Runtime, error) {
	c, err := h.Container(id)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running[id] {
		return nil, fmt.Errorf("container %s is created, not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	return c.Runtime, nil
}

func (h *fakeHub) Pod(id string) (Pod, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.pods[id]
	if !ok {
		return p, fmt.Errorf("pod sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

func (h *fakeHub) Runtime(handler string) (runtime.Runtime, error) {
	rt, ok := h.runtimes[cmp.Or(handler, "runc")]
	if !ok {
		return nil, fmt.Errorf("runtime_handler %q: unknown runtime handler: %w", handler, errdefs.ErrInvalidArgument)
	}
	return rt, nil
}

func (h *fakeHub) RunPod(_ context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.newID("pod")
	h.pods[id] = Pod{ID: id, Handler: handler, Config: cfg}
	return id, nil
}

func (h *fakeHub) CreateContainer(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, from string) (_ string, retErr error) {
	h.mu.Lock()
	id := h.newID("ctr")
	handler := h.pods[podID].Handler
	h.mu.Unlock()
	var undo []func(context.Context) error
	defer func() {
		if retErr != nil {
			for _, f := range slices.Backward(undo) {
				_ = f(ctx)
			}
		}
	}()
	rt, err := h.Runtime(handler)
	if err != nil {
		return "", err
	}
	img, dir, err := h.m.RestoreImage(ctx, id, cfg, rt, from, func(_ string, f func(context.Context) error) { undo = append(undo, f) })
	if err != nil {
		return "", err
	}
	if err := h.m.ApplyRootfsDiff(ctx, id, dir); err != nil {
		return "", err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctrs[id] = Container{ID: id, PodID: podID, Name: cfg.GetMetadata().GetName(), Config: cfg, ImageID: img.ID, Handler: handler}
	h.restores[id] = dir
	return id, nil
}

func (h *fakeHub) StopPod(context.Context, string) error { return nil }

func (h *fakeHub) RemovePod(ctx context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pods, id)
	for cid, c := range h.ctrs {
		if c.PodID == id {
			delete(h.ctrs, cid)
			h.m.RemoveRestoreDir(ctx, cid)
		}
	}
	return nil
}

// ckptRuntime is a runtime that can checkpoint. It embeds runtime.Runtime
// for the methods a Manager never calls.
type ckptRuntime struct {
	runtime.Runtime
	mu sync.Mutex
	// calls lists "freeze ID", "checkpoint ID" (with " frozen" when the
	// caller froze it) and "thaw ID", in order.
	calls  []string
	thawed []string
	// dumps, when set, makes Checkpoint write CRIU's inventory as a
	// dump does (and run WhilePaused), instead of failing.
	dumps bool
	// dumpErr, when set, fails the checkpoint of the container it names.
	dumpErr map[string]error
}

var _ runtime.Checkpointer = (*ckptRuntime)(nil)

func (c *ckptRuntime) Checkpoint(ctx context.Context, id string, req runtime.CheckpointRequest) error {
	c.mu.Lock()
	c.calls = append(c.calls, "checkpoint "+id+map[bool]string{true: " frozen"}[req.Frozen])
	dumps, err := c.dumps, c.dumpErr[id]
	c.mu.Unlock()
	if !dumps {
		return errors.New("the fake does not dump")
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(req.ImagePath, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(req.ImagePath, InventoryFile), []byte(id), 0o600); err != nil {
		return err
	}
	return req.WhilePaused(ctx)
}

func (c *ckptRuntime) Freeze(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "freeze "+id)
	return nil
}

func (c *ckptRuntime) Engine() string { return "fakerunc" }

func (c *ckptRuntime) Thaw(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.thawed = append(c.thawed, id)
	c.calls = append(c.calls, "thaw "+id)
	return nil
}

// plainRuntime cannot checkpoint (the shim v2 backend).
type plainRuntime struct{ runtime.Runtime }

// fakeImages holds testImage; RootfsDiff writes "diff of <id>" and
// ApplyRootfsDiff keeps what it is given.
type fakeImages struct {
	mu      sync.Mutex
	exclude []string
	applied map[string]string
}

func (f *fakeImages) Get(ref string) (*image.Image, error) {
	if ref == "busybox" || ref == testImage.ID {
		return testImage, nil
	}
	return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

func (f *fakeImages) RootfsDiff(_ context.Context, id string, w io.Writer, exclude []string) error {
	f.mu.Lock()
	f.exclude = exclude
	f.mu.Unlock()
	_, err := io.WriteString(w, "diff of "+id)
	return err
}

func (f *fakeImages) ApplyRootfsDiff(_ context.Context, id string, r io.Reader) error {
	b, err := io.ReadAll(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied[id] = string(b)
	return err
}

// fakeSpecs records a spec with one bind mount for every container.
type fakeSpecs struct{}

func (fakeSpecs) ContainerSpec(string) ([]byte, error) {
	return []byte(`{"ociVersion":"1.2.0","mounts":[{"destination":"/data","type":"bind","source":"/srv"}]}`), nil
}

// criuFunc is a CRIUChecker.
type criuFunc func(context.Context) error

func (f criuFunc) Check(ctx context.Context) error { return f(ctx) }

// env is a Manager on a fake hub whose "runc" can checkpoint and whose
// "kata" cannot, with restoring on and a CRIU that works (criuErr, when
// set, is its verdict).
type env struct {
	m       *Manager
	hub     *fakeHub
	rt      *ckptRuntime
	images  *fakeImages
	root    string
	criuErr error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{rt: &ckptRuntime{}, images: &fakeImages{applied: map[string]string{}}, root: t.TempDir()}
	e.hub = &fakeHub{
		pods: map[string]Pod{}, ctrs: map[string]Container{}, running: map[string]bool{},
		runtimes: map[string]runtime.Runtime{"runc": e.rt, "kata": plainRuntime{}},
		restores: map[string]string{},
	}
	e.m = New(Config{
		RootDir: e.root, RestoreArchives: true, DefaultRuntime: "runc",
		Hub: e.hub, Images: e.images, Specs: fakeSpecs{},
		CRIU: criuFunc(func(context.Context) error { return e.criuErr }),
	})
	e.hub.m = e.m
	return e
}

// ckptPodConfig is a pod whose containers CheckpointPod takes: its own
// network, IPC and a PID namespace per container.
func ckptPodConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// ckptCtr is a container config in a PID namespace of its own, as
// kubelet asks for a pod that does not share one.
func ckptCtr(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sleep", "60"},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// addPod adds a pod the hub knows, on handler.
func (e *env) addPod(cfg *runtimeapi.PodSandboxConfig, handler string) string {
	id, _ := e.hub.RunPod(context.Background(), cfg, handler)
	return id
}

// addCtr adds a container of pod the hub knows, running when run is set.
func (e *env) addCtr(pod string, cfg *runtimeapi.ContainerConfig, run bool) string {
	h := e.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.newID("ctr")
	h.ctrs[id] = Container{
		ID: id, PodID: pod, Name: cfg.GetMetadata().GetName(), Config: cfg,
		Image: "busybox", ImageID: testImage.ID, ImageName: testImage.RepoTags[0],
		CreatedAt: time.Unix(1700000000, 0), Handler: h.pods[pod].Handler,
	}
	h.running[id] = run
	return id
}

// ckptPod adds a checkpointable pod with two running containers, a and b.
func (e *env) ckptPod() (string, []string) {
	pod := e.addPod(ckptPodConfig("p"), "")
	return pod, []string{e.addCtr(pod, ckptCtr("a"), true), e.addCtr(pod, ckptCtr("b"), true)}
}
