package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// RemovePodSandbox stops the pod if needed, removes all its containers and
// everything crind made for it, then relays NRI RemovePodSandbox. Removing an unknown pod succeeds (the CRI
// contract: "If there are any running containers in the sandbox, they must
// be forcibly terminated and removed ... must not return an error if the
// sandbox has already been removed").
func (s *Service) RemovePodSandbox(ctx context.Context, r *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	sb, err := s.getSandboxExact(r.GetPodSandboxId())
	if s.sandboxGone(r.GetPodSandboxId(), err) {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if sb.removed {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if err := s.stopSandboxLocked(ctx, sb); err != nil {
		return nil, err
	}
	for _, c := range s.podContainers(sb.rec.ID) {
		if err := s.removeContainer(ctx, c); err != nil {
			return nil, fmt.Errorf("remove container %s: %w", c.rec.ID, err)
		}
	}
	if err := s.destroySandbox(ctx, sb.rec); err != nil {
		return nil, err
	}
	view := sb.nriView()
	sb.mu.Lock()
	sb.removed = true
	sb.mu.Unlock()
	s.mu.Lock()
	delete(s.sandboxes, sb.rec.ID)
	s.mu.Unlock()
	s.emitSandbox(eventDeleted, sb)
	s.log.InfoContext(ctx, "pod sandbox removed", "pod_id", sb.rec.ID)
	if h := s.hooks(); h != nil {
		tctx, cancel := teardownContext(ctx)
		defer cancel()
		if err := h.RemovePodSandbox(tctx, view); err != nil {
			s.log.WarnContext(ctx, "nri remove pod sandbox", "pod_id", sb.rec.ID, "error", err)
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// destroySandbox deletes the infra container (if the pod has one) and the
// pod's files, record and name. It is also how recovery disposes of
// half-made pods.
func (s *Service) destroySandbox(ctx context.Context, rec *store.Sandbox) error {
	if rt, ok := s.opts.Runtimes[rec.RuntimeHandler]; ok && !rec.NoInfra {
		if err := rt.Delete(ctx, rec.ID); err != nil {
			return fmt.Errorf("delete infra container: %w", err)
		}
	}
	s.releasePodShim(ctx, rec)
	if err := s.env.RemovePodCgroup(s.ctx, rec); err != nil {
		// Not fatal: an emptied cgroup directory costs nothing, and a pod
		// that cannot be removed would be retried by kubelet forever.
		s.log.WarnContext(ctx, "remove pod cgroup", "pod_id", rec.ID, "error", err)
	}
	if err := s.env.RemovePodDir(rec); err != nil {
		return err
	}
	return s.opts.Store.RemoveSandbox(rec.ID, rec.Name)
}
