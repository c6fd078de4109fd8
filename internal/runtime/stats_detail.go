package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Detail are the figures of a cgroup that only the CRI metrics
// (cAdvisor's metric set) report. Limits are 0 when unlimited.
type Detail struct {
	// CFS bandwidth: enforcement periods elapsed, periods the cgroup was
	// throttled in, and the time it was throttled for.
	CFSPeriods, CFSThrottledPeriods, CFSThrottledNanos uint64
	// CPUPeriodMicros and CPUQuotaMicros are the CFS period and quota
	// (quota 0: unlimited); CPUShares the cgroup v1 shares (on v2, the
	// shares cpu.weight maps back to).
	CPUPeriodMicros, CPUQuotaMicros, CPUShares uint64

	MemoryMaxUsageBytes   uint64 // peak usage (v1 max_usage_in_bytes, v2 memory.peak)
	MemoryKernelBytes     uint64
	MemoryMappedFileBytes uint64
	MemorySwapBytes       uint64
	// MemorySwapLimitBytes is memory plus swap, as the CRI's
	// memory_swap_limit_in_bytes and v1's memsw limit count it.
	MemorySwapLimitBytes   uint64
	MemoryReservationBytes uint64 // v1 soft limit, v2 memory.min
	// PageFaults and MajorPageFaults are the cgroup's own (v1) faults;
	// Stats has the hierarchy's. v2 counts only the hierarchy's.
	PageFaults, MajorPageFaults uint64
	OOMKills                    uint64 // processes the OOM killer killed in the cgroup

	ThreadsMax uint64 // pids.max

	// IO is the block I/O of the cgroup by device.
	IO []DeviceIO
	// Hugetlb is the cgroup's huge page usage by page size, where the
	// hugetlb controller is enabled for it.
	Hugetlb []HugetlbUsage

	// FileDescriptors and Sockets are what the cgroup's processes hold
	// open; MaxOpenFiles is the soft RLIMIT_NOFILE of its first process
	// (HasMaxOpenFiles: there is one).
	FileDescriptors, Sockets uint64
	MaxOpenFiles             uint64
	HasMaxOpenFiles          bool

	// kernelParts sums v2 memory.stat's kernel figures for kernels older
	// than 5.18, which have no "kernel" line.
	kernelParts, kernelLine uint64
	hasKernelLine           bool
}

// DeviceIO is one block device's I/O: bytes and operations completed.
type DeviceIO struct {
	Major, Minor          uint32
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64
}

// HugetlbUsage is a cgroup's usage of one huge page size ("2MB", "1GB":
// the name in the hugetlb files). MaxUsageBytes is 0 on v2, which keeps no
// peak.
type HugetlbUsage struct {
	Size                      string
	UsageBytes, MaxUsageBytes uint64
}

// addKernel notes a v2 memory.stat figure that makes up kernel memory.
func (d *Detail) addKernel(k string, v uint64) {
	switch k {
	case "kernel":
		d.kernelLine, d.hasKernelLine = v, true
	case "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc", "slab":
		d.kernelParts += v
	}
}

// cgroup1Detail reads the v1 files only the metrics need. Every file is
// optional (a controller or a kernel feature may be missing): a figure
// that cannot be read stays 0.
func cgroup1Detail(root, path string, s *Stats, buf []byte) {
	d := s.Detail
	cpu := filepath.Join(root, "cpu", path)
	mem := filepath.Join(root, "memory", path)
	if b, err := readSmall(filepath.Join(cpu, "cpu.stat"), buf); err == nil {
		eachKV(b, func(k string, v uint64) {
			switch k {
			case "nr_periods":
				d.CFSPeriods = v
			case "nr_throttled":
				d.CFSThrottledPeriods = v
			case "throttled_time":
				d.CFSThrottledNanos = v
			}
		})
	}
	d.CPUPeriodMicros = readUintOr0(filepath.Join(cpu, "cpu.cfs_period_us"), buf)
	d.CPUQuotaMicros = readUintOr0(filepath.Join(cpu, "cpu.cfs_quota_us"), buf) // -1 (unlimited) does not parse
	d.CPUShares = readUintOr0(filepath.Join(cpu, "cpu.shares"), buf)
	d.MemoryMaxUsageBytes = readUintOr0(filepath.Join(mem, "memory.max_usage_in_bytes"), buf)
	d.MemoryKernelBytes = readUintOr0(filepath.Join(mem, "memory.kmem.usage_in_bytes"), buf)
	d.MemorySwapLimitBytes = v1Limit(readUintOr0(filepath.Join(mem, "memory.memsw.limit_in_bytes"), buf))
	d.MemoryReservationBytes = v1Limit(readUintOr0(filepath.Join(mem, "memory.soft_limit_in_bytes"), buf))
	if b, err := readSmall(filepath.Join(mem, "memory.oom_control"), buf); err == nil {
		eachKV(b, func(k string, v uint64) {
			if k == "oom_kill" {
				d.OOMKills = v
			}
		})
	}
	pids := filepath.Join(root, "pids", path)
	d.ThreadsMax = readUintOr0(filepath.Join(pids, "pids.max"), buf) // "max" does not parse
	// On a hybrid host hugetlb may be a v2 controller: read it there when
	// v1 has no hugetlb hierarchy.
	if _, err := os.Stat(filepath.Join(root, "hugetlb")); err == nil {
		d.Hugetlb = readHugetlb(filepath.Join(root, "hugetlb", path), hugePageSizes(), hugetlbV1Files)
	} else {
		d.Hugetlb = readHugetlb(filepath.Join(root, "unified", path), hugePageSizes(), hugetlbV2Files)
	}
	blkio := filepath.Join(root, "blkio", path)
	d.IO = readBlkio(filepath.Join(blkio, "blkio.throttle.io_service_bytes_recursive"), filepath.Join(blkio, "blkio.throttle.io_serviced_recursive"))
	procs := readPids(filepath.Join(pids, "cgroup.procs"))
	if procs == nil {
		procs = readPids(filepath.Join(mem, "cgroup.procs")) // no pids controller
	}
	s.Processes = uint64(len(procs))
	d.scanProcs(procs)
}

