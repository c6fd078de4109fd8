package oci

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
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

// The checks below are the one set of rules for resource values: CRI
// CreateContainer, UpdateContainerResources and UpdatePodSandboxResources
// (through CRIResources and MergeCRIResources) and NRI adjustments and
// updates (resourceMerge) all call them, so a value is accepted or refused
// the same way whichever way it comes in. field names the value in the
// caller's API; every refusal is errdefs.ErrInvalidArgument naming the
// field and the value, except a host that cannot honour a valid value
// (errdefs.ErrNotImplemented).

func checkCPUShares[T int64 | uint64](field string, v T) error {
	if v < T(minCPUShares) || v > T(maxCPUShares) {
		return invalidf("%s %d: not within [%d, %d]", field, v, minCPUShares, maxCPUShares)
	}
	return nil
}

func checkCPUQuota(field string, v int64) error {
	if v != -1 && v < minCPUQuota {
		return invalidf("%s %d: neither -1 nor at least %d", field, v, minCPUQuota)
	}
	return nil
}

func checkCPUPeriod[T int64 | uint64](field string, v T) error {
	if v < T(minCPUPeriod) || v > T(maxCPUPeriod) {
		return invalidf("%s %d: not within [%d, %d]", field, v, minCPUPeriod, maxCPUPeriod)
	}
	return nil
}

// maxCPUListID bounds cpu and node numbers (the kernel's NR_CPUS limit).
const maxCPUListID = 8192

// checkCPUList checks a cpu or memory node list like "0-3,8": ranges must
// not run backwards.
func checkCPUList(field, what, v string) error {
	if !cpuList.MatchString(v) {
		return invalidf("%s %q: not a %s list", field, v, what)
	}
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(lo)
		b := a
		var errB error
		if isRange {
			b, errB = strconv.Atoi(hi)
		}
		if errA != nil || errB != nil || a > maxCPUListID || b > maxCPUListID {
			return invalidf("%s %q: %s numbers must be at most %d", field, v, what, maxCPUListID)
		}
		if a > b {
			return invalidf("%s %q: range %s runs backwards", field, v, part)
		}
	}
	return nil
}

// checkMemLimit checks a memory (or memory+swap) limit in bytes: -1 means
// unlimited.
func checkMemLimit(field string, v int64) error {
	if v < -1 {
		return invalidf("%s %d: neither -1 (unlimited) nor a byte count", field, v)
	}
	return nil
}

// checkSwapAboveLimit refuses a memory+swap limit below the memory limit.
func checkSwapAboveLimit(field string, swap, limit int64) error {
	if limit > 0 && swap > 0 && swap < limit {
		return invalidf("%s %d: memory+swap limit below the memory limit %d", field, swap, limit)
	}
	return nil
}

func checkHugepageSize(field, size string) error {
	if !hugePageSize.MatchString(size) {
		return invalidf("%s %q: not a page size like 2MB", field, size)
	}
	return nil
}

// checkUnified checks one cgroup v2 file and its value (field names the
// map, e.g. linux.unified); the host must use cgroup v2.
func checkUnified(field, key, value string, host *Host) error {
	f := fmt.Sprintf("%s[%q]", field, key)
	switch {
	case !unifiedKey.MatchString(key) || strings.HasPrefix(key, "cgroup."):
		return invalidf("%s: not a controller file", f)
	case strings.ContainsAny(value, "\n\x00"):
		return invalidf("%s value %q: contains a newline or NUL", f, value)
	case !host.CgroupV2:
		return unsupportedf("%s: needs cgroup v2, and this host uses cgroup v1", f)
	}
	return nil
}

// MergeCRIResources validates a CRI resources update with the same rules
// as CRIResources and applies it to a copy of cur: the fields the update
// sets replace the current ones (hugepage limits and unified files as a
// whole). cur is not changed.
//
// NRI updates merge in resourceMerge (nri_resources.go), from NRI's
// types and per page size and per file rather than as a whole, as NRI
// defines. The two must stay alike in one respect: after merging, the
// memory+swap limit is checked against the memory limit again, since
// either side may have set only one of them.
func MergeCRIResources(field string, cur *specs.LinuxResources, in *runtimeapi.LinuxContainerResources, host *Host) (*specs.LinuxResources, error) {
	upd, err := CRIResources(field, in, host)
	if err != nil {
		return nil, err
	}
	out, err := cloneResources(cur)
	if err != nil {
		return nil, err
	}
	if c := upd.CPU; c != nil {
		if out.CPU == nil {
			out.CPU = &specs.LinuxCPU{}
		}
		if c.Shares != nil {
			out.CPU.Shares = c.Shares
		}
		if c.Quota != nil {
			out.CPU.Quota = c.Quota
		}
		if c.Period != nil {
			out.CPU.Period = c.Period
		}
		if c.Cpus != "" {
			out.CPU.Cpus = c.Cpus
		}
		if c.Mems != "" {
			out.CPU.Mems = c.Mems
		}
	}
	if m := upd.Memory; m != nil {
		if out.Memory == nil {
			out.Memory = &specs.LinuxMemory{}
		}
		if m.Limit != nil {
			out.Memory.Limit = m.Limit
		}
		if m.Swap != nil {
			out.Memory.Swap = m.Swap
		}
		if l, sw := out.Memory.Limit, out.Memory.Swap; l != nil && sw != nil {
			if err := checkSwapAboveLimit(field+".memory_swap_limit_in_bytes", *sw, *l); err != nil {
				return nil, err
			}
		}
	}
	if len(upd.HugepageLimits) > 0 {
		out.HugepageLimits = upd.HugepageLimits
	}
	if len(upd.Unified) > 0 {
		out.Unified = upd.Unified
	}
	return out, nil
}

