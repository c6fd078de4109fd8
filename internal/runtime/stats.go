package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/errdefs"
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
}

// CgroupStats reads the usage of the cgroup at cgroupsPath (as written in an
// OCI spec's linux.cgroupsPath with the cgroupfs driver). A cgroup that does
// not exist is errdefs.ErrNotFound.
func CgroupStats(cgroupsPath string) (*Stats, error) {
	if cgroupsPath == "" {
		return nil, fmt.Errorf("cgroup stats: empty cgroups path: %w", errdefs.ErrInvalidArgument)
	}
	path := filepath.Join("/", cgroupsPath)
	if cgroups.Mode() == cgroups.Unified {
		return cgroup2Stats(path)
	}
	return cgroup1Stats(path)
}

func cgroup1Stats(path string) (*Stats, error) {
	cg, err := cgroup1.Load(cgroup1.StaticPath(path))
	if err != nil {
		if errors.Is(err, cgroup1.ErrCgroupDeleted) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cgroup stats %s: %w", path, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("cgroup stats %s: %w", path, err)
	}
	m, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return nil, fmt.Errorf("cgroup stats %s: %w", path, err)
	}
	s := &Stats{Timestamp: time.Now()}
	if m.CPU != nil && m.CPU.Usage != nil {
		s.CPUUsageNanos = m.CPU.Usage.Total
		s.CPUUserNanos = m.CPU.Usage.User
		s.CPUSystemNanos = m.CPU.Usage.Kernel
	}
	if mem := m.Memory; mem != nil {
		if mem.Usage != nil {
			s.MemoryUsageBytes = mem.Usage.Usage
			s.MemoryFailcnt = mem.Usage.Failcnt
			if mem.Usage.Limit < 1<<62 { // unlimited is a huge page-rounded number
				s.MemoryLimitBytes = mem.Usage.Limit
			}
		}
		s.MemoryCacheBytes = mem.TotalCache
		s.MemoryWorkingSet = s.MemoryUsageBytes
		if mem.TotalInactiveFile < s.MemoryWorkingSet {
			s.MemoryWorkingSet -= mem.TotalInactiveFile
		} else {
			s.MemoryWorkingSet = 0
		}
		s.MemoryRSSBytes = mem.TotalRSS
		s.MemoryPageFaults = mem.TotalPgFault
		s.MemoryMajorFaults = mem.TotalPgMajFault
	}
	if m.Pids != nil {
		s.PidsCurrent = m.Pids.Current
	}
	s.Processes = countProcs(filepath.Join("/sys/fs/cgroup/pids", path, "cgroup.procs"))
	return s, nil
}

// countProcs counts the pids listed in a cgroup.procs file; 0 when it
// cannot be read (the cgroup went away).
func countProcs(file string) uint64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	return uint64(bytes.Count(b, []byte{'\n'}))
}

func cgroup2Stats(path string) (*Stats, error) {
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", path)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cgroup stats %s: %w", path, errdefs.ErrNotFound)
	}
	cg, err := cgroup2.Load(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup stats %s: %w", path, err)
	}
	m, err := cg.Stat()
	if err != nil {
		return nil, fmt.Errorf("cgroup stats %s: %w", path, err)
	}
	s := &Stats{Timestamp: time.Now()}
	if m.CPU != nil {
		s.CPUUsageNanos = m.CPU.UsageUsec * 1000
		s.CPUUserNanos = m.CPU.UserUsec * 1000
		s.CPUSystemNanos = m.CPU.SystemUsec * 1000
	}
	if mem := m.Memory; mem != nil {
		s.MemoryUsageBytes = mem.Usage
		s.MemoryWorkingSet = mem.Usage
		if mem.InactiveFile < s.MemoryWorkingSet {
			s.MemoryWorkingSet -= mem.InactiveFile
		} else {
			s.MemoryWorkingSet = 0
		}
		s.MemoryRSSBytes = mem.Anon
		s.MemoryCacheBytes = mem.File
		if mem.UsageLimit < 1<<62 {
			s.MemoryLimitBytes = mem.UsageLimit
		}
		s.MemoryPageFaults = mem.Pgfault
		s.MemoryMajorFaults = mem.Pgmajfault
	}
	if m.Pids != nil {
		s.PidsCurrent = m.Pids.Current
	}
	if m.MemoryEvents != nil {
		s.MemoryFailcnt = m.MemoryEvents.Max
	}
	s.Processes = countProcs(filepath.Join("/sys/fs/cgroup", path, "cgroup.procs"))
	return s, nil
}
