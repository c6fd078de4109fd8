package cri

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/trace"
)

// startSettleTimeout bounds finding out what a failed runtime start left
// (status, kill, wait), on a context that survives the caller's.
const startSettleTimeout = 30 * time.Second

// StartContainer starts a created container and begins watching for its
// exit: NRI StartContainer, runtime start, NRI PostStartContainer. Only a
// container in state created can start; a plugin's StartContainer error
// fails the call and leaves the container created. The runtime start runs
// under c.op only: status, list and NRI Snapshot do not wait for it.
func (s *Service) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.getContainerExact(r.GetContainerId())
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
	trace.Mark(ctx, "lookup")
	h := s.hooks()
	if h != nil {
		c.mu.Lock()
		view := nriContainerLocked(c)
		c.mu.Unlock()
		if err := h.StartContainer(ctx, s.podView(rec.SandboxID), view); err != nil {
			return nil, fmt.Errorf("nri start container %s: %w", rec.ID, err)
		}
	}
	// Checked again: a stop or an eviction may have come during the hook.
	if err := checkStartable(c); err != nil {
		return nil, err
	}
	trace.Mark(ctx, "nri_start")

	// Taken before the start: a process that exits at once must not look
	// as if it finished before it started.
	startedAt := time.Now()
	pid, err := rt.Start(ctx, rec.ID)
	if err != nil {
		var ok bool
		if pid, startedAt, ok = s.settleFailedStart(ctx, rt, rec.ID, startedAt, err); !ok {
			return nil, s.recordStartError(ctx, c, err)
		}
	}
	trace.Mark(ctx, "runtime_start")

	c.mu.Lock()
	if c.removed || rec.State != store.ContainerCreated {
		// A stop (CRI, eviction, pod stop) killed it while it started and
		// recorded the exit; make sure nothing of it runs.
		state := rec.State
		c.mu.Unlock()
		if err := rt.Signal(context.WithoutCancel(ctx), rec.ID, syscall.SIGKILL, runtime.SignalOptions{All: true}); err != nil && !errdefs.IsNotFound(err) {
			s.log.WarnContext(ctx, "kill container stopped while starting", "container_id", rec.ID, "error", err)
		}
		return nil, fmt.Errorf("container %s was stopped while it started (now %s): %w", rec.ID, state, errdefs.ErrFailedPrecondition)
	}
	rec.State = store.ContainerRunning
	rec.Pid = pid
	rec.StartedAt = startedAt.UnixNano()
	s.emitContainer(eventStarted, c)
	var view *api.Container
	if h != nil {
		view = nriContainerLocked(c)
	}
	c.mu.Unlock()
	// The monitor starts after PostStartContainer so that plugins see
	// PostStart before the StopContainer of a process that exits at once.
	// It records the container running first, off this call's path: that
	// record needs no write to disk before the answer, as the runtime
	// knows the container runs and a restarted crind asks it (recover.go).
	defer s.monitor(c, true)
	s.log.InfoContext(ctx, "container started", "container_id", rec.ID, "pid", pid)
	trace.Mark(ctx, "log")
	if view != nil {
		if err := h.PostStartContainer(ctx, s.podView(rec.SandboxID), view); err != nil {
			s.log.WarnContext(ctx, "nri post start container", "container_id", rec.ID, "error", err)
		}
	}
	trace.Mark(ctx, "nri_post_start")
	return &runtimeapi.StartContainerResponse{}, nil
}

// settleFailedStart finds out what a failed runtime start left behind. A
// start can fail after the process started (the reply was lost, or ctx
// expired while the shim answered): then the container runs, and it is
// kept (ok, with its pid and start time) and the error only logged.
// Otherwise whatever is left of it is killed and waited for, so that the
// exit recorded next is final and nothing runs unwatched.
func (s *Service) settleFailedStart(ctx context.Context, rt runtime.Runtime, id string, startedAt time.Time, startErr error) (pid int, at time.Time, ok bool) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startSettleTimeout)
	defer cancel()
	log := s.log.With("container_id", id)
	st, err := rt.Status(sctx, id)
	if err == nil && st.State == runtime.StateRunning {
		log.WarnContext(ctx, "runtime start reported an error but the container runs; keeping it", "start_error", startErr)
		if !st.StartedAt.IsZero() {
			startedAt = st.StartedAt
		}
		return st.Pid, startedAt, true
	}
	if errdefs.IsNotFound(err) || (err == nil && st.State == runtime.StateStopped) {
		return 0, startedAt, false
	}
	if err := rt.Signal(sctx, id, syscall.SIGKILL, runtime.SignalOptions{All: true}); err != nil && !errdefs.IsNotFound(err) {
		log.WarnContext(ctx, "kill container after a failed start", "error", err)
		return 0, startedAt, false
	}
	if _, err := rt.Wait(sctx, id); err != nil && !errdefs.IsNotFound(err) {
		log.WarnContext(ctx, "wait for container after a failed start", "error", err)
	}
	return 0, startedAt, false
}

// recordStartError records a container whose start failed as exited with
// reason StartError and the runtime's message, as kubelet expects, and
// delivers its NRI StopContainer. It returns the error for the caller.
func (s *Service) recordStartError(ctx context.Context, c *container, startErr error) error {
	rec := c.rec
	c.mu.Lock()
	// A concurrent stop may have recorded the exit already.
	if !c.removed && rec.State == store.ContainerCreated {
		rec.State = store.ContainerExited
		rec.ExitCode = 128
		rec.Reason = "StartError"
		rec.Message = startErr.Error()
		rec.FinishedAt = time.Now().UnixNano()
		close(c.done)
		s.emitContainer(eventStopped, c)
		if perr := s.opts.Store.PutContainer(rec); perr != nil {
			s.log.WarnContext(ctx, "persist start failure", "container_id", rec.ID, "error", perr)
		}
	}
	c.mu.Unlock()
	if err := s.deliverStop(ctx, c); err != nil {
		s.log.WarnContext(ctx, "nri stop container after a failed start", "container_id", rec.ID, "error", err)
	}
	return fmt.Errorf("start container %s: %w", rec.ID, startErr)
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
