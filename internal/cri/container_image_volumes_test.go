package cri

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

func volumeConfig(name string, mounts ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
	cfg := ctrConfig(name)
	cfg.Mounts = mounts
	return cfg
}

func TestCreateContainerWithImageVolume(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "p")
	cfg := volumeConfig("v",
		&runtimeapi.Mount{ContainerPath: "/host", HostPath: t.TempDir()},
		&runtimeapi.Mount{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "sha256:c0nf19"}, Readonly: true},
	)
	resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	ms := st.GetStatus().GetMounts()
	if len(ms) != 2 || ms[1].GetImage().GetImage() != "sha256:c0nf19" || ms[1].GetImage().GetImageRef() != testImage.ID {
		t.Fatalf("status mounts %v, want the image volume with image_ref %s (PullImage's answer)", ms, testImage.ID)
	}
	if ms[0].GetImage() != nil {
		t.Errorf("host mount reported with an image: %v", ms[0])
	}
	raw, err := h.opts.Store.ContainerSpec(id)
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(h.images.dir, id+"-volumes", "1")
	found := false
	for _, m := range spec.Mounts {
		if m.Destination == "/data" {
			found = true
			if m.Source != want || !strings.Contains(strings.Join(m.Options, ","), "ro") {
				t.Errorf("/data mount %+v, want a read-only bind of %s", m, want)
			}
		}
	}
	if !found {
		t.Errorf("no /data mount in %+v", spec.Mounts)
	}
	// The image it mounts survives a restart in the status.
	h.start(t, false)
	st, err = h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetMounts()[1].GetImage().GetImageRef(); got != testImage.ID {
		t.Errorf("image_ref after restart %q", got)
	}
	if _, err := h.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume after RemoveContainer: %v", err)
	}
}

// TestStatusMountsOfOlderRecords: a record written before crind recorded
// image volumes by id holds the repo digest reference; the status still
// reports the id PullImage returned, and the image as requested.
func TestStatusMountsOfOlderRecords(t *testing.T) {
	h := newHub(t)
	rec := &store.Container{ImageVolumes: map[int]string{0: testImage.RepoDigests[0]}}
	ms := []*runtimeapi.Mount{{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true}}
	got := h.statusMounts(rec, ms)
	if got[0].GetImage().GetImageRef() != testImage.ID || got[0].GetImage().GetImage() != "busybox" {
		t.Errorf("status mount %v, want image busybox, image_ref %s", got[0], testImage.ID)
	}
	if ms[0].GetImage().GetImageRef() != "" {
		t.Errorf("the config's mount was changed: %v", ms[0])
	}
}

func TestCreateContainerRefusesBadImageVolumes(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "sha256:c0nf19"}
	tests := []struct {
		name    string
		mount   *runtimeapi.Mount
		missing string
		want    error
		field   string
	}{
		{name: "read-write", mount: &runtimeapi.Mount{ContainerPath: "/data", Image: img}, want: errdefs.ErrInvalidArgument, field: "mounts[1].readonly"},
		{name: "escaping sub path", mount: &runtimeapi.Mount{ContainerPath: "/data", Image: img, Readonly: true, ImageSubPath: "../etc"},
			want: errdefs.ErrInvalidArgument, field: `mounts[1].image_sub_path "../etc"`},
		{name: "missing sub path", mount: &runtimeapi.Mount{ContainerPath: "/data", Image: img, Readonly: true, ImageSubPath: "nope"},
			want: errdefs.ErrNotFound, field: `mounts[1].image_sub_path "nope"`},
		{name: "missing image", mount: &runtimeapi.Mount{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "gone:v1"}, Readonly: true},
			missing: "gone:v1", want: errdefs.ErrNotFound, field: `mounts[1].image "gone:v1"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			h.images.missing = tc.missing
			pod := h.runPod(t, "p")
			// mounts[0] is a good volume, so a later failure must undo it.
			cfg := volumeConfig("v", &runtimeapi.Mount{ContainerPath: "/ok", Image: img, Readonly: true}, tc.mount)
			_, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("CreateContainer: %v, want %v naming %s", err, tc.want, tc.field)
			}
			h.images.mu.Lock()
			left := len(h.images.rootfs)
			h.images.mu.Unlock()
			if left != 0 {
				t.Errorf("%d rootfs or volumes left after the refusal", left)
			}
			if ents, _ := os.ReadDir(h.images.dir); len(ents) != 0 {
				t.Errorf("left in the image dir: %v", ents)
			}
			// A retry with the mount fixed works: the name was released.
			cfg.Mounts = cfg.Mounts[:1]
			if _, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podConfig("p")}); err != nil {
				t.Fatalf("retry: %v", err)
			}
		})
	}
}
