package cri

import (
	"context"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// recHub is the hub as start-up recovery sees it.
type recHub struct{ s *Service }

var _ recoveryHub = recHub{}

func (h recHub) knownID(id string) bool { return h.s.knownID(id) }

func (h recHub) knownPod(id string) bool {
	h.s.mu.RLock()
	defer h.s.mu.RUnlock()
	_, ok := h.s.sandboxes[id]
	return ok
}

func (h recHub) podHandler(id string) (string, bool) {
	h.s.mu.RLock()
	defer h.s.mu.RUnlock()
	sb, ok := h.s.sandboxes[id]
	if !ok {
		return "", false
	}
	return sb.rec.RuntimeHandler, true
}

func (h recHub) destroySandbox(ctx context.Context, rec *store.Sandbox) error {
	return h.s.destroySandbox(ctx, rec)
}

func (h recHub) adoptPod(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig) {
	sb := &sandbox{rec: rec, config: cfg}
	sb.nri.store(nriPod(rec, cfg, decodePodLinux(rec)))
	h.s.mu.Lock()
	h.s.sandboxes[rec.ID] = sb
	h.s.mu.Unlock()
	if rec.State == store.SandboxReady {
		h.s.watchSandbox(sb)
	}
}

func (h recHub) adoptContainer(rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) *container {
	c := &container{rec: rec, config: cfg, base: nriContainerBase(rec, cfg, spec), user: processUser(spec), done: make(chan struct{})}
	if rec.State == store.ContainerExited {
		close(c.done)
	}
	h.s.mu.Lock()
	h.s.containers[rec.ID] = c
	h.s.mu.Unlock()
	return c
}

func (h recHub) containerRuntime(rec *store.Container) (runtime.Runtime, error) {
	return h.s.containerRuntime(rec)
}

func (h recHub) recordExit(c *container, st runtime.Status) { h.s.recordExit(c, st) }

func (h recHub) watchExit(c *container) { h.s.monitor(c, false) }

// resumeEvictions finishes each NRI plugin's eviction that a previous
// crind recorded but did not see through (it died during the grace
// period): the plugin was told the eviction succeeded, so the container
// is killed now, without a second grace period. Its exit is recorded as
// Evicted; NRI StopContainer is delivered by AttachNRI or after it, once.
func (h recHub) resumeEvictions(ctx context.Context) {
	h.s.mu.RLock()
	var evicting []*container
	for _, c := range h.s.containers {
		c.mu.Lock()
		if c.rec.Evicting && c.rec.State != store.ContainerExited {
			evicting = append(evicting, c)
		}
		c.mu.Unlock()
	}
	h.s.mu.RUnlock()
	for _, c := range evicting {
		h.s.log.InfoContext(ctx, "finishing an interrupted eviction", "container_id", c.rec.ID, "reason", c.rec.EvictMessage)
		h.s.goOwned(func() { h.s.evict(c, 0) })
	}
}

func (h recHub) counts() (pods, containers int) {
	h.s.mu.RLock()
	defer h.s.mu.RUnlock()
	return len(h.s.sandboxes), len(h.s.containers)
}

func (h recHub) runCleanups() { h.s.goOwned(func() { h.s.cleanups.Run(h.s.ctx) }) }
