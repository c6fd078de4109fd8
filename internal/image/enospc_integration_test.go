//go:build integration

package image

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/crin-dev/crin/internal/image/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// TestPullOnFullDiskIsResourceExhausted pulls onto a 512 KiB tmpfs: the
// layer does not fit, and the pull fails with ResourceExhausted (it used to
// be Unknown) leaving no partial download.
func TestPullOnFullDiskIsResourceExhausted(t *testing.T) {
	needRoot(t)
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "app:v1", imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.NoiseFile("noise", 1<<20))))
	root := filepath.Join(t.TempDir(), "root")
	if err := unix.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "size=512k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	s := newService(t, Config{Root: root})
	_, err := s.Pull(ctxT(t), host+"/app:v1", nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("pull onto a full disk: %v; want ErrResourceExhausted", err)
	}
	if p := partialBlobs(t, root); len(p) != 0 {
		t.Errorf("partial downloads left: %v", p)
	}
}
