package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCheckOutputPath(t *testing.T) {
	for p, ok := range map[string]bool{"": false, "rel/x.tar": false, "/abs/x.tar": true, "/a\x00b": false} {
		err := checkOutputPath("location", p)
		if (err == nil) != ok || (err != nil && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "location"))) {
			t.Errorf("checkOutputPath(%q) = %v", p, err)
		}
	}
}

// TestCheckpointContainer: the archive holds CRIU's images, the writable
// layer taken while the container was frozen (the spec's mounts left
// out), the spec with the names checkpointctl shows and config.dump; the
// runtime froze and thawed the container itself; no staging dir is left.
func TestCheckpointContainer(t *testing.T) {
	e := newEnv(t)
	e.rt.dumps = true
	pod := e.addPod(ckptPodConfig("p"), "")
	id := e.addCtr(pod, ckptCtr("c"), true)
	loc := filepath.Join(t.TempDir(), "c.tar")
	if err := e.m.CheckpointContainer(t.Context(), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: loc}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"checkpoint " + id}; !slices.Equal(e.rt.calls, want) {
		t.Errorf("runtime calls %q, want %q", e.rt.calls, want)
	}
	if !slices.Contains(e.images.exclude, "/data") || !slices.Contains(e.images.exclude, "/proc") {
		t.Errorf("the rootfs diff left out %q, want /proc, /sys, /dev and the spec's mounts", e.images.exclude)
	}
	dir := t.TempDir()
	if err := Extract(loc, dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	ck, err := ReadConfig(dir)
	if err != nil || ck.ID != id || ck.Name != "c" || ck.RootfsImageRef != testImage.ID || ck.RootfsImage != "busybox" || ck.Runtime != "runc" || ck.CreatedTime.Unix() != 1700000000 {
		t.Errorf("config.dump %+v, %v", ck, err)
	}
	spec, err := ReadSpec(dir)
	if err != nil || spec.Annotations[ckptContainerName] != "c" || spec.Annotations[ckptSandboxName] != "p" || spec.Annotations[ckptSandboxNS] != "default" {
		t.Errorf("spec.dump: %+v, %v", spec, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, RootfsDiffFile)); err != nil || string(b) != "diff of "+id {
		t.Errorf("%s: %q, %v", RootfsDiffFile, b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ImagesDir, InventoryFile)); err != nil {
		t.Errorf("no CRIU images in the archive: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.root, "checkpoints")); len(ents) != 0 {
		t.Errorf("%d staging dirs left", len(ents))
	}
}

// TestCheckpointContainerRefusals: each request CheckpointContainer cannot
// take is refused with the right code, naming why, before the runtime is
// called; a dump that fails leaves nothing at location.
func TestCheckpointContainerRefusals(t *testing.T) {
	e := newEnv(t)
	pod := e.addPod(ckptPodConfig("p"), "")
	ok := e.addCtr(pod, ckptCtr("c"), true)
	created := e.addCtr(pod, ckptCtr("created"), false)
	tty := ckptCtr("tty")
	tty.Tty = true
	onTTY := e.addCtr(pod, tty, true)
	kata := e.addPod(ckptPodConfig("k"), "kata")
	onKata := e.addCtr(kata, ckptCtr("k"), true)
	dir := t.TempDir()
	loc := filepath.Join(dir, "c.tar")
	for _, tc := range []struct {
		name string
		r    *runtimeapi.CheckpointContainerRequest
		criu error
		is   func(error) bool
		want string
	}{
		{"relative location", &runtimeapi.CheckpointContainerRequest{ContainerId: ok, Location: "c.tar"}, nil, errdefs.IsInvalidArgument, "location"},
		{"no such dir", &runtimeapi.CheckpointContainerRequest{ContainerId: ok, Location: filepath.Join(dir, "none", "c.tar")}, nil, errdefs.IsInvalidArgument, "its directory does not exist"},
		{"negative timeout", &runtimeapi.CheckpointContainerRequest{ContainerId: ok, Location: loc, Timeout: -1}, nil, errdefs.IsInvalidArgument, "timeout -1"},
		{"unknown", &runtimeapi.CheckpointContainerRequest{ContainerId: "gone", Location: loc}, nil, errdefs.IsNotFound, "gone"},
		{"not running", &runtimeapi.CheckpointContainerRequest{ContainerId: created, Location: loc}, nil, errdefs.IsFailedPrecondition, "not running"},
		{"handler", &runtimeapi.CheckpointContainerRequest{ContainerId: onKata, Location: loc}, nil, errdefs.IsFailedPrecondition, "cannot checkpoint"},
		{"terminal", &runtimeapi.CheckpointContainerRequest{ContainerId: onTTY, Location: loc}, nil, errdefs.IsFailedPrecondition, "terminal"},
		{"criu", &runtimeapi.CheckpointContainerRequest{ContainerId: ok, Location: loc}, errdefs.ErrFailedPrecondition, errdefs.IsFailedPrecondition, "checkpoint container " + ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.criuErr = tc.criu
			err := e.m.CheckpointContainer(t.Context(), tc.r)
			if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckpointContainer: %v; want %q", err, tc.want)
			}
		})
	}
	e.criuErr = nil
	release, err := e.m.dumping.claim(ok)
	if err != nil {
		t.Fatal(err)
	}
	err = e.m.CheckpointContainer(t.Context(), &runtimeapi.CheckpointContainerRequest{ContainerId: ok, Location: loc})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("CheckpointContainer of a container being checkpointed: %v", err)
	}
	release()
	if len(e.rt.calls) != 0 {
		t.Errorf("refused checkpoints called the runtime: %q", e.rt.calls)
	}
	// The fake does not dump: the checkpoint fails.
	if err := e.m.CheckpointContainer(t.Context(), &runtimeapi.CheckpointContainerRequest{ContainerId: ok, Location: loc}); err == nil {
		t.Fatal("CheckpointContainer with a failing dump succeeded")
	}
	if _, err := os.Stat(loc); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed checkpoint left %s: %v", loc, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.root, "checkpoints")); len(ents) != 0 {
		t.Errorf("%d staging dirs left", len(ents))
	}
}

// TestSweepThawsLeftFrozen: a checkpoint a crind that died left
// unfinished has its container thawed and its dir removed; a dir naming
// no container is removed too.
func TestSweepThawsLeftFrozen(t *testing.T) {
	e := newEnv(t)
	pod := e.addPod(ckptPodConfig("p"), "")
	id := e.addCtr(pod, ckptCtr("c"), true)
	for _, name := range []string{id + ".123", "gone.456"} {
		if err := os.MkdirAll(filepath.Join(e.root, "checkpoints", name, ImagesDir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.m.Sweep(t.Context())
	if !slices.Equal(e.rt.thawed, []string{id}) {
		t.Errorf("thawed %v, want %s", e.rt.thawed, id)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.root, "checkpoints")); len(ents) != 0 {
		t.Errorf("the sweep left %d unfinished checkpoints", len(ents))
	}
}
