package shimv2

import (
	"path/filepath"
	"strings"

	"github.com/containerd/cgroups/v3"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// cgroupRoot is where cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// oomAncestors is how many cgroups above a container's are counted on
// cgroup v2: the pod's (or, for crun, its scope above the container's
// subgroup), and one or two more.
const oomAncestors = 3

// oomCounterFile is the file counting the OOM kills of the memory
// cgroup at cgroupsPath (as in an OCI spec, in either driver's form):
// memory.oom_control on cgroup v1, memory.events on v2. The shim's OOM
// events are not received (see the package doc), so the kernel's counter
// says whether a container was OOM-killed.
func oomCounterFile(cgroupsPath string) string {
	if cgroupsPath == "" {
		return ""
	}
	p := cgroup.Dir(cgroupsPath)
	if cgroups.Mode() == cgroups.Unified {
		return filepath.Join(cgroupRoot, p, "memory.events")
	}
	return filepath.Join(cgroupRoot, "memory", p, "memory.oom_control")
}

// watchOOM records in m the container's OOM kill counter and, on cgroup
// v2, those of the cgroups above it, nearest first, as they are now
// (after the task's create, so the container's cgroup exists).
func watchOOM(m *meta, cgroupsPath string) {
	m.OOMCounter = oomCounterFile(cgroupsPath)
	if m.OOMCounter == "" {
		return
	}
	if n, err := shim.ReadOOMKills(m.OOMCounter); err == nil {
		m.OOMBase = n
	}
	if filepath.Base(m.OOMCounter) != "memory.events" {
		return
	}
	dir := filepath.Dir(m.OOMCounter)
	for range oomAncestors {
		dir = filepath.Dir(dir)
		if dir == cgroupRoot || !strings.HasPrefix(dir, cgroupRoot+"/") {
			break
		}
		f := filepath.Join(dir, "memory.events")
		if n, err := shim.ReadOOMKills(f); err == nil {
			m.OOMAncestors = append(m.OOMAncestors, oomCount{File: f, Base: n})
		}
	}
}

// oomKilled reports whether the kernel OOM-killed a process of the
// container since its create; code is its exit status as the shim
// reports it (128+signal for a signal). The container's own counter
// decides while its cgroup exists. Under the systemd driver it may not:
// systemd stops a container's scope, removing its cgroup, as soon as the
// last process in it is gone, which can be before the shim has reaped the
// init and crind asked for the exit. For an init killed by SIGKILL the
// nearest ancestor still there then tells (crin-shim's oomWatch does the
// same): its counter went up since create only if a process below it was
// OOM-killed (another container of the pod OOM-killed in the same window
// would be taken for this one's).
func oomKilled(m meta, code uint32) bool {
	if m.OOMCounter == "" {
		return false
	}
	n, err := shim.ReadOOMKills(m.OOMCounter)
	if err == nil {
		return n > m.OOMBase
	}
	if code != 128+9 {
		return false
	}
	for _, a := range m.OOMAncestors {
		if n, err := shim.ReadOOMKills(a.File); err == nil {
			return n > a.Base
		}
	}
	return false
}
