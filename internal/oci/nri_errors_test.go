package oci

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

type claimFunc = func(o *api.OwningPlugins, id, plugin string) error

// TestApplyAdjustmentRefusals checks that every refusal names the plugin
// that owns the field and the field, and is classified.
func TestApplyAdjustmentRefusals(t *testing.T) {
	runc := runc115Features(t)
	lin := func(l *api.LinuxContainerAdjustment) *api.ContainerAdjustment {
		return &api.ContainerAdjustment{Linux: l}
	}
	res := func(r *api.LinuxResources) *api.ContainerAdjustment {
		return lin(&api.LinuxContainerAdjustment{Resources: r})
	}
	mem := func(m *api.LinuxMemory) *api.ContainerAdjustment { return res(&api.LinuxResources{Memory: m}) }
	cpu := func(c *api.LinuxCPU) *api.ContainerAdjustment { return res(&api.LinuxResources{Cpu: c}) }
	ann := func(k string) claimFunc { return keyed((*api.OwningPlugins).ClaimAnnotation, k) }

	tests := []struct {
		name  string
		adj   *api.ContainerAdjustment
		claim claimFunc
		opts  func(*AdjustOptions)
		want  error
		field string // in the message
	}{
		// What runc 1.1.5 does not implement.
		{"scheduler on runc 1.1.5", lin(&api.LinuxContainerAdjustment{Scheduler: &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_OTHER}}),
			(*api.OwningPlugins).ClaimLinuxScheduler, withFeatures(runc), errdefs.ErrNotImplemented, "process.scheduler: runc supports OCI runtime spec up to 1.0.2-dev"},
		{"io priority on runc 1.1.5", lin(&api.LinuxContainerAdjustment{IoPriority: &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_IDLE}}),
			(*api.OwningPlugins).ClaimIOPriority, withFeatures(runc), errdefs.ErrNotImplemented, "process.ioPriority"},
		{"memory policy on runc 1.1.5", lin(&api.LinuxContainerAdjustment{MemoryPolicy: &api.LinuxMemoryPolicy{Mode: api.MpolMode_MPOL_INTERLEAVE, Nodes: "0"}}),
			(*api.OwningPlugins).ClaimMemoryPolicy, withFeatures(runc), errdefs.ErrNotImplemented, "linux.memoryPolicy"},
		{"memory policy mode not in features", lin(&api.LinuxContainerAdjustment{MemoryPolicy: &api.LinuxMemoryPolicy{Mode: api.MpolMode_MPOL_WEIGHTED_INTERLEAVE, Nodes: "0"}}),
			(*api.OwningPlugins).ClaimMemoryPolicy, nil, errdefs.ErrNotImplemented, "linux.memoryPolicy.mode"},
		{"net devices on runc 1.1.5", lin(&api.LinuxContainerAdjustment{NetDevices: map[string]*api.LinuxNetDevice{"eth1": {}}}),
			keyed((*api.OwningPlugins).ClaimLinuxNetDevice, "eth1"), withFeatures(runc), errdefs.ErrNotImplemented, `linux.netDevices["eth1"]`},
		{"net devices without the features key", lin(&api.LinuxContainerAdjustment{NetDevices: map[string]*api.LinuxNetDevice{"eth1": {}}}),
			keyed((*api.OwningPlugins).ClaimLinuxNetDevice, "eth1"), func(o *AdjustOptions) { o.Features.Linux.NetDevices = nil }, errdefs.ErrNotImplemented, "features linux.netDevices.enabled"},
		{"RDT on runc 1.1.5", lin(&api.LinuxContainerAdjustment{Rdt: &api.LinuxRdt{ClosId: api.String("gold")}}),
			(*api.OwningPlugins).ClaimRdtClosID, withFeatures(runc), errdefs.ErrNotImplemented, "linux.intelRdt"},
		{"RDT schemata not enabled", lin(&api.LinuxContainerAdjustment{Rdt: &api.LinuxRdt{Schemata: api.RepeatedString([]string{"L3:0=1"})}}),
			(*api.OwningPlugins).ClaimRdtSchemata, func(o *AdjustOptions) { o.Features.Linux.IntelRdt.Schemata = nil }, errdefs.ErrNotImplemented, "linux.intelRdt.schemata"},
		{"time namespace on runc 1.1.5", lin(&api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{{Type: "time"}}}),
			keyed((*api.OwningPlugins).ClaimNamespace, "time"), withFeatures(runc), errdefs.ErrNotImplemented, `linux.namespaces type "time": not supported`},
		{"idmap mount on runc 1.1.5", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/m", Type: "bind", Source: "/s", Options: []string{"rbind", "idmap"}}}},
			keyed((*api.OwningPlugins).ClaimMount, "/m"), withFeatures(runc), errdefs.ErrNotImplemented, `mounts["/m"] option idmap`},
		{"seccomp flag unknown to OCI 1.0 runtime", lin(&api.LinuxContainerAdjustment{SeccompPolicy: &api.LinuxSeccomp{DefaultAction: "SCMP_ACT_KILL_PROCESS"}}),
			(*api.OwningPlugins).ClaimSeccompPolicy, withFeatures(nil), errdefs.ErrNotImplemented, "linux.seccomp.defaultAction"},
		{"createRuntime hook on OCI 1.0.0 runtime", &api.ContainerAdjustment{Hooks: &api.Hooks{CreateRuntime: []*api.Hook{{Path: "/h"}}}},
			(*api.OwningPlugins).ClaimHooks, func(o *AdjustOptions) { o.Features.OCIVersionMax, o.Features.Hooks = "1.0.0", nil }, errdefs.ErrNotImplemented, "hooks.createRuntime"},

		// What the host cannot do.
		{"unified on cgroup v1", res(&api.LinuxResources{Unified: map[string]string{"memory.high": "1"}}),
			keyed((*api.OwningPlugins).ClaimCgroupsUnified, "memory.high"), withHost(hostV1), errdefs.ErrNotImplemented, `linux.resources.unified["memory.high"]: needs cgroup v2`},
		{"swap without swap accounting", mem(&api.LinuxMemory{Swap: api.Int64(int64(1 << 30))}),
			(*api.OwningPlugins).ClaimMemSwapLimit, func(o *AdjustOptions) { o.Host, o.memswFile = hostV1, "/nonexistent/memsw" }, errdefs.ErrNotImplemented, "linux.resources.memory.swap: this host has no swap accounting"},
		{"kernel memory", mem(&api.LinuxMemory{Kernel: api.Int64(int64(1 << 20))}),
			(*api.OwningPlugins).ClaimMemKernelLimit, withHost(hostV1), errdefs.ErrNotImplemented, "linux.resources.memory.kernel"},
		{"kernel TCP memory on cgroup v2", mem(&api.LinuxMemory{KernelTcp: api.Int64(int64(1 << 20))}),
			(*api.OwningPlugins).ClaimMemTCPLimit, nil, errdefs.ErrNotImplemented, "linux.resources.memory.kernelTCP"},
		{"swappiness on cgroup v2", mem(&api.LinuxMemory{Swappiness: api.UInt64(uint64(0))}),
			(*api.OwningPlugins).ClaimMemSwappiness, nil, errdefs.ErrNotImplemented, "linux.resources.memory.swappiness"},
		{"OOM killer off on cgroup v2", mem(&api.LinuxMemory{DisableOomKiller: api.Bool(true)}),
			(*api.OwningPlugins).ClaimMemDisableOomKiller, nil, errdefs.ErrNotImplemented, "linux.resources.memory.disableOOMKiller"},
		{"realtime CPU on cgroup v2", cpu(&api.LinuxCPU{RealtimeRuntime: api.Int64(int64(1000))}),
			(*api.OwningPlugins).ClaimCPURealtimeRuntime, nil, errdefs.ErrNotImplemented, "linux.resources.cpu.realtimeRuntime"},

		// What crind is not configured for, or does not know.
		{"blockio class with none configured", res(&api.LinuxResources{BlockioClass: api.String("slow")}),
			(*api.OwningPlugins).ClaimBlockioClass, nil, errdefs.ErrNotImplemented, `linux.resources.blockio_class "slow": no block I/O classes are configured`},
		{"unknown blockio class", res(&api.LinuxResources{BlockioClass: api.String("nope")}),
			(*api.OwningPlugins).ClaimBlockioClass, func(o *AdjustOptions) {
				o.BlockioClass = func(n string) (*specs.LinuxBlockIO, error) { return nil, fmt.Errorf("no class %q", n) }
			}, errdefs.ErrNotFound, `linux.resources.blockio_class "nope": no class "nope"`},
		{"RDT class with none configured", res(&api.LinuxResources{RdtClass: api.String("gold")}),
			(*api.OwningPlugins).ClaimRdtClass, nil, errdefs.ErrNotImplemented, `linux.resources.rdt_class "gold"`},
		{"CDI device with no spec dirs", &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "example.com/gpu=gpu0"}}},
			keyed((*api.OwningPlugins).ClaimCdiDevice, "example.com/gpu=gpu0"), nil, errdefs.ErrNotImplemented, `CDI_devices["example.com/gpu=gpu0"]: CDI is not configured`},
		{"unknown CDI device", &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "example.com/gpu=gpu9"}}},
			keyed((*api.OwningPlugins).ClaimCdiDevice, "example.com/gpu=gpu9"), func(o *AdjustOptions) { o.CDISpecDirs = []string{t.TempDir()} }, errdefs.ErrNotFound, `CDI_devices["example.com/gpu=gpu9"]: no CDI spec`},
		{"malformed CDI name", &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "gpu0"}}},
			keyed((*api.OwningPlugins).ClaimCdiDevice, "gpu0"), nil, errdefs.ErrInvalidArgument, `CDI_devices["gpu0"]`},

		// Bad values.
		{"reserved annotation", &api.ContainerAdjustment{Annotations: map[string]string{AnnotationSandboxID: "x"}},
			ann(AnnotationSandboxID), nil, errdefs.ErrInvalidArgument, `annotations["io.crin.sandbox-id"]`},
		{"relative mount destination", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "data", Type: "bind", Source: "/s"}}},
			keyed((*api.OwningPlugins).ClaimMount, "data"), nil, errdefs.ErrInvalidArgument, `mounts["data"] destination: not absolute`},
		{"bind mount without source", &api.ContainerAdjustment{Mounts: []*api.Mount{{Destination: "/d", Type: "bind"}}},
			keyed((*api.OwningPlugins).ClaimMount, "/d"), nil, errdefs.ErrInvalidArgument, `mounts["/d"]: bind mount without a source`},
		{"env name with =", &api.ContainerAdjustment{Env: []*api.KeyValue{{Key: "A=B", Value: "x"}}},
			keyed((*api.OwningPlugins).ClaimEnv, "A=B"), nil, errdefs.ErrInvalidArgument, `env["A=B"]`},
		{"empty args", &api.ContainerAdjustment{Args: []string{""}},
			(*api.OwningPlugins).ClaimArgs, nil, errdefs.ErrInvalidArgument, "args"},
		{"relative hook", &api.ContainerAdjustment{Hooks: &api.Hooks{Poststop: []*api.Hook{{Path: "hook"}}}},
			(*api.OwningPlugins).ClaimHooks, nil, errdefs.ErrInvalidArgument, "hooks.poststop[0].path"},
		{"unknown rlimit", &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_FOO"}}},
			keyed((*api.OwningPlugins).ClaimRlimit, "RLIMIT_FOO"), nil, errdefs.ErrInvalidArgument, `rlimits["RLIMIT_FOO"]`},
		{"rlimit soft above hard", &api.ContainerAdjustment{Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_CORE", Soft: 2, Hard: 1}}},
			keyed((*api.OwningPlugins).ClaimRlimit, "RLIMIT_CORE"), nil, errdefs.ErrInvalidArgument, `rlimits["RLIMIT_CORE"]: soft limit 2 above hard limit 1`},
		{"device of bad type", lin(&api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{{Path: "/dev/x", Type: "z"}}}),
			keyed((*api.OwningPlugins).ClaimDevice, "/dev/x"), nil, errdefs.ErrInvalidArgument, `linux.devices["/dev/x"] type "z"`},
		{"CPU shares too low", cpu(&api.LinuxCPU{Shares: api.UInt64(uint64(1))}),
			(*api.OwningPlugins).ClaimCPUShares, nil, errdefs.ErrInvalidArgument, "linux.resources.cpu.shares 1"},
		{"CPU quota zero", cpu(&api.LinuxCPU{Quota: api.Int64(int64(0))}),
			(*api.OwningPlugins).ClaimCPUQuota, nil, errdefs.ErrInvalidArgument, "linux.resources.cpu.quota 0"},
		{"CPU period too long", cpu(&api.LinuxCPU{Period: api.UInt64(uint64(2000000))}),
			(*api.OwningPlugins).ClaimCPUPeriod, nil, errdefs.ErrInvalidArgument, "linux.resources.cpu.period"},
		{"bad cpuset", cpu(&api.LinuxCPU{Cpus: "0-"}),
			(*api.OwningPlugins).ClaimCPUSetCPUs, nil, errdefs.ErrInvalidArgument, `linux.resources.cpu.cpus "0-"`},
		{"bad mems", cpu(&api.LinuxCPU{Mems: "x"}),
			(*api.OwningPlugins).ClaimCPUSetMems, nil, errdefs.ErrInvalidArgument, `linux.resources.cpu.mems "x"`},
		{"negative memory limit", mem(&api.LinuxMemory{Limit: api.Int64(int64(-2))}),
			(*api.OwningPlugins).ClaimMemLimit, nil, errdefs.ErrInvalidArgument, "linux.resources.memory.limit -2"},
		{"swap below limit", mem(&api.LinuxMemory{Swap: api.Int64(int64(1 << 20))}),
			(*api.OwningPlugins).ClaimMemSwapLimit, nil, errdefs.ErrInvalidArgument, "linux.resources.memory.swap 1048576: memory+swap limit"},
		{"swappiness above 100", mem(&api.LinuxMemory{Swappiness: api.UInt64(uint64(101))}),
			(*api.OwningPlugins).ClaimMemSwappiness, withHost(hostV1), errdefs.ErrInvalidArgument, "linux.resources.memory.swappiness 101"},
		{"bad hugepage size", res(&api.LinuxResources{HugepageLimits: []*api.HugepageLimit{{PageSize: "2M"}}}),
			keyed((*api.OwningPlugins).ClaimHugepageLimit, "2M"), nil, errdefs.ErrInvalidArgument, `linux.resources.hugepageLimits["2M"]`},
		{"unified cgroup file", res(&api.LinuxResources{Unified: map[string]string{"cgroup.procs": "1"}}),
			keyed((*api.OwningPlugins).ClaimCgroupsUnified, "cgroup.procs"), nil, errdefs.ErrInvalidArgument, `linux.resources.unified["cgroup.procs"]`},
		{"pids zero", res(&api.LinuxResources{Pids: &api.LinuxPids{Limit: 0}}),
			(*api.OwningPlugins).ClaimPidsLimit, nil, errdefs.ErrInvalidArgument, "linux.resources.pids.limit 0"},
		{"relative cgroups path", lin(&api.LinuxContainerAdjustment{CgroupsPath: "kubepods/x"}),
			(*api.OwningPlugins).ClaimCgroupsPath, nil, errdefs.ErrInvalidArgument, `linux.cgroupsPath "kubepods/x"`},
		{"cgroups path with ..", lin(&api.LinuxContainerAdjustment{CgroupsPath: "/kubepods/../x"}),
			(*api.OwningPlugins).ClaimCgroupsPath, nil, errdefs.ErrInvalidArgument, `linux.cgroupsPath "/kubepods/../x"`},
		{"oom score out of range", lin(&api.LinuxContainerAdjustment{OomScoreAdj: api.Int(1001)}),
			(*api.OwningPlugins).ClaimOomScoreAdj, nil, errdefs.ErrInvalidArgument, "process.oomScoreAdj 1001"},
		{"io priority out of range", lin(&api.LinuxContainerAdjustment{IoPriority: &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE, Priority: 8}}),
			(*api.OwningPlugins).ClaimIOPriority, nil, errdefs.ErrInvalidArgument, "process.ioPriority.priority 8"},
		{"unknown seccomp action", lin(&api.LinuxContainerAdjustment{SeccompPolicy: &api.LinuxSeccomp{DefaultAction: "SCMP_ACT_MAYBE"}}),
			(*api.OwningPlugins).ClaimSeccompPolicy, nil, errdefs.ErrInvalidArgument, "linux.seccomp: defaultAction"},
		{"unknown namespace", lin(&api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{{Type: "foo"}}}),
			keyed((*api.OwningPlugins).ClaimNamespace, "foo"), nil, errdefs.ErrInvalidArgument, `linux.namespaces["foo"]`},
		{"mount namespace removed", lin(&api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{{Type: "-mount"}}}),
			keyed((*api.OwningPlugins).ClaimNamespace, "mount"), nil, errdefs.ErrInvalidArgument, `linux.namespaces["mount"]`},
		{"user namespace without mappings", lin(&api.LinuxContainerAdjustment{Namespaces: []*api.LinuxNamespace{{Type: "user"}}}),
			keyed((*api.OwningPlugins).ClaimNamespace, "user"), nil, errdefs.ErrInvalidArgument, `linux.namespaces["user"]`},
		{"node-wide sysctl", lin(&api.LinuxContainerAdjustment{Sysctl: map[string]string{"vm.swappiness": "1"}}),
			keyed((*api.OwningPlugins).ClaimSysctl, "vm.swappiness"), nil, errdefs.ErrInvalidArgument, `linux.sysctls["vm.swappiness"]: not a namespaced sysctl`},
		{"net sysctl with host network", lin(&api.LinuxContainerAdjustment{Sysctl: map[string]string{"net.core.somaxconn": "1"}}),
			keyed((*api.OwningPlugins).ClaimSysctl, "net.core.somaxconn"), func(o *AdjustOptions) { o.HostNetwork = true }, errdefs.ErrInvalidArgument, "not allowed with host network"},
		{"ipc sysctl with host IPC", lin(&api.LinuxContainerAdjustment{Sysctl: map[string]string{"kernel.shmmax": "1"}}),
			keyed((*api.OwningPlugins).ClaimSysctl, "kernel.shmmax"), func(o *AdjustOptions) { o.HostIPC = true }, errdefs.ErrInvalidArgument, "not allowed with host IPC"},
		{"net device with host network", lin(&api.LinuxContainerAdjustment{NetDevices: map[string]*api.LinuxNetDevice{"eth1": {}}}),
			keyed((*api.OwningPlugins).ClaimLinuxNetDevice, "eth1"), func(o *AdjustOptions) { o.HostNetwork = true }, errdefs.ErrInvalidArgument, `linux.netDevices["eth1"]: the pod uses the host network`},
		{"bad net device name", lin(&api.LinuxContainerAdjustment{NetDevices: map[string]*api.LinuxNetDevice{"eth1": {Name: "a/b"}}}),
			keyed((*api.OwningPlugins).ClaimLinuxNetDevice, "eth1"), nil, errdefs.ErrInvalidArgument, `linux.netDevices["eth1"].name "a/b"`},
		{"FIFO scheduler priority 0", lin(&api.LinuxContainerAdjustment{Scheduler: &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_FIFO}}),
			(*api.OwningPlugins).ClaimLinuxScheduler, nil, errdefs.ErrInvalidArgument, "process.scheduler.priority 0"},
		{"memory policy without nodes", lin(&api.LinuxContainerAdjustment{MemoryPolicy: &api.LinuxMemoryPolicy{Mode: api.MpolMode_MPOL_BIND}}),
			(*api.OwningPlugins).ClaimMemoryPolicy, nil, errdefs.ErrInvalidArgument, `linux.memoryPolicy.nodes ""`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := AdjustOptions{
				ContainerID: testCtr, Owners: ownedBy(t, "10-res", tc.claim),
				Features: newerFeatures(), RuntimeName: "runc", Host: hostV2,
			}
			if tc.opts != nil {
				tc.opts(&o)
			}
			err := ApplyAdjustment(nriBaseSpec(), tc.adj, o)
			t.Log(err)
			checkRefusal(t, err, tc.want, `nri plugin "10-res" adjusts `, tc.field)
		})
	}
}

