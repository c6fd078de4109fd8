package cri

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// ReopenContainerLog makes the container's shim reopen its log file, after
// kubelet rotated it. Only running containers have an open log.
func (s *Service) ReopenContainerLog(ctx context.Context, r *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	// c.mu only for the state: it is never held across a shim call.
	c.mu.Lock()
	rec, state := c.rec, c.rec.State
	c.mu.Unlock()
	if state != store.ContainerRunning {
		return nil, fmt.Errorf("container %s is %s, not running: %w", rec.ID, state, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
		return nil, err
	}
	if err := rt.ReopenLog(ctx, rec.ID); err != nil {
		return nil, fmt.Errorf("reopen log of %s: %w", rec.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
