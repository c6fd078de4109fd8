package cri

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/runtime"
)

// internal/checkpoint's tests check what a checkpoint and a restore do,
// on a fake hub; these check that the hub wires them in: a restored
// container is created (and removed) as any other, a RestorePod that
// fails leaves no pod, the start-up sweep thaws what a checkpoint left
// frozen.

// ckptRuntime is a fakeRuntime that can checkpoint: it remembers what it
// was asked to restore and to thaw.
type ckptRuntime struct {
	*fakeRuntime
	mu       sync.Mutex
	restores map[string]string // container id -> CreateRequest.RestoreFrom
	thawed   []string
}

var _ runtime.Checkpointer = (*ckptRuntime)(nil)

func (c *ckptRuntime) Create(ctx context.Context, req runtime.CreateRequest) error {
	c.mu.Lock()
	c.restores[req.ID] = req.RestoreFrom
	c.mu.Unlock()
	return c.fakeRuntime.Create(ctx, req)
}

// Checkpoint writes CRIU's inventory; the fake images keep no writable
// layer to diff, so WhilePaused is not run.
func (c *ckptRuntime) Checkpoint(_ context.Context, _ string, req runtime.CheckpointRequest) error {
	if err := os.MkdirAll(req.ImagePath, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(req.ImagePath, checkpoint.InventoryFile), []byte("x"), 0o600)
}

func (c *ckptRuntime) Freeze(context.Context, string) error { return nil }

func (c *ckptRuntime) Engine() string { return "fakerunc" }

func (c *ckptRuntime) Thaw(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.thawed = append(c.thawed, id)
	return nil
}

// criuWorks is a CRIU that passes its check.
type criuWorks struct{}

func (criuWorks) Check(context.Context) error { return nil }

// restoreHub is a hub whose runtime can checkpoint, with restoring on and
// a CRIU that works.
func restoreHub(t *testing.T) (*hub, *ckptRuntime) {
	t.Helper()
	h := newHub(t)
	rt := &ckptRuntime{fakeRuntime: h.rt, restores: map[string]string{}}
	h.opts.Runtimes = map[string]runtime.Runtime{"runc": rt}
	h.opts.RestoreArchives = true
	h.opts.Network = newFakeCNI() // pods CheckpointPod takes have a network
	h.start(t, false)
	h.ckpt = newCheckpoints(h.Service, criuWorks{})
	// Pods with their own IPC namespace have a /dev/shm mounted: removed
	// before the temporary dirs are.
	t.Cleanup(func() {
		shms, _ := filepath.Glob(filepath.Join(h.opts.RootDir, "pods", "*", "shm"))
		for _, m := range shms {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
	return h, rt
}

// writeTestArchive writes a checkpoint archive of a container that ran
// testImage, with CRIU's inventory and a rootfs diff.
func writeTestArchive(t *testing.T) string {
	t.Helper()
	staging := t.TempDir()
	if err := checkpoint.WriteConfig(staging, checkpoint.ContainerConfig{ID: "old", Name: "c", RootfsImageRef: testImage.ID}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(staging, checkpoint.ImagesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, checkpoint.ImagesDir, checkpoint.InventoryFile), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, checkpoint.RootfsDiffFile), []byte("the diff"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ckpt.tar")
	if err := checkpoint.WriteArchive(out, staging); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestoreCreates: a good archive gives a created container whose
// runtime is told to restore from the unpacked CRIU images, whose
// writable layer got the diff, and whose unpacked archive goes with it.
func TestRestoreCreates(t *testing.T) {
	h, rt := restoreHub(t)
	pod := h.runPod(t, "p")
	cfg := ctrConfig("r")
	cfg.Image = &runtimeapi.ImageSpec{Image: writeTestArchive(t)}
	resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	dir := filepath.Join(h.opts.RootDir, "restore", id)
	rt.mu.Lock()
	got := rt.restores[id]
	rt.mu.Unlock()
	if want := filepath.Join(dir, checkpoint.ImagesDir); got != want {
		t.Errorf("runtime asked to restore from %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(h.images.dir, id+"-rootfs-diff.tar")); err != nil || string(b) != "the diff" {
		t.Errorf("the writable layer got %q (%v), want the archive's diff", b, err)
	}
	if _, err := h.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unpacked archive outlived its container: %v", err)
	}
}

// TestRestoreRefusedLeavesNothing: an archive CreateContainer cannot
// restore from leaves no record and no unpacked dir.
func TestRestoreRefusedLeavesNothing(t *testing.T) {
	h, _ := restoreHub(t)
	pod := h.runPod(t, "p")
	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	if err := os.WriteFile(garbage, []byte("not a tar at all, not even close"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := ctrConfig("r")
	cfg.Image = &runtimeapi.ImageSpec{Image: garbage}
	_, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "config.image.image") {
		t.Fatalf("CreateContainer from a file that is not a tar: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.opts.RootDir, "restore")); len(ents) > 0 {
		t.Errorf("a refused restore left %d unpacked dirs", len(ents))
	}
	if cs, _ := h.opts.Store.Containers(); len(cs) > 0 {
		t.Errorf("a refused restore left %d records", len(cs))
	}
}

// TestCheckpointLeftFrozenIsThawed: a checkpoint a crind that died left
// unfinished has its container thawed and its dir removed at start-up.
func TestCheckpointLeftFrozenIsThawed(t *testing.T) {
	h, rt := restoreHub(t)
	pod := h.runPod(t, "p")
	resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("c"), SandboxConfig: podConfig("p")})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	left := filepath.Join(h.opts.RootDir, "checkpoints", id+".123")
	if err := os.MkdirAll(filepath.Join(left, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.start(t, false)
	rt.mu.Lock()
	thawed := rt.thawed
	rt.mu.Unlock()
	if len(thawed) != 1 || thawed[0] != id {
		t.Errorf("thawed %v at start-up, want %s", thawed, id)
	}
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the unfinished checkpoint's dir is still there: %v", err)
	}
}

// ckptPodConfig is a pod whose containers CheckpointPod takes: its own
// network, IPC and a PID namespace per container.
func ckptPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	return cfg
}

// ckptCtr is ctrConfig in a PID namespace of its own, as kubelet asks
// for a pod that does not share one.
func ckptCtr(name string) *runtimeapi.ContainerConfig {
	cfg := ctrConfig(name)
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
	}}
	return cfg
}

// podCheckpoint checkpoints, through the hub, a pod of two running
// containers a and b and returns the checkpoint dir.
func podCheckpoint(t *testing.T, h *hub) string {
	t.Helper()
	resp, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: ckptPodConfig("p")})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range []string{"a", "b"} {
		c, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: ckptCtr(name)})
		if err != nil {
			t.Fatal(err)
		}
		h.startCtr(t, c.ContainerId)
		ids = append(ids, c.ContainerId)
	}
	out := t.TempDir()
	if _, err := h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: resp.PodSandboxId, OutputPath: out, ContainerIds: ids}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestorePodCreates: RestorePod through the hub runs a new pod whose
