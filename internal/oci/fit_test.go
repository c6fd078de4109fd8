package oci

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runc115 is what `runc features` printed for runc 1.1.5 (Debian 12).
func runc115(t *testing.T) *features.Features {
	t.Helper()
	b, err := os.ReadFile("testdata/runc-1.1.5-features.json")
	if err != nil {
		t.Fatal(err)
	}
	var f features.Features
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

// crunLike is what crin synthesises for crun 1.8, which has no features
// command.
var crunLike = &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.0"}

func boolp(b bool) *bool { return &b }

// modern is a made-up runtime that supports everything in spec 1.3.0.
var modern = &features.Features{
	OCIVersionMin: "1.0.0", OCIVersionMax: "1.3.0",
	Linux: &features.Linux{
		IntelRdt:     &features.IntelRdt{Enabled: boolp(true), Schemata: boolp(true)},
		NetDevices:   &features.NetDevices{Enabled: boolp(true)},
		MemoryPolicy: &features.MemoryPolicy{Modes: []string{"MPOL_BIND"}},
	},
}

func testContainerSpec(t *testing.T, seccomp bool) *specs.Spec {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}}}
	if seccomp {
		cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	}
	s, err := ContainerSpec(containerOpts(t, podConfig(nil), cfg))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFitVersion(t *testing.T) {
	tests := []struct {
		name    string
		f       *features.Features
		seccomp bool
		want    string
	}{
		{name: "runc plain", f: runc115(t), want: "1.0.0"},
		{name: "runc with default seccomp (errnoRet)", f: runc115(t), seccomp: true, want: "1.0.2-dev"},
		{name: "nil plain", want: "1.0.0"},
		{name: "nil with seccomp", seccomp: true, want: "1.0.2"},
		{name: "crun", f: crunLike, seccomp: true, want: "1.0.0"},
		{name: "modern with seccomp", f: modern, seccomp: true, want: "1.1.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testContainerSpec(t, tc.seccomp)
			if err := Fit(s, tc.f); err != nil {
				t.Fatal(err)
			}
			if s.Version != tc.want {
				t.Errorf("ociVersion = %q, want %q", s.Version, tc.want)
			}
		})
	}
}

