package cri

import (
	"context"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"

	"github.com/crin-dev/crin/internal/nri"
)

// AttachNRI makes the hub relay lifecycle events to a (started)
// adaptation. Call it once, after nri.New(cfg, svc) and Start, before
// serving CRI. Self-exits recorded before it are delivered then.
func (s *Service) AttachNRI(ctx context.Context, a *nri.Adaptation) {}

// NRIOwners returns, for a container, which plugin owns which adjusted
// field (nri.OwnersTable's form). NotFound for an unknown container.
func (s *Service) NRIOwners(id string) (map[string]string, error) {
	return nil, errdefs.ErrNotImplemented
}

// Snapshot implements nri.Engine.
func (s *Service) Snapshot(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	return nil, nil, nil
}

// UpdateContainers implements nri.Engine.
func (s *Service) UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return updates, errdefs.ErrNotImplemented
}

// EvictContainer implements nri.Engine.
func (s *Service) EvictContainer(ctx context.Context, containerID, reason string) error {
	return errdefs.ErrNotImplemented
}

var _ nri.Engine = (*Service)(nil)
