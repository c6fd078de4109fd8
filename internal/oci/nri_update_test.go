package oci

import (
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// curResources are a running container's resources on a cgroup v1 host.
func curResources() *specs.LinuxResources {
	return &specs.LinuxResources{
		Devices: defaultDeviceRules(),
		Memory: &specs.LinuxMemory{
			Limit: new(int64(64 << 20)), Swappiness: new(uint64(60)), UseHierarchy: new(true),
		},
		CPU:            &specs.LinuxCPU{Shares: new(uint64(512)), Cpus: "0-3"},
		HugepageLimits: []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 1 << 20}},
		BlockIO:        &specs.LinuxBlockIO{Weight: new(uint16(500))},
	}
}

func TestApplyUpdate(t *testing.T) {
	memsw := memswFile(t)
	cur := curResources()
	upd := &api.LinuxResources{
		Memory: &api.LinuxMemory{
			Limit: api.Int64(int64(128 << 20)), Reservation: api.Int64(int64(32 << 20)), Swap: api.Int64(int64(256 << 20)),
			KernelTcp: api.Int64(int64(8 << 20)),
			// Unchanged values of what runc update cannot change are fine.
			Swappiness: api.UInt64(uint64(60)), UseHierarchy: api.Bool(true), DisableOomKiller: api.Bool(false),
		},
		Cpu: &api.LinuxCPU{
			Shares: api.UInt64(uint64(256)), Quota: api.Int64(int64(20000)), Period: api.UInt64(uint64(100000)),
			RealtimeRuntime: api.Int64(int64(1000)), RealtimePeriod: api.UInt64(uint64(100000)), Mems: "0",
		},
		HugepageLimits: []*api.HugepageLimit{{PageSize: "2MB", Limit: 1 << 20}},
		Pids:           &api.LinuxPids{Limit: 50},
		BlockioClass:   api.String("gold"),
		Devices:        NRIResources(cur).Devices,
	}
	o := UpdateOptions{
		ContainerID: testCtr, Plugin: "10-a", Features: runc115Features(t), RuntimeName: "runc", Host: hostV1, memswFile: memsw,
		BlockioClass: func(string) (*specs.LinuxBlockIO, error) { return &specs.LinuxBlockIO{Weight: new(uint16(900))}, nil },
	}
	got, err := ApplyUpdate(cur, upd, o)
	if err != nil {
		t.Fatal(err)
	}
	want := curResources()
	want.Memory = &specs.LinuxMemory{
		Limit: new(int64(128 << 20)), Reservation: new(int64(32 << 20)), Swap: new(int64(256 << 20)), KernelTCP: new(int64(8 << 20)),
		Swappiness: new(uint64(60)), UseHierarchy: new(true), DisableOOMKiller: new(false),
	}
	want.CPU = &specs.LinuxCPU{
		Shares: new(uint64(256)), Quota: new(int64(20000)), Period: new(uint64(100000)),
		RealtimeRuntime: new(int64(1000)), RealtimePeriod: new(uint64(100000)), Cpus: "0-3", Mems: "0",
	}
	want.Pids = &specs.LinuxPids{Limit: new(int64(50))}
	want.BlockIO = &specs.LinuxBlockIO{Weight: new(uint16(900))}
	diff(t, "updated resources", got, want)
	diff(t, "current resources after the update", cur, curResources())

	t.Run("unified on cgroup v2", func(t *testing.T) {
		got, err := ApplyUpdate(nil, &api.LinuxResources{Unified: map[string]string{"memory.high": "max"}}, UpdateOptions{Host: hostV2})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "unified", got.Unified, map[string]string{"memory.high": "max"})
	})
	t.Run("nil update", func(t *testing.T) {
		got, err := ApplyUpdate(cur, nil, UpdateOptions{Host: hostV1})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "resources", got, curResources())
	})
}

