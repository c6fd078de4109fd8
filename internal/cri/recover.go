package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/podenv"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// recover rebuilds the in-memory state from the store and the live shims
// (docs/recovery.md): pods and containers that were half-made when crind
// died are undone; running containers are watched again; containers that
// exited meanwhile get their real exit status; leftovers nobody owns (runtime
// containers, netns pins, name reservations) are removed; evictions a
// previous crind recorded but did not finish are finished. No NRI event is
// sent here: no adaptation is attached yet. AttachNRI later delivers the
// StopContainer events of exits that no plugin heard of.
func (s *Service) recover(ctx context.Context) error {
	sbs, err := s.opts.Store.Sandboxes()
	if err != nil {
		return err
	}
	for _, rec := range sbs {
		if err := s.recoverSandbox(ctx, rec); err != nil {
			s.log.WarnContext(ctx, "recover pod", "pod_id", rec.ID, "error", err)
		}
	}
	cs, err := s.opts.Store.Containers()
	if err != nil {
		return err
	}
	for _, rec := range cs {
		if err := s.recoverContainer(ctx, rec); err != nil {
			s.log.WarnContext(ctx, "recover container", "container_id", rec.ID, "error", err)
		}
	}
	s.removeOrphans(ctx)
	s.sweep(ctx)
	for _, c := range s.containers {
		c.mu.Lock()
		evicting := c.rec.Evicting && c.rec.State != store.ContainerExited
		c.mu.Unlock()
		if evicting {
			s.resumeEviction(ctx, c)
		}
	}
	s.log.InfoContext(ctx, "state recovered", "pods", len(s.sandboxes), "containers", len(s.containers))
	return nil
}

