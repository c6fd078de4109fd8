//go:build !linux

package cni

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// NewNetNS creates a network namespace pinned at dir/name. Network
// namespaces exist only on Linux: elsewhere it is errdefs.ErrNotImplemented.
func NewNetNS(dir, name string) (string, error) {
	return "", fmt.Errorf("new netns: %w", errdefs.ErrNotImplemented)
}

// RemoveNetNS unpins and removes the namespace at path. A missing path is not
// an error.
func RemoveNetNS(path string) error {
	if path == "" {
		return nil
	}
	return fmt.Errorf("remove netns: %w", errdefs.ErrNotImplemented)
}

// isNetNS reports whether path holds a pinned network namespace.
func isNetNS(string) bool { return false }

// InNetNS runs fn in the network namespace at path. Network namespaces exist
// only on Linux: elsewhere it is errdefs.ErrNotImplemented.
func InNetNS(path string, fn func() error) error {
	return fmt.Errorf("enter netns: %w", errdefs.ErrNotImplemented)
}
