//go:build integration

package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

func TestVolumeMountsReadOnlyView(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	img := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.Dir("data", 0o755), imagetest.File("data/a", "one", 0o644), imagetest.File("gone", "x", 0o644)),
		imagetest.Layer(t, imagetest.File("data/b", "two", 0o644), imagetest.Whiteout("", "gone")),
	)
	imagetest.Push(t, host, "vol:v1", img)
	s := newService(t, Config{})
	ctx := ctxT(t)
	pulled, err := s.Pull(ctx, host+"/vol:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrepareRootfs(ctx, "c1", pulled.ID); err != nil {
		t.Fatal(err)
	}
	vol, err := s.PrepareVolume(ctx, "c1", "0", host+"/vol:v1")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(s.root, "containers", "c1", "volumes", "0"); vol.Path != want || vol.Image.ID != pulled.ID {
		t.Fatalf("volume %s of %s, want %s of %s", vol.Path, vol.Image.ID, want, pulled.ID)
	}
	for f, want := range map[string]string{"data/a": "one", "data/b": "two"} {
		if b, err := os.ReadFile(filepath.Join(vol.Path, f)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", f, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(vol.Path, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("whited-out file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(vol.Path, "data/new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write into the view: %v, want EROFS", err)
	}
	// Idempotent; another image under the same name is refused.
	if again, err := s.PrepareVolume(ctx, "c1", "0", pulled.ID); err != nil || again.Path != vol.Path {
		t.Errorf("second PrepareVolume: %v, %v", again, err)
	}
	imagetest.Push(t, host, "other:v1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("x", "x", 0o644))))
	if _, err := s.Pull(ctx, host+"/other:v1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrepareVolume(ctx, "c1", "0", host+"/other:v1"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("PrepareVolume of another image under the same name: %v, want AlreadyExists", err)
	}
	sub, err := ResolveSubPath(vol.Path, "data")
	if err != nil || sub != filepath.Join(vol.Path, "data") {
		t.Errorf("ResolveSubPath(data) = %s, %v", sub, err)
	}

	// Unmounted (as after a reboot): Rootfs mounts the volume again.
	if err := unix.Unmount(vol.Path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rootfs(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(vol.Path, "data/a")); err != nil || string(b) != "one" {
		t.Errorf("after remount: data/a = %q, %v", b, err)
	}

	if err := s.Remove(ctx, pulled.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Remove of the mounted image: %v, want FailedPrecondition", err)
	}
	if err := s.ReleaseRootfs(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), filepath.Join(s.root, "containers", "c1")) {
		t.Errorf("still mounted after ReleaseRootfs:\n%s", m)
	}
	if _, err := os.Stat(filepath.Join(s.root, "containers", "c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("container dir after ReleaseRootfs: %v", err)
	}
	if err := s.Remove(ctx, pulled.ID); err != nil {
		t.Fatalf("Remove after release: %v", err)
	}
	if n := len(layerDirs(t, s.root)); n != 1 {
		t.Errorf("%d layer dirs left, want other's 1", n)
	}
}

// TestVolumeManyLayers mounts a view whose option string only fits with
// paths relative to Root.
func TestVolumeManyLayers(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	var layers []v1.Layer
	for i := range 70 {
		layers = append(layers, imagetest.Layer(t, imagetest.File("f"+strings.Repeat("x", i), "x", 0o644)))
	}
	imagetest.Push(t, host, "many:v1", imagetest.Image(t, v1.Config{}, layers...))
	s := newService(t, Config{Root: filepath.Join(t.TempDir(), strings.Repeat("r", 60))})
	ctx := ctxT(t)
	if _, err := s.Pull(ctx, host+"/many:v1", nil); err != nil {
		t.Fatal(err)
	}
	vol, err := s.PrepareVolume(ctx, "c1", "0", host+"/many:v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.ReleaseRootfs(ctx, "c1") })
	if _, err := os.Stat(filepath.Join(vol.Path, "f"+strings.Repeat("x", 69))); err != nil {
		t.Error(err)
	}
}