func (s *Service) recoverSandbox(ctx context.Context, rec *store.Sandbox) error {
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := proto.Unmarshal(rec.Config, cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	if rec.State == store.SandboxCreating {
		s.log.InfoContext(ctx, "undoing half-made pod", "pod_id", rec.ID)
		if rec.NetNS != "" {
			if err := s.opts.Network.Teardown(ctx, cniPod(rec, cfg)); err != nil {
				return fmt.Errorf("tear down network: %w", err)
			}
			if err := s.env.RemoveNetNS(rec.NetNS); err != nil {
				return err
			}
		}
		return s.destroySandbox(ctx, rec)
	}
	if rec.State == store.SandboxReady && rec.NoInfra {
		// Nothing of it can have died; its namespaces are gone only with
		// their pins (the node rebooted, the state dir was a tmpfs).
		if lost := s.env.LostPin(rec); lost != "" {
			s.log.WarnContext(ctx, "pod namespace pin is gone, pod is not ready", "pod_id", rec.ID, "path", lost)
			rec.State = store.SandboxNotReady
			if err := s.opts.Store.PutSandbox(rec); err != nil {
				return err
			}
		}
	} else if rec.State == store.SandboxReady {
		alive := false
		if rt, ok := s.opts.Runtimes[rec.RuntimeHandler]; ok {
			st, err := rt.Status(ctx, rec.ID)
			alive = err == nil && st.State == runtime.StateRunning
		}
		if !alive {
			s.log.WarnContext(ctx, "pod infra process is gone, pod is not ready", "pod_id", rec.ID)
			rec.State = store.SandboxNotReady
			if err := s.opts.Store.PutSandbox(rec); err != nil {
				return err
			}
		} else if rec.IPCNS == "" && rec.UTSNS == "" && rec.PIDNS == "" {
			// Made by a crind that joined containers through /proc. A
			// failure only keeps new containers out of the pod.
			if err := s.env.PinPodNamespaces(rec, cfg); err != nil {
				s.log.WarnContext(ctx, "pin namespaces of a recovered pod", "pod_id", rec.ID, "error", err)
			} else if err := s.opts.Store.PutSandbox(rec); err != nil {
				return err
			}
		}
	}
	sb := &sandbox{rec: rec, config: cfg}
	sb.nri.store(nriPod(rec, cfg, decodePodLinux(rec)))
	s.sandboxes[rec.ID] = sb
	if rec.State == store.SandboxReady {
		s.watchSandbox(sb)
	}
	return nil
}

func (s *Service) recoverContainer(ctx context.Context, rec *store.Container) error {
	cfg := &runtimeapi.ContainerConfig{}
	if err := proto.Unmarshal(rec.Config, cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	sb, ok := s.sandboxes[rec.SandboxID]
	if !ok || rec.State == store.ContainerCreating {
		s.log.InfoContext(ctx, "undoing half-made or orphaned container", "container_id", rec.ID)
		if ok {
			if rt, ok := s.opts.Runtimes[sb.rec.RuntimeHandler]; ok {
				if err := rt.Delete(ctx, rec.ID); err != nil {
					return err
				}
			}
		} else {
			for _, rt := range s.opts.Runtimes {
				if err := rt.Delete(ctx, rec.ID); err != nil {
					return err
				}
			}
		}
		if err := podenv.RemoveUserNSDir(s.env.UserNSCtrDir(rec.SandboxID, rec.ID)); err != nil {
			return err
		}
		if err := s.opts.Images.ReleaseRootfs(ctx, rec.ID); err != nil {
			return err
		}
		if err := s.opts.Store.DeleteContainer(rec.ID); err != nil {
			return err
		}
		return s.opts.Store.Release(store.KindContainer, rec.Name, rec.ID)
	}
	spec, err := s.recoveredSpec(ctx, rec)
	if err != nil {
		return err
	}
	c := &container{rec: rec, config: cfg, base: nriContainerBase(rec, cfg, spec), user: processUser(spec), done: make(chan struct{})}
	s.containers[rec.ID] = c
	if rec.State == store.ContainerExited {
		close(c.done)
		return nil
	}
	if _, err := s.opts.Images.Rootfs(ctx, rec.ID); err != nil {
		s.log.WarnContext(ctx, "remount container rootfs", "container_id", rec.ID, "error", err)
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
		return err
	}
	st, err := rt.Status(ctx, rec.ID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		rec.Reason, rec.Message = "Unknown", "the container's runtime state was lost while crind was down"
		s.recordExit(c, runtime.Status{State: runtime.StateStopped, ExitCode: 255, FinishedAt: time.Now()})
	case err != nil:
		return fmt.Errorf("status: %w", err)
	case st.State == runtime.StateStopped:
		if rec.StartedAt == 0 && !st.StartedAt.IsZero() {
			rec.StartedAt = st.StartedAt.UnixNano()
		}
		s.recordExit(c, st)
	case st.State == runtime.StateRunning:
		if rec.State != store.ContainerRunning {
			// crind died between the runtime start and recording it.
			rec.State, rec.Pid, rec.StartedAt = store.ContainerRunning, st.Pid, st.StartedAt.UnixNano()
			if err := s.opts.Store.PutContainer(rec); err != nil {
				return err
			}
		}
		s.monitor(c, false)
	}
	return nil
}

// resumeEviction finishes an NRI plugin's eviction that a previous crind
// recorded but did not see through (it died during the grace period): the
// plugin was told the eviction succeeded, so the container is killed now,
// without a second grace period. Its exit is recorded as Evicted; NRI
// StopContainer is delivered by AttachNRI or after it, once.
func (s *Service) resumeEviction(ctx context.Context, c *container) {
	s.log.InfoContext(ctx, "finishing an interrupted eviction", "container_id", c.rec.ID, "reason", c.rec.EvictMessage)
	s.goOwned(func() { s.evict(c, 0) })
}

// removeOrphans removes what no record owns: runtime containers, netns and
// other namespace pins, and name reservations left by a crash between two
// steps.
func (s *Service) removeOrphans(ctx context.Context) {
	known := func(id string) bool {
		_, sb := s.sandboxes[id]
		_, c := s.containers[id]
		return sb || c
	}
	for name, rt := range s.opts.Runtimes {
		ids, err := rt.List(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "list runtime containers", "runtime", name, "error", err)
			continue
		}
		for _, id := range ids {
			if known(id) {
				continue
			}
			s.log.InfoContext(ctx, "removing orphaned runtime container", "runtime", name, "id", id)
			if err := rt.Delete(ctx, id); err != nil {
				s.log.WarnContext(ctx, "remove orphaned runtime container", "id", id, "error", err)
			}
		}
	}
	s.env.SweepPins(ctx, func(id string) bool {
		_, ok := s.sandboxes[id]
		return ok
	}, known)
	for _, k := range []store.Kind{store.KindSandbox, store.KindContainer} {
		res, err := s.opts.Store.Reservations(k)
		if err != nil {
			continue
		}
		for name, id := range res {
			if !known(id) {
				_ = s.opts.Store.Release(k, name, id)
			}
		}
	}
}

// recoveredSpec decodes the stored spec of container rec (nil when it
// has none or it is corrupt). A record written before specs were stored
// apart carries its own: it is moved to the store's specs, so it is no
// longer rewritten with each record nor kept in memory.
func (s *Service) recoveredSpec(ctx context.Context, rec *store.Container) (*specs.Spec, error) {
	if len(rec.Spec) > 0 {
		spec := decodeSpec(rec.Spec)
		if err := s.opts.Store.PutContainer(rec); err != nil {
			return nil, err
		}
		rec.Spec = nil
		return spec, nil
	}
	raw, err := s.opts.Store.ContainerSpec(rec.ID)
	if err != nil {
		s.log.WarnContext(ctx, "read container spec", "container_id", rec.ID, "error", err)
	}
	return decodeSpec(raw), nil
}
