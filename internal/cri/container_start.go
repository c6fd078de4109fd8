package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// StartContainer starts a created container and begins watching for its
// exit: NRI StartContainer, runtime start, NRI PostStartContainer. Only a
// container in state created can start; a plugin's StartContainer error
// fails the call and leaves the container created.
func (s *Service) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.op.Lock()
	defer c.op.Unlock()
	rec := c.rec
	if err := checkStartable(c); err != nil {
		return nil, err
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
		return nil, err
	}
	h := s.hooks()
	if h != nil {
		c.mu.Lock()
		view := nriContainerLocked(c)
		c.mu.Unlock()
		if err := h.StartContainer(ctx, s.podView(rec.SandboxID), view); err != nil {
			return nil, fmt.Errorf("nri start container %s: %w", rec.ID, err)
		}
	}

	c.mu.Lock()
	// Checked again: a stop or an eviction may have come during the hook.
	if err := checkStartableLocked(c); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	// Taken before the start: a process that exits at once must not look
	// as if it finished before it started.
	startedAt := time.Now()
	pid, err := rt.Start(ctx, rec.ID)
	if err != nil {
		// The runtime may have left the container dead; record that so the
		// user sees an exited container with the reason, as kubelet expects.
		rec.State = store.ContainerExited
		rec.ExitCode = 128
		rec.Reason = "StartError"
		rec.Message = err.Error()
		rec.FinishedAt = time.Now().UnixNano()
		close(c.done)
		if perr := s.opts.Store.PutContainer(rec); perr != nil {
			s.log.WarnContext(ctx, "persist start failure", "container_id", rec.ID, "error", perr)
		}
		c.mu.Unlock()
		s.deliverStop(ctx, c)
		return nil, fmt.Errorf("start container %s: %w", rec.ID, err)
	}
	rec.State = store.ContainerRunning
	rec.Pid = pid
	rec.StartedAt = startedAt.UnixNano()
	perr := s.opts.Store.PutContainer(rec)
	var view *api.Container
	if h != nil {
		view = nriContainerLocked(c)
	}
	c.mu.Unlock()
	// The monitor starts after PostStartContainer so that plugins see
	// PostStart before the StopContainer of a process that exits at once.
	defer s.monitor(c)
	if perr != nil {
		return nil, perr
	}
	s.log.InfoContext(ctx, "container started", "container_id", rec.ID, "pid", pid)
	if view != nil {
		if err := h.PostStartContainer(ctx, s.podView(rec.SandboxID), view); err != nil {
			s.log.WarnContext(ctx, "nri post start container", "container_id", rec.ID, "error", err)
		}
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func checkStartable(c *container) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return checkStartableLocked(c)
}

func checkStartableLocked(c *container) error {
	if c.removed || c.rec.State != store.ContainerCreated {
		return fmt.Errorf("container %s is %s, only a created container can start: %w", c.rec.ID, c.rec.State, errdefs.ErrFailedPrecondition)
	}
	return nil
}
