package nri

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// mergeTestKeyed describes one compound field: how a plugin sets and
// removes one key of it, and how validators find the key's owner.
type mergeTestKeyed struct {
	name   string // as errors name the field
	key    string
	set    func(a *api.ContainerAdjustment, key string)
	remove func(a *api.ContainerAdjustment, key string)
	owner  func(o *api.OwningPlugins, id, key string) (string, bool)
	// orig adds the key to a container, for removal marks.
	orig func(c *api.Container, key string)
}

func mergeTestKeyedFields() []mergeTestKeyed {
	linux := func(c *api.Container) *api.LinuxContainer {
		if c.Linux == nil {
			c.Linux = &api.LinuxContainer{}
		}
		return c.Linux
	}
	res := func(c *api.Container) *api.LinuxResources {
		l := linux(c)
		if l.Resources == nil {
			l.Resources = &api.LinuxResources{}
		}
		return l.Resources
	}
	return []mergeTestKeyed{
		{
			name:   "annotation",
			key:    "example.com/x",
			set:    func(a *api.ContainerAdjustment, k string) { a.AddAnnotation(k, "v") },
			remove: func(a *api.ContainerAdjustment, k string) { a.RemoveAnnotation(k) },
			owner:  (*api.OwningPlugins).AnnotationOwner,
			orig:   func(c *api.Container, k string) { c.Annotations = map[string]string{k: "old"} },
		},
		{
			name: "mount",
			key:  "/data",
			set: func(a *api.ContainerAdjustment, k string) {
				a.AddMount(&api.Mount{Destination: k, Source: "/srv", Type: "bind", Options: []string{"rbind"}})
			},
			remove: func(a *api.ContainerAdjustment, k string) { a.RemoveMount(k) },
			owner:  (*api.OwningPlugins).MountOwner,
			orig:   func(c *api.Container, k string) { c.Mounts = []*api.Mount{{Destination: k, Source: "/old"}} },
		},
		{
			name:   "env",
			key:    "FOO",
			set:    func(a *api.ContainerAdjustment, k string) { a.AddEnv(k, "1") },
			remove: func(a *api.ContainerAdjustment, k string) { a.RemoveEnv(k) },
			owner:  (*api.OwningPlugins).EnvOwner,
			orig:   func(c *api.Container, k string) { c.Env = []string{k + "=old"} },
		},
		{
			name: "device",
			key:  "/dev/foo",
			set: func(a *api.ContainerAdjustment, k string) {
				a.AddDevice(&api.LinuxDevice{Path: k, Type: "c", Major: 1, Minor: 3})
			},
			remove: func(a *api.ContainerAdjustment, k string) { a.RemoveDevice(k) },
			owner:  (*api.OwningPlugins).DeviceOwner,
			orig:   func(c *api.Container, k string) { linux(c).Devices = []*api.LinuxDevice{{Path: k, Type: "c"}} },
		},
		{
			name: "CDI device",
			key:  "vendor.com/gpu=0",
			set:  func(a *api.ContainerAdjustment, k string) { a.AddCDIDevice(&api.CDIDevice{Name: k}) },
			remove: func(a *api.ContainerAdjustment, k string) {
				a.CDIDevices = append(a.CDIDevices, &api.CDIDevice{Name: api.MarkForRemoval(k)})
			},
			owner: (*api.OwningPlugins).CdiDeviceOwner,
			orig:  func(c *api.Container, k string) { c.CDIDevices = []*api.CDIDevice{{Name: k}} },
		},
		{
			name: "rlimit",
			key:  "RLIMIT_NOFILE",
			set:  func(a *api.ContainerAdjustment, k string) { a.AddRlimit(k, 1024, 512) },
			remove: func(a *api.ContainerAdjustment, k string) {
				a.Rlimits = append(a.Rlimits, &api.POSIXRlimit{Type: api.MarkForRemoval(k)})
			},
			owner: (*api.OwningPlugins).RlimitOwner,
			orig:  func(c *api.Container, k string) { c.Rlimits = []*api.POSIXRlimit{{Type: k, Hard: 1, Soft: 1}} },
		},
		{
			name: "hugepage limit",
			key:  "2MB",
			set:  func(a *api.ContainerAdjustment, k string) { a.AddLinuxHugepageLimit(k, 1<<21) },
			remove: func(a *api.ContainerAdjustment, k string) {
				a.AddLinuxHugepageLimit(api.MarkForRemoval(k), 0)
			},
			owner: (*api.OwningPlugins).HugepageLimitOwner,
			orig: func(c *api.Container, k string) {
				res(c).HugepageLimits = []*api.HugepageLimit{{PageSize: k, Limit: 1}}
			},
		},
		{
			name:   "unified cgroup resource",
			key:    "memory.high",
			set:    func(a *api.ContainerAdjustment, k string) { a.AddLinuxUnified(k, "1G") },
			remove: func(a *api.ContainerAdjustment, k string) { a.AddLinuxUnified(api.MarkForRemoval(k), "") },
			owner:  (*api.OwningPlugins).CgroupsUnifiedOwner,
			orig:   func(c *api.Container, k string) { res(c).Unified = map[string]string{k: "max"} },
		},
		{
			name: "namespace",
			key:  "network",
			set: func(a *api.ContainerAdjustment, k string) {
				a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: k, Path: "/var/run/netns/x"})
			},
			remove: func(a *api.ContainerAdjustment, k string) { a.RemoveNamespace(&api.LinuxNamespace{Type: k}) },
			owner:  (*api.OwningPlugins).NamespaceOwner,
			orig:   func(c *api.Container, k string) { linux(c).Namespaces = []*api.LinuxNamespace{{Type: k}} },
		},
		{
			name:   "sysctl",
			key:    "net.ipv4.ip_forward",
			set:    func(a *api.ContainerAdjustment, k string) { a.SetLinuxSysctl(k, "1") },
			remove: func(a *api.ContainerAdjustment, k string) { a.SetLinuxSysctl(api.MarkForRemoval(k), "") },
			owner:  (*api.OwningPlugins).SysctlOwner,
			orig:   func(c *api.Container, k string) { linux(c).Sysctl = map[string]string{k: "0"} },
		},
		{
			name: "net device",
			key:  "eth1",
			set: func(a *api.ContainerAdjustment, k string) {
				a.AddLinuxNetDevice(k, &api.LinuxNetDevice{Name: "net1"})
			},
			remove: func(a *api.ContainerAdjustment, k string) { a.RemoveLinuxNetDevice(k) },
			owner:  (*api.OwningPlugins).LinuxNetDeviceOwner,
			orig: func(c *api.Container, k string) {
				linux(c).NetDevices = map[string]*api.LinuxNetDevice{k: {Name: "old"}}
			},
		},
	}
}