func TestFitRefuses(t *testing.T) {
	one := int64(1)
	tests := []struct {
		name   string
		f      *features.Features
		mutate func(s *specs.Spec)
		field  string // "" means accepted
	}{
		{name: "intelRdt on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "x"} }, field: "linux.intelRdt"},
		{name: "intelRdt on modern", f: modern, mutate: func(s *specs.Spec) {
			s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "x", Schemata: []string{"L3:0=f"}}
		}},
		{name: "intelRdt monitoring on modern", f: modern, mutate: func(s *specs.Spec) { s.Linux.IntelRdt = &specs.LinuxIntelRdt{EnableMonitoring: true} }, field: "linux.intelRdt.enableMonitoring"},
		{name: "scheduler on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Process.Scheduler = &specs.Scheduler{Policy: "SCHED_OTHER"} }, field: "process.scheduler"},
		{name: "scheduler on nil", mutate: func(s *specs.Spec) { s.Process.Scheduler = &specs.Scheduler{Policy: "SCHED_OTHER"} }, field: "process.scheduler"},
		{name: "scheduler on modern", f: modern, mutate: func(s *specs.Spec) { s.Process.Scheduler = &specs.Scheduler{Policy: "SCHED_OTHER"} }},
		{name: "ioPriority on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Process.IOPriority = &specs.LinuxIOPriority{Class: "IOPRIO_CLASS_BE"} }, field: "process.ioPriority"},
		{name: "memoryPolicy on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Linux.MemoryPolicy = &specs.LinuxMemoryPolicy{Mode: "MPOL_BIND", Nodes: "0"} }, field: "linux.memoryPolicy"},
		{name: "memoryPolicy on modern", f: modern, mutate: func(s *specs.Spec) { s.Linux.MemoryPolicy = &specs.LinuxMemoryPolicy{Mode: "MPOL_BIND", Nodes: "0"} }},
		{name: "memoryPolicy mode not listed", f: modern, mutate: func(s *specs.Spec) { s.Linux.MemoryPolicy = &specs.LinuxMemoryPolicy{Mode: "MPOL_LOCAL"} }, field: "linux.memoryPolicy.mode"},
		{name: "netDevices on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Linux.NetDevices = map[string]specs.LinuxNetDevice{"eth1": {}} }, field: "linux.netDevices"},
		{name: "netDevices on modern", f: modern, mutate: func(s *specs.Spec) { s.Linux.NetDevices = map[string]specs.LinuxNetDevice{"eth1": {}} }},
		{name: "personality on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Linux.Personality = &specs.LinuxPersonality{Domain: specs.PerLinux} }, field: "linux.personality"},
		{name: "personality on crun-like", f: crunLike, mutate: func(s *specs.Spec) { s.Linux.Personality = &specs.LinuxPersonality{Domain: specs.PerLinux} }, field: "linux.personality"},
		{name: "personality on nil", mutate: func(s *specs.Spec) { s.Linux.Personality = &specs.LinuxPersonality{Domain: specs.PerLinux} }},
		{name: "timeOffsets on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Linux.TimeOffsets = map[string]specs.LinuxTimeOffset{"monotonic": {Secs: 1}} }, field: "linux.timeOffsets"},
		{name: "time namespace on runc", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.TimeNamespace})
		}, field: "linux.namespaces"},
		{name: "unknown namespace", mutate: func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: "bogus"})
		}, field: `"bogus": unknown namespace`},
		{name: "idmap option on runc", f: runc115(t), mutate: func(s *specs.Spec) { s.Mounts[0].Options = append(s.Mounts[0].Options, "idmap") }, field: `option idmap`},
		{name: "generic option not listed", f: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.2", MountOptions: []string{"ro"}},
			mutate: func(s *specs.Spec) {
				s.Mounts = []specs.Mount{{Destination: "/x", Type: "tmpfs", Options: []string{"ro", "nosuid", "size=1m"}}}
			}, field: `mounts[0] (/x) option "nosuid"`},
		{name: "filesystem data passes", f: runc115(t), mutate: func(s *specs.Spec) { s.Mounts[0].Options = append(s.Mounts[0].Options, "size=1m", "newinstance") }},
		{name: "unknown seccomp action", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_FOO"}
		}, field: "linux.seccomp.defaultAction"},
		{name: "seccomp action not listed", f: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.1.0",
			Linux: &features.Linux{Seccomp: &features.Seccomp{Actions: []string{"SCMP_ACT_ALLOW"}}}},
			mutate: func(s *specs.Spec) {
				s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"x"}, Action: specs.ActKillProcess}}}
			}, field: "linux.seccomp.syscalls[0].action"},
		{name: "kill process on crun-like", f: crunLike, mutate: func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActKillProcess}
		}, field: "linux.seccomp.defaultAction"},
		{name: "kill process on runc", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActKillProcess}
		}},
		{name: "unknown operator", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"x"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Op: "SCMP_CMP_XX"}}}}}
		}, field: "args[0].op"},
		{name: "unknown arch", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: []specs.Arch{"SCMP_ARCH_Z80"}}
		}, field: "linux.seccomp.architectures"},
		{name: "arch not listed by runc", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: []specs.Arch{specs.ArchRISCV64}}
		}, field: "linux.seccomp.architectures"},
		{name: "createRuntime hook on runc", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/bin/true"}}}
		}},
		{name: "createRuntime hook on crun-like", f: crunLike, mutate: func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/bin/true"}}}
		}, field: "hooks.createRuntime"},
		{name: "hook kind not listed", f: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.1.0", Hooks: []string{"prestart"}}, mutate: func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}}
		}, field: "hooks.poststart"},
		{name: "cpu burst on runc", f: runc115(t), mutate: func(s *specs.Spec) {
			b := uint64(1)
			s.Linux.Resources.CPU = &specs.LinuxCPU{Burst: &b}
		}, field: "linux.resources.cpu.burst"},
		{name: "unified when v2 compiled out", f: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.1.0",
			Linux: &features.Linux{Cgroup: &features.Cgroup{V2: boolp(false)}}}, mutate: func(s *specs.Spec) {
			s.Linux.Resources.Unified = map[string]string{"memory.high": "1"}
		}, field: "linux.resources.unified"},
		{name: "unified on runc", f: runc115(t), mutate: func(s *specs.Spec) {
			s.Linux.Resources.Unified = map[string]string{"memory.high": "1"}
			s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &one}
		}},
		{name: "apparmor disabled", f: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.2",
			Linux: &features.Linux{Apparmor: &features.Apparmor{Enabled: boolp(false)}}}, mutate: func(s *specs.Spec) {
			s.Process.ApparmorProfile = "p"
		}, field: "process.apparmorProfile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testContainerSpec(t, false)
			tc.mutate(s)
			before := s.Version
			err := Fit(s, tc.f)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrNotImplemented) {
				t.Fatalf("err = %v, want not implemented", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %q, want it to name %q", err, tc.field)
			}
			if s.Version != before {
				t.Errorf("version changed to %q on failure", s.Version)
			}
		})
	}
}

