package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/cgroup"
)

// Stats are the resource usage figures of one cgroup (cgroup v1 on the
// hybrid layout of our nodes, v2 when the host is unified).
type Stats struct {
	Timestamp         time.Time
	CPUUsageNanos     uint64
	MemoryUsageBytes  uint64
	MemoryWorkingSet  uint64 // usage minus inactive file
	MemoryRSSBytes    uint64
	MemoryPageFaults  uint64
	MemoryMajorFaults uint64
	PidsCurrent       uint64 // tasks (threads) in the cgroup

	CPUUserNanos     uint64
	CPUSystemNanos   uint64
	MemoryCacheBytes uint64 // page cache (file-backed memory)
	MemoryLimitBytes uint64 // 0 when unlimited or unknown
	MemoryFailcnt    uint64 // times usage hit the limit (v1; v2: memory.events max)
	Processes        uint64 // processes (thread group leaders) in the cgroup

	// Pressure stall information of the cgroup (cgroup v2, a kernel with
	// PSI): nil where the files are not there.
	CPUPressure, MemoryPressure, IOPressure *Pressure
	// SwapUsageBytes and SwapLimitBytes (0: unlimited) are the cgroup's
	// swap, where the host accounts it (cgroup v2 memory.swap.*);
	// HasSwap says whether it does.
	SwapUsageBytes, SwapLimitBytes uint64
	HasSwap                        bool

	// Detail holds the figures only the metrics RPCs report; nil unless
	// asked for (CgroupStatsDetail).
	Detail *Detail
}

// Pressure is one resource's pressure stall information: the share of
// time some (or all, full) of the cgroup's tasks were stalled on it.
type Pressure struct {
	Some, Full PressureLine
}

// PressureLine is one line of a *.pressure file: running averages over
// 10, 60 and 300 s, in percent, and the total stall time.
type PressureLine struct {
	Avg10, Avg60, Avg300 float64
	Total                time.Duration
}

// cgroupRoot is where the cgroup hierarchies are mounted; v1 controllers
// are read at cgroupRoot/<controller>, the layout systemd and every
// distribution mount.
const cgroupRoot = "/sys/fs/cgroup"

// userHZ is the unit of cpuacct.stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// CgroupStats reads the usage of the cgroup at cgroupsPath (as written in an
// OCI spec's linux.cgroupsPath, in either driver's form: cgroup.Dir). A cgroup that does
// not exist is errdefs.ErrNotFound.
//
// It reads only the files the figures come from (8 small reads, no
// mountinfo parse): kubelet asks for every container every few seconds.
func CgroupStats(cgroupsPath string) (*Stats, error) {
	return cgroupStats(cgroupsPath, nil)
}

// CgroupStatsDetail is CgroupStats with Stats.Detail filled in: the
// figures cAdvisor's metric set adds (CFS throttling, limits, peaks, OOM
// kills, block I/O, open files of the cgroup's processes). It costs about
// twice CgroupStats' reads plus a directory read per process, so only the
// metrics RPCs pay for it.
func CgroupStatsDetail(cgroupsPath string) (*Stats, error) {
	return cgroupStats(cgroupsPath, &Detail{})
}

