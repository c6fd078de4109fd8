// Package cgroup says where pods' and containers' cgroups live under the
// two cgroup drivers kubelet knows: cgroupfs, where a cgroup is a path
// below the hierarchy's root that crind and the OCI runtime make as
// directories, and systemd, where a pod's cgroup is a slice unit and a
// container's a scope unit that systemd makes over D-Bus (the OCI
// runtime's --systemd-cgroup). It validates the cgroup parents CRI and
// NRI send, derives crind's own parents for pods that name none, and
// turns any of those names into the directory under the cgroup mount
// where the files are, which is what stats, OOM watching and removal
// read.
//
// The forms are self-describing, so reading a recorded path needs no
// driver: "/a/b" is a cgroupfs path, "a-b.slice" a slice and
// "a-b.slice:crin:ID" runc's slice:prefix:name form of a scope.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/errdefs"
)

// Driver names how pod and container cgroups are made and named.
type Driver string

const (
	// Cgroupfs is the driver whose cgroups are directories below a
	// parent path.
	Cgroupfs Driver = "cgroupfs"
	// Systemd is the driver where a pod is a slice, each container a
	// scope in it, made by
	// systemd; kubelet's default (kubeadm's too) on systemd nodes.
	Systemd Driver = "systemd"
)

// ScopePrefix is the prefix of the scope units containers run in with the
// systemd driver: crin-<container id>.scope.
const ScopePrefix = "crin"

// DefaultParent is crind's parent of the pods that name none, per driver.
func DefaultParent(d Driver) string {
	if d == Systemd {
		return "crin.slice"
	}
	return "/crin"
}

// Detect picks the driver a node wants: systemd when systemd is PID 1 (it
// made /run/systemd/system, as sd_booted checks) on a cgroup v2 host,
// where systemd owns the whole tree and expects units; cgroupfs
// elsewhere, notably on cgroup v1 and hybrid hosts.
func Detect() Driver {
	if cgroups.Mode() != cgroups.Unified {
		return Cgroupfs
	}
	if fi, err := os.Lstat("/run/systemd/system"); err == nil && fi.IsDir() {
		return Systemd
	}
	return Cgroupfs
}

// ParseDriver reads a configured driver name.
func ParseDriver(s string) (Driver, error) {
	switch d := Driver(s); d {
	case Cgroupfs, Systemd:
		return d, nil
	}
	return "", fmt.Errorf("cgroup driver %q: must be %q or %q: %w", s, Cgroupfs, Systemd, errdefs.ErrInvalidArgument)
}

// Layout is how one crind names cgroups.
type Layout struct {
	Driver Driver
	// Parent is crind's parent of pods that name none: an absolute path
	// (cgroupfs) or a slice name (systemd).
	Parent string
}