func mergeTestAdj(ops ...func(a *api.ContainerAdjustment)) *api.ContainerAdjustment {
	a := &api.ContainerAdjustment{}
	for _, op := range ops {
		op(a)
	}
	return a
}

func TestMergeKeyedOwnership(t *testing.T) {
	const id = "ctr-1"
	for _, f := range mergeTestKeyedFields() {
		setOp := func(a *api.ContainerAdjustment) { f.set(a, f.key) }
		rmOp := func(a *api.ContainerAdjustment) { f.remove(a, f.key) }
		otherOp := func(a *api.ContainerAdjustment) { f.set(a, f.key+"2") }
		tests := []struct {
			name      string
			first     func(a *api.ContainerAdjustment)
			second    func(a *api.ContainerAdjustment)
			wantErr   string
			wantOwner string
		}{
			{"set then set", setOp, setOp, `plugins "10-a" and "20-b" both adjust ` + f.name + ` "` + f.key + `"`, "10-a"},
			{"set then remove", setOp, rmOp, `plugins "10-a" and "20-b" both adjust ` + f.name + ` "` + f.key + `"`, "10-a"},
			{"remove then set", rmOp, setOp, `plugins "10-a" and "20-b" both adjust ` + f.name + ` "` + f.key + `"`, "-10-a"},
			{"remove then remove", rmOp, rmOp, `plugins "10-a" and "20-b" both adjust ` + f.name + ` "` + f.key + `"`, "-10-a"},
			{"other keys", setOp, otherOp, "", "10-a"},
		}
		for _, tc := range tests {
			t.Run(f.name+"/"+tc.name, func(t *testing.T) {
				m := newMerger(&api.PodSandbox{Id: "pod"}, &api.Container{Id: id})
				if err := m.applyCreate("10-a", mergeTestAdj(tc.first), nil); err != nil {
					t.Fatalf("first plugin: %v", err)
				}
				before := m.adjustment()
				err := m.applyCreate("20-b", mergeTestAdj(tc.second), nil)
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("second plugin: %v", err)
					}
					if owner, _ := f.owner(m.owners(), id, f.key+"2"); owner != "20-b" {
						t.Errorf("owner of other key = %q, want 20-b", owner)
					}
				} else {
					if err == nil || err.Error() != tc.wantErr {
						t.Fatalf("second plugin: error %v, want %q", err, tc.wantErr)
					}
					var ce *mergeConflictError
					if !errors.As(err, &ce) || !errdefs.IsConflict(err) {
						t.Errorf("error %T is not a conflict", err)
					}
					if diff := cmp.Diff(before, m.adjustment(), protocmp.Transform()); diff != "" {
						t.Errorf("rejected response changed the adjustment (-before +after):\n%s", diff)
					}
				}
				if owner, ok := f.owner(m.owners(), id, f.key); !ok || owner != tc.wantOwner {
					t.Errorf("owner = %q, %v, want %q", owner, ok, tc.wantOwner)
				}
			})
		}

		t.Run(f.name+"/same plugin removes then sets", func(t *testing.T) {
			orig := &api.Container{Id: id}
			f.orig(orig, f.key)
			m := newMerger(nil, orig)
			if err := m.applyCreate("10-a", mergeTestAdj(rmOp, setOp), nil); err != nil {
				t.Fatal(err)
			}
			if err := m.applyCreate("10-a", mergeTestAdj(rmOp, setOp), nil); err != nil {
				t.Fatalf("same plugin again: %v", err)
			}
			if owner, _ := f.owner(m.owners(), id, f.key); owner != "10-a" {
				t.Errorf("owner = %q, want 10-a", owner)
			}
			if err := m.applyCreate("20-b", mergeTestAdj(rmOp), nil); err == nil {
				t.Error("another plugin removed the key the first one re-set")
			}
		})

		t.Run(f.name+"/single set is the adjustment", func(t *testing.T) {
			m := newMerger(nil, &api.Container{Id: id})
			if err := m.applyCreate("10-a", mergeTestAdj(setOp), nil); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(mergeTestAdj(setOp), m.adjustment(), protocmp.Transform()); diff != "" {
				t.Errorf("adjustment (-want +got):\n%s", diff)
			}
		})

		t.Run(f.name+"/removal marks", func(t *testing.T) {
			// A removal of an item of the original container reaches the
			// spec applier; one of an item it never had is dropped.
			orig := &api.Container{Id: id}
			f.orig(orig, f.key)
			m := newMerger(nil, orig)
			if err := m.applyCreate("10-a", mergeTestAdj(rmOp), nil); err != nil {
				t.Fatal(err)
			}
			if err := m.applyCreate("20-b", mergeTestAdj(func(a *api.ContainerAdjustment) { f.remove(a, "absent") }), nil); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(mergeTestAdj(rmOp), m.adjustment(), protocmp.Transform()); diff != "" {
				t.Errorf("adjustment (-want +got):\n%s", diff)
			}
			if owner, _ := f.owner(m.owners(), id, "absent"); owner != "-20-b" {
				t.Errorf("owner of removed absent key = %q, want -20-b", owner)
			}
		})
	}
}

