package config

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// blockDeviceNumber stats path (following symlinks, so /dev/disk/by-id
// names work) and returns its device number if it is a block device.
func blockDeviceNumber(path string) (major, minor int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, fmt.Errorf("no such device: %w", errdefs.ErrInvalidArgument)
		}
		return 0, 0, fmt.Errorf("stat: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, 0, fmt.Errorf("not a block device: %w", errdefs.ErrInvalidArgument)
	}
	return int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev)), nil
}
