package shimd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cgroupRoot is where cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// oomCounterFile returns the file that counts OOM kills in the memory
// cgroup of pid: memory.oom_control on cgroup v1, memory.events on v2.
func oomCounterFile(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("read cgroup of %d: %w", pid, err)
	}
	var unified string
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return filepath.Join(cgroupRoot, "memory", parts[2], "memory.oom_control"), nil
			}
		}
	}
	if unified != "" {
		if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
			return filepath.Join(cgroupRoot, unified, "memory.events"), nil
		}
	}
	return "", fmt.Errorf("no memory cgroup for %d", pid)
}
