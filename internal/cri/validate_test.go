package cri

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
)

func TestValidatePodConfig(t *testing.T) {
	good := func() *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"}}
	}
	for _, tc := range []struct {
		name    string
		mut     func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig
		mention string // "" means valid
	}{
		{"valid", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return c }, ""},
		{"nil", func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return nil }, "config"},
		{"no metadata", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata = nil; return c }, "config.metadata"},
		{"no uid", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Uid = ""; return c }, "metadata.uid"},
		{"slash in name", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Name = "a/b"; return c }, `"a/b"`},
		{"container netns", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_CONTAINER}}}
			return c
		}, "namespace_options.network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validatePodConfig(tc.mut(good()))
			if tc.mention == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %v, want InvalidArgument mentioning %q", err, tc.mention)
			}
		})
	}
}

func TestMergeResources(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	i := func(v int64) *int64 { return &v }
	cur := &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Shares: u(512), Quota: i(50000), Period: u(100000), Cpus: "0-1"},
		Memory: &specs.LinuxMemory{Limit: i(64 << 20)},
	}
	got, err := mergeResources(cur, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpusetCpus: "1"})
	if err != nil {
		t.Fatal(err)
	}
	want := &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Shares: u(512), Quota: i(50000), Period: u(100000), Cpus: "1"},
		Memory: &specs.LinuxMemory{Limit: i(128 << 20)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if *cur.Memory.Limit != 64<<20 || cur.CPU.Cpus != "0-1" {
		t.Errorf("mergeResources modified its input")
	}
	if _, err := mergeResources(cur, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -2}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative memory limit: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "quit": syscall.SIGQUIT, "9": syscall.SIGKILL, "SIGRTMIN+3": 0} {
		got, ok := parseSignal(in)
		if want == 0 {
			continue
		}
		if !ok || got != want {
			t.Errorf("parseSignal(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	if _, ok := parseSignal("NOPE"); ok {
		t.Errorf("parseSignal accepted NOPE")
	}
}

func TestLabelsMatchAndImageName(t *testing.T) {
	if !labelsMatch(map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}) {
		t.Errorf("subset selector did not match")
	}
	if labelsMatch(map[string]string{"a": "1"}, map[string]string{"a": "2"}) || labelsMatch(nil, map[string]string{"a": ""}) {
		t.Errorf("mismatching selector matched")
	}
	img := &image.Image{ID: "sha256:abc", RepoTags: []string{"docker.io/library/busybox:latest", "r.local/bb:1"}, RepoDigests: []string{"docker.io/library/busybox@sha256:d"}}
	for ref, want := range map[string]string{
		"busybox":                  "docker.io/library/busybox:latest",
		"r.local/bb:1":             "r.local/bb:1",
		"sha256:abc":               "docker.io/library/busybox:latest",
		"library/busybox@sha256:d": "docker.io/library/busybox@sha256:d",
	} {
		if got := imageName(img, ref); got != want {
			t.Errorf("imageName(%q) = %q, want %q", ref, got, want)
		}
	}
}
