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
// spec names in linux.cgroupsPath, or "": a cgroupfs path, or on cgroup
// v2 the systemd driver's "slice:prefix:name" (the scope
// <prefix>-<name>.scope in the slice's dir; crun's subgroup below it is
// counted there too). The shim takes it over the init pid's: it can be
// read before the runtime starts the container, and a runtime that makes
// the container's cgroup only at start (crin-lxc, whose "init" is its
// monitor) has no cgroup of the container at create to look the pid up
// in.
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
	_, err = os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	v2 := err == nil
	if v2 && strings.Count(p, ":") == 2 {
		if dir := systemdScopeDir(p); dir != "" {
			return filepath.Join(cgroupRoot, dir, "memory.events")
		}
		return ""
	}
	if !strings.HasPrefix(p, "/") || strings.Contains(p, ":") {
		return ""
	}
	if v2 {
		return filepath.Join(cgroupRoot, filepath.Clean(p), "memory.events")
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "memory")); err == nil {
		return filepath.Join(cgroupRoot, "memory", filepath.Clean(p), "memory.oom_control")
	}
	return ""
}

// systemdScopeDir is the cgroup dir, relative to the v2 root, of the
// scope the systemd driver's cgroupsPath "slice:prefix:name" names: the
// slice's dir (each dash of its name a level: "a-b.slice" is
// "a.slice/a-b.slice") and "<prefix>-<name>.scope" in it; "" for what is
// not of that form.
func systemdScopeDir(cgroupsPath string) string {
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 || parts[2] == "" || strings.ContainsAny(cgroupsPath, "/") {
		return ""
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	// No slice is the runtime's default, which crind never leaves to it;
	// a name that is a slice is not a scope.
	if !strings.HasSuffix(slice, ".slice") || strings.HasSuffix(name, ".slice") {
		return ""
	}
	if slice == "-.slice" {
		slice = ""
	}
	var dir string
	if slice != "" {
		base := strings.TrimSuffix(slice, ".slice")
		if base == "" || strings.HasPrefix(base, "-") || strings.HasSuffix(base, "-") || strings.Contains(base, "--") {
			return ""
		}
		words := strings.Split(base, "-")
		for i := range words {
			dir = filepath.Join(dir, strings.Join(words[:i+1], "-")+".slice")
		}
	}
	unit := name + ".scope"
	if prefix != "" {
		unit = prefix + "-" + unit
	}
	return filepath.Join(dir, unit)
}
