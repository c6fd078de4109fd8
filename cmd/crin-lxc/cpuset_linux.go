package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cpusetRoot is the cgroup v1 cpuset hierarchy's mount, "" when there is
// none (cgroup v2, or no cpuset controller mounted on its own or with
// others).
func cpusetRoot() string {
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		for _, c := range strings.Split(e.Name(), ",") {
			if c == "cpuset" {
				return filepath.Join("/sys/fs/cgroup", e.Name())
			}
		}
	}
	return ""
}

// prepareCpuset readies the cgroup v1 cpuset hierarchy at root for a
// container whose cgroup is rel, before liblxc creates it: a new cpuset
// cgroup starts with no CPUs and no memory nodes, and no task may enter
// it until both are set. liblxc sets them on the levels it creates, but
// a level that already exists is taken as it is; kubelet makes a pod's
// cgroups (kubepods/<qos>/pod<uid>) without cgroup.clone_children, so a
// container cgroup liblxc makes below one would be empty and liblxc fails
// with "Failed to enter cgroup". So, as runc does for its own, every
// existing ancestor of rel with no CPUs or nodes gets its parent's, and
// the deepest existing one gets cgroup.clone_children = 1, which the
// kernel copies to the levels made below it: each starts with its
// parent's CPUs and nodes.
func prepareCpuset(root, rel string) error {
	rel = strings.Trim(filepath.Clean("/"+rel), "/")
	if root == "" || rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	dir := root
	deepest := ""
	for _, p := range parts[:len(parts)-1] {
		next := filepath.Join(dir, p)
		if _, err := os.Stat(next); errors.Is(err, os.ErrNotExist) {
			break
		} else if err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if err := inheritCpuset(dir, next, f); err != nil {
				return err
			}
		}
		deepest, dir = next, next
	}
	if deepest == "" {
		// Nothing exists below the root: liblxc makes every level.
		return nil
	}
	f := filepath.Join(deepest, "cgroup.clone_children")
	if b, err := os.ReadFile(f); err == nil && string(bytes.TrimSpace(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("cpuset cgroup %s: %w", deepest, err)
	}
	return nil
}

// inheritCpuset copies file from parent to child when the child's is
// empty.
func inheritCpuset(parent, child, file string) error {
	b, err := os.ReadFile(filepath.Join(child, file))
	if err != nil {
		return fmt.Errorf("cpuset cgroup %s: %w", child, err)
	}
	if len(bytes.TrimSpace(b)) > 0 {
		return nil
	}
	v, err := os.ReadFile(filepath.Join(parent, file))
	if err != nil {
		return fmt.Errorf("cpuset cgroup %s: %w", parent, err)
	}
	if err := os.WriteFile(filepath.Join(child, file), bytes.TrimSpace(v), 0o644); err != nil {
		return fmt.Errorf("cpuset cgroup %s: %s: %w", child, file, err)
	}
	return nil
}
