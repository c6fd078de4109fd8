//go:build !linux

package config

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// blockDeviceNumber: block I/O classes need Linux.
func blockDeviceNumber(path string) (major, minor int64, err error) {
	return 0, 0, fmt.Errorf("block I/O classes need linux: %w", errdefs.ErrNotImplemented)
}
