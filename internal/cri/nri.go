package cri

// NRI wiring and why it cannot deadlock.
//
// The hub calls the adaptation's event methods (RunPodSandbox, CreateContainer,
// ...); the adaptation calls back into the hub through nri.Engine (Snapshot,
// UpdateContainers, EvictContainer), possibly while an event is in progress,
// possibly from a plugin's handler of that very event, and the event cannot
// return before that handler does. So the rule is: nothing an Engine method
// waits for may be held across an NRI event call.
//
// Locks, outermost first (a goroutine only takes them in this order):
//
//	sandbox.op    lifecycle of a pod; MAY be held across NRI calls
//	container.op  lifecycle of a container; MAY be held across NRI calls
//	              and runtime calls
//	container.upd resource updates (updateResources, container_update.go);
//	              held across the runtime update only, NEVER across an
//	              NRI call
//	sandbox.mu, container.mu   record fields; NEVER held across an NRI call,
//	              a runtime call, a wait for an exit, or a wait for another
//	              lock above
//	Service.mu    the maps; held only for map access
//
// The Engine methods take only container.upd (UpdateContainers),
// container.mu and Service.mu, and read pods through sandbox.nri (an
// atomic pointer), so they never wait for an *.op lock, and therefore
// never for an NRI event: whoever holds a container.upd is in a runtime
// update, whoever holds a container.mu or Service.mu is reading or writing
// a record, both making progress without NRI. Since no mu is held across a
// runtime call, Snapshot (a plugin's Synchronize), status and list do not
// wait for a slow shim either. EvictContainer does not wait for the
// container to stop: it records the eviction, sends the stop signal and
// leaves the grace period, the kill and the NRI StopContainer to an owned
// goroutine. (A synchronous stop would deliver StopContainer, which waits
// behind the pod's in-progress event, which waits for the plugin handler
// that asked for the eviction.)
//
// NRI StopContainer is delivered exactly once per container that existed
// (reached created): whoever ends it (CRI stop, eviction, the exit
// monitor, a failed start) calls deliverStop after the exit is recorded;
// the first caller claims it under container.mu (stopNotify), delivers with
// no lock held, then persists NRIStopDelivered; later callers wait for the
// claim or return. An exit recorded while no adaptation was attached (also
// by the restart recovery) is delivered by AttachNRI. A CRI call that
// waited for another goroutine's delivery and ran out of time fails with
// its context's error rather than report a stop whose StopContainer may
// not have reached the plugins.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"

	"github.com/crin-dev/crin/internal/nri"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/store"
)

// ReasonEvicted is the status reason of a container an NRI plugin evicted;
// the status message is the plugin's reason.
const ReasonEvicted = "Evicted"

// evictGrace is how long an evicted container has between its stop signal
// and SIGKILL.
const evictGrace = 10 * time.Second

// nriDeliveryTimeout bounds one teardown event (each plugin call has its
// own, shorter, timeout in the adaptation).
const nriDeliveryTimeout = time.Minute

// nriHooks is what the hub needs of the NRI adaptation: its event methods.
// *nri.Adaptation implements it; tests use a recording fake.
type nriHooks interface {
	RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error
	UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, res *api.LinuxResources) error
	PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error
	StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error
	RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error
	CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*nri.CreateResult, error)
	PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error)
	PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error)
	RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
}

var _ nriHooks = (*nri.Adaptation)(nil)

type nriRef struct{ h nriHooks }

// hooks returns the attached adaptation, or nil.
func (s *Service) hooks() nriHooks {
	if r := s.nri.Load(); r != nil {
		return r.h
	}
	return nil
}

// AttachNRI makes the hub relay lifecycle events to a (started)
// adaptation. Call it once, after nri.New(cfg, svc.NRIEngine()) and Start, before
// serving CRI. Self-exits recorded before it (also while crind was down)
// whose NRI StopContainer was never delivered are delivered then.
func (s *Service) AttachNRI(ctx context.Context, a *nri.Adaptation) {
	if a == nil {
		return
	}
	s.attach(ctx, a)
}

func (s *Service) attach(ctx context.Context, h nriHooks) {
	s.nri.Store(&nriRef{h: h})
	for _, c := range s.allContainers() {
		if err := s.deliverStop(ctx, c); err != nil {
			s.log.WarnContext(ctx, "nri stop container at attach", "container_id", c.rec.ID, "error", err)
		}
	}
}

// NRIOwners returns, for a container, which plugin owns which adjusted
// field (nri.OwnersTable's form); empty when no plugin adjusted it.
// NotFound for an unknown container.
func (s *Service) NRIOwners(id string) (map[string]string, error) {
	c, err := s.getContainer(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.rec.NRIOwners)
	if out == nil {
		out = map[string]string{}
	}
	return out, nil
}

// addPending puts view in pending (s.pendingPods or s.pendingCtrs) under
// id, so Snapshot shows it while its NRI create event is in flight, and
// adds to undo the step that takes it out again. The commit that makes the
// pod or container visible takes it out on success.
func addPending[V any](s *Service, pending map[string]V, id string, view V, undo *rollback) {
	undo.add("forget pending NRI view", func(context.Context) error {
		s.mu.Lock()
		delete(pending, id)
		s.mu.Unlock()
		return nil
	})
	s.mu.Lock()
	pending[id] = view
	s.mu.Unlock()
}

// updateSource says which NRI call plugin updates came with, for errors
// and logs.
type updateSource struct {
	// request is the NRI call: CreateContainer, UpdateContainer,
	// StopContainer or UpdateContainers.
	request string
	// owners name the plugin behind each field, keyed by container id;
	// nil when the call does not say (only CreateContainer's result does).
	owners *api.OwningPlugins
}

