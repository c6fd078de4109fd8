package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/nri"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/test/poll"
)

// fakeRuntime keeps containers in memory; a signal ends the process.
// The fields after pid are set by tests under mu.
type fakeRuntime struct {
	mu   sync.Mutex
	ctrs map[string]*fakeCtr
	pid  int

	// block, when set, makes Start and Update wait until it is closed;
	// each waiting call first sends "start ID" or "update ID" to blocked.
	block   chan struct{}
	blocked chan string
	// startErr makes Start fail; with startRuns the process starts anyway
	// (as when the reply is lost).
	startErr  error
	startRuns bool
	// ignoreTerm makes the process ignore SIGTERM.
	ignoreTerm bool
	// onDelete is called for each Delete.
	onDelete func(id string)
	// deleteFails makes that many Deletes fail (as when runc is killed).
	deleteFails int
	// createErr makes Create fail.
	createErr error
	// withoutInfra offers the podsWithoutInfra capability, as the oci
	// backend does; unset, every pod gets an infra container.
	withoutInfra bool
	// podShims are the pods whose shim runs (runtime.PodShims, see
	// podshim_test.go), with the error StartPodShim gives, if any.
	podShims     map[string]bool
	podShimErr   error
	podShimStart int
}

func (f *fakeRuntime) PodsWithoutInfra() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.withoutInfra
}

// wait blocks while the test holds the runtime's calls (see block).
func (f *fakeRuntime) wait(op, id string) {
	f.mu.Lock()
	b, bl := f.block, f.blocked
	f.mu.Unlock()
	if b == nil {
		return
	}
	if bl != nil {
		bl <- op + " " + id
	}
	<-b
}

type fakeCtr struct {
	st   runtime.Status
	exit chan struct{}
	res  *specs.LinuxResources
	pod  string // CreateRequest.PodID
}

var _ runtime.Runtime = (*fakeRuntime)(nil)

func newFakeRuntime() *fakeRuntime { return &fakeRuntime{ctrs: map[string]*fakeCtr{}, pid: 1000} }

