package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime/crilog"
)

// ReopenContainerLog makes the container's shim reopen its log file, after
// kubelet rotated it. Only running containers have an open log. A log path
// the shim could not open (its directory gone, a symbolic link in it) is
// FailedPrecondition naming the path; the shim keeps writing the old file.
func (s *Service) ReopenContainerLog(ctx context.Context, r *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.getContainerExact(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	ref, rt, err := s.running(c)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	path, root := c.rec.LogPath, c.rec.LogRoot
	c.mu.Unlock()
	if err := checkLogReopen(root, path); err != nil {
		return nil, fmt.Errorf("reopen log of %s: %w", ref.ID, err)
	}
	if err := rt.ReopenLog(ctx, ref.ID); err != nil {
		return nil, fmt.Errorf("reopen log of %s: %w", ref.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// checkLogReopen says, before the shim is asked, whether the log at path
// can be opened again beneath the pod's log directory root (the shim
// checks again as it opens it: this gives the clearer error).
func checkLogReopen(root, path string) error {
	if path == "" {
		return nil
	}
	if root == "" {
		// A record from before crind kept the directory.
		if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("log %s: its directory does not exist: %w", path, errdefs.ErrFailedPrecondition)
		}
		return nil
	}
	if err := crilog.CheckLogPath(root, path); err != nil {
		if errors.Is(err, crilog.ErrLogPath) {
			return fmt.Errorf("log %w: %w", err, errdefs.ErrFailedPrecondition)
		}
		return err
	}
	return nil
}
