package podenv

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/cgroup"
)

// SweepMounts unmounts what is mounted under crind's root and state dirs
// (RootDir, the parent of NetNSDir) for a pod or container that known
// says no record owns (a rootfs overlay, a pod's /dev/shm), deepest
// first. A container's rootfs (under containers/<id>) goes to
// releaseRootfs, the image store's, which also removes its directories;
// what that fails to release is unmounted. Network namespace pins are
// SweepPins'. Failures are logged.
func (e *Env) SweepMounts(ctx context.Context, known func(id string) bool, releaseRootfs func(ctx context.Context, id string) error) {
	points, err := e.mountsUnder(e.c.RootDir, filepath.Dir(e.c.NetNSDir))
	if err != nil {
		e.log.WarnContext(ctx, "sweep mounts", "error", err)
		return
	}
	released := map[string]bool{}
	for _, mp := range points {
		if filepath.Dir(mp) == filepath.Clean(e.c.NetNSDir) {
			continue // netns pins: SweepPins
		}
		id := unknownID(mp, known)
		if id == "" {
			continue
		}
		if strings.Contains(mp, "/containers/"+id) && !released[id] {
			released[id] = true
			if err := releaseRootfs(ctx, id); err == nil {
				e.log.InfoContext(ctx, "released the rootfs of a container no record owns", "container_id", id)
				continue
			}
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			e.log.WarnContext(ctx, "unmount orphaned mount", "mount", mp, "error", err)
			continue
		}
		e.log.InfoContext(ctx, "unmounted a mount no record owns", "mount", mp, "id", id)
	}
}

// mountsUnder lists the mount points below the dirs, deepest first; ""
// and "/" are no dirs here.
func (e *Env) mountsUnder(dirs ...string) ([]string, error) {
	var bases []string
	for _, b := range dirs {
		if b != "" && b != "." && b != "/" {
			bases = append(bases, filepath.Clean(b)+"/")
		}
	}
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !slices.ContainsFunc(bases, func(b string) bool { return strings.HasPrefix(m.Mountpoint, b) }), false
	})
	if err != nil {
		return nil, err
	}
	points := make([]string, 0, len(mounts))
	for _, m := range mounts {
		points = append(points, m.Mountpoint)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points, nil
}

// idParents are the directories crind keeps one entry per pod or
// container in: <root>/pods/<pod id>, <root>/image/containers/<container
// id>, <state>/c/<id>. Other path elements (layer digests) are not ids.
var idParents = []string{"pods", "containers", "c"}

// unknownID returns the first id in p (an element under one of
// idParents) that no record owns, or "".
func unknownID(p string, known func(string) bool) string {
	els := strings.Split(p, "/")
	for i := 1; i < len(els); i++ {
		if slices.Contains(idParents, els[i-1]) && isID(els[i]) && !known(els[i]) {
			return els[i]
		}
	}
	return ""
}

// SweepCgroups removes, in every hierarchy, the cgroups under crind's
// cgroup parent that no record owns (known reports the pods and
// containers that one does): a pod directory whose pod is gone, and
// inside a known pod's directory a container cgroup whose container is
// gone (processes still inside are killed). Failures are logged.
func (e *Env) SweepCgroups(ctx context.Context, known func(id string) bool) {
	l := e.Layout()
	if l.Parent == "" || l.Parent == "/" {
		return
	}
	roots, err := e.cgroupHierarchies()
	if err != nil {
		e.log.WarnContext(ctx, "sweep cgroups", "error", err)
		return
	}
	stale := map[string]bool{}
	for _, root := range roots {
		pods, err := os.ReadDir(filepath.Join(root, cgroup.Dir(l.Parent)))
		if err != nil {
			continue
		}
		for _, p := range pods {
			podID, ok := l.PodOf(p.Name())
			if !p.IsDir() || !ok || !isID(podID) {
				continue
			}
			podCg := l.OwnPodParent(podID)
			if !known(podID) {
				stale[podCg] = true
				continue
			}
			ctrs, _ := os.ReadDir(filepath.Join(root, cgroup.Dir(podCg)))
			for _, c := range ctrs {
				id, ok := l.ContainerOf(c.Name())
				if c.IsDir() && ok && isID(id) && id != podID && !known(id) {
					stale[cgroup.Container(podCg, id)] = true
				}
			}
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(stale)) {
		if err := e.RemoveCgroupTree(ctx, rel); err != nil {
			e.log.WarnContext(ctx, "remove orphaned cgroup", "cgroup", rel, "error", err)
			continue
		}
		e.log.InfoContext(ctx, "removed a cgroup no record owns", "cgroup", rel)
	}
}

// SweepPodDirs removes the pod dirs (RootDir/pods/<id>) no record owns
// (SweepIDDirs).
func (e *Env) SweepPodDirs(ctx context.Context, owned func(id string) bool) {
	if e.c.RootDir != "" {
		e.SweepIDDirs(ctx, filepath.Join(e.c.RootDir, "pods"), owned)
	}
}

// SweepIDDirs removes the entries of dir named by an id (or ".pod-" and
// an id) that owned says no record owns. A dir that still has a mount
// below it is left alone and logged; names that are not of crind's form
// are left alone too: crind cannot tell whose they are. Failures are
// logged.
func (e *Env) SweepIDDirs(ctx context.Context, dir string, owned func(id string) bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if !os.IsNotExist(err) {
			e.log.WarnContext(ctx, "sweep dirs", "dir", dir, "error", err)
		}
		return
	}
	for _, ent := range ents {
		id := strings.TrimPrefix(ent.Name(), ".pod-")
		if !isID(id) {
			e.log.DebugContext(ctx, "sweep left alone an entry whose name is no crind id", "dir", dir, "name", ent.Name())
			continue
		}
		if owned(id) {
			continue
		}
		p := filepath.Join(dir, ent.Name())
		if mounted(p) {
			e.log.WarnContext(ctx, "left alone a dir no record owns: something is still mounted below it", "dir", p)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			e.log.WarnContext(ctx, "remove a dir no record owns", "dir", p, "error", err)
			continue
		}
		e.log.InfoContext(ctx, "removed a dir no record owns", "dir", p)
	}
}

// mounted reports whether anything is mounted at or below p (or whether
// the mount table cannot be read: then nothing is removed).
func mounted(p string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(p))
	return err != nil || len(ms) > 0
}