// plugins lists the plugins that own fields of container id's update.
func (u updateSource) plugins(id string) []string {
	var out []string
	for _, p := range nri.OwnersTable(u.owners, id) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// applyUpdates applies plugin updates, skipping any for container skip
// (the one whose event produced them), logs each failure at warn level
// and returns the failed ones that are not IgnoreFailure.
func (s *Service) applyUpdates(ctx context.Context, updates []*api.ContainerUpdate, skip string, src updateSource) []*api.ContainerUpdate {
	var failed []*api.ContainerUpdate
	for _, u := range updates {
		id := u.GetContainerId()
		if id == skip && skip != "" {
			continue
		}
		err := s.applyUpdate(ctx, u, src)
		if err == nil {
			continue
		}
		attrs := []any{"container_id", id, "nri_request", src.request, "ignore_failure", u.GetIgnoreFailure(), "error", err}
		if ps := src.plugins(id); len(ps) > 0 {
			attrs = append(attrs, "plugins", ps)
		}
		s.log.WarnContext(ctx, "nri container update failed", attrs...)
		if !u.GetIgnoreFailure() {
			failed = append(failed, u)
		}
	}
	return failed
}

// applyUpdate applies one plugin update to a created or running container.
func (s *Service) applyUpdate(ctx context.Context, u *api.ContainerUpdate, src updateSource) error {
	id := u.GetContainerId()
	s.mu.RLock()
	c, ok := s.containers[id]
	s.mu.RUnlock()
	if !ok {
		return fmt.Errorf("nri update: container %q: %w", id, errdefs.ErrNotFound)
	}
	res := u.GetLinux().GetResources()
	if res == nil || proto.Size(res) == 0 {
		if src.request == "UpdateContainers" {
			// Asked for on its own, an update that changes nothing is a
			// plugin's mistake: it is listed as failed, not dropped.
			return fmt.Errorf("nri update: container %q: the update sets no resources: %w", id, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	opts := s.updateOptions(id, s.handlerOf(c.rec.SandboxID))
	opts.Owners, opts.Request = src.owners, src.request
	return s.updateResources(ctx, c, func(cur *specs.LinuxResources) (*specs.LinuxResources, error) {
		return oci.ApplyUpdate(cur, res, opts)
	})
}

// failedUpdatesError reports plugin updates to other containers that
// failed and were not allowed to.
func failedUpdatesError(failed []*api.ContainerUpdate) error {
	if len(failed) == 0 {
		return nil
	}
	ids := make([]string, len(failed))
	for i, u := range failed {
		ids[i] = u.GetContainerId()
	}
	return fmt.Errorf("nri: updating containers %v as plugins required failed (see the log): %w", ids, errdefs.ErrFailedPrecondition)
}

// evict stops an evicted container (on an owned goroutine).
func (s *Service) evict(c *container, grace time.Duration) {
	if err := s.stopContainer(s.ctx, c, grace); err != nil {
		s.log.WarnContext(s.ctx, "evict container", "container_id", c.rec.ID, "error", err)
	}
}

// deliverStop delivers NRI StopContainer for an exited container, exactly
// once (see the top of this file). It returns at once when no adaptation
// is attached, the container has not exited or was delivered; when another
// goroutine is delivering it waits for that, and returns ctx's error if
// ctx ends first (the event was then not necessarily delivered yet). It
// must not be called with any container or sandbox mu held.
func (s *Service) deliverStop(ctx context.Context, c *container) error {
	h := s.hooks()
	if h == nil {
		return nil
	}
	c.mu.Lock()
	if c.removed || c.rec.State != store.ContainerExited || c.rec.NRIStopDelivered {
		c.mu.Unlock()
		return nil
	}
	if ch := c.stopNotify; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("wait for nri stop container of %s: %w", c.rec.ID, ctx.Err())
		}
	}
	ch := make(chan struct{})
	c.stopNotify = ch
	ctr := nriContainerLocked(c)
	c.mu.Unlock()
	defer close(ch)

	// Once begun, the delivery is not cut short by the caller going away:
	// a half-delivered event would be redelivered to some plugins.
	dctx, cancel := teardownContext(ctx)
	defer cancel()
	upds, err := h.StopContainer(dctx, s.podView(ctr.GetPodSandboxId()), ctr)
	if err != nil {
		s.log.WarnContext(dctx, "nri stop container", "container_id", ctr.GetId(), "error", err)
	}
	// Failures are logged (applyUpdates): the container is stopped
	// whatever a side update of another container did.
	s.applyUpdates(dctx, upds, ctr.GetId(), updateSource{request: "StopContainer"})

	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec.NRIStopDelivered = true
	if c.removed {
		return nil
	}
	if err := s.opts.Store.PutContainer(c.rec); err != nil {
		s.log.WarnContext(dctx, "persist nri stop delivered", "container_id", ctr.GetId(), "error", err)
	}
	return nil
}

// teardownContext is the context a teardown event (StopContainer,
// RemoveContainer, Stop/RemovePodSandbox) is delivered on: once the
// teardown happened the event must reach the plugins, also when the
// caller went away.
func teardownContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), nriDeliveryTimeout)
}

// handlerOf is the runtime handler of a pod ("" when unknown).
func (s *Service) handlerOf(podID string) string {
	s.mu.RLock()
	sb, ok := s.sandboxes[podID]
	s.mu.RUnlock()
	if !ok {
		return ""
	}
	// RuntimeHandler never changes after the pod is made.
	return sb.rec.RuntimeHandler
}

func (s *Service) updateOptions(id, handler string) oci.UpdateOptions {
	return oci.UpdateOptions{
		ContainerID:  id,
		Features:     s.features[handler],
		RuntimeName:  handler,
		BlockioClass: s.opts.BlockioClass,
		RdtClass:     s.opts.RdtClass,
	}
}
