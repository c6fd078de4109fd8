package cri

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/crin-dev/crin/internal/nri"
	"github.com/crin-dev/crin/internal/store"
)

// nriEngine is the hub as the NRI adaptation sees it (nri.Engine): what
// plugins may ask of crind on their own. Its methods keep the lock rules
// at the top of nri.go: they take only Service.mu, container.mu and
// container.upd, never an *.op lock.
type nriEngine struct{ s *Service }

var _ nri.Engine = nriEngine{}

// NRIEngine is the hub as the NRI adaptation calls it back: give it to
// nri.New.
func (s *Service) NRIEngine() nri.Engine { return nriEngine{s} }

// Snapshot implements nri.Engine: every visible pod and container, plus
// those whose RunPodSandbox / CreateContainer event is in progress. It
// takes only Service.mu and container.mu, briefly.
func (e nriEngine) Snapshot(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	e.s.mu.RLock()
	sbs := make([]*sandbox, 0, len(e.s.sandboxes))
	for _, sb := range e.s.sandboxes {
		sbs = append(sbs, sb)
	}
	cs := make([]*container, 0, len(e.s.containers))
	for _, c := range e.s.containers {
		cs = append(cs, c)
	}
	pods := make([]*api.PodSandbox, 0, len(sbs)+len(e.s.pendingPods))
	ctrs := make([]*api.Container, 0, len(cs)+len(e.s.pendingCtrs))
	for _, p := range e.s.pendingPods {
		pods = append(pods, proto.Clone(p).(*api.PodSandbox))
	}
	for _, c := range e.s.pendingCtrs {
		ctrs = append(ctrs, proto.Clone(c).(*api.Container))
	}
	e.s.mu.RUnlock()
	for _, sb := range sbs {
		if p := sb.nri.load(); p != nil {
			pods = append(pods, p)
		}
	}
	for _, c := range cs {
		c.mu.Lock()
		if !c.removed {
			ctrs = append(ctrs, nriContainerLocked(c))
		}
		c.mu.Unlock()
	}
	return pods, ctrs, nil
}

// UpdateContainers implements nri.Engine: it applies each update to the
// container's recorded resources and the runtime and returns the failed
// ones; a failure the update marks IgnoreFailure is logged, not returned.
// It takes only container.upd and container.mu (see the top of nri.go).
// The api.ContainerUpdate does not say which plugin sent it (the
// adaptation logs that), so errors say "an NRI plugin's UpdateContainers".
func (e nriEngine) UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return e.s.applyUpdates(ctx, updates, "", updateSource{request: "UpdateContainers"}), nil
}

// EvictContainer implements nri.Engine: it records the eviction, sends
// the container its stop signal and returns; an owned goroutine kills it
// after evictGrace and delivers NRI StopContainer. The container's status
// then shows reason "Evicted" and the plugin's reason as message. The
// eviction is persisted before the signal, so a crind that dies during the
// grace period kills the container when it recovers (docs/recovery.md).
// Evicting an exited container is a no-op; an unknown one is NotFound.
func (e nriEngine) EvictContainer(ctx context.Context, containerID, reason string) error {
	e.s.mu.RLock()
	c, ok := e.s.containers[containerID]
	e.s.mu.RUnlock()
	if !ok {
		return fmt.Errorf("evict container %q: %w", containerID, errdefs.ErrNotFound)
	}
	if reason == "" {
		reason = "evicted by an NRI plugin"
	}
	c.mu.Lock()
	rec := c.rec
	if c.removed || rec.State == store.ContainerExited || rec.Evicting {
		c.mu.Unlock()
		return nil
	}
	rec.Evicting, rec.EvictMessage = true, reason
	if err := e.s.opts.Store.PutContainer(rec); err != nil {
		rec.Evicting, rec.EvictMessage = false, ""
		c.mu.Unlock()
		return fmt.Errorf("evict container %s: record the eviction: %w", containerID, err)
	}
	c.mu.Unlock()
	e.s.log.InfoContext(ctx, "evicting container on nri plugin request", "container_id", containerID, "reason", reason)
	if !e.s.goOwned(func() { e.s.evict(c, evictGrace) }) {
		// Recorded: the next crind finishes it.
		return fmt.Errorf("evict container %s: crind is shutting down: %w", containerID, errdefs.ErrUnavailable)
	}
	return nil
}
