package cri

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// minFreeBytes is the free space crind wants on the filesystems of its
// root and state dirs before it makes anything (a pod, a container, an
// image). What is below it is left to stop and remove, so that kubelet can
// evict pods from a full disk (docs/recovery.md, "Full disk").
const minFreeBytes = 1 << 20

// validateCreateRequest is the package's validateCreateRequest, then
// checkDiskRoom.
func (s *Service) validateCreateRequest(cfg *runtimeapi.ContainerConfig) error {
	if err := validateCreateRequest(cfg); err != nil {
		return err
	}
	return s.checkDiskRoom("create container")
}

// checkDiskRoom refuses op, wrapping ENOSPC (ResourceExhausted), when the
// filesystem of the root or state dir has less than minFreeBytes free;
// the error names the dir and what is free. A dir that cannot be looked
// at is let through: the writes will say more.
func (s *Service) checkDiskRoom(op string) error {
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
			return fmt.Errorf("%s: filesystem of %s has %d bytes free, less than the %d crind keeps for stop and remove: %w",
				op, dir, free, minFreeBytes, unix.ENOSPC)
		}
	}
	return nil
}
