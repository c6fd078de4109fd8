package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	bolt "go.etcd.io/bbolt"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

func TestResolveSubPath(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc/app", "data/sub", "usr/share/doc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/app/conf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"abs":       "/usr/share",          // absolute: from the image's root
		"up":        "../../../../../etc",  // climbs no higher than the image's root
		"data/rel":  "sub",                 // relative to its dir
		"loop":      "loop",                // never resolves
		"dangling":  "/nope",               // names nothing
		"data/dots": "../etc/./app/../app", // through "..", then down again
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sub     string
		want    string // relative to root
		wantErr error
	}{
		{sub: "etc/app", want: "etc/app"},
		{sub: "etc/app/", want: "etc/app"},
		{sub: "etc/app/conf", want: "etc/app/conf"},
		{sub: "etc/../data", want: "data"},
		{sub: "abs/doc", want: "usr/share/doc"},
		{sub: "up/app", want: "etc/app"},
		{sub: "data/rel", want: "data/sub"},
		{sub: "data/dots/conf", want: "etc/app/conf"},
		{sub: "missing", wantErr: errdefs.ErrNotFound},
		{sub: "etc/app/conf/below", wantErr: errdefs.ErrNotFound},
		{sub: "dangling", wantErr: errdefs.ErrNotFound},
		{sub: "loop", wantErr: errdefs.ErrInvalidArgument},
		{sub: "fifo", wantErr: errdefs.ErrInvalidArgument},
		{sub: "../etc", wantErr: errdefs.ErrInvalidArgument},
		{sub: "etc/../../x", wantErr: errdefs.ErrInvalidArgument},
		{sub: "/etc", wantErr: errdefs.ErrInvalidArgument},
		{sub: "", wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.sub, func(t *testing.T) {
			got, err := ResolveSubPath(root, tc.sub)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ResolveSubPath(%q) = %q, %v; want %v", tc.sub, got, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.sub) {
					t.Errorf("error %q does not name %q", err, tc.sub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tc.want); got != want {
				t.Errorf("ResolveSubPath(%q) = %s, want %s", tc.sub, got, want)
			}
		})
	}
}

// recordVolume records an image volume the way PrepareVolume does,
// without mounting it (which needs root).
func recordVolume(t *testing.T, s *Service, containerID, name, ref string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.resolveLocked(ref)
	if err != nil {
		t.Fatal(err)
	}
	rec := &volumeRecord{ImageID: img.ID, Layers: img.Layers}
	if err := s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketVolumes, volumeKey(containerID, name), rec) }); err != nil {
		t.Fatal(err)
	}
	s.volumes[volumeKey(containerID, name)] = rec
}

func TestRemoveRefusesImageOfVolume(t *testing.T) {
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "vol:v1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("f", "x", 0o644))))
	root := filepath.Join(t.TempDir(), "root")
	s, err := New(t.Context(), Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	img, err := s.Pull(ctx, host+"/vol:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	recordVolume(t, s, "c1", "0", img.ID)
	recordVolume(t, s, "c2", "3", host+"/vol:v1")
	err = s.Remove(ctx, host+"/vol:v1")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "c1, c2") {
		t.Fatalf("Remove of a mounted image: %v, want FailedPrecondition naming c1, c2", err)
	}
	// The refusal outlives a restart: the volumes are on disk.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newService(t, Config{Root: root})
	if err := s.Remove(ctx, img.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Remove after a restart: %v, want FailedPrecondition", err)
	}
	if n := len(layerDirs(t, root)); n != 1 {
		t.Fatalf("%d layer dirs, want 1", n)
	}
	if err := s.ReleaseRootfs(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, img.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) || strings.Contains(err.Error(), "c1") {
		t.Fatalf("Remove with c2 left: %v, want FailedPrecondition naming only c2", err)
	}
	if err := s.ReleaseRootfs(context.Background(), "c2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, img.ID); err != nil {
		t.Fatalf("Remove after the volumes are released: %v", err)
	}
	if dirs := layerDirs(t, root); len(dirs) != 0 {
		t.Errorf("layer dirs %v left", dirs)
	}
}

func TestVolumeKeepsLayersFromGC(t *testing.T) {
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "vol:v1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("f", "x", 0o644))))
	imagetest.Push(t, host, "other:v1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("g", "y", 0o644))))
	s := newService(t, Config{})
	ctx := ctxT(t)
	for _, r := range []string{"vol:v1", "other:v1"} {
		if _, err := s.Pull(ctx, host+"/"+r, nil); err != nil {
			t.Fatal(err)
		}
	}
	recordVolume(t, s, "c1", "0", host+"/vol:v1")
	// Collection run by removing another image keeps the volume's layer.
	if err := s.Remove(ctx, host+"/other:v1"); err != nil {
		t.Fatal(err)
	}
	if n := len(layerDirs(t, s.root)); n != 1 {
		t.Fatalf("%d layer dirs, want the volume's 1", n)
	}
}

func TestPrepareVolumeRefusesBadInput(t *testing.T) {
	s := newService(t, Config{})
	ctx := ctxT(t)
	for _, tc := range []struct{ id, name, ref string }{
		{"../x", "0", "a"},
		{"c1", "../0", "a"},
		{"c1", "", "a"},
		{"c1", ".x", "a"},
	} {
		if _, err := s.PrepareVolume(ctx, tc.id, tc.name, tc.ref); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("PrepareVolume(%q, %q): %v, want InvalidArgument", tc.id, tc.name, err)
		}
	}
	if _, err := s.PrepareVolume(ctx, "c1", "0", "nope:v1"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "nope:v1") {
		t.Errorf("PrepareVolume of an unknown image: %v, want NotFound naming it", err)
	}
	if len(s.volumes) != 0 {
		t.Errorf("volumes recorded after refusals: %v", s.volumes)
	}
}