// mergeTestScalar describes one simple field of an adjustment.
type mergeTestScalar struct {
	name  string
	set   func(a *api.ContainerAdjustment)
	owner func(o *api.OwningPlugins, id string) (string, bool)
}

func mergeTestScalarFields() []mergeTestScalar {
	oom := -500
	return []mergeTestScalar{
		{"args", func(a *api.ContainerAdjustment) { a.SetArgs([]string{"/bin/sleep", "1"}) }, (*api.OwningPlugins).ArgsOwner},
		{"memory limit", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryLimit(1 << 30) }, (*api.OwningPlugins).MemLimitOwner},
		{"memory reservation", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryReservation(1 << 29) }, (*api.OwningPlugins).MemReservationOwner},
		{"memory swap limit", func(a *api.ContainerAdjustment) { a.SetLinuxMemorySwap(1 << 31) }, (*api.OwningPlugins).MemSwapLimitOwner},
		{"kernel memory limit", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryKernel(1 << 20) }, (*api.OwningPlugins).MemKernelLimitOwner},
		{"kernel TCP memory limit", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryKernelTCP(1 << 20) }, (*api.OwningPlugins).MemTCPLimitOwner},
		{"memory swappiness", func(a *api.ContainerAdjustment) { a.SetLinuxMemorySwappiness(10) }, (*api.OwningPlugins).MemSwappinessOwner},
		{"memory OOM killer disabling", (*api.ContainerAdjustment).SetLinuxMemoryDisableOomKiller, (*api.OwningPlugins).MemDisableOomKillerOwner},
		{"memory hierarchy accounting", (*api.ContainerAdjustment).SetLinuxMemoryUseHierarchy, (*api.OwningPlugins).MemUseHierarchyOwner},
		{"CPU shares", func(a *api.ContainerAdjustment) { a.SetLinuxCPUShares(512) }, (*api.OwningPlugins).CPUSharesOwner},
		{"CPU quota", func(a *api.ContainerAdjustment) { a.SetLinuxCPUQuota(50000) }, (*api.OwningPlugins).CPUQuotaOwner},
		{"CPU period", func(a *api.ContainerAdjustment) { a.SetLinuxCPUPeriod(100000) }, (*api.OwningPlugins).CPUPeriodOwner},
		{"CPU realtime runtime", func(a *api.ContainerAdjustment) { a.SetLinuxCPURealtimeRuntime(900) }, (*api.OwningPlugins).CPURealtimeRuntimeOwner},
		{"CPU realtime period", func(a *api.ContainerAdjustment) { a.SetLinuxCPURealtimePeriod(1000) }, (*api.OwningPlugins).CPURealtimePeriodOwner},
		{"cpuset CPUs", func(a *api.ContainerAdjustment) { a.SetLinuxCPUSetCPUs("0-1") }, (*api.OwningPlugins).CPUSetCPUsOwner},
		{"cpuset memory nodes", func(a *api.ContainerAdjustment) { a.SetLinuxCPUSetMems("0") }, (*api.OwningPlugins).CPUSetMemsOwner},
		{"pids limit", func(a *api.ContainerAdjustment) { a.SetLinuxPidLimits(128) }, (*api.OwningPlugins).PidsLimitOwner},
		{"block I/O class", func(a *api.ContainerAdjustment) { a.SetLinuxBlockIOClass("slow") }, (*api.OwningPlugins).BlockioClassOwner},
		{"RDT class", func(a *api.ContainerAdjustment) { a.SetLinuxRDTClass("gold") }, (*api.OwningPlugins).RdtClassOwner},
		{"cgroups path", func(a *api.ContainerAdjustment) { a.SetLinuxCgroupsPath("/kubepods/x") }, (*api.OwningPlugins).CgroupsPathOwner},
		{"OOM score adjustment", func(a *api.ContainerAdjustment) { a.SetLinuxOomScoreAdj(&oom) }, (*api.OwningPlugins).OomScoreAdjOwner},
		{"I/O priority", func(a *api.ContainerAdjustment) {
			a.SetLinuxIOPriority(&api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE, Priority: 4})
		}, (*api.OwningPlugins).IOPriorityOwner},
		{"seccomp policy", func(a *api.ContainerAdjustment) {
			a.SetLinuxSeccompPolicy(&api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ERRNO"})
		}, (*api.OwningPlugins).SeccompPolicyOwner},
		{"scheduler", func(a *api.ContainerAdjustment) {
			a.SetLinuxScheduler(&api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_BATCH, Nice: 5})
		}, (*api.OwningPlugins).LinuxSchedulerOwner},
		{"RDT CLOS id", func(a *api.ContainerAdjustment) { a.SetLinuxRDTClosID("clos1") }, (*api.OwningPlugins).RdtClosIDOwner},
		{"RDT schemata", func(a *api.ContainerAdjustment) { a.SetLinuxRDTSchemata([]string{"L3:0=f"}) }, (*api.OwningPlugins).RdtSchemataOwner},
		{"RDT monitoring", func(a *api.ContainerAdjustment) { a.SetLinuxRDTEnableMonitoring(true) }, (*api.OwningPlugins).RdtEnableMonitoringOwner},
		{"memory policy", func(a *api.ContainerAdjustment) {
			a.SetLinuxMemoryPolicy(api.MpolMode_MPOL_BIND, "0", api.MpolFlag_MPOL_F_STATIC_NODES)
		}, (*api.OwningPlugins).MemoryPolicyOwner},
	}
}

