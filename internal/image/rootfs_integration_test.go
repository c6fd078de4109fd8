//go:build integration

package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/crin-dev/crin/internal/image/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount overlays")
	}
}

func TestRootfsRunsBusybox(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	s := newService(t, Config{})
	ctx := ctxT(t)
	img, err := s.Pull(ctx, host+"/library/busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := s.PrepareRootfs(ctx, "c1", img.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.ReleaseRootfs(context.Background(), "c1") })
	if want := filepath.Join(s.root, "containers", "c1", "rootfs"); rootfs != want {
		t.Errorf("rootfs %s, want %s", rootfs, want)
	}
	out, err := exec.Command("chroot", rootfs, "/bin/sh", "-c", "echo hello > /tmp/f && cat /tmp/f && id -u app").CombinedOutput()
	if err != nil || string(out) != "hello\n1000\n" {
		t.Fatalf("run in rootfs: %q, %v", out, err)
	}
	// Writes land in the container's upper dir, not in the shared layer.
	if b, err := os.ReadFile(filepath.Join(s.root, "containers", "c1", "upper", "tmp", "f")); err != nil || string(b) != "hello\n" {
		t.Errorf("upper/tmp/f = %q, %v", b, err)
	}
	for _, d := range layerDirs(t, s.root) {
		if _, err := os.Stat(filepath.Join(s.root, "l", d, "tmp", "f")); err == nil {
			t.Errorf("container write reached layer %s", d)
		}
	}
	// Idempotent; another image for the same container is refused.
	if again, err := s.PrepareRootfs(ctx, "c1", img.ID); err != nil || again != rootfs {
		t.Errorf("second PrepareRootfs: %s, %v", again, err)
	}
	other := imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("x", "x", 0o644)))
	imagetest.Push(t, host, "other:v1", other)
	if _, err := s.Pull(ctx, host+"/other:v1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrepareRootfs(ctx, "c1", host+"/other:v1"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("PrepareRootfs with another image: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.PrepareRootfs(ctx, "c2", "nope:v1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("PrepareRootfs of an unknown image: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"../x", "a/b", "", ".hidden"} {
		if _, err := s.PrepareRootfs(ctx, bad, img.ID); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("PrepareRootfs(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}

	// The image goes, the rootfs keeps its layers.
	if err := s.Remove(ctx, img.ID); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chroot", rootfs, "/bin/true").CombinedOutput(); err != nil {
		t.Fatalf("rootfs broken after image removal: %q, %v", out, err)
	}
	if n := len(layerDirs(t, s.root)); n != 2 {
		t.Errorf("%d layer dirs, want 2 (busybox kept by the rootfs, other)", n)
	}

	// A restart finds the rootfs mounted and keeps it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newService(t, Config{Root: s.root})
	if n := len(layerDirs(t, s.root)); n != 2 {
		t.Errorf("%d layer dirs after restart, want 2", n)
	}
	got, err := s.Rootfs(ctx, "c1")
	if err != nil || got != rootfs {
		t.Fatalf("Rootfs: %s, %v", got, err)
	}
	if out, err := exec.Command("chroot", rootfs, "/bin/cat", "/tmp/f").CombinedOutput(); err != nil || string(out) != "hello\n" {
		t.Errorf("rootfs after a restart: %q, %v; want the container's file", out, err)
	}
	// The writable layer is mounted without syncs (volatile), so a
	// reboot (its mount gone) leaves it refused, with a clear error; it
	// is still released below.
	if err := unmountAll(rootfs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rootfs(ctx, "c1"); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "volatile") {
		t.Errorf("Rootfs after the mount was lost: %v, want FailedPrecondition saying volatile", err)
	}
	if _, err := s.Rootfs(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Rootfs of unknown container: %v, want ErrNotFound", err)
	}

	if err := s.ReleaseRootfs(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if m, _ := isMountpoint(rootfs); m {
		t.Errorf("%s still mounted", rootfs)
	}
	if _, err := os.Stat(filepath.Join(s.root, "containers", "c1")); !os.IsNotExist(err) {
		t.Errorf("container dir left: %v", err)
	}
	if n := len(layerDirs(t, s.root)); n != 1 {
		t.Errorf("%d layer dirs after release, want 1 (busybox's gone)", n)
	}
	if err := s.ReleaseRootfs(ctx, "c1"); err != nil {
		t.Errorf("second release: %v", err)
	}
	if _, err := s.Rootfs(ctx, "c1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Rootfs after release: %v, want ErrNotFound", err)
	}
}

func TestRootfsWhiteouts(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	img := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t,
			imagetest.File("etc/keep", "keep", 0o644),
			imagetest.File("etc/gone", "gone", 0o644),
			imagetest.File("data/old1", "1", 0o644),
			imagetest.File("data/old2", "2", 0o644),
		),
		imagetest.Layer(t,
			imagetest.Whiteout("etc", "gone"),
			imagetest.Dir("data", 0o755),
			imagetest.Opaque("data"),
			imagetest.File("data/new", "n", 0o644),
		),
	)
	imagetest.Push(t, host, "wh:v1", img)
	s := newService(t, Config{})
	ctx := ctxT(t)
	pulled, err := s.Pull(ctx, host+"/wh:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := s.PrepareRootfs(ctx, "wh", pulled.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.ReleaseRootfs(ctx, "wh")
	list := func(dir string) string {
		ents, err := os.ReadDir(filepath.Join(rootfs, dir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, ",")
	}
	if got := list("etc"); got != "keep" {
		t.Errorf("etc holds %q, want keep (gone whited out)", got)
	}
	if got := list("data"); got != "new" {
		t.Errorf("data holds %q, want new (opaque dir)", got)
	}
}

func TestRootfsManyLayersLongRoot(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	const n = 40
	var layers []v1.Layer
	for i := range n {
		layers = append(layers, imagetest.Layer(t, imagetest.File(fmt.Sprintf("layer%02d", i), fmt.Sprint(i), 0o644)))
	}
	imagetest.Push(t, host, "many:v1", imagetest.Image(t, v1.Config{}, layers...))
	// A long root makes the absolute overlay options longer than a page.
	root := filepath.Join(t.TempDir(), strings.Repeat("r", 120))
	s := newService(t, Config{Root: root})
	ctx := ctxT(t)
	img, err := s.Pull(ctx, host+"/many:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != n {
		t.Fatalf("%d layers, want %d", len(img.Layers), n)
	}
	rootfs, err := s.PrepareRootfs(ctx, strings.Repeat("c", 64), img.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.ReleaseRootfs(ctx, strings.Repeat("c", 64))
	ents, err := os.ReadDir(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != n {
		t.Errorf("rootfs has %d entries, want %d", len(ents), n)
	}
	if err := s.ReleaseRootfs(ctx, strings.Repeat("c", 64)); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseBusyRootfs(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	s := newService(t, Config{})
	ctx := ctxT(t)
	img, err := s.Pull(ctx, host+"/library/busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := s.PrepareRootfs(ctx, "busy", img.ID)
	if err != nil {
		t.Fatal(err)
	}
	// An open file keeps the mount busy: release detaches it lazily.
	f, err := os.Open(filepath.Join(rootfs, "bin", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.ReleaseRootfs(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "containers", "busy")); !os.IsNotExist(err) {
		t.Errorf("container dir left: %v", err)
	}
}
