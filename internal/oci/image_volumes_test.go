package oci

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCheckImageMounts(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "sha256:abc"}
	tests := []struct {
		name    string
		mounts  []*runtimeapi.Mount
		wantErr string // "" for valid
	}{
		{name: "volume", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", Image: img, Readonly: true}}},
		{name: "sub path", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", Image: img, Readonly: true, ImageSubPath: "etc/app/"}}},
		{name: "host mounts are not volumes", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/x"}}},
		{name: "read-write", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/x"}, {ContainerPath: "/data", Image: img}},
			wantErr: `mounts[1].readonly: must be true`},
		{name: "host path too", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", Image: img, Readonly: true, HostPath: "/x"}},
			wantErr: `mounts[0].host_path "/x": must be empty`},
		{name: "sub path escapes", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", Image: img, Readonly: true, ImageSubPath: "a/../../etc"}},
			wantErr: `mounts[0].image_sub_path "a/../../etc"`},
		{name: "absolute sub path", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", Image: img, Readonly: true, ImageSubPath: "/etc"}},
			wantErr: `mounts[0].image_sub_path "/etc"`},
		{name: "sub path without image", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/x", ImageSubPath: "etc"}},
			wantErr: `mounts[0].image_sub_path "etc": set without an image`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckImageMounts(tc.mounts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantInvalid(t, err, tc.wantErr)
		})
	}
}

func TestContainerSpecImageVolumes(t *testing.T) {
	pod := podConfig(nil)
	mounts := []*runtimeapi.Mount{
		{ContainerPath: "/host", HostPath: "/x"},
		{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "sha256:abc"}, Readonly: true, ImageSubPath: "sub",
			MountOptions: []string{"noexec"}},
		{ContainerPath: "/whole", Image: &runtimeapi.ImageSpec{Image: "sha256:def"}, Readonly: true, RecursiveReadOnly: true},
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "sha256:abc"},
		Mounts:   mounts,
	}
	before := cloneMounts(mounts)
	o := containerOpts(t, pod, cfg)
	o.ImageVolumes = map[int]string{1: "/var/lib/crin/image/containers/c1/volumes/1/sub", 2: "/var/lib/crin/image/containers/c1/volumes/2"}
	s, err := ContainerSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		got[m.Destination] = m
	}
	for dst, want := range map[string]specs.Mount{
		"/host":  {Destination: "/host", Type: "bind", Source: "/x", Options: []string{"rbind", "rprivate", "rw"}},
		"/data":  {Destination: "/data", Type: "bind", Source: o.ImageVolumes[1], Options: []string{"rbind", "rprivate", "ro", "noexec"}},
		"/whole": {Destination: "/whole", Type: "bind", Source: o.ImageVolumes[2], Options: []string{"rbind", "rprivate", "rro"}},
	} {
		if d := cmp.Diff(want, got[dst]); d != "" {
			t.Errorf("mount %s (-want +got):\n%s", dst, d)
		}
	}
	// The config (reported in ContainerStatus) keeps its image mounts.
	if d := cmp.Diff(before, cfg.Mounts, protocmp.Transform()); d != "" {
		t.Errorf("config mounts changed (-before +after):\n%s", d)
	}

	// An image mount nobody prepared is refused, not dropped.
	o.ImageVolumes = map[int]string{1: "/v/1"}
	if _, err := ContainerSpec(o); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unprepared image volume: %v, want InvalidArgument", err)
	}
}

func cloneMounts(ms []*runtimeapi.Mount) []*runtimeapi.Mount {
	out := make([]*runtimeapi.Mount, len(ms))
	for i, m := range ms {
		out[i] = proto.Clone(m).(*runtimeapi.Mount)
	}
	return out
}
