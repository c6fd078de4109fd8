package lxcconf

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// CgroupItem is one cgroup file and the value written to it: a
// lxc.cgroup.<file> (v1) or lxc.cgroup2.<file> (v2) line at create, the
// same file written at an update.
type CgroupItem struct {
	File, Value string
}

// cgroups places the container at linux.cgroupsPath and its monitor
// beside the pods, and sets the limits.
func (t *translator) cgroups() error {
	p := t.s.Linux.CgroupsPath
	if p == "" {
		return unsupported("linux.cgroupsPath", "crin-lxc needs the container's cgroup path")
	}
	if !strings.HasPrefix(p, "/") || strings.Contains(p, ":") || strings.ContainsAny(p, " \n\x00") {
		return unsupported("linux.cgroupsPath", "%q: crin-lxc takes cgroupfs paths only (no systemd driver)", p)
	}
	dir := strings.TrimPrefix(path.Clean(p), "/")
	if dir == "" || dir == "." {
		return unsupported("linux.cgroupsPath", "%q is the root cgroup", p)
	}
	t.c.CgroupDir = dir
	t.add("lxc.cgroup.relative", "0")
	t.add("lxc.cgroup.dir.container", dir)
	t.add("lxc.cgroup.dir.monitor", t.o.MonitorCgroup)
	items, err := Resources(t.s.Linux.Resources, t.h.CgroupV2)
	if err != nil {
		return err
	}
	prefix := "lxc.cgroup."
	if t.h.CgroupV2 {
		prefix = "lxc.cgroup2."
	}
	for _, it := range items {
		t.add(prefix+it.File, it.Value)
	}
	return nil
}

// Resources are the cgroup files that set r on v1 (v2 false) or v2, in
// the order they are to be written. What the hierarchy cannot express is
// an *UnsupportedError naming the field (of linux.resources).
func Resources(r *specs.LinuxResources, v2 bool) ([]CgroupItem, error) {
	if r == nil {
		return nil, nil
	}
	var items []CgroupItem
	add := func(file string, v any) { items = append(items, CgroupItem{file, fmt.Sprint(v)}) }
	if err := devicesItems(r.Devices, v2, add); err != nil {
		return nil, err
	}
	if err := memoryItems(r.Memory, v2, add); err != nil {
		return nil, err
	}
	if err := cpuItems(r.CPU, v2, add); err != nil {
		return nil, err
	}
	if r.Pids != nil {
		if l := r.Pids.Limit; l != nil && *l > 0 {
			add("pids.max", *l)
		} else {
			add("pids.max", "max")
		}
	}
	if b := r.BlockIO; b != nil {
		if len(b.WeightDevice) > 0 || len(b.ThrottleReadBpsDevice) > 0 || len(b.ThrottleWriteBpsDevice) > 0 ||
			len(b.ThrottleReadIOPSDevice) > 0 || len(b.ThrottleWriteIOPSDevice) > 0 || b.LeafWeight != nil {
			return nil, unsupported("linux.resources.blockIO", "crin-lxc sets the block I/O weight only")
		}
		if b.Weight != nil {
			if v2 {
				add("io.weight", 1+(uint64(*b.Weight)-10)*9999/990)
			} else {
				add("blkio.weight", *b.Weight)
			}
		}
	}
	for i, h := range r.HugepageLimits {
		if v2 {
			add("hugetlb."+h.Pagesize+".max", h.Limit)
		} else {
			add("hugetlb."+h.Pagesize+".limit_in_bytes", h.Limit)
		}
		if strings.ContainsAny(h.Pagesize, "/ ") {
			return nil, unsupported(fmt.Sprintf("linux.resources.hugepageLimits[%d].pageSize", i), "%q", h.Pagesize)
		}
	}
	if r.Network != nil {
		return nil, unsupported("linux.resources.network", "lxc does not set net_cls or net_prio")
	}
	if r.Rdma != nil {
		return nil, unsupported("linux.resources.rdma", "lxc does not set rdma limits")
	}
	if len(r.Unified) > 0 {
		if !v2 {
			return nil, unsupported("linux.resources.unified", "cgroup v2 files on a cgroup v1 host")
		}
		keys := make([]string, 0, len(r.Unified))
		for k := range r.Unified {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if strings.ContainsAny(k, "/ \n") || strings.ContainsAny(r.Unified[k], "\n") {
				return nil, unsupported(fmt.Sprintf("linux.resources.unified[%q]", k), "not a cgroup file and value")
			}
			add(k, r.Unified[k])
		}
	}
	return items, nil
}

