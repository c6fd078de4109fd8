package oci

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/testing/protocmp"
)

// richSpec has every field NRIContainer reads.
func richSpec() *specs.Spec {
	s := nriBaseSpec()
	s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/h", Args: []string{"h"}, Timeout: new(3)}}}
	s.Process.OOMScoreAdj = new(-10)
	s.Process.IOPriority = &specs.LinuxIOPriority{Class: specs.IOPRIO_CLASS_RT, Priority: 1}
	s.Process.Scheduler = &specs.Scheduler{Policy: specs.SchedRR, Priority: 5, Flags: []specs.LinuxSchedulerFlag{specs.SchedFlagResetOnFork}}
	s.Linux.Seccomp = &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno, DefaultErrnoRet: new(uint(1)), Architectures: []specs.Arch{specs.ArchX86_64},
		Flags:    []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog},
		Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 1, Value: 2, Op: specs.OpEqualTo}}}},
	}
	s.Linux.NetDevices = map[string]specs.LinuxNetDevice{"eth1": {Name: "net1"}}
	s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "gold", Schemata: []string{"L3:0=f"}, EnableMonitoring: true}
	s.Linux.Resources.Memory = &specs.LinuxMemory{
		Limit: new(int64(1 << 30)), Reservation: new(int64(1 << 29)), Swap: new(int64(2 << 30)), KernelTCP: new(int64(1 << 20)),
		Swappiness: new(uint64(5)), DisableOOMKiller: new(true), UseHierarchy: new(true),
	}
	s.Linux.Resources.CPU = &specs.LinuxCPU{
		Shares: new(uint64(100)), Quota: new(int64(10000)), Period: new(uint64(100000)),
		RealtimeRuntime: new(int64(100)), RealtimePeriod: new(uint64(1000)), Cpus: "1", Mems: "0",
	}
	s.Linux.Resources.HugepageLimits = []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 4 << 20}}
	s.Linux.Resources.Pids = &specs.LinuxPids{Limit: new(int64(42))}
	return s
}

func TestNRIContainer(t *testing.T) {
	s := richSpec()
	c := &api.Container{Id: testCtr, Name: "kept"}
	NRIContainer(s, c)

	if c.Id != testCtr || c.Name != "kept" {
		t.Errorf("id/name changed: %q %q", c.Id, c.Name)
	}
	diff(t, "args", c.Args, s.Process.Args)
	diff(t, "env", c.Env, s.Process.Env)
	if len(c.Mounts) != len(s.Mounts) || c.Mounts[0].Destination != "/proc" {
		t.Errorf("mounts = %v", c.Mounts)
	}
	want := &api.Container{
		Id: testCtr, Name: "kept",
		Args: s.Process.Args, Env: s.Process.Env, Mounts: api.FromOCIMounts(s.Mounts),
		Hooks:   &api.Hooks{CreateContainer: []*api.Hook{{Path: "/h", Args: []string{"h"}, Timeout: api.Int(3)}}},
		Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}},
		User:    &api.User{Uid: 1000, Gid: 1000, AdditionalGids: []uint32{1500}},
		Linux: &api.LinuxContainer{
			Namespaces:  api.FromOCILinuxNamespaces(s.Linux.Namespaces),
			Devices:     api.FromOCILinuxDevices(s.Linux.Devices),
			Resources:   NRIResources(s.Linux.Resources),
			OomScoreAdj: api.Int(-10),
			CgroupsPath: "/kubepods/pod1/ctr1",
			IoPriority:  &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_RT, Priority: 1},
			SeccompPolicy: &api.LinuxSeccomp{
				DefaultAction: "SCMP_ACT_ERRNO", DefaultErrno: api.UInt32(uint32(1)), Architectures: []string{"SCMP_ARCH_X86_64"},
				Flags:    []string{"SECCOMP_FILTER_FLAG_LOG"},
				Syscalls: []*api.LinuxSyscall{{Names: []string{"read"}, Action: "SCMP_ACT_ALLOW", Args: []*api.LinuxSeccompArg{{Index: 1, Value: 2, Op: "SCMP_CMP_EQ"}}}},
			},
			Sysctl:     map[string]string{"net.ipv4.ip_forward": "1"},
			NetDevices: map[string]*api.LinuxNetDevice{"eth1": {Name: "net1"}},
			Scheduler:  &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_RR, Priority: 5, Flags: []api.LinuxSchedulerFlag{api.LinuxSchedulerFlag_SCHED_FLAG_RESET_ON_FORK}},
			Rdt:        &api.LinuxRdt{ClosId: api.String("gold"), Schemata: api.RepeatedString([]string{"L3:0=f"}), EnableMonitoring: api.Bool(true)},
		},
	}
	if d := cmp.Diff(want, c, protocmp.Transform()); d != "" {
		t.Errorf("container (-want +got):\n%s", d)
	}
	// The container does not share memory with the spec.
	c.Env[0] = "CHANGED=1"
	if s.Process.Env[0] == "CHANGED=1" {
		t.Error("container env aliases the spec's")
	}
}

