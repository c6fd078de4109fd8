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

// ckptRuntime is a fakeRuntime that can checkpoint: it remembers what it
// was asked to restore and to thaw.
type ckptRuntime struct {
	*fakeRuntime
	mu       sync.Mutex
	restores map[string]string // container id -> CreateRequest.RestoreFrom
	thawed   []string
	// calls lists "freeze ID", "checkpoint ID" (with " frozen" when the
	// caller froze it) and "thaw ID", in order.
	calls []string
	// dumpErr, when set, fails the checkpoint of the container it names.
	dumpErr map[string]error
	// dumps, when set, makes Checkpoint write CRIU's inventory as a
	// dump does, instead of failing.
	dumps bool
}

func (c *ckptRuntime) Create(ctx context.Context, req runtime.CreateRequest) error {
	c.mu.Lock()
	c.restores[req.ID] = req.RestoreFrom
	c.mu.Unlock()
	return c.fakeRuntime.Create(ctx, req)
}

func (c *ckptRuntime) Checkpoint(_ context.Context, id string, req runtime.CheckpointRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "checkpoint "+id+map[bool]string{true: " frozen"}[req.Frozen])
	if !c.dumps {
		return errors.New("the fake does not dump")
	}
	if err := c.dumpErr[id]; err != nil {
		return err
	}
	if err := os.MkdirAll(req.ImagePath, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(req.ImagePath, checkpoint.InventoryFile), []byte(id), 0o600)
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
	h.criu = &criuProbe{
		look: func(string) (string, error) { return "/usr/sbin/criu", nil },
		run:  func(context.Context, string) ([]byte, error) { return nil, nil },
	}
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

// writeTestArchive writes a checkpoint archive whose config names image,
// with CRIU's inventory when images is set.
func writeTestArchive(t *testing.T, image string, images bool) string {
	t.Helper()
	staging := t.TempDir()
	if err := checkpoint.WriteConfig(staging, checkpoint.ContainerConfig{ID: "old", Name: "c", RootfsImageRef: image, RootfsImageName: image}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(staging, checkpoint.ImagesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if images {
		if err := os.WriteFile(filepath.Join(staging, checkpoint.ImagesDir, checkpoint.InventoryFile), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
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

// TestRestoreRefusals: each archive CreateContainer cannot restore from is
// refused with the right code, naming the image field, and leaves nothing
// (no record, no unpacked dir).
func TestRestoreRefusals(t *testing.T) {
	h, _ := restoreHub(t)
	pod := h.runPod(t, "p")
	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	if err := os.WriteFile(garbage, []byte("not a tar at all, not even close"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.images.missing = "sha256:gone"
	for _, tc := range []struct {
		name, image string
		is          func(error) bool
		want        string
	}{
		{"missing file", filepath.Join(t.TempDir(), "none.tar"), errdefs.IsNotFound, "no such checkpoint archive"},
		{"a directory", t.TempDir(), errdefs.IsInvalidArgument, "not a regular file"},
		{"not a tar", garbage, errdefs.IsInvalidArgument, "unpack the checkpoint"},
		{"no CRIU images", writeTestArchive(t, testImage.ID, false), errdefs.IsInvalidArgument, "no CRIU images"},
		{"image not here", writeTestArchive(t, "sha256:gone", true), errdefs.IsFailedPrecondition, "pull it first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctrConfig("r")
			cfg.Image = &runtimeapi.ImageSpec{Image: tc.image}
			_, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")})
			if err == nil || !tc.is(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "config.image.image") {
				t.Fatalf("CreateContainer from %s: %v; want %q naming config.image.image", tc.name, err, tc.want)
			}
			if ents, _ := os.ReadDir(filepath.Join(h.opts.RootDir, "restore")); len(ents) > 0 {
				t.Errorf("a refused restore left %d unpacked dirs", len(ents))
			}
			if cs, _ := h.opts.Store.Containers(); len(cs) > 0 {
				t.Errorf("a refused restore left %d records", len(cs))
			}
		})
	}

	// Off, an archive path is refused before the file is looked at.
	h.opts.RestoreArchives = false
	h.start(t, false)
	cfg := ctrConfig("r")
	cfg.Image = &runtimeapi.ImageSpec{Image: garbage}
	_, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "restore_from_archives") {
		t.Errorf("CreateContainer from an archive with restoring off: %v", err)
	}
}

// TestRestoreCreates: a good archive gives a created container whose
// runtime is told to restore from the unpacked CRIU images, whose
// writable layer got the diff, and whose unpacked archive goes with it.
func TestRestoreCreates(t *testing.T) {
	h, rt := restoreHub(t)
	pod := h.runPod(t, "p")
	cfg := ctrConfig("r")
	cfg.Image = &runtimeapi.ImageSpec{Image: writeTestArchive(t, testImage.ID, true)}
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
