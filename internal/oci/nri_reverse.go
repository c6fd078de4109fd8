package oci

import (
	"maps"
	"slices"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// NRIContainer fills the spec-derived fields of c (args, env, mounts,
// hooks, rlimits, user, linux: namespaces, devices, resources, oom score
// adj, cgroups path, io priority, seccomp, sysctls, scheduler, RDT,
// memory policy, net devices) from s. The memory policy is not filled:
// api.LinuxContainer (v0.12) has no field for it. Fields not in the spec
// (ids, labels, annotations, state, seccomp profile, image) are left to
// the caller.
func NRIContainer(s *specs.Spec, c *api.Container) {
	if s == nil || c == nil {
		return
	}
	if p := s.Process; p != nil {
		c.Args = slices.Clone(p.Args)
		c.Env = slices.Clone(p.Env)
		c.Rlimits = nil
		for _, r := range p.Rlimits {
			c.Rlimits = append(c.Rlimits, &api.POSIXRlimit{Type: r.Type, Hard: r.Hard, Soft: r.Soft})
		}
		c.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: slices.Clone(p.User.AdditionalGids)}
	}
	c.Mounts = api.FromOCIMounts(s.Mounts)
	c.Hooks = api.FromOCIHooks(s.Hooks).Hooks()
	l := s.Linux
	if l == nil && s.Process == nil {
		return
	}
	lc := &api.LinuxContainer{}
	if l != nil {
		lc.Namespaces = api.FromOCILinuxNamespaces(l.Namespaces)
		lc.Devices = api.FromOCILinuxDevices(l.Devices)
		lc.Resources = NRIResources(l.Resources)
		lc.CgroupsPath = l.CgroupsPath
		if l.Seccomp != nil {
			lc.SeccompPolicy = api.FromOCILinuxSeccomp(l.Seccomp)
		}
		lc.Sysctl = maps.Clone(l.Sysctl)
		lc.NetDevices = api.FromOCILinuxNetDevices(l.NetDevices)
		if r := l.IntelRdt; r != nil {
			lc.Rdt = &api.LinuxRdt{}
			if r.ClosID != "" {
				lc.Rdt.ClosId = api.String(r.ClosID)
			}
			if len(r.Schemata) > 0 {
				lc.Rdt.Schemata = api.RepeatedString(slices.Clone(r.Schemata))
			}
			if r.EnableMonitoring {
				lc.Rdt.EnableMonitoring = api.Bool(true)
			}
		}
	}
	if p := s.Process; p != nil {
		lc.OomScoreAdj = api.Int(p.OOMScoreAdj)
		lc.IoPriority = api.FromOCILinuxIOPriority(p.IOPriority)
		lc.Scheduler = api.FromOCILinuxScheduler(p.Scheduler)
	}
	c.Linux = lc
}

// NRIResources converts OCI resources to NRI's; nil gives nil. Block I/O
// and RDT settings have no NRI counterpart but their class names, which a
// spec does not record.
func NRIResources(r *specs.LinuxResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	out := &api.LinuxResources{}
	if m := r.Memory; m != nil {
		out.Memory = &api.LinuxMemory{
			Limit:            api.Int64(m.Limit),
			Reservation:      api.Int64(m.Reservation),
			Swap:             api.Int64(m.Swap),
			Kernel:           api.Int64(m.Kernel), //nolint:staticcheck // shown as the spec has it
			KernelTcp:        api.Int64(m.KernelTCP),
			Swappiness:       api.UInt64(m.Swappiness),
			DisableOomKiller: api.Bool(m.DisableOOMKiller),
			UseHierarchy:     api.Bool(m.UseHierarchy),
		}
	}
	if c := r.CPU; c != nil {
		out.Cpu = &api.LinuxCPU{
			Shares:          api.UInt64(c.Shares),
			Quota:           api.Int64(c.Quota),
			Period:          api.UInt64(c.Period),
			RealtimeRuntime: api.Int64(c.RealtimeRuntime),
			RealtimePeriod:  api.UInt64(c.RealtimePeriod),
			Cpus:            c.Cpus,
			Mems:            c.Mems,
		}
	}
	for _, h := range r.HugepageLimits {
		out.HugepageLimits = append(out.HugepageLimits, &api.HugepageLimit{PageSize: h.Pagesize, Limit: h.Limit})
	}
	out.Unified = maps.Clone(r.Unified)
	for _, d := range r.Devices {
		out.Devices = append(out.Devices, &api.LinuxDeviceCgroup{
			Allow: d.Allow, Type: d.Type, Major: api.Int64(d.Major), Minor: api.Int64(d.Minor), Access: d.Access,
		})
	}
	if p := r.Pids; p != nil && p.Limit != nil {
		out.Pids = &api.LinuxPids{Limit: *p.Limit}
	}
	return out
}

// NRIPodLinux fills the spec-derived linux fields of a pod (namespaces,
// cgroups path, resources) from its infra container's spec. The pod's
// CRI resources, overhead and cgroup parent are the caller's to fill.
func NRIPodLinux(s *specs.Spec) *api.LinuxPodSandbox {
	if s == nil || s.Linux == nil {
		return nil
	}
	return &api.LinuxPodSandbox{
		CgroupsPath: s.Linux.CgroupsPath,
		Namespaces:  api.FromOCILinuxNamespaces(s.Linux.Namespaces),
		Resources:   NRIResources(s.Linux.Resources),
	}
}
