package oci

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultMemswFile exists on cgroup v1 hosts with swap accounting.
const defaultMemswFile = "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"

// resourceMerge applies NRI resources onto OCI ones, validating each
// value and checking the host can honour it. It serves both adjustments
// (before create) and updates (of a running container). Values are
// checked with the same check* functions as CRI resources (resources.go),
// so a value is accepted or refused alike whichever way it comes in.
type resourceMerge struct {
	verb string // "adjusts" or "updates"
	// who names the plugin that set field (key for keyed fields).
	who func(field, key string) string
	// request names the NRI call the change came with, for errors when
	// who does not know the plugin; may be empty.
	request   string
	host      *Host
	rt        *runtimeFeatures
	memswFile string
	blockio   func(name string) (*specs.LinuxBlockIO, error)
}

func (m *resourceMerge) fail(field, key string, err error) error {
	return requestError(m.who(field, key), m.request, m.verb, err)
}

// Resource field names, as errors and owners know them.
const (
	fMemLimit       = "linux.resources.memory.limit"
	fMemReservation = "linux.resources.memory.reservation"
	fMemSwap        = "linux.resources.memory.swap"
	fMemKernel      = "linux.resources.memory.kernel"
	fMemKernelTCP   = "linux.resources.memory.kernelTCP"
	fMemSwappiness  = "linux.resources.memory.swappiness"
	fMemNoOOMKill   = "linux.resources.memory.disableOOMKiller"
	fMemHierarchy   = "linux.resources.memory.useHierarchy"
	fCPUShares      = "linux.resources.cpu.shares"
	fCPUQuota       = "linux.resources.cpu.quota"
	fCPUPeriod      = "linux.resources.cpu.period"
	fCPURtRuntime   = "linux.resources.cpu.realtimeRuntime"
	fCPURtPeriod    = "linux.resources.cpu.realtimePeriod"
	fCPUCpus        = "linux.resources.cpu.cpus"
	fCPUMems        = "linux.resources.cpu.mems"
	fHugepages      = "linux.resources.hugepageLimits"
	fUnified        = "linux.resources.unified"
	fDevices        = "linux.resources.devices"
	fPids           = "linux.resources.pids.limit"
	fBlockioClass   = "linux.resources.blockio_class"
	fRdtClass       = "linux.resources.rdt_class"
)

// resourceOwners maps simple resource fields to their owner lookups.
var resourceOwners = map[string]func(*api.OwningPlugins, string) (string, bool){
	fMemLimit:       (*api.OwningPlugins).MemLimitOwner,
	fMemReservation: (*api.OwningPlugins).MemReservationOwner,
	fMemSwap:        (*api.OwningPlugins).MemSwapLimitOwner,
	fMemKernel:      (*api.OwningPlugins).MemKernelLimitOwner,
	fMemKernelTCP:   (*api.OwningPlugins).MemTCPLimitOwner,
	fMemSwappiness:  (*api.OwningPlugins).MemSwappinessOwner,
	fMemNoOOMKill:   (*api.OwningPlugins).MemDisableOomKillerOwner,
	fMemHierarchy:   (*api.OwningPlugins).MemUseHierarchyOwner,
	fCPUShares:      (*api.OwningPlugins).CPUSharesOwner,
	fCPUQuota:       (*api.OwningPlugins).CPUQuotaOwner,
	fCPUPeriod:      (*api.OwningPlugins).CPUPeriodOwner,
	fCPURtRuntime:   (*api.OwningPlugins).CPURealtimeRuntimeOwner,
	fCPURtPeriod:    (*api.OwningPlugins).CPURealtimePeriodOwner,
	fCPUCpus:        (*api.OwningPlugins).CPUSetCPUsOwner,
	fCPUMems:        (*api.OwningPlugins).CPUSetMemsOwner,
	fPids:           (*api.OwningPlugins).PidsLimitOwner,
	fBlockioClass:   (*api.OwningPlugins).BlockioClassOwner,
	fRdtClass:       (*api.OwningPlugins).RdtClassOwner,
}

