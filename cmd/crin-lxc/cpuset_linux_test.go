package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrepareCpuset: on a tree of plain files shaped like a cpuset
// hierarchy, the existing ancestors of the container's cgroup get their
// parent's CPUs and nodes where empty, and the deepest one
// cgroup.clone_children; the levels still to be made are left to liblxc.
func TestPrepareCpuset(t *testing.T) {
	root := t.TempDir()
	mk := func(rel, cpus, mems string) {
		d := filepath.Join(root, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"cpuset.cpus": cpus, "cpuset.mems": mems, "cgroup.clone_children": "0\n"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(rel, f string) string {
		b, err := os.ReadFile(filepath.Join(root, rel, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	mk("", "0-3\n", "0\n")
	mk("kubepods", "0-3\n", "0\n")
	mk("kubepods/besteffort", "\n", "\n") // made by someone who left it empty
	mk("kubepods/besteffort/pod1", "\n", "0\n")

	if err := prepareCpuset(root, "/kubepods/besteffort/pod1/ctr/leaf"); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"kubepods/besteffort", "kubepods/besteffort/pod1"} {
		if got := read(rel, "cpuset.cpus"); got != "0-3" {
			t.Errorf("%s cpuset.cpus = %q, want the parent's 0-3", rel, got)
		}
		if got := read(rel, "cpuset.mems"); got != "0" {
			t.Errorf("%s cpuset.mems = %q, want 0", rel, got)
		}
	}
	if got := read("kubepods/besteffort/pod1", "cgroup.clone_children"); got != "1" {
		t.Errorf("deepest existing level's clone_children = %q, want 1", got)
	}
	for _, rel := range []string{"kubepods", "kubepods/besteffort"} {
		if got := read(rel, "cgroup.clone_children"); got != "0" {
			t.Errorf("%s clone_children = %q: only the deepest existing level is changed", rel, got)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "kubepods/besteffort/pod1/ctr")); !os.IsNotExist(err) {
		t.Errorf("a level liblxc makes was made: %v", err)
	}

	// Nothing below the root yet, or no cpuset hierarchy: nothing to do.
	if err := prepareCpuset(root, "/new/ctr"); err != nil {
		t.Fatal(err)
	}
	if got := read("", "cgroup.clone_children"); got != "0" {
		t.Errorf("the hierarchy's root was changed: clone_children %q", got)
	}
	if err := prepareCpuset("", "/kubepods/x"); err != nil {
		t.Fatal(err)
	}
}
