package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// StartContainer starts a created container and begins watching for its
// exit. Only a container in state created can start.
func (s *Service) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.rec
	if rec.State != store.ContainerCreated {
		return nil, fmt.Errorf("container %s is %s, only a created container can start: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
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
		return nil, fmt.Errorf("start container %s: %w", rec.ID, err)
	}
	rec.State = store.ContainerRunning
	rec.Pid = pid
	rec.StartedAt = startedAt.UnixNano()
	if err := s.opts.Store.PutContainer(rec); err != nil {
		return nil, err
	}
	s.monitor(c)
	s.log.InfoContext(ctx, "container started", "container_id", rec.ID, "pid", pid)
	return &runtimeapi.StartContainerResponse{}, nil
}