func TestMergeScalarOwnership(t *testing.T) {
	const id = "ctr-1"
	fields := mergeTestScalarFields()
	for i, f := range fields {
		next := fields[(i+1)%len(fields)]
		t.Run(f.name, func(t *testing.T) {
			m := newMerger(nil, &api.Container{Id: id})
			if err := m.applyCreate("10-a", mergeTestAdj(f.set), nil); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(mergeTestAdj(f.set), m.adjustment(), protocmp.Transform()); diff != "" {
				t.Errorf("adjustment (-want +got):\n%s", diff)
			}
			// Another field is free for another plugin.
			if err := m.applyCreate("15-c", mergeTestAdj(next.set), nil); err != nil {
				t.Errorf("other field %s: %v", next.name, err)
			}
			err := m.applyCreate("20-b", mergeTestAdj(f.set), nil)
			want := `plugins "10-a" and "20-b" both adjust ` + f.name
			if err == nil || err.Error() != want {
				t.Fatalf("error %v, want %q", err, want)
			}
			if !errdefs.IsConflict(err) {
				t.Errorf("error is not a conflict")
			}
			if owner, ok := f.owner(m.owners(), id); !ok || owner != "10-a" {
				t.Errorf("owner = %q, %v, want 10-a", owner, ok)
			}
			if owner, _ := next.owner(m.owners(), id); owner != "15-c" {
				t.Errorf("owner of %s = %q, want 15-c", next.name, owner)
			}
			// The same plugin may set its own field again.
			if err := m.applyCreate("10-a", mergeTestAdj(f.set), nil); err != nil {
				t.Errorf("same plugin again: %v", err)
			}
		})
	}
}

func TestMergeContainerView(t *testing.T) {
	orig := &api.Container{
		Id:          "ctr-1",
		Name:        "app",
		Annotations: map[string]string{"keep": "1", "drop": "1"},
		Args:        []string{"/bin/app"},
		Env:         []string{"PATH=/bin", "DROP=1", "MODE=a=b"},
		Mounts:      []*api.Mount{{Destination: "/data", Source: "/srv/data"}},
		Linux: &api.LinuxContainer{
			Namespaces: []*api.LinuxNamespace{{Type: "pid"}, {Type: "network", Path: "/run/netns/p"}},
			Resources:  &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(100)}},
			Sysctl:     map[string]string{"kernel.msgmax": "1"},
			Rdt:        &api.LinuxRdt{ClosId: api.String("old")},
		},
	}
	pristine := proto.Clone(orig).(*api.Container)
	m := newMerger(&api.PodSandbox{Id: "pod"}, orig)

	hook := &api.Hook{Path: "/bin/hook"}
	a := &api.ContainerAdjustment{}
	a.AddAnnotation("new", "2")
	a.RemoveAnnotation("drop")
	a.AddEnv("FOO", "1")
	a.AddEnv("MODE", "c")
	a.RemoveEnv("DROP")
	a.AddMount(&api.Mount{Destination: "/cache", Source: "/srv/cache"})
	a.RemoveMount("/data")
	a.AddHooks(&api.Hooks{Prestart: []*api.Hook{hook}})
	a.SetArgs([]string{"/bin/app", "-v"})
	a.AddRlimit("RLIMIT_NOFILE", 10, 5)
	a.AddCDIDevice(&api.CDIDevice{Name: "vendor.com/gpu=0"})
	a.AddDevice(&api.LinuxDevice{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229})
	a.SetLinuxMemoryLimit(200)
	a.SetLinuxCPUShares(512)
	a.AddLinuxHugepageLimit("2MB", 4096)
	a.AddLinuxUnified("memory.high", "1G")
	a.SetLinuxPidLimits(64)
	a.RemoveNamespace(&api.LinuxNamespace{Type: "network"})
	a.SetLinuxSysctl("net.core.somaxconn", "1024")
	a.AddLinuxNetDevice("eth1", &api.LinuxNetDevice{Name: "net1"})
	a.SetLinuxSeccompPolicy(&api.LinuxSeccomp{DefaultAction: "SCMP_ACT_LOG"})
	a.SetLinuxScheduler(&api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_IDLE})
	a.SetLinuxIOPriority(&api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_IDLE})
	a.SetLinuxCgroupsPath("/custom")
	oom := 100
	a.SetLinuxOomScoreAdj(&oom)
	a.SetLinuxRDTSchemata([]string{"L3:0=3"})
	if err := m.applyCreate("10-a", a, nil); err != nil {
		t.Fatal(err)
	}

	want := &api.Container{
		Id:          "ctr-1",
		Name:        "app",
		Annotations: map[string]string{"keep": "1", "new": "2"},
		Args:        []string{"/bin/app", "-v"},
		Env:         []string{"PATH=/bin", "MODE=c", "FOO=1"},
		Mounts:      []*api.Mount{{Destination: "/cache", Source: "/srv/cache"}},
		Hooks:       &api.Hooks{Prestart: []*api.Hook{hook}},
		Rlimits:     []*api.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 10, Soft: 5}},
		CDIDevices:  []*api.CDIDevice{{Name: "vendor.com/gpu=0"}},
		Linux: &api.LinuxContainer{
			Namespaces: []*api.LinuxNamespace{{Type: "pid"}},
			Devices:    []*api.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}},
			Resources: &api.LinuxResources{
				Memory:         &api.LinuxMemory{Limit: api.Int64(200)},
				Cpu:            &api.LinuxCPU{Shares: api.UInt64(512)},
				HugepageLimits: []*api.HugepageLimit{{PageSize: "2MB", Limit: 4096}},
				Unified:        map[string]string{"memory.high": "1G"},
				Pids:           &api.LinuxPids{Limit: 64},
			},
			Sysctl:        map[string]string{"kernel.msgmax": "1", "net.core.somaxconn": "1024"},
			NetDevices:    map[string]*api.LinuxNetDevice{"eth1": {Name: "net1"}},
			SeccompPolicy: &api.LinuxSeccomp{DefaultAction: "SCMP_ACT_LOG"},
			Scheduler:     &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_IDLE},
			IoPriority:    &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_IDLE},
			CgroupsPath:   "/custom",
			OomScoreAdj:   &api.OptionalInt{Value: 100},
			Rdt:           &api.LinuxRdt{ClosId: api.String("old"), Schemata: api.RepeatedString([]string{"L3:0=3"})},
		},
	}
	seen := m.container()
	if diff := cmp.Diff(want, seen, protocmp.Transform()); diff != "" {
		t.Errorf("container seen by the next plugin (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pristine, orig, protocmp.Transform()); diff != "" {
		t.Errorf("newMerger input was modified (-pristine +now):\n%s", diff)
	}

	// container() is a copy: a plugin call cannot change the merge.
	seen.Env = nil
	seen.Linux.Resources.Memory.Limit = api.Int64(1)
	if diff := cmp.Diff(want, m.container(), protocmp.Transform()); diff != "" {
		t.Errorf("changing a returned container changed the merger:\n%s", diff)
	}

	// A later plugin builds on the earlier one's view and adds its own.
	b := &api.ContainerAdjustment{}
	b.SetLinuxMemoryReservation(150)
	b.AddEnv("BAR", "2")
	if err := m.applyCreate("20-b", b, nil); err != nil {
		t.Fatal(err)
	}
	got := m.container()
	if gotEnv, wantEnv := got.Env, []string{"PATH=/bin", "MODE=c", "FOO=1", "BAR=2"}; !cmp.Equal(gotEnv, wantEnv) {
		t.Errorf("env = %q, want %q", gotEnv, wantEnv)
	}
	if l, r := got.Linux.Resources.Memory.GetLimit().GetValue(), got.Linux.Resources.Memory.GetReservation().GetValue(); l != 200 || r != 150 {
		t.Errorf("memory limit, reservation = %d, %d, want 200, 150", l, r)
	}
}