// TestNRIRoundTrip: what plugins see, applied back as an adjustment onto a
// bare spec, gives the spec's fields again.
func TestNRIRoundTrip(t *testing.T) {
	s := richSpec()
	c := &api.Container{}
	NRIContainer(s, c)

	adj := &api.ContainerAdjustment{Args: c.Args, Mounts: c.Mounts, Hooks: c.Hooks, Rlimits: c.Rlimits}
	adj.Env = append(adj.Env, api.FromOCIEnv(c.Env)...)
	l := c.Linux
	adj.Linux = &api.LinuxContainerAdjustment{
		Devices: l.Devices, Resources: l.Resources, CgroupsPath: l.CgroupsPath, OomScoreAdj: l.OomScoreAdj,
		IoPriority: l.IoPriority, SeccompPolicy: l.SeccompPolicy, Namespaces: l.Namespaces, Sysctl: l.Sysctl,
		NetDevices: l.NetDevices, Scheduler: l.Scheduler, Rdt: l.Rdt,
	}
	got := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	o := AdjustOptions{ContainerID: testCtr, Features: newerFeatures(), Host: hostV1, memswFile: memswFile(t), OOMScoreAdjMin: -1000}
	if err := ApplyAdjustment(got, adj, o); err != nil {
		t.Fatal(err)
	}
	orderMounts(s.Mounts)
	diff(t, "args", got.Process.Args, s.Process.Args)
	diff(t, "env", got.Process.Env, s.Process.Env)
	diff(t, "rlimits", got.Process.Rlimits, s.Process.Rlimits)
	diff(t, "mounts", got.Mounts, s.Mounts)
	diff(t, "hooks", got.Hooks, s.Hooks)
	diff(t, "oomScoreAdj", got.Process.OOMScoreAdj, s.Process.OOMScoreAdj)
	diff(t, "ioPriority", got.Process.IOPriority, s.Process.IOPriority)
	diff(t, "scheduler", got.Process.Scheduler, s.Process.Scheduler)
	// The adjustment adds an allow rule per device; the spec's own rules
	// (deny all first) come back through resources.devices.
	gotRules := got.Linux.Resources.Devices[len(s.Linux.Devices):]
	diff(t, "device rules", gotRules, s.Linux.Resources.Devices)
	got.Linux.Resources.Devices = s.Linux.Resources.Devices
	diff(t, "linux", got.Linux, s.Linux)
}

func TestNRIResources(t *testing.T) {
	if NRIResources(nil) != nil {
		t.Error("NRIResources(nil) != nil")
	}
	r := richSpec().Linux.Resources
	r.Unified = map[string]string{"memory.high": "1"}
	_, err := ApplyUpdate(nil, NRIResources(r), UpdateOptions{Host: &Host{CgroupV2: true}})
	if err == nil {
		t.Fatal("swappiness accepted on a cgroup v2 host")
	}
	// On a v1 host with swap accounting, everything but unified comes back.
	r.Unified = nil
	back, err := ApplyUpdate(&specs.LinuxResources{Memory: &specs.LinuxMemory{Swappiness: new(uint64(5)), DisableOOMKiller: new(true), UseHierarchy: new(true)},
		HugepageLimits: r.HugepageLimits, Devices: r.Devices}, NRIResources(r), UpdateOptions{Host: hostV1, memswFile: memswFile(t)})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "resources", back, r)
}

func TestNRIPodLinux(t *testing.T) {
	if NRIPodLinux(nil) != nil || NRIPodLinux(&specs.Spec{}) != nil {
		t.Error("no linux section gives a pod linux")
	}
	s := nriBaseSpec()
	got := NRIPodLinux(s)
	want := &api.LinuxPodSandbox{
		CgroupsPath: "/kubepods/pod1/ctr1",
		Namespaces:  api.FromOCILinuxNamespaces(s.Linux.Namespaces),
		Resources:   NRIResources(s.Linux.Resources),
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("pod linux (-want +got):\n%s", d)
	}
	if got.Resources.Memory.Limit.GetValue() != 64<<20 || got.Resources.Cpu.Shares.GetValue() != 512 {
		t.Errorf("resources = %v", got.Resources)
	}
}
