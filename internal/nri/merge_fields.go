package nri

import (
	"fmt"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

// mergeAdjustment merges one plugin's adjustment of the container being
// created into the merged adjustment and the adjusted container.
func (m *merger) mergeAdjustment(plugin string, in *api.ContainerAdjustment) error {
	if in == nil || proto.Size(in) == 0 {
		return nil
	}
	// The merger owns in (applyCreate's contract): its parts are kept
	// without copies.
	c := m.createCall(plugin)
	ctr, out := m.liveCtr(), m.adjusting()

	// Plain steps, not a slice of closures, and the list helpers only for
	// fields the plugin set: this runs once per plugin and CreateContainer,
	// and every closure is an allocation.
	if err := mergeMap(c, api.Field_Annotations, in.GetAnnotations(), &out.Annotations, &ctr.Annotations); err != nil {
		return err
	}
	if len(in.GetMounts()) > 0 {
		if err := mergeList(c, api.Field_Mounts, in.GetMounts(), (*api.Mount).GetDestination,
			func(k string) *api.Mount { return &api.Mount{Destination: k} },
			&out.Mounts, mergeLiveSlice(&ctr.Mounts, (*api.Mount).GetDestination)); err != nil {
			return err
		}
	}
	if len(in.GetEnv()) > 0 {
		if err := mergeList(c, api.Field_Env, in.GetEnv(), (*api.KeyValue).GetKey,
			func(k string) *api.KeyValue { return &api.KeyValue{Key: k} },
			&out.Env, mergeLiveEnv(&ctr.Env)); err != nil {
			return err
		}
	}
	if h := in.GetHooks().Hooks(); h != nil {
		c.accumulate(api.Field_OciHooks)
		if out.Hooks == nil {
			out.Hooks = &api.Hooks{}
		}
		out.Hooks.Append(h)
		if ctr.Hooks == nil {
			ctr.Hooks = &api.Hooks{}
		}
		ctr.Hooks.Append(h)
	}
	if err := c.args(in.GetArgs()); err != nil {
		return err
	}
	if len(in.GetRlimits()) > 0 {
		if err := mergeList(c, api.Field_Rlimits, in.GetRlimits(), (*api.POSIXRlimit).GetType,
			func(k string) *api.POSIXRlimit { return &api.POSIXRlimit{Type: k} },
			&out.Rlimits, mergeLiveSlice(&ctr.Rlimits, (*api.POSIXRlimit).GetType)); err != nil {
			return err
		}
	}
	if len(in.GetCDIDevices()) > 0 {
		if err := mergeList(c, api.Field_CdiDevices, in.GetCDIDevices(), (*api.CDIDevice).GetName,
			func(k string) *api.CDIDevice { return &api.CDIDevice{Name: k} },
			&out.CDIDevices, mergeLiveSlice(&ctr.CDIDevices, (*api.CDIDevice).GetName)); err != nil {
			return err
		}
	}
	return c.linux(in.GetLinux())
}

// args merges a command line. A leading empty argument (api's UpdateArgs)
// asks to override the command line even if another plugin set it: the
// plugin takes the ownership over.
func (c *mergeCall) args(args []string) error {
	if len(args) == 0 {
		return nil
	}
	if args[0] == "" {
		args = args[1:]
		if len(args) == 0 {
			return nil
		}
		c.fo.Simple[api.Field_Args.Key()] = c.plugin
	} else if err := c.claim(api.Field_Args, ""); err != nil {
		return err
	}
	c.m.st.adj.Args = slices.Clone(args)
	c.m.st.ctr.Args = slices.Clone(args)
	return nil
}

// linux merges the Linux part of an adjustment.
func (c *mergeCall) linux(in *api.LinuxContainerAdjustment) error {
	if in == nil {
		return nil
	}
	ctr, adj := c.m.st.ctr, c.m.st.adj
	if ctr.Linux == nil {
		ctr.Linux = &api.LinuxContainer{}
	}
	if adj.Linux == nil {
		adj.Linux = &api.LinuxContainerAdjustment{}
	}
	cl, ol := ctr.Linux, adj.Linux

	steps := []func() error{
		func() error {
			return mergeList(c, api.Field_Devices, in.GetDevices(), (*api.LinuxDevice).GetPath,
				func(k string) *api.LinuxDevice { return &api.LinuxDevice{Path: k} },
				&ol.Devices, mergeLiveSlice(&cl.Devices, (*api.LinuxDevice).GetPath))
		},
		func() error {
			if in.Resources == nil {
				return nil
			}
			if ol.Resources == nil {
				ol.Resources = &api.LinuxResources{}
			}
			if cl.Resources == nil {
				cl.Resources = &api.LinuxResources{}
			}
			return c.resources(in.Resources, ol.Resources, cl.Resources)
		},
		func() error {
			return c.set(api.Field_CgroupsPath, in.CgroupsPath != "", func() {
				ol.CgroupsPath, cl.CgroupsPath = in.CgroupsPath, in.CgroupsPath
			})
		},
		func() error {
			return c.set(api.Field_OomScoreAdj, in.OomScoreAdj != nil, func() {
				ol.OomScoreAdj, cl.OomScoreAdj = in.OomScoreAdj, in.OomScoreAdj
			})
		},
		func() error {
			return c.set(api.Field_IoPriority, in.IoPriority != nil, func() {
				ol.IoPriority, cl.IoPriority = in.IoPriority, in.IoPriority
			})
		},
		func() error {
			return c.set(api.Field_SeccompPolicy, in.SeccompPolicy != nil, func() {
				ol.SeccompPolicy, cl.SeccompPolicy = in.SeccompPolicy, in.SeccompPolicy
			})
		},
		func() error {
			return mergeList(c, api.Field_Namespace, in.GetNamespaces(), (*api.LinuxNamespace).GetType,
				func(k string) *api.LinuxNamespace { return &api.LinuxNamespace{Type: k} },
				&ol.Namespaces, mergeLiveSlice(&cl.Namespaces, (*api.LinuxNamespace).GetType))
		},
		func() error { return mergeMap(c, api.Field_Sysctl, in.GetSysctl(), &ol.Sysctl, &cl.Sysctl) },
		func() error {
			return mergeMap(c, api.Field_LinuxNetDevices, in.GetNetDevices(), &ol.NetDevices, &cl.NetDevices)
		},
		func() error {
			return c.set(api.Field_LinuxSched, in.Scheduler != nil, func() {
				ol.Scheduler, cl.Scheduler = in.Scheduler, in.Scheduler
			})
		},
		func() error { return c.rdt(in.Rdt, ol, cl) },
		func() error {
			// The api's Container carries no memory policy: only the
			// merged adjustment records it.
			return c.set(api.Field_MemoryPolicy, in.MemoryPolicy != nil, func() {
				ol.MemoryPolicy = in.MemoryPolicy
			})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// rdt merges the RDT configuration: its removal first (it claims every RDT
// field, as it drops them all), then each field that is set.
func (c *mergeCall) rdt(in *api.LinuxRdt, ol *api.LinuxContainerAdjustment, cl *api.LinuxContainer) error {
	if in == nil {
		return nil
	}
	if in.Remove {
		for _, f := range []api.Field{api.Field_RdtClosID, api.Field_RdtSchemata, api.Field_RdtEnableMonitoring} {
			if err := c.claimRemoval(f, ""); err != nil {
				return err
			}
		}
		cl.Rdt = nil
		// Only a configuration the container had needs removing.
		ol.Rdt = &api.LinuxRdt{Remove: c.m.orig.GetLinux().GetRdt() != nil}
	}
	ensure := func() {
		if ol.Rdt == nil {
			ol.Rdt = &api.LinuxRdt{}
		}
		if cl.Rdt == nil {
			cl.Rdt = &api.LinuxRdt{}
		}
	}
	if err := c.set(api.Field_RdtClosID, in.ClosId != nil, func() {
		ensure()
		ol.Rdt.ClosId, cl.Rdt.ClosId = in.ClosId, in.ClosId
	}); err != nil {
		return err
	}
	if err := c.set(api.Field_RdtSchemata, in.Schemata != nil, func() {
		ensure()
		ol.Rdt.Schemata, cl.Rdt.Schemata = in.Schemata, in.Schemata
	}); err != nil {
		return err
	}
	return c.set(api.Field_RdtEnableMonitoring, in.EnableMonitoring != nil, func() {
		ensure()
		ol.Rdt.EnableMonitoring, cl.Rdt.EnableMonitoring = in.EnableMonitoring, in.EnableMonitoring
	})
}

// set claims the simple field f if the response sets it, then applies it.
func (c *mergeCall) set(f api.Field, present bool, apply func()) error {
	if !present {
		return nil
	}
	if err := c.claim(f, ""); err != nil {
		return err
	}
	apply()
	return nil
}

// resources merges Linux resources into out (the merged adjustment or
// update) and live (the adjusted container's resources; nil when the
// container is not the merger's own).
func (c *mergeCall) resources(in, out, live *api.LinuxResources) error {
	var liveMem **api.LinuxMemory
	var liveCPU **api.LinuxCPU
	if live != nil {
		liveMem, liveCPU = &live.Memory, &live.Cpu
	}
	if err := mergeScalars(c, memoryFields(), in.Memory, &out.Memory, liveMem); err != nil {
		return err
	}
	if err := mergeScalars(c, cpuFields(), in.Cpu, &out.Cpu, liveCPU); err != nil {
		return err
	}

	var (
		liveHuge    mergeLive[*api.HugepageLimit]
		liveUnified *map[string]string
	)
	if live != nil {
		liveHuge = mergeLiveSlice(&live.HugepageLimits, (*api.HugepageLimit).GetPageSize)
		liveUnified = &live.Unified
	}
	if err := mergeList(c, api.Field_HugepageLimits, in.HugepageLimits, (*api.HugepageLimit).GetPageSize,
		func(k string) *api.HugepageLimit { return &api.HugepageLimit{PageSize: k} },
		&out.HugepageLimits, liveHuge); err != nil {
		return err
	}
	if err := mergeMap(c, api.Field_CgroupsUnified, in.Unified, &out.Unified, liveUnified); err != nil {
		return err
	}
	if err := c.set(api.Field_BlockioClass, in.BlockioClass != nil, func() {
		out.BlockioClass = in.BlockioClass
		if live != nil {
			live.BlockioClass = in.BlockioClass
		}
	}); err != nil {
		return err
	}
	if err := c.set(api.Field_RdtClass, in.RdtClass != nil, func() {
		out.RdtClass = in.RdtClass
		if live != nil {
			live.RdtClass = in.RdtClass
		}
	}); err != nil {
		return err
	}
	if err := c.set(api.Field_PidsLimit, in.Pids != nil, func() {
		out.Pids = in.Pids
		if live != nil {
			live.Pids = in.Pids
		}
	}); err != nil {
		return err
	}
	// Device cgroup rules (NRI v1 emulation) have no field to own: like
	// OCI hooks they accumulate, in plugin order.
	out.Devices = append(out.Devices, in.Devices...)
	if live != nil {
		live.Devices = append(live.Devices, in.Devices...)
	}
	return nil
}

// mergeScalars merges the scalars of one resource group (LinuxMemory,
// LinuxCPU) of in into *out and, when live is not nil, *live, claiming
// each field the plugin sets.
func mergeScalars[T any](c *mergeCall, fields []scalarField[T], in *T, out, live **T) error {
	if in == nil {
		return nil
	}
	if *out == nil {
		*out = new(T)
	}
	if live != nil && *live == nil {
		*live = new(T)
	}
	for _, sf := range fields {
		if !sf.move(*out, in) {
			continue
		}
		if err := c.claim(sf.f, ""); err != nil {
			return err
		}
		if live != nil {
			sf.move(*live, in)
		}
	}
	return nil
}

// scalarField is one scalar of a resource group T: move copies it from
// src to dst if src sets it and tells whether it did.
type scalarField[T any] struct {
	f    api.Field
	move func(dst, src *T) bool
}

// memoryFields are the scalars of LinuxMemory.
func memoryFields() []scalarField[api.LinuxMemory] {
	return []scalarField[api.LinuxMemory]{
		{api.Field_MemLimit, func(d, s *api.LinuxMemory) bool { d.Limit = mergeOr(s.Limit, d.Limit); return s.Limit != nil }},
		{api.Field_MemReservation, func(d, s *api.LinuxMemory) bool {
			d.Reservation = mergeOr(s.Reservation, d.Reservation)
			return s.Reservation != nil
		}},
		{api.Field_MemSwapLimit, func(d, s *api.LinuxMemory) bool { d.Swap = mergeOr(s.Swap, d.Swap); return s.Swap != nil }},
		{api.Field_MemKernelLimit, func(d, s *api.LinuxMemory) bool { d.Kernel = mergeOr(s.Kernel, d.Kernel); return s.Kernel != nil }},
		{api.Field_MemTCPLimit, func(d, s *api.LinuxMemory) bool {
			d.KernelTcp = mergeOr(s.KernelTcp, d.KernelTcp)
			return s.KernelTcp != nil
		}},
		{api.Field_MemSwappiness, func(d, s *api.LinuxMemory) bool {
			d.Swappiness = mergeOr(s.Swappiness, d.Swappiness)
			return s.Swappiness != nil
		}},
		{api.Field_MemDisableOomKiller, func(d, s *api.LinuxMemory) bool {
			d.DisableOomKiller = mergeOr(s.DisableOomKiller, d.DisableOomKiller)
			return s.DisableOomKiller != nil
		}},
		{api.Field_MemUseHierarchy, func(d, s *api.LinuxMemory) bool {
			d.UseHierarchy = mergeOr(s.UseHierarchy, d.UseHierarchy)
			return s.UseHierarchy != nil
		}},
	}
}

// cpuFields are the scalars of LinuxCPU.
func cpuFields() []scalarField[api.LinuxCPU] {
	return []scalarField[api.LinuxCPU]{
		{api.Field_CPUShares, func(d, s *api.LinuxCPU) bool { d.Shares = mergeOr(s.Shares, d.Shares); return s.Shares != nil }},
		{api.Field_CPUQuota, func(d, s *api.LinuxCPU) bool { d.Quota = mergeOr(s.Quota, d.Quota); return s.Quota != nil }},
		{api.Field_CPUPeriod, func(d, s *api.LinuxCPU) bool { d.Period = mergeOr(s.Period, d.Period); return s.Period != nil }},
		{api.Field_CPURealtimeRuntime, func(d, s *api.LinuxCPU) bool {
			d.RealtimeRuntime = mergeOr(s.RealtimeRuntime, d.RealtimeRuntime)
			return s.RealtimeRuntime != nil
		}},
		{api.Field_CPURealtimePeriod, func(d, s *api.LinuxCPU) bool {
			d.RealtimePeriod = mergeOr(s.RealtimePeriod, d.RealtimePeriod)
			return s.RealtimePeriod != nil
		}},
		{api.Field_CPUSetCPUs, func(d, s *api.LinuxCPU) bool {
			if s.Cpus == "" {
				return false
			}
			d.Cpus = s.Cpus
			return true
		}},
		{api.Field_CPUSetMems, func(d, s *api.LinuxCPU) bool {
			if s.Mems == "" {
				return false
			}
			d.Mems = s.Mems
			return true
		}},
	}
}

// mergeOr is v if set, else old.
func mergeOr[P any](v, old *P) *P {
	if v != nil {
		return v
	}
	return old
}

// mergeUpdates merges one plugin's updates of existing containers, one
// merged update per container. A merged update ignores failure only if every
// contributing plugin said so: one plugin's update must not become optional
// because another's is.
func (m *merger) mergeUpdates(plugin string, upds []*api.ContainerUpdate) error {
	for _, u := range upds {
		if u == nil {
			continue
		}
		id := u.GetContainerId()
		if id == "" {
			return fmt.Errorf("merge updates of plugin %q: update without container ID: %w", plugin, errdefs.ErrInvalidArgument)
		}
		u = proto.Clone(u).(*api.ContainerUpdate)
		out, ok := m.st.upds[id]
		if !ok {
			out = &api.ContainerUpdate{ContainerId: id, IgnoreFailure: u.IgnoreFailure}
			if m.st.upds == nil {
				m.st.upds = make(map[string]*api.ContainerUpdate)
			}
			m.st.upds[id] = out
			m.st.order = append(m.st.order, id)
		} else if !u.IgnoreFailure {
			out.IgnoreFailure = false
		}
		in := u.GetLinux().GetResources()
		if in == nil {
			continue
		}
		if out.Linux == nil {
			out.Linux = &api.LinuxContainerUpdate{}
		}
		if out.Linux.Resources == nil {
			out.Linux.Resources = &api.LinuxResources{}
		}
		var live *api.LinuxResources
		if id == m.orig.GetId() {
			m.liveCtr()
			if m.st.ctr.Linux == nil {
				m.st.ctr.Linux = &api.LinuxContainer{}
			}
			if m.st.ctr.Linux.Resources == nil {
				m.st.ctr.Linux.Resources = &api.LinuxResources{}
			}
			live = m.st.ctr.Linux.Resources
		}
		if err := m.updateCall(id, plugin).resources(in, out.Linux.Resources, live); err != nil {
			return err
		}
	}
	return nil
}
