package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// Helpers shared by the NRI tests.

const testCtr = "ctr1"

// nriBaseSpec is a container spec as build.go makes them, small.
func nriBaseSpec() *specs.Spec {
	return &specs.Spec{
		Version: "1.0.2",
		Process: &specs.Process{
			Args:        []string{"/bin/app", "-v"},
			Env:         []string{"PATH=/bin", "FOO=1", "KEEP=x"},
			Cwd:         "/",
			User:        specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1500}},
			Rlimits:     []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}},
			OOMScoreAdj: new(0),
		},
		Root:        &specs.Root{Path: "/rootfs"},
		Mounts:      defaultMounts(baseMountOptions{}),
		Annotations: map[string]string{"a": "1", "b": "2", AnnotationContainerType: ContainerTypeContainer},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: "/proc/10/ns/net"},
				{Type: specs.UTSNamespace, Path: "/proc/10/ns/uts"},
				{Type: specs.IPCNamespace, Path: "/proc/10/ns/ipc"},
				{Type: specs.PIDNamespace, Path: "/proc/10/ns/pid"},
			},
			Devices: defaultDevices(),
			Resources: &specs.LinuxResources{
				Devices: defaultDeviceRules(),
				Memory:  &specs.LinuxMemory{Limit: new(int64(64 << 20))},
				CPU:     &specs.LinuxCPU{Shares: new(uint64(512))},
			},
			CgroupsPath: "/kubepods/pod1/ctr1",
			Sysctl:      map[string]string{"net.ipv4.ip_forward": "1"},
		},
	}
}

func runc115Features(t *testing.T) *features.Features {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "runc-1.1.5-features.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f features.Features
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

// newerFeatures stands for a runtime implementing runtime-spec 1.3 with
// everything enabled.
func newerFeatures() *features.Features {
	on := new(true)
	return &features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: "1.3.0",
		Hooks:         []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"},
		MountOptions:  genericMountOptions,
		Linux: &features.Linux{
			Namespaces: []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts", "time"},
			Cgroup:     &features.Cgroup{V1: on, V2: on},
			Seccomp:    &features.Seccomp{Enabled: on},
			IntelRdt:   &features.IntelRdt{Enabled: on, Schemata: on, Monitoring: on},
			MemoryPolicy: &features.MemoryPolicy{
				Modes: []string{"MPOL_DEFAULT", "MPOL_BIND", "MPOL_INTERLEAVE", "MPOL_PREFERRED", "MPOL_LOCAL"},
				Flags: []string{"MPOL_F_STATIC_NODES", "MPOL_F_RELATIVE_NODES"},
			},
			NetDevices: &features.NetDevices{Enabled: on},
		},
	}
}

var (
	hostV1 = &Host{CgroupV2: false}
	hostV2 = &Host{CgroupV2: true}
)

// memswFile makes a stand-in for the cgroup v1 swap accounting file.
func memswFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "memory.memsw.limit_in_bytes")
	if err := os.WriteFile(p, []byte("9223372036854771712\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ownedBy claims, for plugin, the fields claims names.
func ownedBy(t *testing.T, plugin string, claims ...func(o *api.OwningPlugins, id, plugin string) error) *api.OwningPlugins {
	t.Helper()
	o := api.NewOwningPlugins()
	for _, c := range claims {
		if err := c(o, testCtr, plugin); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// keyed adapts a keyed Claim method to ownedBy.
func keyed(claim func(*api.OwningPlugins, string, string, string) error, key string) func(*api.OwningPlugins, string, string) error {
	return func(o *api.OwningPlugins, id, plugin string) error { return claim(o, id, key, plugin) }
}
