package oci

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var (
	cpuList      = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
	hugePageSize = regexp.MustCompile(`^[1-9][0-9]*(KB|MB|GB|TB|PB)$`)
	unifiedKey   = regexp.MustCompile(`^[a-z][a-z0-9_]*\.[a-z0-9_.]+$`)
)

// Bounds the kernel puts on CFS bandwidth and shares.
const (
	minCPUPeriod = 1000
	maxCPUPeriod = 1000000
	minCPUQuota  = 1000
	minCPUShares = 2
	maxCPUShares = 262144
	// sandboxCPUShares is the infra container's weight when the pod gives
	// none: it only sleeps.
	sandboxCPUShares = 2
)

// linuxResources validates CRI resources (field names the message) and
// returns them as OCI resources; oom_score_adj is handled by the caller.
func linuxResources(field string, r *runtimeapi.LinuxContainerResources, host *Host) (*specs.LinuxResources, error) {
	out := &specs.LinuxResources{}
	if r == nil {
		return out, nil
	}
	cpu := &specs.LinuxCPU{}
	if v := r.GetCpuPeriod(); v != 0 {
		if v < minCPUPeriod || v > maxCPUPeriod {
			return nil, invalidf("%s.cpu_period %d: not within [%d, %d]", field, v, minCPUPeriod, maxCPUPeriod)
		}
		p := uint64(v)
		cpu.Period = &p
	}
	if v := r.GetCpuQuota(); v != 0 {
		if v != -1 && v < minCPUQuota {
			return nil, invalidf("%s.cpu_quota %d: neither -1 nor at least %d", field, v, minCPUQuota)
		}
		cpu.Quota = &v
	}
	if v := r.GetCpuShares(); v != 0 {
		if v < minCPUShares || v > maxCPUShares {
			return nil, invalidf("%s.cpu_shares %d: not within [%d, %d]", field, v, minCPUShares, maxCPUShares)
		}
		s := uint64(v)
		cpu.Shares = &s
	}
	if v := r.GetCpusetCpus(); v != "" {
		if !cpuList.MatchString(v) {
			return nil, invalidf("%s.cpuset_cpus %q: not a cpu list", field, v)
		}
		cpu.Cpus = v
	}
	if v := r.GetCpusetMems(); v != "" {
		if !cpuList.MatchString(v) {
			return nil, invalidf("%s.cpuset_mems %q: not a node list", field, v)
		}
		cpu.Mems = v
	}
	if *cpu != (specs.LinuxCPU{}) {
		out.CPU = cpu
	}

	mem := &specs.LinuxMemory{}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		if v < 0 {
			return nil, invalidf("%s.memory_limit_in_bytes %d: negative", field, v)
		}
		mem.Limit = &v
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		switch {
		case v < -1:
			return nil, invalidf("%s.memory_swap_limit_in_bytes %d: negative", field, v)
		case v > 0 && mem.Limit != nil && v < *mem.Limit:
			return nil, invalidf("%s.memory_swap_limit_in_bytes %d: below memory_limit_in_bytes %d", field, v, *mem.Limit)
		}
		mem.Swap = &v
	}
	if mem.Limit != nil || mem.Swap != nil {
		out.Memory = mem
	}

	for i, h := range r.GetHugepageLimits() {
		if !hugePageSize.MatchString(h.GetPageSize()) {
			return nil, invalidf("%s.hugepage_limits[%d].page_size %q: not a page size like 2MB", field, i, h.GetPageSize())
		}
		if host.NoHugetlb {
			continue
		}
		out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
	}

	if u := r.GetUnified(); len(u) > 0 {
		if !host.CgroupV2 {
			return nil, invalidf("%s.unified: needs cgroup v2, and this host uses cgroup v1", field)
		}
		out.Unified = make(map[string]string, len(u))
		for _, k := range slices.Sorted(maps.Keys(u)) {
			v := u[k]
			if !unifiedKey.MatchString(k) || strings.HasPrefix(k, "cgroup.") {
				return nil, invalidf("%s.unified[%q]: not a controller file", field, k)
			}
			if strings.ContainsAny(v, "\n\x00") {
				return nil, invalidf("%s.unified[%q] value %q: contains a newline or NUL", field, k, v)
			}
			out.Unified[k] = v
		}
	}
	return out, nil
}

// sandboxResources limits the infra container to the pod's resources plus
// its overhead when kubelet passes them, and gives it the minimum CPU
// weight otherwise.
func sandboxResources(l *runtimeapi.LinuxPodSandboxConfig, host *Host) (*specs.LinuxResources, error) {
	res, err := linuxResources("linux.resources", l.GetResources(), host)
	if err != nil {
		return nil, err
	}
	over, err := linuxResources("linux.overhead", l.GetOverhead(), host)
	if err != nil {
		return nil, err
	}
	if l.GetResources() == nil {
		res = over
	} else if l.GetOverhead() != nil {
		addOverhead(res, over)
	}
	// Hugepages and unified files of the pod are the pod cgroup's
	// business (kubelet's), not the infra process's.
	res.HugepageLimits, res.Unified = nil, nil
	if res.CPU == nil {
		res.CPU = &specs.LinuxCPU{}
	}
	if res.CPU.Shares == nil {
		s := uint64(sandboxCPUShares)
		res.CPU.Shares = &s
	}
	return res, nil
}

// addOverhead adds the overhead's memory limit, CPU shares and CPU quota
// (rescaled to res's period) to res when both set them.
func addOverhead(res, over *specs.LinuxResources) {
	if res.Memory != nil && res.Memory.Limit != nil && over.Memory != nil && over.Memory.Limit != nil {
		v := *res.Memory.Limit + *over.Memory.Limit
		res.Memory.Limit = &v
	}
	if res.CPU == nil || over.CPU == nil {
		return
	}
	if res.CPU.Shares != nil && over.CPU.Shares != nil {
		v := min(*res.CPU.Shares+*over.CPU.Shares, maxCPUShares)
		res.CPU.Shares = &v
	}
	if res.CPU.Quota != nil && *res.CPU.Quota > 0 && over.CPU.Quota != nil && *over.CPU.Quota > 0 {
		rp, op := uint64(100000), uint64(100000) // the kernel's default period
		if res.CPU.Period != nil {
			rp = *res.CPU.Period
		}
		if over.CPU.Period != nil {
			op = *over.CPU.Period
		}
		v := *res.CPU.Quota + int64(uint64(*over.CPU.Quota)*rp/op)
		res.CPU.Quota = &v
	}
}

// clampOOMScoreAdj keeps v within [min, 1000]: crind cannot give a
// container a lower score than its own without CAP_SYS_RESOURCE.
func clampOOMScoreAdj(field string, v int64, lo int) (int, error) {
	if v < -1000 || v > 1000 {
		return 0, invalidf("%s %d: not within [-1000, 1000]", field, v)
	}
	return max(int(v), min(lo, 1000)), nil
}