// cgroup2Detail reads the v2 files only the metrics need; like
// cgroup1Detail, a file that cannot be read leaves its figure 0.
func cgroup2Detail(dir string, s *Stats, buf []byte) {
	d := s.Detail
	d.PageFaults, d.MajorPageFaults = s.MemoryPageFaults, s.MemoryMajorFaults
	d.MemoryKernelBytes = d.kernelParts
	if d.hasKernelLine {
		d.MemoryKernelBytes = d.kernelLine
	}
	if b, err := readSmall(filepath.Join(dir, "cpu.max"), buf); err == nil {
		quota, period, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		d.CPUQuotaMicros, _ = strconv.ParseUint(quota, 10, 64) // "max" is unlimited: 0
		d.CPUPeriodMicros, _ = strconv.ParseUint(period, 10, 64)
	}
	if w := readUintOr0(filepath.Join(dir, "cpu.weight"), buf); w >= 1 && w <= 10000 {
		d.CPUShares = 2 + (w-1)*262142/9999 // the inverse of runc's shares-to-weight mapping
	}
	d.MemoryMaxUsageBytes = readUintOr0(filepath.Join(dir, "memory.peak"), buf)
	d.MemoryReservationBytes = readUintOr0(filepath.Join(dir, "memory.min"), buf)
	if s.HasSwap && s.MemoryLimitBytes > 0 {
		if b, err := readSmall(filepath.Join(dir, "memory.swap.max"), buf); err == nil && string(bytes.TrimSpace(b)) != "max" {
			d.MemorySwapLimitBytes = s.MemoryLimitBytes + s.SwapLimitBytes
		}
	}
	d.ThreadsMax = readUintOr0(filepath.Join(dir, "pids.max"), buf)
	d.Hugetlb = readHugetlb(dir, hugePageSizes(), hugetlbV2Files)
	d.IO = readIOStat(filepath.Join(dir, "io.stat"))
	procs := readPids(filepath.Join(dir, "cgroup.procs"))
	if len(procs) == 0 && s.PidsCurrent > 0 {
		procs = childPids(dir) // crun's <scope>/container, as in cgroup2Stats
	}
	s.Processes = uint64(len(procs))
	d.scanProcs(procs)
}

// v1Limit is a v1 limit file's value, 0 for unlimited (a huge
// page-rounded number).
func v1Limit(v uint64) uint64 {
	if v >= 1<<62 {
		return 0
	}
	return v
}

func readUintOr0(path string, buf []byte) uint64 {
	v, _ := readCgroupUint(path, buf)
	return v
}

// readPids lists a cgroup.procs file; nil when it cannot be read.
func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	pids := []int{}
	for _, f := range bytes.Fields(b) {
		if p, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// childPids lists the processes in the cgroups right below dir.
func childPids(dir string) []int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		if e.IsDir() {
			pids = append(pids, readPids(filepath.Join(dir, e.Name(), "cgroup.procs"))...)
		}
	}
	return pids
}

// scanProcs counts the open files and sockets of pids (a process that
// exits meanwhile counts nothing) and reads the first one's open files
// limit, as cAdvisor's process metrics do.
func (d *Detail) scanProcs(pids []int) {
	var link [64]byte
	for i, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		if i == 0 {
			d.MaxOpenFiles, d.HasMaxOpenFiles = readMaxOpenFiles(dir + "/limits")
		}
		f, err := os.Open(dir + "/fd")
		if err != nil {
			continue
		}
		names, _ := f.Readdirnames(-1)
		f.Close()
		d.FileDescriptors += uint64(len(names))
		for _, n := range names {
			m, err := syscall.Readlink(dir+"/fd/"+n, link[:])
			if err == nil && bytes.HasPrefix(link[:m], []byte("socket:")) {
				d.Sockets++
			}
		}
	}
}