func memoryItems(m *specs.LinuxMemory, v2 bool, add func(string, any)) error {
	if m == nil {
		return nil
	}
	if m.Kernel != nil || m.KernelTCP != nil { //nolint:staticcheck // refused, not used
		return unsupported("linux.resources.memory.kernel", "kernel memory limits are not supported by crin-lxc")
	}
	if m.DisableOOMKiller != nil && *m.DisableOOMKiller {
		return unsupported("linux.resources.memory.disableOOMKiller", "crin-lxc does not disable the OOM killer")
	}
	if m.CheckBeforeUpdate != nil && *m.CheckBeforeUpdate {
		return unsupported("linux.resources.memory.checkBeforeUpdate", "not supported by crin-lxc")
	}
	if !v2 {
		if m.Limit != nil {
			add("memory.limit_in_bytes", *m.Limit)
		}
		if m.Swap != nil {
			add("memory.memsw.limit_in_bytes", *m.Swap)
		}
		if m.Reservation != nil {
			add("memory.soft_limit_in_bytes", *m.Reservation)
		}
		if m.Swappiness != nil && *m.Swappiness <= 100 {
			add("memory.swappiness", *m.Swappiness)
		}
		return nil
	}
	if m.Limit != nil {
		add("memory.max", v2Max(*m.Limit))
	}
	if m.Swap != nil {
		switch {
		case *m.Swap == -1:
			add("memory.swap.max", "max")
		case m.Limit != nil && *m.Limit > 0:
			add("memory.swap.max", *m.Swap-*m.Limit)
		default:
			return unsupported("linux.resources.memory.swap", "a swap limit without a memory limit on cgroup v2")
		}
	}
	if m.Reservation != nil {
		add("memory.low", v2Max(*m.Reservation))
	}
	if m.Swappiness != nil && *m.Swappiness <= 100 {
		return unsupported("linux.resources.memory.swappiness", "cgroup v2 has no swappiness")
	}
	return nil
}

func v2Max(v int64) any {
	if v < 0 {
		return "max"
	}
	return v
}

func cpuItems(c *specs.LinuxCPU, v2 bool, add func(string, any)) error {
	if c == nil {
		return nil
	}
	if c.RealtimePeriod != nil || c.RealtimeRuntime != nil {
		return unsupported("linux.resources.cpu.realtimeRuntime", "crin-lxc does not set realtime CPU limits")
	}
	if c.Idle != nil || c.Burst != nil {
		return unsupported("linux.resources.cpu.burst", "crin-lxc does not set CPU idle or burst")
	}
	if !v2 {
		if c.Shares != nil && *c.Shares > 0 {
			add("cpu.shares", *c.Shares)
		}
		if c.Period != nil && *c.Period > 0 {
			add("cpu.cfs_period_us", *c.Period)
		}
		if c.Quota != nil && *c.Quota != 0 {
			add("cpu.cfs_quota_us", *c.Quota)
		}
	} else {
		if c.Shares != nil && *c.Shares > 0 {
			add("cpu.weight", 1+((*c.Shares-2)*9999)/262142)
		}
		if c.Quota != nil || c.Period != nil {
			quota := "max"
			if c.Quota != nil && *c.Quota > 0 {
				quota = strconv.FormatInt(*c.Quota, 10)
			}
			period := uint64(100000)
			if c.Period != nil && *c.Period > 0 {
				period = *c.Period
			}
			add("cpu.max", quota+" "+strconv.FormatUint(period, 10))
		}
	}
	if c.Cpus != "" {
		add("cpuset.cpus", c.Cpus)
	}
	if c.Mems != "" {
		add("cpuset.mems", c.Mems)
	}
	return nil
}

// devicesItems: v1 devices.deny and devices.allow lines in the spec's
// order; v2 the same rules as lxc.cgroup2.devices.* lines, which LXC
// turns into its BPF device program.
func devicesItems(ds []specs.LinuxDeviceCgroup, v2 bool, add func(string, any)) error {
	for i, d := range ds {
		typ := d.Type
		if typ == "" {
			typ = "a"
		}
		if !slices.Contains([]string{"a", "b", "c"}, typ) || strings.ContainsAny(d.Access, " \n") {
			return unsupported(fmt.Sprintf("linux.resources.devices[%d]", i), "type %q access %q", d.Type, d.Access)
		}
		rule := typ
		if typ != "a" || d.Major != nil || d.Minor != nil {
			rule = fmt.Sprintf("%s %s:%s %s", typ, devNumber(d.Major), devNumber(d.Minor), d.Access)
		}
		if typ == "a" && d.Major == nil && d.Minor == nil {
			rule = "a"
		}
		file := "devices.deny"
		if d.Allow {
			file = "devices.allow"
		}
		_ = v2
		add(file, rule)
	}
	return nil
}

func devNumber(n *int64) string {
	if n == nil || *n < 0 {
		return "*"
	}
	return strconv.FormatInt(*n, 10)
}
