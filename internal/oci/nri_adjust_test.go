package oci

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestApplyAdjustment applies one adjustment per case to a base spec and
// checks the fields it should change.
func TestApplyAdjustment(t *testing.T) {
	cdiDir := t.TempDir()
	writeFile(t, filepath.Join(cdiDir, "vendor.json"), `{
  "cdiVersion": "0.6.0",
  "kind": "example.com/gpu",
  "devices": [{"name": "gpu0", "containerEdits": {
    "env": ["GPU=0"],
    "deviceNodes": [{"path": "/dev/gpu0", "hostPath": "/dev/null", "permissions": "rw"}]
  }}]
}`)
	memsw := memswFile(t)
	blockio := func(name string) (*specs.LinuxBlockIO, error) {
		if name != "slow" {
			return nil, os.ErrNotExist
		}
		return &specs.LinuxBlockIO{Weight: new(uint16(100))}, nil
	}
	rdtClass := func(name string) (*specs.LinuxIntelRdt, error) {
		return &specs.LinuxIntelRdt{ClosID: name, L3CacheSchema: "L3:0=f"}, nil
	}

	tests := []struct {
		name  string
		adj   *api.ContainerAdjustment
		opts  func(*AdjustOptions)
		check func(t *testing.T, s *specs.Spec)
	}{
		{
			name: "annotations added, overridden and removed",
			adj: &api.ContainerAdjustment{Annotations: map[string]string{
				"a": "one", "-b": "", "c": "3", "-missing": "",
			}},
			check: func(t *testing.T, s *specs.Spec) {
				want := map[string]string{"a": "one", "c": "3", AnnotationContainerType: ContainerTypeContainer}
				diff(t, "annotations", s.Annotations, want)
			},
		},
		{
			name: "annotation removed and set again",
			adj:  &api.ContainerAdjustment{Annotations: map[string]string{"-a": "", "a": "new"}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "annotations[a]", s.Annotations["a"], "new")
			},
		},
		{
			name: "mounts added after their parents, replaced and removed",
			adj: &api.ContainerAdjustment{Mounts: []*api.Mount{
				{Destination: "/data/sub", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro"}},
				{Destination: "/data", Type: "bind", Source: "/etc", Options: []string{"rbind", "rw"}},
				{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"size=1g"}},
				{Destination: "-/dev/mqueue"},
			}},
			check: func(t *testing.T, s *specs.Spec) {
				var dsts []string
				for _, m := range s.Mounts {
					dsts = append(dsts, m.Destination)
				}
				// Parents first, the given order otherwise; a replaced mount
				// goes where the new ones go.
				want := []string{"/proc", "/dev", "/sys", "/data", "/dev/pts", "/data/sub", "/dev/shm"}
				diff(t, "mount order", dsts, want)
				i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/dev/shm" })
				diff(t, "/dev/shm", s.Mounts[i], specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"size=1g"}})
			},
		},
		{
			name: "shared mount makes the rootfs shared",
			adj: &api.ContainerAdjustment{Mounts: []*api.Mount{
				{Destination: "/var/lib/kubelet", Type: "bind", Source: "/var/lib", Options: []string{"rbind", "rshared"}},
			}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "rootfsPropagation", s.Linux.RootfsPropagation, "rshared")
			},
		},
		{
			name: "env added, overridden and removed",
			adj: &api.ContainerAdjustment{Env: []*api.KeyValue{
				{Key: "NEW", Value: "a=b"}, {Key: "FOO", Value: "2"}, {Key: "-KEEP"},
			}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "env", s.Process.Env, []string{"PATH=/bin", "FOO=2", "NEW=a=b"})
			},
		},
		{
			name: "args replaced",
			adj:  &api.ContainerAdjustment{Args: []string{"/bin/other", "x"}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "args", s.Process.Args, []string{"/bin/other", "x"})
			},
		},
		{
			name: "args replaced through UpdateArgs",
			adj:  &api.ContainerAdjustment{Args: []string{"", "/bin/other"}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "args", s.Process.Args, []string{"/bin/other"})
			},
		},
		{
			name: "hooks of every kind appended",
			adj: &api.ContainerAdjustment{Hooks: &api.Hooks{
				Prestart:        []*api.Hook{{Path: "/hook/prestart"}},
				CreateRuntime:   []*api.Hook{{Path: "/hook/cr", Args: []string{"cr", "x"}, Env: []string{"A=1"}}},
				CreateContainer: []*api.Hook{{Path: "/hook/cc", Timeout: api.Int(5)}},
				StartContainer:  []*api.Hook{{Path: "/hook/sc"}},
				Poststart:       []*api.Hook{{Path: "/hook/poststart"}},
				Poststop:        []*api.Hook{{Path: "/hook/poststop"}},
			}},
			opts: func(o *AdjustOptions) { o.Features = nil },
			check: func(t *testing.T, s *specs.Spec) {
				five := 5
				want := &specs.Hooks{
					Prestart:        []specs.Hook{{Path: "/hook/prestart"}}, //nolint:staticcheck // NRI's prestart hooks are still passed on
					CreateRuntime:   []specs.Hook{{Path: "/hook/cr", Args: []string{"cr", "x"}, Env: []string{"A=1"}}},
					CreateContainer: []specs.Hook{{Path: "/hook/cc", Timeout: &five}},
					StartContainer:  []specs.Hook{{Path: "/hook/sc"}},
					Poststart:       []specs.Hook{{Path: "/hook/poststart"}},
					Poststop:        []specs.Hook{{Path: "/hook/poststop"}},
				}
				diff(t, "hooks", s.Hooks, want)
			},
		},
		{
			name: "rlimits replaced by type and added",
			adj: &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: 8192, Soft: 2048}, {Type: "RLIMIT_CORE"},
			}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "rlimits", s.Process.Rlimits, []specs.POSIXRlimit{
					{Type: "RLIMIT_NOFILE", Hard: 8192, Soft: 2048}, {Type: "RLIMIT_CORE"},
				})
			},
		},
		{
			name: "devices added with allow rules and removed with theirs",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{
				{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229, FileMode: api.FileMode(os.FileMode(0o444)), Uid: api.UInt32(uint32(0)), Gid: api.UInt32(uint32(5))},
				{Path: "-/dev/full"},
			}}},
			check: func(t *testing.T, s *specs.Spec) {
				i := slices.IndexFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/fuse" })
				if i < 0 {
					t.Fatal("no /dev/fuse device")
				}
				mode := os.FileMode(0o444)
				diff(t, "/dev/fuse", s.Linux.Devices[i], specs.LinuxDevice{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229, FileMode: &mode, UID: new(uint32(0)), GID: new(uint32(5))})
				if !slices.ContainsFunc(s.Linux.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
					return r.Allow && r.Type == "c" && *r.Major == 10 && *r.Minor == 229 && r.Access == "rm"
				}) {
					t.Errorf("no rm allow rule for 10:229 in %+v", s.Linux.Resources.Devices)
				}
				if slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/full" }) {
					t.Error("/dev/full still there")
				}
				if slices.ContainsFunc(s.Linux.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
					return r.Allow && r.Major != nil && *r.Major == 1 && r.Minor != nil && *r.Minor == 7
				}) {
					t.Error("allow rule of /dev/full (1:7) still there")
				}
			},
		},
		{
			name: "CDI device injected",
			adj:  &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "example.com/gpu=gpu0"}}},
			opts: func(o *AdjustOptions) { o.CDISpecDirs = []string{cdiDir} },
			check: func(t *testing.T, s *specs.Spec) {
				if !slices.Contains(s.Process.Env, "GPU=0") {
					t.Errorf("env %q lacks GPU=0", s.Process.Env)
				}
				if !slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/gpu0" && d.Major == 1 && d.Minor == 3 }) {
					t.Errorf("no /dev/gpu0 (1:3) in %+v", s.Linux.Devices)
				}
				if !slices.ContainsFunc(s.Linux.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
					return r.Allow && *r.Major == 1 && *r.Minor == 3 && r.Access == "rw"
				}) {
					t.Error("no rw allow rule for the CDI device")
				}
			},
		},
		{
			name: "every CPU field",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{
				Shares: api.UInt64(uint64(1024)), Quota: api.Int64(int64(50000)), Period: api.UInt64(uint64(100000)),
				RealtimeRuntime: api.Int64(int64(950000)), RealtimePeriod: api.UInt64(uint64(1000000)),
				Cpus: "0-1", Mems: "0",
			}}}},
			opts: func(o *AdjustOptions) { o.Host = hostV1 },
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "cpu", s.Linux.Resources.CPU, &specs.LinuxCPU{
					Shares: new(uint64(1024)), Quota: new(int64(50000)), Period: new(uint64(100000)),
					RealtimeRuntime: new(int64(950000)), RealtimePeriod: new(uint64(1000000)), Cpus: "0-1", Mems: "0",
				})
			},
		},
		{
			name: "every memory field on cgroup v1",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{Memory: &api.LinuxMemory{
				Limit: api.Int64(int64(128 << 20)), Reservation: api.Int64(int64(64 << 20)), Swap: api.Int64(int64(256 << 20)),
				Kernel: api.Int64(int64(0)), KernelTcp: api.Int64(int64(16 << 20)), Swappiness: api.UInt64(uint64(10)),
				DisableOomKiller: api.Bool(true), UseHierarchy: api.Bool(true),
			}}}},
			opts: func(o *AdjustOptions) { o.Host, o.memswFile = hostV1, memsw },
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "memory", s.Linux.Resources.Memory, &specs.LinuxMemory{
					Limit: new(int64(128 << 20)), Reservation: new(int64(64 << 20)), Swap: new(int64(256 << 20)),
					KernelTCP: new(int64(16 << 20)), Swappiness: new(uint64(10)),
					DisableOOMKiller: new(true), UseHierarchy: new(true),
				})
			},
		},
		{
			name: "hugepages, unified, pids and device rules on cgroup v2",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{
				HugepageLimits: []*api.HugepageLimit{{PageSize: "2MB", Limit: 1 << 30}},
				Unified:        map[string]string{"memory.high": "100000000"},
				Pids:           &api.LinuxPids{Limit: 100},
				Devices:        []*api.LinuxDeviceCgroup{{Allow: true, Type: "c", Major: api.Int64(int64(10)), Minor: api.Int64(int64(200)), Access: "rw"}},
			}}},
			check: func(t *testing.T, s *specs.Spec) {
				r := s.Linux.Resources
				diff(t, "hugepages", r.HugepageLimits, []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 1 << 30}})
				diff(t, "unified", r.Unified, map[string]string{"memory.high": "100000000"})
				diff(t, "pids", r.Pids, &specs.LinuxPids{Limit: new(int64(100))})
				diff(t, "last device rule", r.Devices[len(r.Devices)-1], specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: new(int64(10)), Minor: new(int64(200)), Access: "rw"})
			},
		},
		{
			name: "blockio and RDT classes",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{
				BlockioClass: api.String("slow"), RdtClass: api.String("gold"),
			}}},
			opts: func(o *AdjustOptions) { o.BlockioClass, o.RdtClass = blockio, rdtClass },
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "blockIO", s.Linux.Resources.BlockIO, &specs.LinuxBlockIO{Weight: new(uint16(100))})
				diff(t, "intelRdt", s.Linux.IntelRdt, &specs.LinuxIntelRdt{ClosID: "gold", L3CacheSchema: "L3:0=f"})
			},
		},
		{
			name: "RDT class then RDT fields",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
				Resources: &api.LinuxResources{RdtClass: api.String("gold")},
				Rdt:       &api.LinuxRdt{ClosId: api.String("silver"), Schemata: api.RepeatedString([]string{"L3:0=3"}), EnableMonitoring: api.Bool(true)},
			}},
			opts: func(o *AdjustOptions) { o.RdtClass = rdtClass },
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "intelRdt", s.Linux.IntelRdt, &specs.LinuxIntelRdt{ClosID: "silver", L3CacheSchema: "L3:0=f", Schemata: []string{"L3:0=3"}, EnableMonitoring: true})
			},
		},
		{
			name: "RDT removed",
			adj:  &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Rdt: &api.LinuxRdt{Remove: true}}},
			opts: func(o *AdjustOptions) { o.RdtClass = rdtClass },
			check: func(t *testing.T, s *specs.Spec) {
				if s.Linux.IntelRdt != nil {
					t.Errorf("intelRdt = %+v, want none", s.Linux.IntelRdt)
				}
			},
		},
		{
			name: "cgroups path, clamped oom score, io priority",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
				CgroupsPath: "/kubepods/besteffort/ctr1",
				OomScoreAdj: api.Int(-999),
				IoPriority:  &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE, Priority: 7},
			}},
			opts: func(o *AdjustOptions) { o.OOMScoreAdjMin = -500 },
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "cgroupsPath", s.Linux.CgroupsPath, "/kubepods/besteffort/ctr1")
				diff(t, "oomScoreAdj", *s.Process.OOMScoreAdj, -500)
				diff(t, "ioPriority", s.Process.IOPriority, &specs.LinuxIOPriority{Class: specs.IOPRIO_CLASS_BE, Priority: 7})
			},
		},
		{
			name: "seccomp policy with default errno",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{SeccompPolicy: &api.LinuxSeccomp{
				DefaultAction: "SCMP_ACT_ERRNO", DefaultErrno: api.UInt32(uint32(38)),
				Architectures: []string{"SCMP_ARCH_X86_64"}, Flags: []string{"SECCOMP_FILTER_FLAG_LOG"},
				Syscalls: []*api.LinuxSyscall{{Names: []string{"read", "write"}, Action: "SCMP_ACT_ALLOW"}, {
					Names: []string{"personality"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: api.UInt32(uint32(1)),
					Args: []*api.LinuxSeccompArg{{Index: 0, Value: 8, Op: "SCMP_CMP_EQ"}},
				}},
			}}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "seccomp", s.Linux.Seccomp, &specs.LinuxSeccomp{
					DefaultAction: specs.ActErrno, DefaultErrnoRet: new(uint(38)),
					Architectures: []specs.Arch{specs.ArchX86_64}, Flags: []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog},
					Syscalls: []specs.LinuxSyscall{{Names: []string{"read", "write"}, Action: specs.ActAllow}, {
						Names: []string{"personality"}, Action: specs.ActErrno, ErrnoRet: new(uint(1)),
						Args: []specs.LinuxSeccompArg{{Index: 0, Value: 8, Op: specs.OpEqualTo}},
					}},
				})
			},
		},
		{
			name: "namespaces replaced, removed and added in order",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{
				{Type: "network", Path: "/run/netns/other"}, {Type: "-ipc"}, {Type: "cgroup"}, {Type: "-uts"}, {Type: "uts"},
			}}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "namespaces", s.Linux.Namespaces, []specs.LinuxNamespace{
					{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: "/run/netns/other"},
					{Type: specs.PIDNamespace, Path: "/proc/10/ns/pid"}, {Type: specs.CgroupNamespace}, {Type: specs.UTSNamespace},
				})
			},
		},
		{
			name: "sysctls added and removed",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Sysctl: map[string]string{
				"net.core.somaxconn": "1024", "kernel.shmmax": "100", "-net.ipv4.ip_forward": "",
			}}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "sysctls", s.Linux.Sysctl, map[string]string{"net.core.somaxconn": "1024", "kernel.shmmax": "100"})
			},
		},
		{
			name: "net devices, scheduler, memory policy",
			adj: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
				NetDevices:   map[string]*api.LinuxNetDevice{"eth1": {Name: "net1"}, "eth2": {}},
				Scheduler:    &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_BATCH, Nice: 5},
				MemoryPolicy: &api.LinuxMemoryPolicy{Mode: api.MpolMode_MPOL_BIND, Nodes: "0-1", Flags: []api.MpolFlag{api.MpolFlag_MPOL_F_STATIC_NODES}},
			}},
			check: func(t *testing.T, s *specs.Spec) {
				diff(t, "netDevices", s.Linux.NetDevices, map[string]specs.LinuxNetDevice{"eth1": {Name: "net1"}, "eth2": {}})
				diff(t, "scheduler", s.Process.Scheduler, &specs.Scheduler{Policy: specs.SchedBatch, Nice: 5})
				diff(t, "memoryPolicy", s.Linux.MemoryPolicy, &specs.LinuxMemoryPolicy{Mode: specs.MpolBind, Nodes: "0-1", Flags: []specs.MemoryPolicyFlagType{specs.MpolFStaticNodes}})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := AdjustOptions{ContainerID: testCtr, Features: newerFeatures(), RuntimeName: "runc", Host: hostV2, OOMScoreAdjMin: -1000}
			if tc.opts != nil {
				tc.opts(&o)
			}
			s := nriBaseSpec()
			if err := ApplyAdjustment(s, tc.adj, o); err != nil {
				t.Fatalf("ApplyAdjustment: %v", err)
			}
			tc.check(t, s)
			// What the adjustment did not touch is as it was.
			if tc.adj.Linux == nil {
				diff(t, "linux.namespaces", s.Linux.Namespaces, nriBaseSpec().Linux.Namespaces)
			}
		})
	}
}

