package shimv2

import (
	"path/filepath"

	"github.com/containerd/cgroups/v3"

	"github.com/crin-dev/crin/internal/cgroup"
)

// oomCounter is the file counting the OOM kills of the memory cgroup at
// cgroupsPath (as in an OCI spec, in either driver's form):
// memory.oom_control on cgroup v1, memory.events on v2. The shim's OOM
// events are not received (see the package doc), so the kernel's counter
// says whether a container was OOM-killed; it is read while the
// container's cgroup still exists, between its exit and its Delete.
func oomCounter(cgroupsPath string) string {
	if cgroupsPath == "" {
		return ""
	}
	p := cgroup.Dir(cgroupsPath)
	if cgroups.Mode() == cgroups.Unified {
		return filepath.Join("/sys/fs/cgroup", p, "memory.events")
	}
	return filepath.Join("/sys/fs/cgroup/memory", p, "memory.oom_control")
}
