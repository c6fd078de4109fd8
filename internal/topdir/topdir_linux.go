// Package topdir marks the directories under which crind makes one
// subdirectory per pod or container (its rootfs dirs, pod dirs, bundles,
// namespace pins and the OCI runtime's state) as tops of unrelated
// hierarchies for the ext2/3/4 Orlov allocator (FS_TOPDIR_FL, what
// "chattr +T" sets): each new subdirectory then goes to a block group of
// the allocator's choosing, as a directory made in the filesystem's root
// does, not into its parent's group.
//
// Why it matters: ext4 puts a subdirectory, and every file in it, in the
// parent's block group first. Every pod and container makes and deletes
// about forty inodes there, and on an ext4 without a journal the
// allocator steps over each inode of the group freed in the last seconds
// (minutes, while its inode table block is not yet written back) one by
// one, looking each up. Measured on the CI machine's disk, a directory of
// ten entries cost 0.92 ms to make under a busy parent and 0.30 ms under
// a marked one (docs/runtimes.md, Cost). Filesystems without the flag
// (tmpfs, xfs, btrfs, overlay) refuse it; Mark then does nothing.
package topdir

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsTopdirFL is FS_TOPDIR_FL of linux/fs.h.
const fsTopdirFL = 0x00020000

// Mark sets FS_TOPDIR_FL on dir (which must exist) unless it is set. A
// filesystem without inode flags, or without this one, is not an error.
func Mark(dir string) error {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("mark %s as a top dir: %w", dir, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if unsupported(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark %s as a top dir: get flags: %w", dir, err)
	}
	if flags&fsTopdirFL != 0 {
		return nil
	}
	err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopdirFL))
	if unsupported(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark %s as a top dir: set flags: %w", dir, err)
	}
	return nil
}

// unsupported reports an error that means the filesystem has no such
// flag (or no inode flags at all).
func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}