// CRIResources validates CRI container resources (field names them in
// errors, e.g. "linux.resources") and returns them as OCI resources;
// oom_score_adj is not part of them. Zero values are unset. A nil host
// means DetectHost(). Errors are errdefs.ErrInvalidArgument naming the
// field and the value (errdefs.ErrNotImplemented for what the host cannot
// do, like unified files on cgroup v1).
//
// It is the one way CRI resources become OCI ones: CreateContainer,
// RunPodSandbox, UpdateContainerResources (MergeCRIResources) and
// UpdatePodSandboxResources all come through here.
func CRIResources(field string, r *runtimeapi.LinuxContainerResources, host *Host) (*specs.LinuxResources, error) {
	host = hostOrDetect(host)
	if err := checkCRIResources(field, r, host); err != nil {
		return nil, err
	}
	out := fromCRI(r)
	if host.NoHugetlb {
		// kubelet sends a zero limit per page size even where the host has
		// no hugetlb controller, and runtimes refuse any limit there.
		out.HugepageLimits = nil
	}
	return out, nil
}

// checkCRIResources applies the resource rules to every field r sets
// (field names r in errors); CRI uses zero values for "unset".
func checkCRIResources(field string, r *runtimeapi.LinuxContainerResources, host *Host) error {
	if r == nil {
		return nil
	}
	if err := checkCRICPU(field, r); err != nil {
		return err
	}
	if err := checkCRIMemory(field, r); err != nil {
		return err
	}
	for i, h := range r.GetHugepageLimits() {
		if err := checkHugepageSize(fmt.Sprintf("%s.hugepage_limits[%d].page_size", field, i), h.GetPageSize()); err != nil {
			return err
		}
	}
	u := r.GetUnified()
	for _, k := range slices.Sorted(maps.Keys(u)) {
		if err := checkUnified(field+".unified", k, u[k], host); err != nil {
			return err
		}
	}
	return nil
}

func checkCRICPU(field string, r *runtimeapi.LinuxContainerResources) error {
	if v := r.GetCpuPeriod(); v != 0 {
		if err := checkCPUPeriod(field+".cpu_period", v); err != nil {
			return err
		}
	}
	if v := r.GetCpuQuota(); v != 0 {
		if err := checkCPUQuota(field+".cpu_quota", v); err != nil {
			return err
		}
	}
	if v := r.GetCpuShares(); v != 0 {
		if err := checkCPUShares(field+".cpu_shares", v); err != nil {
			return err
		}
	}
	if v := r.GetCpusetCpus(); v != "" {
		if err := checkCPUList(field+".cpuset_cpus", "cpu", v); err != nil {
			return err
		}
	}
	if v := r.GetCpusetMems(); v != "" {
		return checkCPUList(field+".cpuset_mems", "node", v)
	}
	return nil
}

func checkCRIMemory(field string, r *runtimeapi.LinuxContainerResources) error {
	limit := r.GetMemoryLimitInBytes()
	if limit != 0 {
		if err := checkMemLimit(field+".memory_limit_in_bytes", limit); err != nil {
			return err
		}
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		if err := checkMemLimit(field+".memory_swap_limit_in_bytes", v); err != nil {
			return err
		}
		return checkSwapAboveLimit(field+".memory_swap_limit_in_bytes", v, limit)
	}
	return nil
}

// fromCRI maps CRI resources to OCI ones without checking them; a zero
// value is unset, and CPU and memory are nil when r sets none of theirs.
// Callers: CRIResources, after checking, and NRIResourcesFromCRI, for
// views of values CRIResources accepted earlier.
func fromCRI(r *runtimeapi.LinuxContainerResources) *specs.LinuxResources {
	out := &specs.LinuxResources{}
	if r == nil {
		return out
	}
	cpu := specs.LinuxCPU{Cpus: r.GetCpusetCpus(), Mems: r.GetCpusetMems()}
	if v := r.GetCpuPeriod(); v != 0 {
		cpu.Period = new(uint64(v))
	}
	if v := r.GetCpuQuota(); v != 0 {
		cpu.Quota = &v
	}
	if v := r.GetCpuShares(); v != 0 {
		cpu.Shares = new(uint64(v))
	}
	if cpu != (specs.LinuxCPU{}) {
		out.CPU = &cpu
	}
	var mem specs.LinuxMemory
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		mem.Limit = &v
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		mem.Swap = &v
	}
	if mem.Limit != nil || mem.Swap != nil {
		out.Memory = &mem
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	if u := r.GetUnified(); len(u) > 0 {
		out.Unified = maps.Clone(u)
	}
	return out
}

// SandboxResources are the infra container's resources for a pod of l:
// the pod's resources plus its overhead when kubelet passes them, and the
// minimum CPU weight otherwise (RunPodSandbox's spec, and
// UpdatePodSandboxResources). A nil host means DetectHost(). Errors are
// CRIResources's.
func SandboxResources(l *runtimeapi.LinuxPodSandboxConfig, host *Host) (*specs.LinuxResources, error) {
	res, err := CRIResources("linux.resources", l.GetResources(), host)
	if err != nil {
		return nil, err
	}
	over, err := CRIResources("linux.overhead", l.GetOverhead(), host)
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