func cgroupStats(cgroupsPath string, d *Detail) (*Stats, error) {
	if cgroupsPath == "" {
		return nil, fmt.Errorf("cgroup stats: empty cgroups path: %w", errdefs.ErrInvalidArgument)
	}
	path := cgroup.Dir(cgroupsPath)
	var s *Stats
	var err error
	if cgroups.Mode() == cgroups.Unified {
		s, err = cgroup2Stats(filepath.Join(cgroupRoot, path), d)
	} else {
		s, err = cgroup1Stats(cgroupRoot, path, d)
	}
	if errors.Is(err, syscall.ENOENT) {
		return nil, fmt.Errorf("cgroup stats %s: %w", path, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup stats %s: %w", path, err)
	}
	return s, nil
}

// cgroup1Stats reads the v1 cgroup at path in each controller's hierarchy
// under root; want, when not nil, is filled too and becomes s.Detail.
func cgroup1Stats(root, path string, want *Detail) (*Stats, error) {
	s := &Stats{Timestamp: time.Now(), Detail: want}
	var scratch Detail
	d := want
	if d == nil {
		d = &scratch // the figures parsed on the way cost nothing
	}
	var buf [4096]byte
	cpu := filepath.Join(root, "cpuacct", path)
	mem := filepath.Join(root, "memory", path)
	pids := filepath.Join(root, "pids", path)
	var err error
	if s.CPUUsageNanos, err = readCgroupUint(filepath.Join(cpu, "cpuacct.usage"), buf[:]); err != nil {
		return nil, err
	}
	b, err := readSmall(filepath.Join(cpu, "cpuacct.stat"), buf[:])
	if err != nil {
		return nil, err
	}
	eachKV(b, func(k string, v uint64) {
		switch k {
		case "user":
			s.CPUUserNanos = v * (1e9 / userHZ)
		case "system":
			s.CPUSystemNanos = v * (1e9 / userHZ)
		}
	})
	if s.MemoryUsageBytes, err = readCgroupUint(filepath.Join(mem, "memory.usage_in_bytes"), buf[:]); err != nil {
		return nil, err
	}
	if s.MemoryFailcnt, err = readCgroupUint(filepath.Join(mem, "memory.failcnt"), buf[:]); err != nil {
		return nil, err
	}
	limit, err := readCgroupUint(filepath.Join(mem, "memory.limit_in_bytes"), buf[:])
	if err != nil {
		return nil, err
	}
	if limit < 1<<62 { // unlimited is a huge page-rounded number
		s.MemoryLimitBytes = limit
	}
	var stat [4096 * 2]byte // memory.stat is about 1.5 KiB
	if b, err = readSmall(filepath.Join(mem, "memory.stat"), stat[:]); err != nil {
		return nil, err
	}
	var inactiveFile uint64
	eachKV(b, func(k string, v uint64) {
		switch k {
		case "total_rss":
			s.MemoryRSSBytes = v
		case "total_cache":
			s.MemoryCacheBytes = v
		case "total_inactive_file":
			inactiveFile = v
		case "total_pgfault":
			s.MemoryPageFaults = v
		case "total_pgmajfault":
			s.MemoryMajorFaults = v
		case "pgfault":
			d.PageFaults = v
		case "pgmajfault":
			d.MajorPageFaults = v
		case "total_swap":
			d.MemorySwapBytes = v
		case "total_mapped_file":
			d.MemoryMappedFileBytes = v
		}
	})
	s.MemoryWorkingSet = sub0(s.MemoryUsageBytes, inactiveFile)
	// The pids controller may be absent (old kernels): no figures then.
	if v, err := readCgroupUint(filepath.Join(pids, "pids.current"), buf[:]); err == nil {
		s.PidsCurrent = v
		if s.Detail == nil {
			s.Processes = countLines(filepath.Join(pids, "cgroup.procs"))
		}
	}
	if s.Detail != nil {
		cgroup1Detail(root, path, s, buf[:])
	}
	return s, nil
}

// cgroup2Stats reads the v2 cgroup at dir; want, when not nil, is filled
// too and becomes s.Detail.
func cgroup2Stats(dir string, want *Detail) (*Stats, error) {
	s := &Stats{Timestamp: time.Now(), Detail: want}
	var scratch Detail
	d := want
	if d == nil {
		d = &scratch // the figures parsed on the way cost nothing
	}
	var buf [4096 * 2]byte
	b, err := readSmall(filepath.Join(dir, "cpu.stat"), buf[:])
	if err != nil {
		return nil, err
	}
	eachKV(b, func(k string, v uint64) {
		switch k {
		case "usage_usec":
			s.CPUUsageNanos = v * 1000
		case "user_usec":
			s.CPUUserNanos = v * 1000
		case "system_usec":
			s.CPUSystemNanos = v * 1000
		case "nr_periods":
			d.CFSPeriods = v
		case "nr_throttled":
			d.CFSThrottledPeriods = v
		case "throttled_usec":
			d.CFSThrottledNanos = v * 1000
		}
	})
	// memory and pids may not be enabled for the subtree: no figures then.
	cgroup2Memory(dir, s, d, buf[:])
	if v, err := readCgroupUint(filepath.Join(dir, "memory.swap.current"), buf[:]); err == nil {
		s.SwapUsageBytes, s.HasSwap = v, true
		d.MemorySwapBytes = v
		if b, err := readSmall(filepath.Join(dir, "memory.swap.max"), buf[:]); err == nil {
			if v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil {
				s.SwapLimitBytes = v
			}
		}
	}
	if v, err := readCgroupUint(filepath.Join(dir, "pids.current"), buf[:]); err == nil {
		s.PidsCurrent = v
	}
	if s.Detail != nil {
		cgroup2Detail(dir, s, buf[:])
	} else {
		s.Processes = countLines(filepath.Join(dir, "cgroup.procs"))
		if s.Processes == 0 && s.PidsCurrent > 0 {
			// crun with the systemd driver runs the container in a child of
			// its scope (<scope>/container): count the children's.
			s.Processes = countChildProcs(dir)
		}
	}
	s.CPUPressure = readPressure(filepath.Join(dir, "cpu.pressure"), buf[:])
	s.MemoryPressure = readPressure(filepath.Join(dir, "memory.pressure"), buf[:])
	s.IOPressure = readPressure(filepath.Join(dir, "io.pressure"), buf[:])
	return s, nil
}

// cgroup2Memory reads the memory figures of the v2 cgroup at dir, when the
// memory controller is enabled there.
func cgroup2Memory(dir string, s *Stats, d *Detail, buf []byte) {
	v, err := readCgroupUint(filepath.Join(dir, "memory.current"), buf)
	if err != nil {
		return
	}
	s.MemoryUsageBytes = v
	if b, err := readSmall(filepath.Join(dir, "memory.max"), buf); err == nil {
		if v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil { // "max" is unlimited
			s.MemoryLimitBytes = v
		}
	}
	if b, err := readSmall(filepath.Join(dir, "memory.events"), buf); err == nil {
		eachKV(b, func(k string, v uint64) {
			switch k {
			case "max":
				s.MemoryFailcnt = v
			case "oom_kill":
				d.OOMKills = v
			}
		})
	}
	if b, err := readSmall(filepath.Join(dir, "memory.stat"), buf); err == nil {
		var inactiveFile uint64
		eachKV(b, func(k string, v uint64) {
			switch k {
			case "anon":
				s.MemoryRSSBytes = v
			case "file":
				s.MemoryCacheBytes = v
			case "inactive_file":
				inactiveFile = v
			case "pgfault":
				s.MemoryPageFaults = v
			case "pgmajfault":
				s.MemoryMajorFaults = v
			case "file_mapped":
				d.MemoryMappedFileBytes = v
			default:
				d.addKernel(k, v)
			}
		})
		s.MemoryWorkingSet = sub0(s.MemoryUsageBytes, inactiveFile)
	}
}

// readPressure reads a PSI file ("some avg10=0.12 avg60=0.05 avg300=0.01
// total=123456", then a "full" line, total in microseconds); nil when it
// cannot be read (no PSI in this kernel, or psi=0).
func readPressure(path string, buf []byte) *Pressure {
	b, err := readSmall(path, buf)
	if err != nil {
		return nil
	}
	return parsePressure(b)
}

func parsePressure(b []byte) *Pressure {
	var p Pressure
	seen := false
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		var pl *PressureLine
		switch string(f[0]) {
		case "some":
			pl = &p.Some
		case "full":
			pl = &p.Full
		default:
			continue
		}
		seen = true
		for _, kv := range f[1:] {
			k, v, ok := bytes.Cut(kv, []byte{'='})
			if !ok {
				continue
			}
			switch string(k) {
			case "avg10":
				pl.Avg10, _ = strconv.ParseFloat(string(v), 64)
			case "avg60":
				pl.Avg60, _ = strconv.ParseFloat(string(v), 64)
			case "avg300":
				pl.Avg300, _ = strconv.ParseFloat(string(v), 64)
			case "total":
				us, _ := strconv.ParseUint(string(v), 10, 64)
				pl.Total = time.Duration(us) * time.Microsecond
			}
		}
	}
	if !seen {
		return nil
	}
	return &p
}

