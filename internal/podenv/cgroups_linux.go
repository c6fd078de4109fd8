package podenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/store"
)

// UnitStopper stops systemd units (cgroup.Units in production). With
// the systemd cgroup driver, a pod slice crind made and the scope of a
// container no record owns are removed by stopping their units: systemd
// owns those cgroups, kills what is left inside and removes the
// directories. A unit that is not loaded is already stopped: success.
type UnitStopper interface {
	StopUnit(ctx context.Context, name string) error
}

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupEmptyWait is how long a cgroup removal waits for the processes it
// killed to leave.
const cgroupEmptyWait = 2 * time.Second

// Layout is how this crind names cgroups.
func (e *Env) Layout() cgroup.Layout {
	d := e.c.CgroupDriver
	if d == "" {
		d = cgroup.Cgroupfs
	}
	return cgroup.Layout{Driver: d, Parent: e.c.CgroupParent}
}

// RemovePodCgroup removes the pod-level cgroup crind derived for a pod
// that named no cgroup parent (<cgroup_parent>/<pod id>, or with the
// systemd driver the slice <parent>-pod<id>.slice): runc removes each
// container's own cgroup, not this parent of them. A parent kubelet gave
// belongs to kubelet and is left alone. What is still inside (a container
// cgroup whose runtime delete was killed, a stray runc init) is killed
// and removed too; a removal that fails anyway is handed to Config.Defer
// (store.CleanupPodCgroup) and the error returned.
func (e *Env) RemovePodCgroup(ctx context.Context, rec *store.Sandbox) error {
	if rec.CgroupParent != e.Layout().OwnPodParent(rec.ID) {
		return nil
	}
	err := e.RemoveCgroupTree(ctx, rec.CgroupParent)
	if err != nil {
		e.deferCleanup(ctx, store.Cleanup{Kind: store.CleanupPodCgroup, ID: rec.ID, Path: rec.CgroupParent}, err)
	}
	return err
}

// RemoveCgroupTree removes the cgroup rel (a path under every hierarchy's
// root, or a systemd slice or scope: removeUnitCgroup) and everything
// below it: processes still inside (a runc init whose runc was killed, a
// container whose runtime delete never ran) are SIGKILLed first. Only for
// cgroups crind made and no record owns. Already gone is success; a path
// that is not clean and absolute is an error.
func (e *Env) RemoveCgroupTree(ctx context.Context, rel string) error {
	if cgroup.Unit(rel) != "" {
		return e.removeUnitCgroup(ctx, rel)
	}
	if rel == "" || rel == "/" || !filepath.IsAbs(rel) || filepath.Clean(rel) != rel {
		return fmt.Errorf("remove cgroup %q: not a clean absolute cgroup path", rel)
	}
	roots, err := e.cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, root := range roots {
		if err := removeCgroupDir(ctx, filepath.Join(root, rel)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeUnitCgroup removes cgroup p (a slice, or a scope in runc's
// slice:prefix:name form) by stopping its unit, then removes what systemd
// left of its directory (nothing, unless the unit was never systemd's).
func (e *Env) removeUnitCgroup(ctx context.Context, p string) error {
	unit := cgroup.Unit(p)
	if e.c.Units == nil {
		return fmt.Errorf("remove cgroup %s: unit %s: no systemd connection (cgroup driver %s)", p, unit, e.Layout().Driver)
	}
	if err := e.c.Units.StopUnit(ctx, unit); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", p, err)
	}
	dir := filepath.Join(e.cgroupFS(), cgroup.Dir(p))
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return removeCgroupDir(ctx, dir)
}

// cgroupFS is where the cgroup hierarchies are mounted.
func (e *Env) cgroupFS() string {
	if e.c.CgroupFS != "" {
		return e.c.CgroupFS
	}
	return cgroupRoot
}

// cgroupHierarchies lists the roots of every cgroup hierarchy: the one
// cgroup2 mount, or (v1 and hybrid) each controller's mount and the
// cgroup2 mount beside them.
func (e *Env) cgroupHierarchies() ([]string, error) {
	fsRoot := e.cgroupFS()
	if _, err := os.Stat(filepath.Join(fsRoot, "cgroup.controllers")); err == nil {
		return []string{fsRoot}, nil
	}
	ents, err := os.ReadDir(fsRoot)
	if err != nil {
		return nil, fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	var out []string
	for _, ent := range ents {
		if ent.IsDir() {
			out = append(out, filepath.Join(fsRoot, ent.Name()))
		}
	}
	return out, nil
}

// removeCgroupDir kills what runs in dir and below, then removes the
// directories deepest first.
func removeCgroupDir(ctx context.Context, dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk cgroup %s: %w", dir, err)
	}
	for _, d := range dirs {
		// A frozen cgroup would keep its killed processes forever.
		if _, err := os.Stat(filepath.Join(d, "freezer.state")); err == nil {
			_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0o644)
		}
		killCgroupProcs(d)
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := rmdirCgroup(ctx, dirs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func killCgroupProcs(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// rmdirCgroup removes an empty cgroup, waiting a little for killed
// processes to leave it (EBUSY meanwhile).
func rmdirCgroup(ctx context.Context, dir string) error {
	deadline := time.Now().Add(cgroupEmptyWait)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		killCgroupProcs(dir)
		time.Sleep(20 * time.Millisecond)
	}
}
