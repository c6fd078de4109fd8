package shimd

import (
	"encoding/json"
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

// specOOMCounterFile is the OOM kill counter of the cgroup the bundle's
// spec names, when linux.cgroupsPath is a cgroupfs path (not the
// systemd driver's slice:prefix:name), or "". The shim takes it over the
// init pid's: a runtime that makes the container's cgroup only at start
// (crin-lxc, whose "init" is its monitor) has no cgroup of the
// container at create to look the pid up in.
func specOOMCounterFile(bundle string) string {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return ""
	}
	var spec struct {
		Linux *struct {
			CgroupsPath string `json:"cgroupsPath"`
		} `json:"linux"`
	}
	if json.Unmarshal(data, &spec) != nil || spec.Linux == nil {
		return ""
	}
	p := spec.Linux.CgroupsPath
	if !strings.HasPrefix(p, "/") || strings.Contains(p, ":") {
		return ""
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return filepath.Join(cgroupRoot, filepath.Clean(p), "memory.events")
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "memory")); err == nil {
		return filepath.Join(cgroupRoot, "memory", filepath.Clean(p), "memory.oom_control")
	}
	return ""
}