func TestMergeAdjustmentExpressesRemovals(t *testing.T) {
	orig := &api.Container{
		Id:          "ctr-1",
		Annotations: map[string]string{"a": "1"},
		Env:         []string{"FOO=old"},
		Mounts:      []*api.Mount{{Destination: "/data"}},
		Linux: &api.LinuxContainer{
			Namespaces: []*api.LinuxNamespace{{Type: "network"}},
			Rdt:        &api.LinuxRdt{ClosId: api.String("x")},
		},
	}
	m := newMerger(nil, orig)

	a := &api.ContainerAdjustment{}
	a.RemoveEnv("FOO")
	a.AddEnv("FOO", "new") // replace the original value
	a.RemoveMount("/data")
	a.RemoveAnnotation("a")
	a.AddAnnotation("a", "2")
	a.RemoveNamespace(&api.LinuxNamespace{Type: "network"})
	a.RemoveLinuxRDT()
	a.SetLinuxRDTClosID("y")
	if err := m.applyCreate("10-a", a, nil); err != nil {
		t.Fatal(err)
	}
	// A plugin that adds and then drops an item of its own leaves nothing.
	b := &api.ContainerAdjustment{}
	b.AddEnv("TMP", "1")
	b.RemoveEnv("TMP")
	if err := m.applyCreate("20-b", b, nil); err != nil {
		t.Fatal(err)
	}

	want := &api.ContainerAdjustment{
		Annotations: map[string]string{"a": "2"},
		Env:         []*api.KeyValue{{Key: "-FOO"}, {Key: "FOO", Value: "new"}},
		Mounts:      []*api.Mount{{Destination: "-/data"}},
		Linux: &api.LinuxContainerAdjustment{
			Namespaces: []*api.LinuxNamespace{{Type: "-network"}},
			Rdt:        &api.LinuxRdt{Remove: true, ClosId: api.String("y")},
		},
	}
	if diff := cmp.Diff(want, m.adjustment(), protocmp.Transform()); diff != "" {
		t.Errorf("adjustment (-want +got):\n%s", diff)
	}
	if owner, _ := m.owners().EnvOwner("ctr-1", "TMP"); owner != "-20-b" {
		t.Errorf("TMP owner = %q, want -20-b", owner)
	}
}