// CheckParent checks a cgroup parent sent for a pod (field names where it
// came from, for the error) against the driver's form: a clean absolute
// path without ".." for cgroupfs, a slice unit name for systemd. The
// error is errdefs.ErrInvalidArgument and names field, value and driver.
func (l Layout) CheckParent(field, p string) error {
	switch l.Driver {
	case Systemd:
		if err := checkSystemdParent(p); err != nil {
			return fmt.Errorf("%s %q: %v (the systemd cgroup driver takes a slice, by name or by path: kubepods-burstable-pod<uid>.slice or /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice, as kubelet sends with cgroupDriver: systemd): %w",
				field, p, err, errdefs.ErrInvalidArgument)
		}
	default:
		if err := checkPath(p); err != nil {
			return fmt.Errorf("%s %q: %v (the cgroupfs cgroup driver takes a path such as /kubepods/burstable/pod<uid>): %w",
				field, p, err, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// PodParent is the cgroup parent recorded for pod id: given (checked
// already; with the systemd driver a slice's path is recorded as the
// slice's name, the form runc's slice:prefix:name takes) or, when empty,
// crind's own one derived from id.
func (l Layout) PodParent(given, id string) string {
	if given != "" {
		if l.Driver == Systemd && strings.Contains(given, "/") {
			return filepath.Base(given)
		}
		return given
	}
	return l.OwnPodParent(id)
}

// OwnPodParent is the parent crind makes for pod id when the pod names
// none: <Parent>/<id>, or the slice <Parent's name>-pod<id>.slice inside
// the Parent slice.
func (l Layout) OwnPodParent(id string) string {
	if l.Driver == Systemd {
		return strings.TrimSuffix(l.Parent, ".slice") + "-pod" + id + ".slice"
	}
	return filepath.Join(l.Parent, id)
}

// Container is the OCI linux.cgroupsPath of container id in a pod whose
// cgroup parent is parent, in the parent's form: parent/id, or runc's and
// crun's slice:prefix:name, which they turn into the scope
// crin-<id>.scope in that slice.
func Container(parent, id string) string {
	if IsSlice(parent) {
		return parent + ":" + ScopePrefix + ":" + id
	}
	return filepath.Join(parent, id)
}

// IsSlice reports whether p names a slice (the systemd form), not a path.
func IsSlice(p string) bool {
	return !strings.Contains(p, "/") && strings.HasSuffix(p, ".slice")
}

// IsScopePath reports whether p is in runc's slice:prefix:name form.
func IsScopePath(p string) bool {
	return !strings.Contains(p, "/") && strings.Count(p, ":") == 2
}

// Dir is the directory of cgroup p, relative to the root of a hierarchy
// and starting with "/", for p in any form: a cgroupfs path, a slice name,
// or slice:prefix:name.
func Dir(p string) string {
	switch {
	case IsScopePath(p):
		parts := strings.SplitN(p, ":", 3)
		slice, prefix, name := parts[0], parts[1], parts[2]
		if slice == "" {
			slice = "system.slice"
		}
		unit := name
		if !strings.HasSuffix(name, ".slice") {
			unit = name + ".scope"
			if prefix != "" {
				unit = prefix + "-" + unit
			}
		}
		return filepath.Join(ExpandSlice(slice), unit)
	case IsSlice(p):
		return ExpandSlice(p)
	}
	return filepath.Join("/", p)
}

// Unit is the systemd unit whose cgroup p is (a slice name, or the scope
// of slice:prefix:name), or "" for a cgroupfs path.
func Unit(p string) string {
	switch {
	case IsSlice(p):
		return p
	case IsScopePath(p):
		return filepath.Base(Dir(p))
	}
	return ""
}

// ExpandSlice is where systemd puts slice s: each dash starts a child of
// the slice named by what comes before it, so a-b-c.slice is
// /a.slice/a-b.slice/a-b-c.slice, and -.slice is the root.
func ExpandSlice(s string) string {
	name := strings.TrimSuffix(s, ".slice")
	if name == "-" || name == "" {
		return "/"
	}
	dir := "/"
	for i := 0; i < len(name); i++ {
		if name[i] == '-' {
			dir = filepath.Join(dir, name[:i]+".slice")
		}
	}
	return filepath.Join(dir, s)
}

// checkSystemdParent checks a parent for the systemd driver: a slice's
// name, or its path under the cgroup root, which kubelet sends (the path
// systemd gives the slice: each dash-separated prefix a slice above it).
func checkSystemdParent(p string) error {
	if !strings.Contains(p, "/") {
		return checkSlice(p)
	}
	if err := checkPath(p); err != nil {
		return err
	}
	base := filepath.Base(p)
	if err := checkSlice(base); err != nil {
		return err
	}
	if want := ExpandSlice(base); p != want {
		return fmt.Errorf("not the path systemd gives slice %s (%s)", base, want)
	}
	return nil
}

// checkSlice checks a slice unit name as systemd does: unit-name
// characters, ".slice" at the end, no empty dash-separated part.
func checkSlice(s string) error {
	if !strings.HasSuffix(s, ".slice") {
		return errors.New("not a slice name: must end in .slice")
	}
	if len(s) > 255 {
		return errors.New("longer than a unit name may be (255 bytes)")
	}
	name := strings.TrimSuffix(s, ".slice")
	if name == "-" {
		return nil
	}
	if name == "" || name[0] == '-' || name[len(name)-1] == '-' || strings.Contains(name, "--") {
		return errors.New("not a slice name: dashes separate non-empty parts")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_.-\\@", c) >= 0
		if !ok {
			return fmt.Errorf("not a slice name: byte %q not allowed in a unit name", c)
		}
	}
	return nil
}

// checkPath checks a cgroupfs cgroup path: absolute, clean, and no ".."
// (which would climb out of the parent the node gave).
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("must be an absolute cgroup path")
	}
	if filepath.Clean(p) != p || strings.Contains(p, "\x00") {
		return errors.New("must be a clean path (no '..', '.', '//' or trailing '/')")
	}
	if p == "/" {
		return errors.New("must not be the cgroup root")
	}
	return nil
}

// PodOf reports which pod's own parent (OwnPodParent) a child of the
// Parent cgroup is, by the child's directory name.
func (l Layout) PodOf(name string) (string, bool) {
	if l.Driver == Systemd {
		pre := strings.TrimSuffix(l.Parent, ".slice") + "-pod"
		if strings.HasPrefix(name, pre) && strings.HasSuffix(name, ".slice") {
			return strings.TrimSuffix(strings.TrimPrefix(name, pre), ".slice"), true
		}
		return "", false
	}
	return name, true
}

// ContainerOf reports which container's cgroup a child of a pod's cgroup
// is, by the child's directory name (its id, or crin-<id>.scope).
func (l Layout) ContainerOf(name string) (string, bool) {
	if l.Driver == Systemd {
		pre := ScopePrefix + "-"
		if strings.HasPrefix(name, pre) && strings.HasSuffix(name, ".scope") {
			return strings.TrimSuffix(strings.TrimPrefix(name, pre), ".scope"), true
		}
		return "", false
	}
	return name, true
}