func TestFitFiltersCapabilities(t *testing.T) {
	s := testContainerSpec(t, false)
	s.Process.Capabilities.Bounding = append(s.Process.Capabilities.Bounding, "CAP_BPF")
	f := &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.2", Linux: &features.Linux{Capabilities: []string{"CAP_CHOWN", "CAP_KILL"}}}
	if err := Fit(s, f); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"CAP_CHOWN", "CAP_KILL"}, s.Process.Capabilities.Bounding); d != "" {
		t.Errorf("bounding (-want +got):\n%s", d)
	}
}

// TestFitDropsCompatArchs: a runtime that filters only the native
// architecture (gVisor's runsc lists SCMP_ARCH_X86_64 alone) takes the
// default profile without the compat ones, which only narrows the filter;
// a filter whose native architecture it cannot apply is refused.
func TestFitDropsCompatArchs(t *testing.T) {
	native := nativeArchs()
	if len(native) < 2 {
		t.Skipf("%v: no compat architecture on this machine", native)
	}
	onlyNative := &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.1.0",
		Linux: &features.Linux{Seccomp: &features.Seccomp{Archs: []string{string(native[0])}}}}
	s := testContainerSpec(t, false)
	s.Linux.Seccomp = DefaultSeccomp(s.Process.Capabilities)
	if err := Fit(s, onlyNative); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]specs.Arch{native[0]}, s.Linux.Seccomp.Architectures); d != "" {
		t.Errorf("architectures (-want +got):\n%s", d)
	}
	compatOnly := &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.1.0",
		Linux: &features.Linux{Seccomp: &features.Seccomp{Archs: []string{string(native[1])}}}}
	s = testContainerSpec(t, false)
	s.Linux.Seccomp = DefaultSeccomp(s.Process.Capabilities)
	before := slices.Clone(s.Linux.Seccomp.Architectures)
	err := Fit(s, compatOnly)
	if !errors.Is(err, errdefs.ErrNotImplemented) || !strings.Contains(err.Error(), string(native[0])) {
		t.Errorf("native architecture not listed: err = %v, want not implemented naming %s", err, native[0])
	}
	if d := cmp.Diff(before, s.Linux.Seccomp.Architectures); d != "" {
		t.Errorf("a refused spec was changed (-before +after):\n%s", d)
	}
}

func TestFitBadFeatures(t *testing.T) {
	for _, f := range []*features.Features{
		{OCIVersionMin: "1.0.0", OCIVersionMax: "one"},
		{OCIVersionMin: "", OCIVersionMax: "1.0.2"},
	} {
		if err := Fit(testContainerSpec(t, false), f); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("features %+v: err = %v, want invalid argument", f, err)
		}
	}
	if err := Fit(testContainerSpec(t, false), &features.Features{OCIVersionMin: "2.0.0", OCIVersionMax: "2.1.0"}); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("2.x runtime: err = %v, want not implemented", err)
	}
}

// The runc on this machine accepts what crin writes, by its own account.
func TestFitInstalledRunc(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc not on PATH")
	}
	out, err := exec.Command(runc, "features").Output()
	if err != nil {
		t.Skipf("runc features: %v", err)
	}
	var f features.Features
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}
	sb, err := SandboxSpec(sandboxOpts(podConfig(nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*specs.Spec{testContainerSpec(t, true), sb} {
		if err := Fit(s, &f); err != nil {
			t.Fatal(err)
		}
		if s.Version < f.OCIVersionMin || s.Version > f.OCIVersionMax {
			t.Errorf("ociVersion %q outside [%s, %s]", s.Version, f.OCIVersionMin, f.OCIVersionMax)
		}
	}
}

func TestOCIVersionCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1.0.2-dev", "1.0.2", -1},
		{"1.0.2", "1.0.2-dev", 1},
		{"1.0.2-dev", "1.0.1", 1},
		{"1.1.0", "1.0.9", 1},
		{"1.0.0", "1.0.0", 0},
		{"1.2.0+dev", "1.2.0", 0},
	}
	for _, tc := range tests {
		got := mustVersion(tc.a).compare(mustVersion(tc.b))
		if (got > 0) != (tc.want > 0) || (got < 0) != (tc.want < 0) {
			t.Errorf("compare(%s, %s) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}