func TestMergeRdtRemovalConflicts(t *testing.T) {
	m := newMerger(nil, &api.Container{Id: "c"})
	a := &api.ContainerAdjustment{}
	a.SetLinuxRDTSchemata([]string{"L3:0=1"})
	if err := m.applyCreate("10-a", a, nil); err != nil {
		t.Fatal(err)
	}
	b := &api.ContainerAdjustment{}
	b.RemoveLinuxRDT()
	err := m.applyCreate("20-b", b, nil)
	if want := `plugins "10-a" and "20-b" both adjust RDT schemata`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	// The rejected removal claimed nothing.
	if owner, ok := m.owners().RdtClosIDOwner("c"); ok {
		t.Errorf("RDT CLOS id owned by %q after a rejected response", owner)
	}
	// A removal of a configuration the container never had is no mark.
	c := &api.ContainerAdjustment{}
	c.RemoveLinuxRDT()
	m2 := newMerger(nil, &api.Container{Id: "c"})
	if err := m2.applyCreate("10-a", c, nil); err != nil {
		t.Fatal(err)
	}
	if got := m2.adjustment(); got.GetLinux().GetRdt() != nil {
		t.Errorf("adjustment has RDT %v for a container without one", got.GetLinux().GetRdt())
	}
}

func TestMergeHooksAccumulate(t *testing.T) {
	m := newMerger(nil, &api.Container{Id: "c", Hooks: &api.Hooks{Poststop: []*api.Hook{{Path: "/orig"}}}})
	h1 := &api.Hook{Path: "/bin/one"}
	h2 := &api.Hook{Path: "/bin/two", Args: []string{"two"}}
	for _, step := range []struct {
		plugin string
		hooks  *api.Hooks
	}{
		{"10-a", &api.Hooks{Prestart: []*api.Hook{h1}, Poststop: []*api.Hook{h1}}},
		{"20-b", &api.Hooks{Prestart: []*api.Hook{h2}, CreateRuntime: []*api.Hook{h2}}},
		{"30-c", &api.Hooks{}}, // no hooks: not a contributor
	} {
		a := &api.ContainerAdjustment{}
		a.AddHooks(step.hooks)
		if err := m.applyCreate(step.plugin, a, nil); err != nil {
			t.Fatalf("%s: %v", step.plugin, err)
		}
	}
	want := &api.Hooks{
		Prestart:      []*api.Hook{h1, h2},
		CreateRuntime: []*api.Hook{h2},
		Poststop:      []*api.Hook{h1},
	}
	if diff := cmp.Diff(want, m.adjustment().GetHooks(), protocmp.Transform()); diff != "" {
		t.Errorf("merged hooks (-want +got):\n%s", diff)
	}
	want.Poststop = append([]*api.Hook{{Path: "/orig"}}, h1)
	if diff := cmp.Diff(want, m.container().GetHooks(), protocmp.Transform()); diff != "" {
		t.Errorf("container hooks (-want +got):\n%s", diff)
	}
	if owner, _ := m.owners().HooksOwner("c"); owner != "10-a,20-b" {
		t.Errorf("hooks owner = %q, want 10-a,20-b", owner)
	}
}

func TestMergeArgsOverride(t *testing.T) {
	m := newMerger(nil, &api.Container{Id: "c", Args: []string{"/bin/app"}})
	a := &api.ContainerAdjustment{}
	a.SetArgs([]string{"/bin/a"})
	if err := m.applyCreate("10-a", a, nil); err != nil {
		t.Fatal(err)
	}
	// UpdateArgs (a leading "") overrides whoever set the command line.
	b := &api.ContainerAdjustment{}
	b.UpdateArgs([]string{"/bin/b", "x"})
	if err := m.applyCreate("20-b", b, nil); err != nil {
		t.Fatalf("forced override: %v", err)
	}
	if got, want := m.adjustment().GetArgs(), []string{"/bin/b", "x"}; !cmp.Equal(got, want) {
		t.Errorf("args = %q, want %q", got, want)
	}
	if got := m.container().GetArgs(); !cmp.Equal(got, []string{"/bin/b", "x"}) {
		t.Errorf("container args = %q", got)
	}
	if owner, _ := m.owners().ArgsOwner("c"); owner != "20-b" {
		t.Errorf("args owner = %q, want 20-b", owner)
	}
	c := &api.ContainerAdjustment{}
	c.SetArgs([]string{"/bin/c"})
	if err := m.applyCreate("30-c", c, nil); err == nil || !strings.Contains(err.Error(), `"20-b" and "30-c" both adjust args`) {
		t.Errorf("plain set after override: error %v", err)
	}
}

// mergeTestUpdate describes one resource an update can carry.
type mergeTestUpdate struct {
	name  string
	set   func(u *api.ContainerUpdate)
	owner func(o *api.OwningPlugins, id string) (string, bool)
}