// resourceOwner names the plugin behind a resource field of an
// adjustment.
func (a *adjuster) resourceOwner(field, key string) string {
	return resourceOwner(a.o.Owners, a.o.ContainerID, field, key)
}

// resourceOwner names the plugin that owns a resource field (key for keyed
// fields) of container id; "" when o is nil or records none.
func resourceOwner(o *api.OwningPlugins, id, field, key string) string {
	if o == nil {
		return ""
	}
	var p string
	switch field {
	case fHugepages:
		p, _ = o.HugepageLimitOwner(id, key)
	case fUnified:
		p, _ = o.CgroupsUnifiedOwner(id, key)
	default:
		if get, ok := resourceOwners[field]; ok {
			p, _ = get(o, id)
		}
	}
	return api.ClearRemovalMarker(p)
}

func (a *adjuster) resources(adj *api.ContainerAdjustment) error {
	r := adj.GetLinux().GetResources()
	if r == nil {
		return nil
	}
	lx := a.linux()
	if lx.Resources == nil {
		lx.Resources = &specs.LinuxResources{}
	}
	m := &resourceMerge{
		verb: "adjusts", who: a.resourceOwner, host: a.host, rt: a.rt,
		memswFile: a.o.memswFile, blockio: a.o.BlockioClass,
	}
	if err := m.merge(lx.Resources, r); err != nil {
		return err
	}
	if c := r.RdtClass; c != nil {
		plugin := a.owner((*api.OwningPlugins).RdtClassOwner)
		if c.Value == "" {
			lx.IntelRdt = nil
			return nil
		}
		field := fmt.Sprintf("%s %q", fRdtClass, c.Value)
		if a.o.RdtClass == nil {
			return a.fail(plugin, unsupportedf("%s: no RDT classes are configured", field))
		}
		rdt, err := a.o.RdtClass(c.Value)
		if err != nil {
			return a.fail(plugin, classError(field, err))
		}
		if rdt != nil {
			if err := fitIntelRdt(a.rt.fitter(), a.rt.fl, rdt); err != nil {
				return a.fail(plugin, fmt.Errorf("%s: %w", field, err))
			}
			rdt = new(*rdt)
		}
		lx.IntelRdt = rdt
	}
	return nil
}

