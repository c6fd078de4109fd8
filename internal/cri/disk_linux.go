package cri

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// minFreeBytes is the free space crind wants on the filesystems of its
// root and state dirs before it makes anything (a pod, a container, an
// image). What is below it is left to stop and remove, so that kubelet can
// evict pods from a full disk (docs/recovery.md, "Full disk").
const minFreeBytes = 1 << 20

// checkDiskRoom refuses, wrapping ENOSPC (ResourceExhausted), to make
// anything when the root or state dir's filesystem has less than
// minFreeBytes free; the error names the dir and what is free. A dir
// that cannot be looked at is let through: the writes will say more.
func (s *Service) checkDiskRoom() error {
	dirs := []string{s.opts.RootDir}
	if s.opts.NetNSDir != "" {
		dirs = append(dirs, filepath.Dir(s.opts.NetNSDir))
	}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			continue
		}
		if free := int64(st.Bavail) * st.Bsize; free < minFreeBytes {
			return fmt.Errorf("filesystem of %s has %d bytes free, less than the %d crind keeps for stop and remove: %w",
				dir, free, minFreeBytes, unix.ENOSPC)
		}
	}
	return nil
}
