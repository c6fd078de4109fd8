package idmap

import (
	"errors"
	"fmt"
	"github.com/moby/sys/mountinfo"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// RemapOverlay replaces the overlay mounted at target (a container rootfs
// whose lower dirs all lie under root) with one whose lower dirs are read
// through an id-mapped clone of root, and chowns the (new, empty) upper
// dir to uid:gid, the host ids of the container's root. overlayfs cannot
// be id-mapped itself, nor can its upper dir (it makes its work dirs as
// the mounter, host root, which an id-mapped mount cannot write), so
// this is how a rootfs looks owned by root inside a user namespace while
// what the container writes is owned by its mapped ids on disk.
//
// The clone is never attached: overlayfs keeps private copies of its
// layers' mounts, so nothing is left to unmount but target. On error the
// original overlay is mounted again.
func RemapOverlay(usernsFd int, target, root string, uid, gid uint32) error {
	opts, err := overlayOptions(target)
	if err != nil {
		return err
	}
	lowers, upper, work := opts["lowerdir"], opts["upperdir"], opts["workdir"]
	if lowers == "" || upper == "" || work == "" {
		return fmt.Errorf("remap overlay %s: not an overlay with upper and lower dirs", target)
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	var rel []string
	for _, l := range strings.Split(lowers, ":") {
		r, err := filepath.Rel(root, abs(l))
		if err != nil || !filepath.IsLocal(r) {
			return fmt.Errorf("remap overlay %s: lower dir %s is not under %s", target, l, root)
		}
		rel = append(rel, r)
	}
	original := "lowerdir=" + lowers + ",upperdir=" + upper + ",workdir=" + work
	upper, work = abs(upper), abs(work)
	data := "lowerdir=" + strings.Join(rel, ":") + ",upperdir=" + upper + ",workdir=" + work
	// Shown as "fsync=volatile" since Linux 6.6, as "volatile" before.
	_, volatile := opts["volatile"]
	volatile = volatile || opts["fsync"] == "volatile"
	if volatile {
		original += ",volatile"
		data += ",volatile"
	}
	if len(data) > os.Getpagesize()-1 {
		return fmt.Errorf("remap overlay %s: %d layers do not fit in the mount options", target, len(rel))
	}

	fd, err := unix.OpenTree(unix.AT_FDCWD, root, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("remap overlay %s: open tree %s: %w", target, root, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFd)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("remap overlay %s: id-map %s: %w: %w", target, root, err, errdefs.ErrFailedPrecondition)
	}
	if err := os.Chown(upper, int(uid), int(gid)); err != nil {
		return fmt.Errorf("remap overlay %s: %w", target, err)
	}
	if err := unix.Unmount(target, 0); err != nil {
		return fmt.Errorf("remap overlay %s: unmount the original: %w", target, err)
	}
	if volatile {
		clearVolatile(work)
	}
	if err := mountAt(fd, target, data); err != nil {
		// Put back what the image store mounted, so its release works as
		// it would have.
		if volatile {
			clearVolatile(work)
		}
		if rerr := mountAt(-1, target, original); rerr != nil {
			return fmt.Errorf("remap overlay %s: %w (and the original cannot be mounted again: %w)", target, err, rerr)
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("remap overlay %s: %w", target, err)
	}
	return nil
}

// clearVolatile removes the mark a volatile overlay leaves in its work
// dir, which makes the kernel refuse to mount that upper dir again (it
// cannot know the upper dir is intact). Here it is: the overlay was just
// unmounted cleanly, without a crash in between.
func clearVolatile(work string) {
	_ = os.RemoveAll(filepath.Join(work, "work", "incompat"))
}

// mountAt mounts an overlay with options data at target from a thread
// whose working directory is dirFd (when not -1), so relative paths in
// data resolve against it. The thread is thrown away afterwards.
func mountAt(dirFd int, target, data string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if dirFd >= 0 {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				errc <- fmt.Errorf("unshare fs: %w", err)
				return
			}
			if err := unix.Fchdir(dirFd); err != nil {
				errc <- fmt.Errorf("chdir: %w", err)
				return
			}
		}
		if err := unix.Mount("overlay", target, "overlay", 0, data); err != nil {
			errc <- fmt.Errorf("mount overlay: %w", err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// overlayOptions reads the super options of the overlay mounted at
// target from mountinfo.
func overlayOptions(target string) (map[string]string, error) {
	target = filepath.Clean(target)
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != target, false
	})
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var found map[string]string
	for _, m := range mounts {
		if m.FSType != "overlay" {
			found = nil // a later mount on top hides it
			continue
		}
		found = map[string]string{}
		for _, kv := range strings.Split(m.VFSOptions, ",") {
			k, v, _ := strings.Cut(kv, "=")
			found[k] = unescape(v)
		}
	}
	if found == nil {
		return nil, fmt.Errorf("remap overlay %s: no overlay mounted there", target)
	}
	return found, nil
}