// readMaxOpenFiles reads the soft "Max open files" of a /proc/PID/limits
// file; "unlimited" is reported as the largest value.
func readMaxOpenFiles(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return 1<<64 - 1, true
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		return v, err == nil
	}
	return 0, false
}

// readBlkio reads v1's blkio.throttle files ("MAJ:MIN Read N" lines, one
// per operation, and a "Total N" line).
func readBlkio(bytesPath, opsPath string) []DeviceIO {
	var out []DeviceIO
	dev := func(major, minor uint32) *DeviceIO {
		for i := range out {
			if out[i].Major == major && out[i].Minor == minor {
				return &out[i]
			}
		}
		out = append(out, DeviceIO{Major: major, Minor: minor})
		return &out[len(out)-1]
	}
	each := func(path string, fn func(d *DeviceIO, op string, v uint64)) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			major, minor, ok := parseDevice(f[0])
			v, err := strconv.ParseUint(f[2], 10, 64)
			if ok && err == nil {
				fn(dev(major, minor), f[1], v)
			}
		}
	}
	each(bytesPath, func(d *DeviceIO, op string, v uint64) {
		switch op {
		case "Read":
			d.ReadBytes = v
		case "Write":
			d.WriteBytes = v
		}
	})
	each(opsPath, func(d *DeviceIO, op string, v uint64) {
		switch op {
		case "Read":
			d.Reads = v
		case "Write":
			d.Writes = v
		}
	})
	return out
}

// readIOStat reads v2's io.stat ("MAJ:MIN rbytes=N wbytes=N rios=N
// wios=N dbytes=N dios=N" per device).
func readIOStat(path string) []DeviceIO {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []DeviceIO
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		major, minor, ok := parseDevice(f[0])
		if !ok {
			continue
		}
		d := DeviceIO{Major: major, Minor: minor}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "rbytes":
				d.ReadBytes = n
			case "wbytes":
				d.WriteBytes = n
			case "rios":
				d.Reads = n
			case "wios":
				d.Writes = n
			}
		}
		out = append(out, d)
	}
	return out
}

func parseDevice(s string) (major, minor uint32, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	ma, err1 := strconv.ParseUint(a, 10, 32)
	mi, err2 := strconv.ParseUint(b, 10, 32)
	return uint32(ma), uint32(mi), err1 == nil && err2 == nil
}

// hugetlbFiles names a hierarchy's hugetlb files for one page size:
// usage, and peak usage ("" where the hierarchy keeps none).
type hugetlbFiles func(size string) (usage, maxUsage string)

func hugetlbV1Files(size string) (string, string) {
	return "hugetlb." + size + ".usage_in_bytes", "hugetlb." + size + ".max_usage_in_bytes"
}

func hugetlbV2Files(size string) (string, string) { return "hugetlb." + size + ".current", "" }

// readHugetlb reads dir's usage of each huge page size (the kernel's:
// hugePageSizes); nil where the cgroup has no hugetlb files.
func readHugetlb(dir string, sizes []string, files hugetlbFiles) []HugetlbUsage {
	var out []HugetlbUsage
	var buf [512]byte
	for _, size := range sizes {
		usage, maxUsage := files(size)
		v, err := readCgroupUint(filepath.Join(dir, usage), buf[:])
		if err != nil {
			return nil // no controller here (or a size it does not know): none at all
		}
		h := HugetlbUsage{Size: size, UsageBytes: v}
		if maxUsage != "" {
			h.MaxUsageBytes = readUintOr0(filepath.Join(dir, maxUsage), buf[:])
		}
		out = append(out, h)
	}
	return out
}

// hugePageSizesDir lists the kernel's huge page sizes.
const hugePageSizesDir = "/sys/kernel/mm/hugepages"

// hugePageSizes names the kernel's huge page sizes as the hugetlb
// controller's files do ("hugepages-2048kB" is "2MB").
func hugePageSizes() []string {
	ents, err := os.ReadDir(hugePageSizesDir)
	if err != nil {
		return nil
	}
	var sizes []string
	for _, e := range ents {
		kb, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(kb, "kB"), 10, 64)
		if err != nil {
			continue
		}
		sizes = append(sizes, hugePageSizeName(n))
	}
	return sizes
}

// hugePageSizeName is the kernel's name of a page size of kb KiB.
func hugePageSizeName(kb uint64) string {
	units := []string{"KB", "MB", "GB", "TB"}
	i := 0
	for kb >= 1024 && kb%1024 == 0 && i < len(units)-1 {
		kb /= 1024
		i++
	}
	return strconv.FormatUint(kb, 10) + units[i]
}
