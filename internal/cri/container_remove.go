package cri

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// RemoveContainer removes a container, killing it first if it runs.
// Removing an unknown container succeeds: the CRI contract says
// RemoveContainer "must not return an error if the container has already
// been removed".
func (s *Service) RemoveContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if errors.Is(err, errdefs.ErrNotFound) {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.removeContainer(ctx, c); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (s *Service) removeContainer(ctx context.Context, c *container) error {
	if err := s.stopContainer(ctx, c, 0); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.rec
	if rt, err := s.containerRuntime(rec); err == nil {
		if err := rt.Delete(ctx, rec.ID); err != nil {
			return fmt.Errorf("delete container %s: %w", rec.ID, err)
		}
	}
	if err := s.opts.Images.ReleaseRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("release rootfs of %s: %w", rec.ID, err)
	}
	if err := s.opts.Store.DeleteContainer(rec.ID); err != nil {
		return err
	}
	if err := s.opts.Store.Release(store.KindContainer, rec.Name, rec.ID); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.containers, rec.ID)
	s.mu.Unlock()
	s.log.InfoContext(ctx, "container removed", "container_id", rec.ID)
	return nil
}