// TestApplyAdjustmentUnknownOwner: without owners, errors still say what
// and who in general.
func TestApplyAdjustmentUnknownOwner(t *testing.T) {
	adj := &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Scheduler: &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_OTHER}}}
	err := ApplyAdjustment(nriBaseSpec(), adj, AdjustOptions{ContainerID: testCtr, Features: runc115Features(t), RuntimeName: "runc", Host: hostV2})
	checkRefusal(t, err, errdefs.ErrNotImplemented, "an NRI plugin adjusts ", "process.scheduler")

	// Owners recorded for another container do not name this one's.
	o := ownedBy(t, "10-res", (*api.OwningPlugins).ClaimLinuxScheduler)
	err = ApplyAdjustment(nriBaseSpec(), adj, AdjustOptions{ContainerID: "other", Owners: o, Features: runc115Features(t), Host: hostV2})
	checkRefusal(t, err, errdefs.ErrNotImplemented, "an NRI plugin adjusts ", "the OCI runtime supports")
}

func checkRefusal(t *testing.T, err, want error, who, field string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, want) {
		t.Errorf("error %q is not %v", err, want)
	}
	if !strings.HasPrefix(err.Error(), who) {
		t.Errorf("error %q does not start with %q", err, who)
	}
	if !strings.Contains(err.Error(), field) {
		t.Errorf("error %q does not mention %q", err, field)
	}
}

func withFeatures(f *features.Features) func(*AdjustOptions) {
	return func(o *AdjustOptions) { o.Features = f }
}

func withHost(h *Host) func(*AdjustOptions) {
	return func(o *AdjustOptions) { o.Host = h }
}
