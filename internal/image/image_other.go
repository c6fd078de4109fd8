//go:build !linux

package image

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/containerd/errdefs"
)

// Layers and rootfs need Linux (overlayfs, whiteout devices, *at syscalls).

func unpackBlob(ctx context.Context, blob, diffID, dir string, opts unpackOptions) error {
	return fmt.Errorf("unpack layer: %w", errdefs.ErrNotImplemented)
}

// unpackOptions tune unpackBlob.
type unpackOptions struct {
	log    *slog.Logger
	budget *unpackBudget
}

// FsInfo is not implemented on this platform.
func (s *Service) FsInfo() (FsUsage, error) {
	return FsUsage{}, fmt.Errorf("image fs info: %w", errdefs.ErrNotImplemented)
}

// PrepareRootfs is not implemented on this platform.
func (s *Service) PrepareRootfs(ctx context.Context, containerID, imageID string) (string, error) {
	return "", fmt.Errorf("prepare rootfs: %w", errdefs.ErrNotImplemented)
}

// ReleaseRootfs is not implemented on this platform.
func (s *Service) ReleaseRootfs(ctx context.Context, containerID string) error {
	return fmt.Errorf("release rootfs: %w", errdefs.ErrNotImplemented)
}

// Rootfs is not implemented on this platform.
func (s *Service) Rootfs(ctx context.Context, containerID string) (string, error) {
	return "", fmt.Errorf("rootfs: %w", errdefs.ErrNotImplemented)
}

// PrepareVolume is not implemented on this platform.
func (s *Service) PrepareVolume(ctx context.Context, containerID, name, ref string) (*Volume, error) {
	return nil, fmt.Errorf("prepare image volume: %w", errdefs.ErrNotImplemented)
}
