package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A pod checkpoint (CRI v1.37 CheckpointPod, RestorePod) is a directory
// the caller owns: one unpacked container checkpoint per container and,
// last, the manifest (checkpoint.PodManifest) that makes it whole.
// internal/checkpoint writes and reads it; RestorePod makes the new pod
// and its containers through this hub, as RunPodSandbox and
// CreateContainer make any.

// CheckpointPod checkpoints the selected running containers of a pod into
// r.OutputPath and leaves them running (checkpoint.Manager's
// CheckpointPod says how it fails).
func (s *Service) CheckpointPod(ctx context.Context, r *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	if err := s.ckpt.CheckpointPod(ctx, r); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// RestorePod makes a new pod from the pod checkpoint at r.CheckpointPath,
// its containers CREATED, to be restored when started
// (checkpoint.Manager's RestorePod says how it fails).
func (s *Service) RestorePod(ctx context.Context, r *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return s.ckpt.RestorePod(ctx, r)
}