func sub0(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// readSmall reads a small cgroup file into buf with plain syscalls: no
// *os.File, so no poller registration per read. A file longer than buf is
// an error.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &pathError{path, err}
	}
	defer syscall.Close(fd)
	n := 0
	for {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &pathError{path, err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
		if n == len(buf) {
			return nil, fmt.Errorf("read %s: longer than %d bytes", path, len(buf))
		}
	}
}

// pathError names the file and keeps the errno for errors.Is.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return "read " + e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

func readCgroupUint(path string, buf []byte) (uint64, error) {
	b, err := readSmall(path, buf)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// eachKV calls fn for every "key value" line with a numeric value.
func eachKV(b []byte, fn func(k string, v uint64)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			fn(string(k), n)
		}
	}
}

// countLines counts the pids listed in a cgroup.procs file; 0 when it
// cannot be read (the cgroup went away).
func countLines(path string) uint64 {
	var buf [4096]byte
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer syscall.Close(fd)
	var n uint64
	for {
		m, err := syscall.Read(fd, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || m == 0 {
			return n
		}
		n += uint64(bytes.Count(buf[:m], []byte{'\n'}))
	}
}

// countChildProcs counts the processes in the cgroups right below dir.
func countChildProcs(dir string) uint64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, e := range ents {
		if e.IsDir() {
			n += countLines(filepath.Join(dir, e.Name(), "cgroup.procs"))
		}
	}
	return n
}