// TestApplyAdjustmentFitsRunc115 checks a spec adjusted within what runc
// 1.1.5 supports still passes Fit for it.
func TestApplyAdjustmentFitsRunc115(t *testing.T) {
	f := runc115Features(t)
	adj := &api.ContainerAdjustment{
		Env:     []*api.KeyValue{{Key: "X", Value: "1"}},
		Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_CORE", Hard: 1, Soft: 1}},
		Hooks:   &api.Hooks{CreateContainer: []*api.Hook{{Path: "/bin/true"}}},
		Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{
			Memory: &api.LinuxMemory{Reservation: api.Int64(int64(32 << 20))},
		}},
	}
	s := nriBaseSpec()
	if err := ApplyAdjustment(s, adj, AdjustOptions{ContainerID: testCtr, Features: f, RuntimeName: "runc", Host: hostV1}); err != nil {
		t.Fatal(err)
	}
	if err := Fit(s, f); err != nil {
		t.Fatalf("Fit after adjustment: %v", err)
	}
}

func TestApplyAdjustmentNil(t *testing.T) {
	s := nriBaseSpec()
	if err := ApplyAdjustment(s, nil, AdjustOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyAdjustment(s, &api.ContainerAdjustment{}, AdjustOptions{Host: hostV1}); err != nil {
		t.Fatal(err)
	}
	diff(t, "spec", s, nriBaseSpec())
}

func diff[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}