func (f *fakeRuntime) get(id string) (*fakeCtr, error) {
	c, ok := f.ctrs[id]
	if !ok {
		return nil, fmt.Errorf("fake container %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

func (f *fakeRuntime) Create(ctx context.Context, req runtime.CreateRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return f.createErr
	}
	c := &fakeCtr{st: runtime.Status{State: runtime.StateCreated}, exit: make(chan struct{})}
	if req.Spec != nil {
		c.pod = req.PodID
	}
	f.ctrs[req.ID] = c
	return nil
}

func (f *fakeRuntime) Start(ctx context.Context, id string) (int, error) {
	f.wait("start", id)
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.get(id)
	if err != nil {
		return 0, err
	}
	if f.startErr != nil && !f.startRuns {
		return 0, f.startErr
	}
	if c.st.State != runtime.StateCreated {
		return 0, fmt.Errorf("fake container %s is %s: %w", id, c.st.State, errdefs.ErrFailedPrecondition)
	}
	f.pid++
	c.st.State, c.st.Pid, c.st.StartedAt = runtime.StateRunning, f.pid, time.Now()
	if f.startErr != nil {
		return 0, f.startErr
	}
	return f.pid, nil
}

// exit ends a container's process with code, as if it exited by itself.
func (f *fakeRuntime) exit(id string, code int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, err := f.get(id); err == nil && c.st.State != runtime.StateStopped {
		c.st.State, c.st.ExitCode, c.st.FinishedAt = runtime.StateStopped, code, time.Now()
		close(c.exit)
	}
}

func (f *fakeRuntime) Signal(ctx context.Context, id string, sig syscall.Signal, o runtime.SignalOptions) error {
	f.mu.Lock()
	_, err := f.get(id)
	ignore := sig == syscall.SIGTERM && f.ignoreTerm
	f.mu.Unlock()
	if err != nil || ignore {
		return err
	}
	f.exit(id, 128+int32(sig))
	return nil
}

func (f *fakeRuntime) Status(ctx context.Context, id string) (runtime.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.get(id)
	if err != nil {
		return runtime.Status{}, err
	}
	return c.st, nil
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	f.mu.Lock()
	c, err := f.get(id)
	f.mu.Unlock()
	if err != nil {
		return runtime.Status{}, err
	}
	select {
	case <-c.exit:
	case <-ctx.Done():
		return runtime.Status{}, ctx.Err()
	}
	return f.Status(ctx, id)
}

func (f *fakeRuntime) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deleteFails > 0 {
		f.deleteFails--
		return fmt.Errorf("fake runtime delete %s: signal: killed", id)
	}
	delete(f.ctrs, id)
	if f.onDelete != nil {
		f.onDelete(id)
	}
	return nil
}

func (f *fakeRuntime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	f.wait("update", id)
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.get(id)
	if err != nil {
		return err
	}
	c.res = res
	return nil
}

func (f *fakeRuntime) Exec(context.Context, string, runtime.ExecRequest) (runtime.ExecResult, error) {
	return runtime.ExecResult{}, errdefs.ErrNotImplemented
}
func (f *fakeRuntime) ReopenLog(context.Context, string) error { return nil }
func (f *fakeRuntime) List(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.ctrs {
		ids = append(ids, id)
	}
	return ids, nil
}
func (f *fakeRuntime) Features(context.Context) (*features.Features, error) { return nil, nil }

// fakeImages serves one image and makes empty rootfs dirs.
type fakeImages struct {
	dir string
	mu  sync.Mutex
	// rootfs holds the prepared, not released, container rootfs dirs.
	rootfs map[string]bool
	// missing is an image ref PrepareVolume does not find.
	missing string
	// prepareErr makes PrepareRootfs fail.
	prepareErr error
}

var testImage = &image.Image{
	ID:          "sha256:c0nf19",
	RepoTags:    []string{"docker.io/library/busybox:latest"},
	RepoDigests: []string{"docker.io/library/busybox@sha256:d19e57"},
	Config:      image.RuntimeConfig{Cmd: []string{"sh"}},
}

func (f *fakeImages) Pull(context.Context, string, *image.Auth) (*image.Image, error) {
	return testImage, nil
}
func (f *fakeImages) Get(ref string) (*image.Image, error) {
	if ref != "" && ref == f.missing {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return testImage, nil
}
func (f *fakeImages) List() []*image.Image                 { return []*image.Image{testImage} }
func (f *fakeImages) Remove(context.Context, string) error { return nil }
func (f *fakeImages) FsInfo() (image.FsUsage, error)       { return image.FsUsage{}, nil }
func (f *fakeImages) Rootfs(_ context.Context, id string) (string, error) {
	return filepath.Join(f.dir, id), nil
}

func (f *fakeImages) PrepareRootfs(_ context.Context, id, _ string) (string, error) {
	f.mu.Lock()
	perr := f.prepareErr
	f.mu.Unlock()
	if perr != nil {
		return "", perr
	}
	p := filepath.Join(f.dir, id)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", err
	}
	f.mu.Lock()
	f.rootfs[id] = true
	f.mu.Unlock()
	return p, nil
}

// PrepareVolume makes the volume an empty dir beside the rootfs.
func (f *fakeImages) RootfsDiff(context.Context, string, io.Writer, []string) error {
	return errors.New("fake images keep no writable layer")
}

// ApplyRootfsDiff copies the diff beside the rootfs, as rootfs-diff.tar.
func (f *fakeImages) ApplyRootfsDiff(_ context.Context, id string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(f.dir, id+"-rootfs-diff.tar"), data, 0o600)
}

func (f *fakeImages) PrepareVolume(_ context.Context, id, name, ref string) (*image.Volume, error) {
	if ref == f.missing {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	p := filepath.Join(f.dir, id+"-volumes", name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.rootfs[id] = true
	f.mu.Unlock()
	return &image.Volume{Path: p, Image: testImage}, nil
}

func (f *fakeImages) ReleaseRootfs(_ context.Context, id string) error {
	f.mu.Lock()
	delete(f.rootfs, id)
	f.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(f.dir, id+"-volumes")); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(f.dir, id))
}

