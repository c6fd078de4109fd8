package cni

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// NewNetNS creates a network namespace pinned at dir/name (bind mount), with
// loopback up, and returns its path. dir is created (mode 0711) and made a
// shared mount point so the pins are visible to other mount namespaces. An
// existing dir/name is errdefs.ErrAlreadyExists; a name that is not a plain
// file name is errdefs.ErrInvalidArgument. On error nothing is left behind.
func NewNetNS(dir, name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("new netns: invalid name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("new netns: %w", err)
	}
	if err := makeSharedMount(dir); err != nil {
		return "", fmt.Errorf("new netns: %w", err)
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("new netns %s: %w", path, errdefs.ErrAlreadyExists)
	}
	if err != nil {
		return "", fmt.Errorf("new netns: %w", err)
	}
	_ = f.Close()

	if err := OnDisposableThread(func() error { return pinNewNetNS(path) }); err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
		return "", fmt.Errorf("new netns %s: %w", path, err)
	}
	return path, nil
}

// InNetNS runs fn on an OS thread that is in the network namespace pinned
// at path, and throws the thread away afterwards, so no other goroutine ever
// runs in that namespace. Sockets fn opens stay in the namespace and may be
// used from any goroutine afterwards (to dial a pod's localhost for port
// forwarding, say). fn must not start goroutines that expect to be in the
// namespace.
func InNetNS(path string, fn func() error) error {
	return OnDisposableThread(func() error {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("enter netns: %w", err)
		}
		defer f.Close()
		if !isNetNS(path) {
			return fmt.Errorf("enter netns %s: not a network namespace: %w", path, errdefs.ErrInvalidArgument)
		}
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns %s: %w", path, err)
		}
		return fn()
	})
}

// OnDisposableThread runs fn on a locked OS thread that exits when fn is
// done, so a namespace change fn makes (unshare, setns) never reaches
// another goroutine. The hub uses it for a pod's IPC and UTS namespaces
// too.
func OnDisposableThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime terminates the thread when this
		// goroutine returns.
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			errc <- fn()
			return
		}
		// This is the main thread, which the runtime cannot terminate: it
		// would be parked for good, keeping the namespace alive and
		// /proc/self/ns/net pointing into it. Hold it, so fn runs on
		// another thread, and give it back untouched.
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			done <- fn()
		}()
		errc <- <-done
		runtime.UnlockOSThread()
	}()
	return <-errc
}

// pinNewNetNS moves the calling (locked, disposable) thread into a new
// network namespace, pins it at path and brings its loopback up.
func pinNewNetNS(path string) error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s: %w", src, err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	return nil
}

// loopbackUp sets IFF_UP on "lo" in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback up: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: set flags: %w", err)
	}
	return nil
}

// makeSharedMount makes dir a shared mount point, bind-mounting it onto
// itself first when it is not a mount point yet (MS_SHARED on a non-mount
// point fails with EINVAL).
func makeSharedMount(dir string) error {
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// RemoveNetNS unpins and removes the namespace at path. A missing path is not
// an error.
func RemoveNetNS(path string) error {
	if path == "" {
		return nil
	}
	// EINVAL: not a mount point any more (unpinned by an earlier call that
	// then failed to remove the file).
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove netns %s: unmount: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// isNetNS reports whether path holds a pinned network namespace.
func isNetNS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
