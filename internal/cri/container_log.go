package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog makes the container's shim reopen its log file, after
// kubelet rotated it. Only running containers have an open log.
func (s *Service) ReopenContainerLog(ctx context.Context, r *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	rec, rt, err := s.runningContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := rt.ReopenLog(ctx, rec.ID); err != nil {
		return nil, fmt.Errorf("reopen log of %s: %w", rec.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
