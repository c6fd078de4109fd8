package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// writeTestArchive writes a checkpoint archive whose config names image,
// with CRIU's inventory when images is set.
func writeTestArchive(t *testing.T, image string, images bool) string {
	t.Helper()
	staging := t.TempDir()
	if err := WriteConfig(staging, ContainerConfig{ID: "old", Name: "c", RootfsImageRef: image, RootfsImageName: image}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(staging, ImagesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if images {
		if err := os.WriteFile(filepath.Join(staging, ImagesDir, InventoryFile), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, RootfsDiffFile), []byte("the diff"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ckpt.tar")
	if err := WriteArchive(out, staging); err != nil {
		t.Fatal(err)
	}
	return out
}

// restoreFrom is RestoreImage for container id from the archive at path,
// on runtime handler, its undo steps run when it fails, as the hub's
// rollback runs them.
func (e *env) restoreFrom(t *testing.T, id, path, handler string, tty bool) (string, error) {
	t.Helper()
	cfg := ckptCtr("r")
	cfg.Image = &runtimeapi.ImageSpec{Image: path}
	cfg.Tty = tty
	var undo []func(context.Context) error
	_, dir, err := e.m.RestoreImage(t.Context(), id, cfg, e.hub.runtimes[handler], "", func(_ string, f func(context.Context) error) { undo = append(undo, f) })
	if err != nil {
		for _, f := range slices.Backward(undo) {
			_ = f(t.Context())
		}
	}
	return dir, err
}

// TestRestoreRefusals: each archive CreateContainer cannot restore from is
// refused with the right code, naming the image field, and leaves no
// unpacked dir once the caller's rollback ran.
func TestRestoreRefusals(t *testing.T) {
	e := newEnv(t)
	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	if err := os.WriteFile(garbage, []byte("not a tar at all, not even close"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := writeTestArchive(t, testImage.ID, true)
	for _, tc := range []struct {
		name, image, handler string
		tty                  bool
		criu                 error
		is                   func(error) bool
		want                 string
	}{
		{"missing file", filepath.Join(t.TempDir(), "none.tar"), "runc", false, nil, errdefs.IsNotFound, "no such checkpoint archive"},
		{"a directory", t.TempDir(), "runc", false, nil, errdefs.IsInvalidArgument, "not a regular file"},
		{"not a tar", garbage, "runc", false, nil, errdefs.IsInvalidArgument, "unpack the checkpoint"},
		{"no CRIU images", writeTestArchive(t, testImage.ID, false), "runc", false, nil, errdefs.IsInvalidArgument, "no CRIU images"},
		{"image not here", writeTestArchive(t, "sha256:gone", true), "runc", false, nil, errdefs.IsFailedPrecondition, "pull it first"},
		{"handler", good, "kata", false, nil, errdefs.IsFailedPrecondition, "cannot restore"},
		{"terminal", good, "runc", true, nil, errdefs.IsFailedPrecondition, "config.tty"},
		{"criu", good, "runc", false, errdefs.ErrFailedPrecondition, errdefs.IsFailedPrecondition, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.criuErr = tc.criu
			_, err := e.restoreFrom(t, "ctr1", tc.image, tc.handler, tc.tty)
			if err == nil || !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore from %s: %v; want %q", tc.name, err, tc.want)
			}
			if tc.criu == nil && !strings.Contains(err.Error(), "config.image.image") {
				t.Errorf("restore from %s: %v does not name config.image.image", tc.name, err)
			}
			if ents, _ := os.ReadDir(filepath.Join(e.root, "restore")); len(ents) > 0 {
				t.Errorf("a refused restore left %d unpacked dirs", len(ents))
			}
		})
	}

	// Off, an archive path is refused before the file is looked at.
	e.criuErr = nil
	e.m.c.RestoreArchives = false
	if _, err := e.restoreFrom(t, "ctr1", garbage, "runc", false); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "restore_from_archives") {
		t.Errorf("restore from an archive with restoring off: %v", err)
	}
}

// TestRestoreImage: a good archive is unpacked into the container's
// restore dir, whose CRIU images the runtime is to restore from; its
// rootfs diff goes to the writable layer; RemoveRestoreDir removes it.
func TestRestoreImage(t *testing.T) {
	e := newEnv(t)
	dir, err := e.restoreFrom(t, "ctr1", writeTestArchive(t, testImage.ID, true), "runc", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(e.root, "restore", "ctr1"); dir != want {
		t.Errorf("restore dir %q, want %q", dir, want)
	}
	if got, want := RestoreImages(dir), filepath.Join(dir, ImagesDir); got != want {
		t.Errorf("RestoreImages = %q, want %q", got, want)
	}
	if RestoreImages("") != "" {
		t.Error("a container run afresh restores from somewhere")
	}
	if err := e.m.ApplyRootfsDiff(t.Context(), "ctr1", dir); err != nil || e.images.applied["ctr1"] != "the diff" {
		t.Errorf("the writable layer got %q (%v), want the archive's diff", e.images.applied["ctr1"], err)
	}
	e.m.RemoveRestoreDir(t.Context(), "ctr1")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the unpacked archive outlived its container: %v", err)
	}
}
