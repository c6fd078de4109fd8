package cri

import (
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// monitor starts the goroutine that records c's exit and then delivers NRI
// StopContainer for it. The goroutine belongs to the Service and ends on
// Close.
func (s *Service) monitor(c *container, persist bool) {
	rt, err := s.containerRuntime(c.rec)
	if err != nil {
		return
	}
	id := c.rec.ID
	s.goOwned(func() {
		if persist {
			s.persistRunning(c)
		}
		for {
			st, err := rt.Wait(s.ctx, id)
			if s.ctx.Err() != nil {
				return
			}
			if err != nil {
				s.log.WarnContext(s.ctx, "wait for container exit", "container_id", id, "error", err)
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(time.Second):
				}
				if errdefs.IsNotFound(err) {
					st = runtime.Status{State: runtime.StateStopped, ExitCode: 255, FinishedAt: time.Now()}
				} else {
					continue
				}
			}
			s.recordExit(c, st)
			// An error here is Close cutting a wait for another delivery.
			_ = s.deliverStop(s.ctx, c)
			return
		}
	})
}

// persistRunning writes c's record as StartContainer left it in memory
// (running), unless the container was removed meanwhile. The monitor does
// it before waiting for the exit, so the exit's record is written after.
func (s *Service) persistRunning(c *container) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed || c.rec.State != store.ContainerRunning {
		return
	}
	if err := s.opts.Store.PutContainer(c.rec); err != nil {
		// The runtime still knows it runs: a restart finds out.
		s.log.WarnContext(s.ctx, "record container running", "container_id", c.rec.ID, "error", err)
	}
}

// recordExit moves c to exited with the status the runtime reported. It
// does not deliver NRI StopContainer: callers follow it with deliverStop.
func (s *Service) recordExit(c *container, st runtime.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.rec
	if rec.State == store.ContainerExited || c.removed {
		return
	}
	rec.State = store.ContainerExited
	rec.ExitCode = st.ExitCode
	rec.FinishedAt = st.FinishedAt.UnixNano()
	if st.FinishedAt.IsZero() {
		rec.FinishedAt = time.Now().UnixNano()
	}
	if rec.FinishedAt < rec.StartedAt {
		rec.FinishedAt = rec.StartedAt
	}
	evicted := rec.Evicting
	rec.Evicting = false // done: a restart has nothing left to finish
	switch {
	case rec.Reason != "":
		// set by whoever stopped it (start error, lost runtime state)
	case st.Reason != "":
		// the runtime knows better than the exit code (its shim died)
		rec.Reason, rec.Message = st.Reason, st.Message
	case evicted:
		rec.Reason, rec.Message = ReasonEvicted, rec.EvictMessage
	case st.OOMKilled:
		rec.Reason = "OOMKilled"
	case st.ExitCode == 0:
		rec.Reason = "Completed"
	default:
		rec.Reason = "Error"
	}
	if err := s.opts.Store.PutContainer(rec); err != nil {
		s.log.WarnContext(s.ctx, "persist container exit", "container_id", rec.ID, "error", err)
	}
	close(c.done)
	s.emitContainer(eventStopped, c)
	s.log.InfoContext(s.ctx, "container exited", "container_id", rec.ID, "exit_code", rec.ExitCode, "reason", rec.Reason)
}

// containerRuntime is the runtime of c's pod.
func (s *Service) containerRuntime(rec *store.Container) (runtime.Runtime, error) {
	s.mu.RLock()
	sb, ok := s.sandboxes[rec.SandboxID]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("container %s: pod %s: %w", rec.ID, rec.SandboxID, errdefs.ErrNotFound)
	}
	rt, ok := s.opts.Runtimes[sb.rec.RuntimeHandler]
	if !ok {
		return nil, fmt.Errorf("container %s: runtime handler %q is no longer configured: %w", rec.ID, sb.rec.RuntimeHandler, errdefs.ErrFailedPrecondition)
	}
	return rt, nil
}

// watchSandbox starts the goroutine that marks sb NOTREADY when its infra
// process exits while crind runs (killed, crashed, or its shim died and
// the runtime killed it), so kubelet recreates the pod; a stop that kills
// the infra itself finds the pod already NOTREADY or makes it so, either
// way once. The goroutine waits on the infra container through the
// runtime (the shim reaps the infra process, and the runtime holds a pidfd
// on the shim), belongs to the Service and ends on Close.
func (s *Service) watchSandbox(sb *sandbox) {
	if sb.rec.NoInfra {
		return // nothing can die: the pod is ready until stopped
	}
	id, handler := sb.rec.ID, sb.rec.RuntimeHandler
	rt, ok := s.opts.Runtimes[handler]
	if !ok {
		return
	}
	s.goOwned(func() {
		var st runtime.Status
		for {
			var err error
			st, err = rt.Wait(s.ctx, id)
			if s.ctx.Err() != nil {
				return
			}
			if err == nil || errdefs.IsNotFound(err) {
				break
			}
			s.log.WarnContext(s.ctx, "wait for pod infra process", "pod_id", id, "error", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		// op, not only mu: a pod record's writers hold both, and a stop
		// in progress must not be overwritten half-way.
		sb.op.Lock()
		defer sb.op.Unlock()
		if sb.removed || sb.rec.State != store.SandboxReady {
			return
		}
		// Persisted before it is shown, so a client that sees NOTREADY
		// finds it after a crind restart too.
		persisted := *sb.rec
		persisted.State = store.SandboxNotReady
		if err := s.opts.Store.PutSandbox(&persisted); err != nil {
			s.log.WarnContext(s.ctx, "persist pod state", "pod_id", id, "error", err)
		}
		sb.mu.Lock()
		sb.rec.State = store.SandboxNotReady
		sb.mu.Unlock()
		s.log.WarnContext(s.ctx, "pod infra process exited, pod is not ready", "pod_id", id,
			"exit_code", st.ExitCode, "reason", st.Reason, "message", st.Message)
		s.emitSandbox(eventStopped, sb) // evented PLEG learns of it at once
	})
}