// RootfsOwners lists the containers with a prepared rootfs.
func (f *fakeImages) RootfsOwners() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.rootfs))
	for id := range f.rootfs {
		ids = append(ids, id)
	}
	return ids, nil
}

type fakeNetwork struct{}

func (fakeNetwork) Status() error { return nil }
func (fakeNetwork) Setup(context.Context, cni.Pod) (*cni.Result, error) {
	return nil, errdefs.ErrNotImplemented
}
func (fakeNetwork) Teardown(context.Context, cni.Pod) error { return nil }
func (fakeNetwork) SetPodCIDR(string) error                 { return nil }

// fakeNRI records events like a plugin that subscribed to all of them.
// Events of one pod are serialized, as the adaptation does, so a hub
// that waits for an event from inside another of the same pod deadlocks
// here too.
type fakeNRI struct {
	mu     sync.Mutex
	events []string
	pods   map[string]*sync.Mutex

	// fail makes the named event return this error.
	fail map[string]error
	// claim, when set, fills the owners CreateContainer returns
	// (with an empty adjustment).
	claim func(o *api.OwningPlugins, id string)
	// during runs inside the named event, as a plugin's handler would.
	during map[string]func(pod *api.PodSandbox, ctr *api.Container)
	// updates is what UpdateContainer and StopContainer return.
	updates []*api.ContainerUpdate
	// createUpdates is what CreateContainer returns as updates of
	// other containers (claim may fill their owners).
	createUpdates []*api.ContainerUpdate
	// seen keeps the last container view each event carried.
	seen map[string]*api.Container
}

func newFakeNRI() *fakeNRI {
	return &fakeNRI{pods: map[string]*sync.Mutex{}, fail: map[string]error{},
		during: map[string]func(*api.PodSandbox, *api.Container){}, seen: map[string]*api.Container{}}
}

func (f *fakeNRI) event(name string, pod *api.PodSandbox, ctr *api.Container) error {
	f.mu.Lock()
	m := f.pods[pod.GetId()]
	if m == nil {
		m = &sync.Mutex{}
		f.pods[pod.GetId()] = m
	}
	f.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	f.mu.Lock()
	rec := name + " " + short(pod.GetId())
	if ctr != nil {
		rec = name + " " + ctr.GetName()
		f.seen[name] = ctr
	}
	f.events = append(f.events, rec)
	err, fn := f.fail[name], f.during[name]
	f.mu.Unlock()
	if fn != nil {
		fn(pod, ctr)
	}
	return err
}

func short(id string) string {
	if len(id) > 6 {
		return id[:6]
	}
	return id
}

// take returns the events so far and forgets them.
func (f *fakeNRI) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.events
	f.events = nil
	return ev
}

func (f *fakeNRI) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return f.event("RunPodSandbox", pod, nil)
}
func (f *fakeNRI) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	return f.event("UpdatePodSandbox", pod, nil)
}
func (f *fakeNRI) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return f.event("PostUpdatePodSandbox", pod, nil)
}
func (f *fakeNRI) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return f.event("StopPodSandbox", pod, nil)
}
func (f *fakeNRI) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return f.event("RemovePodSandbox", pod, nil)
}
func (f *fakeNRI) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*nri.CreateResult, error) {
	if err := f.event("CreateContainer", pod, ctr); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &nri.CreateResult{Adjust: &api.ContainerAdjustment{}, Owners: api.NewOwningPlugins(), Update: f.createUpdates}
	if f.claim != nil {
		f.claim(res.Owners, ctr.GetId())
	}
	return res, nil
}
func (f *fakeNRI) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return f.event("PostCreateContainer", pod, ctr)
}
func (f *fakeNRI) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return f.event("StartContainer", pod, ctr)
}
func (f *fakeNRI) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return f.event("PostStartContainer", pod, ctr)
}
func (f *fakeNRI) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	err := f.event("UpdateContainer", pod, ctr)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.updates, err
}
func (f *fakeNRI) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return f.event("PostUpdateContainer", pod, ctr)
}
func (f *fakeNRI) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	err := f.event("StopContainer", pod, ctr)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.updates, err
}
func (f *fakeNRI) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return f.event("RemoveContainer", pod, ctr)
}

