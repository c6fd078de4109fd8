// Package idmap gives a pod its own user namespace and makes id-mapped
// clones of the mounts its containers see, so that an OCI runtime that
// cannot id-map mounts itself (runc 1.1) still runs containers whose root
// is an unprivileged host uid while files owned by host root look owned
// by root inside.
//
// A user namespace is made by a short-lived helper process (a binary that
// blocks until killed: crin-pause in crind) cloned into a new user
// namespace, and new network, IPC and UTS namespaces owned by it when
// asked; all are pinned as files (bind mounts of /proc/<pid>/ns/*) and the helper is
// killed. The pinned user namespace is what MOUNT_ATTR_IDMAP takes.
package idmap

import (
	"errors"
	"fmt"
	"github.com/moby/sys/mountinfo"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Pins says where NewUserNS pins the namespaces it makes: the user
// namespace always, and a network, IPC or UTS namespace owned by it for
// each of those paths that is not empty.
type Pins struct {
	User, Net, IPC, UTS string
}

// NewUserNS creates a user namespace with the given mappings and the
// namespaces it owns that p asks for, each pinned at its path. helper is
// the argv of a program that runs until killed; it runs only while the
// namespaces are pinned. The paths must not exist; their directories
// must. On error nothing is left.
func NewUserNS(helper []string, p Pins, uids, gids []specs.LinuxIDMapping) (retErr error) {
	if len(helper) == 0 {
		return fmt.Errorf("new user namespace: no helper program: %w", errdefs.ErrFailedPrecondition)
	}
	flags := uintptr(unix.CLONE_NEWUSER)
	pins := []struct{ kind, path string }{{"user", p.User}}
	for _, o := range []struct {
		kind, path string
		flag       uintptr
	}{{"net", p.Net, unix.CLONE_NEWNET}, {"ipc", p.IPC, unix.CLONE_NEWIPC}, {"uts", p.UTS, unix.CLONE_NEWUTS}} {
		if o.path != "" {
			flags |= o.flag
			pins = append(pins, struct{ kind, path string }{o.kind, o.path})
		}
	}
	cmd := exec.Command(helper[0], helper[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  flags,
		UidMappings: sysMappings(uids),
		GidMappings: sysMappings(gids),
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("new user namespace: start helper: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	defer func() {
		if retErr != nil {
			for _, p := range pins {
				_ = Unpin(p.path)
			}
		}
	}()
	for _, p := range pins {
		if err := pin(fmt.Sprintf("/proc/%d/ns/%s", cmd.Process.Pid, p.kind), p.path); err != nil {
			return fmt.Errorf("new user namespace: %w", err)
		}
	}
	return nil
}

func sysMappings(ms []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, 0, len(ms))
	for _, m := range ms {
		out = append(out, syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)})
	}
	return out
}

// pin bind-mounts the namespace file src on a new file at path.
func pin(src, path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("pin %s: %w", src, err)
	}
	_ = f.Close()
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("pin %s at %s: %w", src, path, err)
	}
	return nil
}

// Unpin unmounts and removes a pin NewUserNS made; a missing one is fine.
func Unpin(path string) error {
	if path == "" {
		return nil
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	return nil
}

// CloneOptions say how Clone copies a mount.
type CloneOptions struct {
	// Recursive clones the submounts too (an rbind).
	Recursive bool
}

// Clone makes an id-mapped copy of the mount (tree) at src at dst, mapped
// by the user namespace open at usernsFd (-1: a plain bind mount): a file a host id owns on disk
// looks owned, through dst, by the id the user namespace maps to it, and
// what a process of that namespace creates through dst is owned on disk
// by the id it has inside. src may be a directory or a file; dst is
// created (with its parents, 0711) to match. A kernel or filesystem that
// cannot id-map is errdefs.ErrFailedPrecondition naming src.
func Clone(usernsFd int, src, dst string, o CloneOptions) (retErr error) {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("id-map %s: %w", src, err)
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if o.Recursive {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, flags)
	if err != nil {
		return fmt.Errorf("id-map %s: open tree: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFd)}
	if usernsFd < 0 {
		// nothing to set
	} else if err := unix.MountSetattr(fd, "", setFlags, &attr); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("id-map %s: the kernel or filesystem cannot id-map it (%w): %w", src, err, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("id-map %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
		return fmt.Errorf("id-map %s: %w", src, err)
	}
	if st.IsDir() {
		err = os.Mkdir(dst, 0o700)
	} else {
		var f *os.File
		if f, err = os.OpenFile(dst, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			_ = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("id-map %s: mount point: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("id-map %s: attach at %s: %w", src, dst, err)
	}
	return nil
}

// UnmountUnder detaches every mount at or below dir, deepest first, so
// that dir can be removed without reaching through a mount into what it
// shows. Nothing mounted is fine.
func UnmountUnder(dir string) error {
	points, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("unmount under %s: %w", dir, err)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range points {
		// A mount point may carry several mounts stacked on it.
		for range 8 {
			err := unix.Unmount(mp, unix.MNT_DETACH)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				break
			}
			if err != nil {
				return fmt.Errorf("unmount %s: %w", mp, err)
			}
		}
	}
	return nil
}

// RemoveAll unmounts everything at or below dir (UnmountUnder), checks
// that nothing is mounted there any more, and only then removes dir, so
// the removal never reaches through a mount into what it shows (a volume,
// the pause rootfs). A missing dir is fine.
func RemoveAll(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := UnmountUnder(dir); err != nil {
		return err
	}
	left, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if len(left) > 0 {
		return fmt.Errorf("remove %s: %s is still mounted", dir, left[0])
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	points := make([]string, 0, len(mounts))
	for _, m := range mounts {
		points = append(points, m.Mountpoint)
	}
	return points, nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space) in a
// super option's value, which moby/sys/mountinfo leaves as the kernel
// wrote it (it unescapes paths only).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