// containers are CREATED, listed in it, each to be restored from its
// checkpoint linked into crind's own restore dir.
func TestRestorePodCreates(t *testing.T) {
	h, rt := restoreHub(t)
	dir := podCheckpoint(t, h)
	resp, err := h.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{
		CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("b"), ckptCtr("a")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range resp.RestoredContainers {
		st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: rc.ContainerId})
		if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("restored %s: %v, %v; want CREATED", rc.Name, st, err)
		}
		rt.mu.Lock()
		from := rt.restores[rc.ContainerId]
		rt.mu.Unlock()
		if want := filepath.Join(h.opts.RootDir, "restore", rc.ContainerId, checkpoint.ImagesDir); from != want {
			t.Errorf("%s restores from %q, want %q", rc.Name, from, want)
		}
	}
	l, err := h.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: resp.PodSandboxId}})
	if err != nil || len(l.Containers) != 2 {
		t.Errorf("the restored pod lists %v (%v), want its two containers", l.GetContainers(), err)
	}
}

// TestRestorePodUndone: a container that cannot be made undoes the whole
// restore through the hub: no pod, no container, no restore dir is left.
func TestRestorePodUndone(t *testing.T) {
	h, _ := restoreHub(t)
	dir := podCheckpoint(t, h)
	keep := h.leftovers(t)
	m, err := checkpoint.ReadPodManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	// b's checkpoint holds a symlink, which crind does not copy.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, m.Containers[1].Dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, err = h.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("b")}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `container "b"`) {
		t.Fatalf("RestorePod of a checkpoint with a symlink: %v", err)
	}
	if got := h.leftovers(t); len(got) != len(keep) {
		t.Errorf("a failed RestorePod left %v (had %v)", got, keep)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.opts.RootDir, "restore")); len(ents) != 0 {
		t.Errorf("a failed RestorePod left %d restore dirs", len(ents))
	}
}
