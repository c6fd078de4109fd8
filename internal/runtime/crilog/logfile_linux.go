package crilog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// A container's CRI log lives under its pod's log directory, which kubelet
// makes and which anything with a hostPath mount of /var/log/pods can
// write to. The shim and crin-logger run as root, so the log is opened
// relative to that directory with no symbolic link followed in any
// component: a link planted there, even after the container started (a
// rotation renames the file, the shim reopens the name), can neither point
// the container's output at a host file nor create one elsewhere.

// ErrLogPath marks an error opening or preparing a CRI log because of what
// is on disk at its path: a symbolic link, a component that is not a
// directory, a file that is not a regular one, or a log directory that is
// gone. It says nothing of the code: a caller classifies it.
var ErrLogPath = errors.New("unusable log path")

// logOpenFlags are the flags the CRI log is written with. O_NONBLOCK makes
// a FIFO planted at the path fail (ENXIO, no reader) instead of blocking
// the shim; it is cleared once the file is known to be a regular one.
const logOpenFlags = unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NONBLOCK

// OpenBeneath opens path, which must lie inside the directory root, with
// flags (O_CLOEXEC and O_NOFOLLOW are added) and mode, following no
// symbolic link below root (root itself is resolved as given). An error
// caused by what is at the path wraps ErrLogPath.
func OpenBeneath(root, path string, flags int, mode uint32) (*os.File, error) {
	rel, err := beneath(root, path)
	if err != nil {
		return nil, err
	}
	dirfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathError(path, err)
	}
	defer unix.Close(dirfd)
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	var fd int
	for range 16 {
		// EAGAIN: a rename raced the lookup; the kernel asks for a retry.
		if fd, err = unix.Openat2(dirfd, rel, how); !errors.Is(err, unix.EAGAIN) {
			break
		}
	}
	if errors.Is(err, unix.ENOSYS) {
		fd, err = openWalk(dirfd, rel, flags, mode)
	}
	if err != nil {
		return nil, pathError(path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openWalk is OpenBeneath for kernels without openat2 (before 5.6): one
// component at a time, none of them followed if it is a link.
func openWalk(dirfd int, rel string, flags int, mode uint32) (int, error) {
	parts := strings.Split(rel, "/")
	cur := dirfd
	defer func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		next, err := openDirNoFollow(cur, p)
		if err != nil {
			return -1, err
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		cur = next
	}
	return unix.Openat(cur, parts[len(parts)-1], flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
}

// openDirNoFollow opens the directory name in dirfd, refusing a symbolic
// link with ELOOP (O_DIRECTORY makes the kernel say ENOTDIR for one).
func openDirNoFollow(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return -1, unix.ELOOP
		}
	}
	return fd, err
}

// beneath is path relative to root, refused unless it stays inside it.
func beneath(root, path string) (string, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) || !filepath.IsAbs(root) {
		return "", fmt.Errorf("%s is not inside the log directory %s: %w", path, root, ErrLogPath)
	}
	return rel, nil
}

// pathError says what about path made an open fail.
func pathError(path string, err error) error {
	why := ""
	switch {
	case errors.Is(err, unix.ELOOP):
		why = "a component is a symbolic link, which crin does not follow"
	case errors.Is(err, unix.EXDEV):
		why = "it leads outside the log directory"
	case errors.Is(err, unix.ENOENT):
		why = "its directory does not exist"
	case errors.Is(err, unix.ENOTDIR):
		why = "a component is not a directory"
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.EISDIR):
		why = "it is not a regular file"
	case errors.Is(err, unix.ENAMETOOLONG):
		why = "a name is too long"
	default:
		return fmt.Errorf("%s: %w", path, err)
	}
	return fmt.Errorf("%s: %s (%w): %w", path, why, err, ErrLogPath)
}

// openLogFile opens the CRI log path for appending; with a root, beneath
// it as OpenBeneath does, and only if it is a regular file with no other
// name (a hard link to a host file would do what a symlink does).
func openLogFile(root, path string) (*os.File, error) {
	if root == "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, fmt.Errorf("open container log %s: %w", path, err)
		}
		return f, nil
	}
	f, err := OpenBeneath(root, path, logOpenFlags, 0o640)
	if err != nil {
		return nil, logOpenError(err)
	}
	var st unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &st)
	switch {
	case err != nil:
		err = fmt.Errorf("%s: %w", path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("%s: it is not a regular file: %w", path, ErrLogPath)
	case st.Nlink > 1:
		err = fmt.Errorf("%s: it has %d hard links, so it may be another file's: %w", path, st.Nlink, ErrLogPath)
	default:
		err = unix.SetNonblock(int(f.Fd()), false)
	}
	if err != nil {
		f.Close()
		return nil, logOpenError(err)
	}
	return f, nil
}

// logOpenError is an error opening the CRI log: one caused by what is on
// disk is errdefs.ErrFailedPrecondition (the shim opens it at start and at
// reopen, where the request was fine but the file system is not).
func logOpenError(err error) error {
	if errors.Is(err, ErrLogPath) {
		return fmt.Errorf("open container log %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("open container log %w", err)
}

// PrepareLogPath makes the directories from root down to the CRI log path
// (mode 0755), following no symbolic link, and checks that path is not
// there yet or is a regular file, so a container whose log cannot be
// written is refused when it is created. An error caused by what is on
// disk wraps ErrLogPath.
func PrepareLogPath(root, path string) error {
	return walkLogPath(root, path, makeDirs)
}

// CheckLogPath is PrepareLogPath making no directory: a missing one is
// an error wrapping ErrLogPath.
func CheckLogPath(root, path string) error {
	return walkLogPath(root, path, dirsMustExist)
}

// dirMode says whether walkLogPath makes missing directories.
type dirMode int

const (
	dirsMustExist dirMode = iota
	makeDirs
)

func walkLogPath(root, path string, mode dirMode) error {
	rel, err := beneath(root, path)
	if err != nil {
		return err
	}
	cur, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return pathError(path, err)
	}
	defer func() { unix.Close(cur) }()
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		if mode == makeDirs {
			if err := unix.Mkdirat(cur, p, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return pathError(path, err)
			}
		}
		next, err := openDirNoFollow(cur, p)
		if err != nil {
			return pathError(path, err)
		}
		unix.Close(cur)
		cur = next
	}
	var st unix.Stat_t
	err = unix.Fstatat(cur, parts[len(parts)-1], &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return pathError(path, err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return pathError(path, unix.ELOOP)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s: it is not a regular file: %w", path, ErrLogPath)
	case st.Nlink > 1:
		return fmt.Errorf("%s: it has %d hard links, so it may be another file's: %w", path, st.Nlink, ErrLogPath)
	}
	return nil
}