func TestApplyUpdateRefusals(t *testing.T) {
	memsw := memswFile(t)
	weightOnly := func(string) (*specs.LinuxBlockIO, error) { return &specs.LinuxBlockIO{Weight: new(uint16(10))}, nil }
	throttle := func(string) (*specs.LinuxBlockIO, error) {
		return &specs.LinuxBlockIO{ThrottleReadBpsDevice: []specs.LinuxThrottleDevice{{Rate: 1 << 20}}}, nil
	}
	tests := []struct {
		name    string
		upd     *api.LinuxResources
		host    *Host
		blockio func(string) (*specs.LinuxBlockIO, error)
		want    error
		field   string
	}{
		{"swappiness changed", &api.LinuxResources{Memory: &api.LinuxMemory{Swappiness: api.UInt64(uint64(10))}}, hostV1, nil,
			errdefs.ErrNotImplemented, "linux.resources.memory.swappiness: runc update cannot change it on a running container (current 60, wanted 10)"},
		{"OOM killer disabled", &api.LinuxResources{Memory: &api.LinuxMemory{DisableOomKiller: api.Bool(true)}}, hostV1, nil,
			errdefs.ErrNotImplemented, "linux.resources.memory.disableOOMKiller"},
		{"use_hierarchy changed", &api.LinuxResources{Memory: &api.LinuxMemory{UseHierarchy: api.Bool(false)}}, hostV1, nil,
			errdefs.ErrNotImplemented, "linux.resources.memory.useHierarchy"},
		{"hugepage limit changed", &api.LinuxResources{HugepageLimits: []*api.HugepageLimit{{PageSize: "2MB", Limit: 2 << 20}}}, hostV1, nil,
			errdefs.ErrNotImplemented, `linux.resources.hugepageLimits["2MB"]`},
		{"hugepage limit added", &api.LinuxResources{HugepageLimits: []*api.HugepageLimit{{PageSize: "1GB", Limit: 1 << 30}}}, hostV1, nil,
			errdefs.ErrNotImplemented, `linux.resources.hugepageLimits["1GB"]: runc update cannot change it on a running container (current unset`},
		{"device rules changed", &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}, hostV1, nil,
			errdefs.ErrNotImplemented, "linux.resources.devices"},
		{"blockio beyond weight", &api.LinuxResources{BlockioClass: api.String("slow")}, hostV1, throttle,
			errdefs.ErrNotImplemented, `linux.resources.blockio_class "slow": runc update can change only the block I/O weight`},
		{"blockio class unconfigured", &api.LinuxResources{BlockioClass: api.String("slow")}, hostV1, nil,
			errdefs.ErrNotImplemented, `linux.resources.blockio_class "slow": no block I/O classes`},
		{"RDT class", &api.LinuxResources{RdtClass: api.String("gold")}, hostV1, weightOnly,
			errdefs.ErrNotImplemented, `linux.resources.rdt_class "gold"`},
		{"kernel memory", &api.LinuxResources{Memory: &api.LinuxMemory{Kernel: api.Int64(int64(1 << 20))}}, hostV1, nil,
			errdefs.ErrNotImplemented, "linux.resources.memory.kernel"},
		{"unified on cgroup v1", &api.LinuxResources{Unified: map[string]string{"memory.high": "1"}}, hostV1, nil,
			errdefs.ErrNotImplemented, `linux.resources.unified["memory.high"]`},
		{"bad shares", &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(0))}}, hostV1, nil,
			errdefs.ErrInvalidArgument, "linux.resources.cpu.shares 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := curResources()
			_, err := ApplyUpdate(cur, tc.upd, UpdateOptions{
				ContainerID: testCtr, Plugin: "10-a, 20-b", RuntimeName: "runc", Host: tc.host,
				BlockioClass: tc.blockio, memswFile: memsw,
			})
			t.Log(err)
			checkRefusal(t, err, tc.want, `nri plugin "10-a, 20-b" updates `, tc.field)
			diff(t, "current resources", cur, curResources())
		})
	}
	_, err := ApplyUpdate(curResources(), &api.LinuxResources{Memory: &api.LinuxMemory{Swappiness: api.UInt64(uint64(1))}}, UpdateOptions{Host: hostV1})
	checkRefusal(t, err, errdefs.ErrNotImplemented, "an NRI plugin updates ", "the OCI runtime update cannot change")
}

// Errors name the plugin that owns the field when the update came with
// owners, else Plugin, else the NRI request it came with.
func TestApplyUpdateNamesThePlugin(t *testing.T) {
	owners := api.NewOwningPlugins()
	if err := owners.ClaimCPUShares(testCtr, "30-cpu"); err != nil {
		t.Fatal(err)
	}
	if err := owners.ClaimCPUShares("other", "40-else"); err != nil {
		t.Fatal(err)
	}
	bad := &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(1))}}
	tests := []struct {
		name string
		o    UpdateOptions
		who  string
	}{
		{"owner of the field", UpdateOptions{ContainerID: testCtr, Owners: owners, Plugin: "fallback", Request: "CreateContainer"}, `nri plugin "30-cpu" updates `},
		{"no owner for this container", UpdateOptions{ContainerID: "third", Owners: owners, Plugin: "10-a"}, `nri plugin "10-a" updates `},
		{"request only", UpdateOptions{ContainerID: testCtr, Request: "UpdateContainers"}, "an NRI plugin's UpdateContainers updates "},
		{"nothing known", UpdateOptions{ContainerID: testCtr}, "an NRI plugin updates "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Host = hostV1
			_, err := ApplyUpdate(curResources(), bad, tc.o)
			checkRefusal(t, err, errdefs.ErrInvalidArgument, tc.who, "linux.resources.cpu.shares 1")
		})
	}
}

func TestApplyUpdateMemoryEdges(t *testing.T) {
	t.Run("kernel 0 is no limit", func(t *testing.T) {
		got, err := ApplyUpdate(curResources(), &api.LinuxResources{Memory: &api.LinuxMemory{Kernel: api.Int64(int64(0))}}, UpdateOptions{Host: hostV1})
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "resources", got, curResources())
	})
	t.Run("use_hierarchy true on cgroup v2 when unset", func(t *testing.T) {
		cur := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: new(int64(1 << 20))}}
		got, err := ApplyUpdate(cur, &api.LinuxResources{Memory: &api.LinuxMemory{UseHierarchy: api.Bool(true)}}, UpdateOptions{Host: hostV2})
		if err != nil {
			t.Fatalf("use_hierarchy true on cgroup v2: %v", err)
		}
		if got.Memory.Limit == nil || *got.Memory.Limit != 1<<20 {
			t.Errorf("memory limit = %v, want it kept", got.Memory.Limit)
		}
	})
	t.Run("use_hierarchy false on cgroup v2 when unset", func(t *testing.T) {
		_, err := ApplyUpdate(&specs.LinuxResources{}, &api.LinuxResources{Memory: &api.LinuxMemory{UseHierarchy: api.Bool(false)}}, UpdateOptions{Host: hostV2})
		checkRefusal(t, err, errdefs.ErrNotImplemented, "an NRI plugin updates ", "linux.resources.memory.useHierarchy")
	})
	t.Run("use_hierarchy true on cgroup v1 when unset", func(t *testing.T) {
		_, err := ApplyUpdate(&specs.LinuxResources{}, &api.LinuxResources{Memory: &api.LinuxMemory{UseHierarchy: api.Bool(true)}}, UpdateOptions{Host: hostV1})
		checkRefusal(t, err, errdefs.ErrNotImplemented, "an NRI plugin updates ", "linux.resources.memory.useHierarchy")
	})
}