// hub is a Service on fakes, with its store path so a test can restart it.
type hub struct {
	*Service
	rt     *fakeRuntime
	images *fakeImages
	nri    *fakeNRI
	opts   Options
}

func newHub(t *testing.T) *hub {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "crin.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &hub{rt: newFakeRuntime(), images: &fakeImages{dir: filepath.Join(dir, "rootfs"), rootfs: map[string]bool{}}}
	// A cgroup v1 layout with one hierarchy, as /sys/fs/cgroup would be.
	if err := os.MkdirAll(filepath.Join(dir, "cgroup", "memory"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.opts = Options{
		Store:          st,
		Images:         h.images,
		Network:        fakeNetwork{},
		Runtimes:       map[string]runtime.Runtime{"runc": h.rt},
		DefaultRuntime: "runc",
		RootDir:        filepath.Join(dir, "root"),
		NetNSDir:       filepath.Join(dir, "netns"),
		PauseRoot:      filepath.Join(dir, "pause"),
		PauseBinary:    "/pause",
		CgroupParent:   "/crin",
		Pinner:         fakePinner{},
		CgroupFS:       filepath.Join(dir, "cgroup"),
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	h.start(t, true)
	return h
}

// start (re)creates the Service on the same store and runtime, as a
// crind restart does, attaching a fresh fake NRI when withNRI.
func (h *hub) start(t *testing.T, withNRI bool) {
	t.Helper()
	if h.Service != nil {
		h.Close()
	}
	svc, err := New(t.Context(), h.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	h.Service = svc
	h.nri = nil
	if withNRI {
		h.nri = newFakeNRI()
		svc.attach(t.Context(), h.nri)
	}
}

func podConfig(name string) *runtimeapi.PodSandboxConfig {
	node := runtimeapi.NamespaceMode_NODE
	return &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Labels:      map[string]string{"app": name},
		Annotations: map[string]string{"note": "pod " + name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: node, Ipc: node},
			},
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 1 << 30},
		},
	}
}

func (h *hub) runPod(t *testing.T, name string) string {
	t.Helper()
	resp, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: podConfig(name)})
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", name, err)
	}
	return resp.PodSandboxId
}

func ctrConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name},
		Image:       &runtimeapi.ImageSpec{Image: "busybox"},
		Command:     []string{"sleep", "60"},
		Labels:      map[string]string{"ctr": name},
		Annotations: map[string]string{"note": "ctr " + name},
	}
}

func (h *hub) create(t *testing.T, pod, name string) string {
	t.Helper()
	resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, Config: ctrConfig(name), SandboxConfig: podConfig("p"),
	})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", name, err)
	}
	return resp.ContainerId
}

func (h *hub) startCtr(t *testing.T, id string) {
	t.Helper()
	if _, err := h.StartContainer(t.Context(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
}

// waitFor waits until cond holds (poll.Until, with a deadline a loaded
// machine meets).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, what, func() (bool, string) { return cond(), "" })
}

// fakePinner "pins" a namespace as an empty file (unit tests run without
// the privilege to bind-mount).
type fakePinner struct{}

func (fakePinner) Pin(dir string, pid int, kinds []string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for _, k := range kinds {
		paths[k] = filepath.Join(dir, k)
		if err := os.WriteFile(paths[k], nil, 0o444); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

func (f fakePinner) New(dir string, kinds []string, _ string) (map[string]string, error) {
	return f.Pin(dir, 0, kinds)
}

func (fakePinner) Pinned(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (fakePinner) Unpin(dir string) error { return os.RemoveAll(dir) }

// NewNetNS "pins" a network namespace as an empty file, as podenv's
// bind-mount pinner would, refusing an existing one as it does.
func (fakePinner) NewNetNS(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("new netns %s: %w", p, errdefs.ErrAlreadyExists)
	}
	if err != nil {
		return "", err
	}
	return p, f.Close()
}

func (fakePinner) RemoveNetNS(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