func mergeTestUpdateFields() []mergeTestUpdate {
	huge := func(o *api.OwningPlugins, id string) (string, bool) { return o.HugepageLimitOwner(id, "1GB") }
	unified := func(o *api.OwningPlugins, id string) (string, bool) { return o.CgroupsUnifiedOwner(id, "cpu.weight") }
	return []mergeTestUpdate{
		{"memory limit", func(u *api.ContainerUpdate) { u.SetLinuxMemoryLimit(1 << 30) }, (*api.OwningPlugins).MemLimitOwner},
		{"memory reservation", func(u *api.ContainerUpdate) { u.SetLinuxMemoryReservation(1) }, (*api.OwningPlugins).MemReservationOwner},
		{"memory swap limit", func(u *api.ContainerUpdate) { u.SetLinuxMemorySwap(1) }, (*api.OwningPlugins).MemSwapLimitOwner},
		{"kernel memory limit", func(u *api.ContainerUpdate) { u.SetLinuxMemoryKernel(1) }, (*api.OwningPlugins).MemKernelLimitOwner},
		{"kernel TCP memory limit", func(u *api.ContainerUpdate) { u.SetLinuxMemoryKernelTCP(1) }, (*api.OwningPlugins).MemTCPLimitOwner},
		{"memory swappiness", func(u *api.ContainerUpdate) { u.SetLinuxMemorySwappiness(1) }, (*api.OwningPlugins).MemSwappinessOwner},
		{"memory OOM killer disabling", (*api.ContainerUpdate).SetLinuxMemoryDisableOomKiller, (*api.OwningPlugins).MemDisableOomKillerOwner},
		{"memory hierarchy accounting", (*api.ContainerUpdate).SetLinuxMemoryUseHierarchy, (*api.OwningPlugins).MemUseHierarchyOwner},
		{"CPU shares", func(u *api.ContainerUpdate) { u.SetLinuxCPUShares(2) }, (*api.OwningPlugins).CPUSharesOwner},
		{"CPU quota", func(u *api.ContainerUpdate) { u.SetLinuxCPUQuota(2) }, (*api.OwningPlugins).CPUQuotaOwner},
		{"CPU period", func(u *api.ContainerUpdate) { u.SetLinuxCPUPeriod(2) }, (*api.OwningPlugins).CPUPeriodOwner},
		{"CPU realtime runtime", func(u *api.ContainerUpdate) { u.SetLinuxCPURealtimeRuntime(2) }, (*api.OwningPlugins).CPURealtimeRuntimeOwner},
		{"CPU realtime period", func(u *api.ContainerUpdate) { u.SetLinuxCPURealtimePeriod(2) }, (*api.OwningPlugins).CPURealtimePeriodOwner},
		{"cpuset CPUs", func(u *api.ContainerUpdate) { u.SetLinuxCPUSetCPUs("1") }, (*api.OwningPlugins).CPUSetCPUsOwner},
		{"cpuset memory nodes", func(u *api.ContainerUpdate) { u.SetLinuxCPUSetMems("1") }, (*api.OwningPlugins).CPUSetMemsOwner},
		{"pids limit", func(u *api.ContainerUpdate) { u.SetLinuxPidLimits(9) }, (*api.OwningPlugins).PidsLimitOwner},
		{"block I/O class", func(u *api.ContainerUpdate) { u.SetLinuxBlockIOClass("x") }, (*api.OwningPlugins).BlockioClassOwner},
		{"RDT class", func(u *api.ContainerUpdate) { u.SetLinuxRDTClass("x") }, (*api.OwningPlugins).RdtClassOwner},
		{`hugepage limit "1GB"`, func(u *api.ContainerUpdate) { u.AddLinuxHugepageLimit("1GB", 1<<30) }, huge},
		{`unified cgroup resource "cpu.weight"`, func(u *api.ContainerUpdate) { u.AddLinuxUnified("cpu.weight", "50") }, unified},
	}
}

func mergeTestUpd(id string, ops ...func(u *api.ContainerUpdate)) *api.ContainerUpdate {
	u := &api.ContainerUpdate{ContainerId: id}
	for _, op := range ops {
		op(u)
	}
	return u
}

func TestMergeUpdates(t *testing.T) {
	fields := mergeTestUpdateFields()
	for i, f := range fields {
		next := fields[(i+1)%len(fields)]
		for _, via := range []string{"applyCreate", "applyUpdates"} {
			t.Run(via+"/"+f.name, func(t *testing.T) {
				m := newMerger(nil, &api.Container{Id: "new"})
				apply := func(plugin string, u ...*api.ContainerUpdate) error {
					if via == "applyCreate" {
						return m.applyCreate(plugin, nil, u)
					}
					return m.applyUpdates(plugin, u)
				}
				if err := apply("10-a", mergeTestUpd("c2", f.set), mergeTestUpd("c3", f.set)); err != nil {
					t.Fatal(err)
				}
				// Another field of c2, and the same field of c4: no conflict.
				if err := apply("20-b", mergeTestUpd("c2", next.set), mergeTestUpd("c4", f.set)); err != nil {
					t.Fatalf("second plugin: %v", err)
				}
				err := apply("30-c", mergeTestUpd("c3", f.set))
				want := `plugins "10-a" and "30-c" both update ` + f.name + ` of container "c3"`
				if err == nil || err.Error() != want {
					t.Fatalf("error %v, want %q", err, want)
				}
				if !errdefs.IsConflict(err) {
					t.Errorf("error is not a conflict")
				}
				wantUpds := []*api.ContainerUpdate{
					mergeTestUpd("c2", f.set, next.set),
					mergeTestUpd("c3", f.set),
					mergeTestUpd("c4", f.set),
				}
				if diff := cmp.Diff(wantUpds, m.updates(), protocmp.Transform()); diff != "" {
					t.Errorf("updates (-want +got):\n%s", diff)
				}
				own := m.owners()
				for _, c := range []struct{ id, owner string }{{"c2", "10-a"}, {"c3", "10-a"}, {"c4", "20-b"}} {
					if got, _ := f.owner(own, c.id); got != c.owner {
						t.Errorf("%s owner of %s = %q, want %q", c.id, f.name, got, c.owner)
					}
				}
				if got, _ := next.owner(own, "c2"); got != "20-b" {
					t.Errorf("c2 owner of %s = %q, want 20-b", next.name, got)
				}
			})
		}
	}
}

