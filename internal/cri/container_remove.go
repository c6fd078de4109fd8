package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/trace"
)

// RemoveContainer removes a container, killing it first if it runs, and
// relays NRI RemoveContainer (after StopContainer, which the stop
// guarantees). Removing an unknown container succeeds: the CRI contract
// says RemoveContainer "must not return an error if the container has
// already been removed".
func (s *Service) RemoveContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := s.getContainerExact(r.GetContainerId())
	if s.containerGone(r.GetContainerId(), err) {
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

// removeContainer stops c, deletes it from the runtime, releases its
// rootfs, record and name, then relays NRI RemoveContainer. A second
// concurrent remove finds it removed and succeeds.
func (s *Service) removeContainer(ctx context.Context, c *container) error {
	if err := s.stopContainer(ctx, c, 0); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// The stop's NRI delivery may still be under way; RemoveContainer
		// must not overtake it.
		return fmt.Errorf("remove container %s: %w", c.rec.ID, err)
	}
	trace.Mark(ctx, "stop")
	c.op.Lock()
	defer c.op.Unlock()
	c.mu.Lock()
	removed := c.removed
	c.mu.Unlock()
	if removed {
		return nil
	}
	rec := c.rec
	if rt, err := s.containerRuntime(rec); err == nil {
		if err := rt.Delete(ctx, rec.ID); err != nil {
			return fmt.Errorf("delete container %s: %w", rec.ID, err)
		}
	}
	trace.Mark(ctx, "runtime_delete")
	// The id-mapped clones hold the rootfs overlay: they go first.
	if err := s.env.ReleaseUserNSDir(ctx, rec.ID, s.env.UserNSCtrDir(rec.SandboxID, rec.ID)); err != nil {
		return fmt.Errorf("remove container %s: %w", rec.ID, err)
	}
	if err := s.opts.Images.ReleaseRootfs(ctx, rec.ID); err != nil {
		return fmt.Errorf("release rootfs of %s: %w", rec.ID, err)
	}
	if rec.RestoreFrom != "" {
		s.ckpt.RemoveRestoreDir(ctx, rec.ID)
	}
	trace.Mark(ctx, "rootfs_release")
	c.mu.Lock()
	view := nriContainerLocked(c)
	err := s.opts.Store.RemoveContainer(rec.ID, rec.Name)
	if err == nil {
		c.removed = true
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	trace.Mark(ctx, "store_delete")
	pod := s.podView(rec.SandboxID)
	s.mu.Lock()
	delete(s.containers, rec.ID)
	s.mu.Unlock()
	s.emitContainer(eventDeleted, c)
	s.log.InfoContext(ctx, "container removed", "container_id", rec.ID)
	trace.Mark(ctx, "publish_log")
	defer trace.Mark(ctx, "nri_remove")
	if h := s.hooks(); h != nil {
		tctx, cancel := teardownContext(ctx)
		defer cancel()
		if err := h.RemoveContainer(tctx, pod, view); err != nil {
			s.log.WarnContext(ctx, "nri remove container", "container_id", rec.ID, "error", err)
		}
	}
	return nil
}