// classError wraps a class lookup's error, as ErrNotFound unless the
// lookup classified it.
func classError(field string, err error) error {
	for _, known := range []error{errdefs.ErrNotFound, errdefs.ErrInvalidArgument, errdefs.ErrNotImplemented, errdefs.ErrFailedPrecondition, errdefs.ErrUnavailable} {
		if errors.Is(err, known) {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	return fmt.Errorf("%s: %w: %w", field, err, errdefs.ErrNotFound)
}

// swapAccounting reports whether the host limits swap per cgroup.
func (m *resourceMerge) swapAccounting() bool {
	if m.host.CgroupV2 {
		return true
	}
	f := m.memswFile
	if f == "" {
		f = defaultMemswFile
	}
	_, err := os.Stat(f)
	return err == nil
}

func (m *resourceMerge) merge(dst *specs.LinuxResources, r *api.LinuxResources) error {
	if err := m.memory(dst, r.Memory); err != nil {
		return err
	}
	if err := m.cpu(dst, r.Cpu); err != nil {
		return err
	}
	for _, h := range r.HugepageLimits {
		if h == nil {
			continue
		}
		if err := checkHugepageSize(fmt.Sprintf("%s[%q].pageSize", fHugepages, h.PageSize), h.PageSize); err != nil {
			return m.fail(fHugepages, h.PageSize, err)
		}
		hl := specs.LinuxHugepageLimit{Pagesize: h.PageSize, Limit: h.Limit}
		if i := slices.IndexFunc(dst.HugepageLimits, func(x specs.LinuxHugepageLimit) bool { return x.Pagesize == h.PageSize }); i >= 0 {
			dst.HugepageLimits[i] = hl
		} else {
			dst.HugepageLimits = append(dst.HugepageLimits, hl)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Unified)) {
		v := r.Unified[k]
		field := fmt.Sprintf("%s[%q]", fUnified, k)
		if err := checkUnified(fUnified, k, v, m.host); err != nil {
			return m.fail(fUnified, k, err)
		}
		if c := m.rt.fl.Cgroup; c != nil {
			if err := notDisabled(field, c.V2); err != nil {
				return m.fail(fUnified, k, err)
			}
		}
		if dst.Unified == nil {
			dst.Unified = map[string]string{}
		}
		dst.Unified[k] = v
	}
	for i, d := range r.Devices {
		if d == nil {
			continue
		}
		field := fmt.Sprintf("%s[%d]", fDevices, i)
		switch {
		case d.Type != "" && d.Type != "a" && d.Type != "b" && d.Type != "c":
			return m.fail(fDevices, "", invalidf("%s.type %q: not one of a, b, c", field, d.Type))
		case !validDevicePermissions(d.Access):
			return m.fail(fDevices, "", invalidf("%s.access %q: not a combination of r, w and m", field, d.Access))
		}
		dst.Devices = append(dst.Devices, specs.LinuxDeviceCgroup{
			Allow: d.Allow, Type: d.Type, Major: d.Major.Get(), Minor: d.Minor.Get(), Access: d.Access,
		})
	}
	if p := r.Pids; p != nil {
		if p.Limit < -1 || p.Limit == 0 {
			return m.fail(fPids, "", invalidf("%s %d: neither positive nor -1 (unlimited)", fPids, p.Limit))
		}
		v := p.Limit
		dst.Pids = &specs.LinuxPids{Limit: &v}
	}
	if c := r.BlockioClass; c != nil {
		if c.Value == "" {
			dst.BlockIO = nil
			return nil
		}
		field := fmt.Sprintf("%s %q", fBlockioClass, c.Value)
		if m.blockio == nil {
			return m.fail(fBlockioClass, "", unsupportedf("%s: no block I/O classes are configured", field))
		}
		b, err := m.blockio(c.Value)
		if err != nil {
			return m.fail(fBlockioClass, "", classError(field, err))
		}
		if b != nil {
			b = new(*b)
		}
		dst.BlockIO = b
	}
	return nil
}

func (m *resourceMerge) memory(dst *specs.LinuxResources, mem *api.LinuxMemory) error {
	if mem == nil {
		return nil
	}
	if dst.Memory == nil {
		dst.Memory = &specs.LinuxMemory{}
	}
	d := dst.Memory
	limit := func(field string, v *api.OptionalInt64, to **int64) error {
		if v == nil {
			return nil
		}
		if err := checkMemLimit(field, v.Value); err != nil {
			return m.fail(field, "", err)
		}
		*to = new(v.Value)
		return nil
	}
	if err := limit(fMemLimit, mem.Limit, &d.Limit); err != nil {
		return err
	}
	if err := limit(fMemReservation, mem.Reservation, &d.Reservation); err != nil {
		return err
	}
	if mem.Swap != nil {
		if err := limit(fMemSwap, mem.Swap, &d.Swap); err != nil {
			return err
		}
		if !m.swapAccounting() {
			return m.fail(fMemSwap, "", unsupportedf("%s: this host has no swap accounting (memory.memsw files)", fMemSwap))
		}
	}
	if v := mem.Kernel; v != nil {
		// runc has ignored a kernel memory limit since 1.0, and cgroup v2
		// has no such knob, so a limit would be silently dropped: refused.
		// 0 asks for no limit, which is what every container has: it is
		// accepted and recorded as unset.
		if v.Value != 0 {
			return m.fail(fMemKernel, "", unsupportedf("%s %d: kernel memory limits are obsolete (Linux 5.4) and not applied by runtimes", fMemKernel, v.Value))
		}
		d.Kernel = nil //nolint:staticcheck // clearing the obsolete field is the point
	}
	if mem.KernelTcp != nil {
		if m.host.CgroupV2 {
			return m.fail(fMemKernelTCP, "", unsupportedf("%s: cgroup v2 has no kernel TCP memory limit", fMemKernelTCP))
		}
		if err := limit(fMemKernelTCP, mem.KernelTcp, &d.KernelTCP); err != nil {
			return err
		}
	}
	if v := mem.Swappiness; v != nil {
		if v.Value > 100 {
			return m.fail(fMemSwappiness, "", invalidf("%s %d: not within [0, 100]", fMemSwappiness, v.Value))
		}
		if m.host.CgroupV2 {
			return m.fail(fMemSwappiness, "", unsupportedf("%s: cgroup v2 has no per-cgroup swappiness", fMemSwappiness))
		}
		d.Swappiness = new(v.Value)
	}
	if v := mem.DisableOomKiller; v != nil {
		if v.Value && m.host.CgroupV2 {
			return m.fail(fMemNoOOMKill, "", unsupportedf("%s: cgroup v2 cannot disable the OOM killer", fMemNoOOMKill))
		}
		d.DisableOOMKiller = new(v.Value)
	}
	if v := mem.UseHierarchy; v != nil {
		if !v.Value && m.host.CgroupV2 {
			return m.fail(fMemHierarchy, "", unsupportedf("%s false: cgroup v2 is always hierarchical", fMemHierarchy))
		}
		d.UseHierarchy = new(v.Value)
	}
	// As in MergeCRIResources (resources.go): the merged memory+swap
	// limit is checked against the merged memory limit, since the update
	// may set only one of them.
	if d.Limit != nil && d.Swap != nil {
		field := fMemSwap
		if mem.Swap == nil {
			field = fMemLimit
		}
		if err := checkSwapAboveLimit(fMemSwap, *d.Swap, *d.Limit); err != nil {
			return m.fail(field, "", err)
		}
	}
	return nil
}

func (m *resourceMerge) cpu(dst *specs.LinuxResources, c *api.LinuxCPU) error {
	if c == nil {
		return nil
	}
	if dst.CPU == nil {
		dst.CPU = &specs.LinuxCPU{}
	}
	d := dst.CPU
	if v := c.Shares; v != nil {
		if err := checkCPUShares(fCPUShares, v.Value); err != nil {
			return m.fail(fCPUShares, "", err)
		}
		d.Shares = new(v.Value)
	}
	if v := c.Quota; v != nil {
		if err := checkCPUQuota(fCPUQuota, v.Value); err != nil {
			return m.fail(fCPUQuota, "", err)
		}
		d.Quota = new(v.Value)
	}
	if v := c.Period; v != nil {
		if err := checkCPUPeriod(fCPUPeriod, v.Value); err != nil {
			return m.fail(fCPUPeriod, "", err)
		}
		d.Period = new(v.Value)
	}
	if v := c.RealtimeRuntime; v != nil {
		if v.Value < -1 {
			return m.fail(fCPURtRuntime, "", invalidf("%s %d: neither -1 nor a duration", fCPURtRuntime, v.Value))
		}
		if m.host.CgroupV2 {
			return m.fail(fCPURtRuntime, "", unsupportedf("%s: cgroup v2 has no realtime CPU bandwidth", fCPURtRuntime))
		}
		d.RealtimeRuntime = new(v.Value)
	}
	if v := c.RealtimePeriod; v != nil {
		if v.Value == 0 {
			return m.fail(fCPURtPeriod, "", invalidf("%s 0: not a period", fCPURtPeriod))
		}
		if m.host.CgroupV2 {
			return m.fail(fCPURtPeriod, "", unsupportedf("%s: cgroup v2 has no realtime CPU bandwidth", fCPURtPeriod))
		}
		d.RealtimePeriod = new(v.Value)
	}
	if c.Cpus != "" {
		if err := checkCPUList(fCPUCpus, "cpu", c.Cpus); err != nil {
			return m.fail(fCPUCpus, "", err)
		}
		d.Cpus = c.Cpus
	}
	if c.Mems != "" {
		if err := checkCPUList(fCPUMems, "node", c.Mems); err != nil {
			return m.fail(fCPUMems, "", err)
		}
		d.Mems = c.Mems
	}
	return nil
}