func TestMergeUpdateRules(t *testing.T) {
	limit := func(u *api.ContainerUpdate) { u.SetLinuxMemoryLimit(5) }
	t.Run("update of the container being created", func(t *testing.T) {
		m := newMerger(nil, &api.Container{Id: "new"})
		a := &api.ContainerAdjustment{}
		a.AddEnv("X", "1")
		err := m.applyCreate("10-a", a, []*api.ContainerUpdate{mergeTestUpd("new", limit)})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `plugin "10-a"`) || !strings.Contains(err.Error(), `"new"`) {
			t.Fatalf("error %v, want invalid argument naming plugin and container", err)
		}
		if got := m.adjustment(); len(got.GetEnv()) != 0 {
			t.Errorf("rejected response merged: %v", got)
		}
	})
	t.Run("update without container", func(t *testing.T) {
		m := newMerger(nil, &api.Container{Id: "new"})
		if err := m.applyUpdates("10-a", []*api.ContainerUpdate{mergeTestUpd("", limit)}); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("error %v, want invalid argument", err)
		}
	})
	t.Run("ignore failure only if every plugin does", func(t *testing.T) {
		m := newMerger(nil, &api.Container{Id: "new"})
		ign := func(u *api.ContainerUpdate) { u.SetIgnoreFailure() }
		cpu := func(u *api.ContainerUpdate) { u.SetLinuxCPUShares(3) }
		if err := m.applyUpdates("10-a", []*api.ContainerUpdate{mergeTestUpd("c2", limit, ign), mergeTestUpd("c3", limit, ign)}); err != nil {
			t.Fatal(err)
		}
		if err := m.applyUpdates("20-b", []*api.ContainerUpdate{mergeTestUpd("c2", cpu), mergeTestUpd("c3", cpu, ign)}); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, u := range m.updates() {
			got[u.GetContainerId()] = u.GetIgnoreFailure()
		}
		if want := map[string]bool{"c2": false, "c3": true}; !cmp.Equal(got, want) {
			t.Errorf("ignore failure = %v, want %v", got, want)
		}
	})
	t.Run("update of own container in UpdateContainer", func(t *testing.T) {
		m := newMerger(nil, &api.Container{Id: "c1", Linux: &api.LinuxContainer{
			Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(2)}},
		}})
		if err := m.applyUpdates("10-a", []*api.ContainerUpdate{mergeTestUpd("c1", limit)}); err != nil {
			t.Fatal(err)
		}
		res := m.container().GetLinux().GetResources()
		if res.GetMemory().GetLimit().GetValue() != 5 || res.GetCpu().GetShares().GetValue() != 2 {
			t.Errorf("container resources = %v, want limit 5 and shares 2", res)
		}
		if err := m.applyUpdates("20-b", []*api.ContainerUpdate{mergeTestUpd("c1", limit)}); err == nil {
			t.Error("second plugin updating the same field of c1 succeeded")
		}
	})
	t.Run("no updates", func(t *testing.T) {
		m := newMerger(nil, nil)
		if err := m.applyCreate("10-a", nil, nil); err != nil {
			t.Fatal(err)
		}
		if got := m.updates(); len(got) != 0 {
			t.Errorf("updates = %v", got)
		}
		if got := m.adjustment(); got == nil || proto.Size(got) != 0 {
			t.Errorf("adjustment = %v, want empty", got)
		}
		if got := m.owners(); got == nil {
			t.Error("owners is nil")
		}
	})
}

func TestMergeRejectsKeylessItems(t *testing.T) {
	tests := []struct {
		name string
		adj  *api.ContainerAdjustment
	}{
		{"env", &api.ContainerAdjustment{Env: []*api.KeyValue{{Value: "x"}}}},
		{"removed env", &api.ContainerAdjustment{Env: []*api.KeyValue{{Key: "-"}}}},
		{"mount", &api.ContainerAdjustment{Mounts: []*api.Mount{nil}}},
		{"annotation", &api.ContainerAdjustment{Annotations: map[string]string{"": "x"}}},
		{"sysctl", &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Sysctl: map[string]string{"-": ""}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMerger(nil, &api.Container{Id: "c"})
			err := m.applyCreate("10-a", tc.adj, nil)
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `plugin "10-a"`) {
				t.Fatalf("error %v, want invalid argument naming the plugin", err)
			}
		})
	}
}

func TestMergeOwnersForValidators(t *testing.T) {
	m := newMerger(nil, &api.Container{Id: "c1"})
	a := &api.ContainerAdjustment{}
	a.AddEnv("A", "1")
	a.SetLinuxCPUShares(100)
	if err := m.applyCreate("10-a", a, []*api.ContainerUpdate{mergeTestUpd("c2", func(u *api.ContainerUpdate) { u.SetLinuxCPUShares(5) })}); err != nil {
		t.Fatal(err)
	}
	b := &api.ContainerAdjustment{}
	b.RemoveAnnotation("x")
	if err := m.applyCreate("20-b", b, nil); err != nil {
		t.Fatal(err)
	}
	own := m.owners()
	checks := []struct {
		name string
		got  func() (string, bool)
		want string
	}{
		{"env of c1", func() (string, bool) { return own.EnvOwner("c1", "A") }, "10-a"},
		{"cpu shares of c1", func() (string, bool) { return own.CPUSharesOwner("c1") }, "10-a"},
		{"removed annotation of c1", func() (string, bool) { return own.AnnotationOwner("c1", "x") }, "-20-b"},
		{"cpu shares of c2", func() (string, bool) { return own.CPUSharesOwner("c2") }, "10-a"},
	}
	for _, c := range checks {
		if got, ok := c.got(); !ok || got != c.want {
			t.Errorf("%s: owner %q, %v, want %q", c.name, got, ok, c.want)
		}
	}
	// owners() is a copy.
	own.Owners["c1"] = nil
	if got, _ := m.owners().EnvOwner("c1", "A"); got != "10-a" {
		t.Errorf("changing returned owners changed the merger: %q", got)
	}
}
