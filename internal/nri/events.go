package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrRequiredPluginMissing says a plugin configured as required is not
// connected, so the request cannot be served.
var ErrRequiredPluginMissing = fmt.Errorf("required nri plugin not connected: %w", errdefs.ErrUnavailable)

// active reports whether events should be relayed at all.
func (a *Adaptation) active() bool { return a.cfg.Enable }

// inEvent is an event in progress: its turn in its pod's order and its
// epoch. done ends it.
type inEvent struct {
	a   *Adaptation
	pod string
	ep  *epoch
}

func (e inEvent) done() {
	e.ep.wg.Done()
	e.a.order.release(e.pod)
}

// enter orders the event after earlier events of the same pod and returns
// the plugin list; the returned inEvent's done must be called when the
// event is over (not when enter fails).
func (a *Adaptation) enter(ctx context.Context, pod *api.PodSandbox) ([]*plugin, inEvent, error) {
	id := pod.GetId()
	if err := a.order.acquire(ctx, id); err != nil {
		return nil, inEvent{}, fmt.Errorf("wait for earlier events of pod %s: %w", id, err)
	}
	ps, ep := a.begin()
	return ps, inEvent{a: a, pod: id, ep: ep}, nil
}

// checkRequired fails if a required plugin is not connected and ready: a
// required plugin must take part in every request, and a request never
// waits for a plugin's Synchronize.
func (a *Adaptation) checkRequired(ps []*plugin) error {
	for _, want := range a.required {
		found := false
		for _, p := range ps {
			if (p.name == want || p.id() == want) && p.ready() {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrRequiredPluginMissing, want)
		}
	}
	return nil
}

// live reports whether p can get a live request now. It never waits: a
// plugin still synchronizing (or gone) is passed over, which is an error
// only for a required plugin.
func (p *plugin) live() (bool, error) {
	if p.ready() {
		return true, nil
	}
	if p.required {
		return false, fmt.Errorf("%w: %s is not ready", ErrRequiredPluginMissing, p.id())
	}
	return false, nil
}

// requestFailure turns a plugin's failure of a request into the request's
// error, or nil when the failure policy lets the request go on.
func requestFailure(p *plugin, err error) error {
	if fault(err) && !p.handleFault(err) {
		return nil
	}
	return err
}

// RunPodSandbox relays the pod's creation; a plugin error, or the failure
// of a plugin whose policy says so, fails it.
func (a *Adaptation) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.podRequest(ctx, api.Event_RUN_POD_SANDBOX, pod, nil)
}

// UpdatePodSandbox relays a change of the pod's resources; failures as for
// RunPodSandbox.
func (a *Adaptation) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *api.LinuxResources) error {
	return a.podRequest(ctx, api.Event_UPDATE_POD_SANDBOX, pod, &api.UpdatePodSandboxRequest{
		Pod: pod, OverheadLinuxResources: overhead, LinuxResources: resources,
	})
}

func (a *Adaptation) podRequest(ctx context.Context, ev api.Event, pod *api.PodSandbox, upd *api.UpdatePodSandboxRequest) error {
	if !a.active() {
		return nil
	}
	ps, in, err := a.enter(ctx, pod)
	if err != nil {
		return err
	}
	defer in.done()
	if ev == api.Event_RUN_POD_SANDBOX {
		if err := a.checkRequired(ps); err != nil {
			return fmt.Errorf("run pod sandbox %s: %w", pod.GetId(), err)
		}
	}
	for _, p := range ps {
		if !p.subscribed(ev) || p.builtin != nil {
			continue
		}
		// A synchronizing plugin learns of the pod after its Synchronize;
		// a resource change it missed reaches it as PostUpdatePodSandbox.
		if ev == api.Event_RUN_POD_SANDBOX && p.enqueue(ev, pod, nil) {
			continue
		}
		ok, err := p.live()
		if err != nil {
			return err
		}
		if !ok || (ev == api.Event_RUN_POD_SANDBOX && p.alreadySeen(pod.GetId())) {
			continue
		}
		if ev == api.Event_RUN_POD_SANDBOX {
			err = p.notify(ctx, ev, pod, nil)
		} else {
			err = p.call(ctx, ev.PrettyName(), func(ctx context.Context) error {
				_, err := p.svc.UpdatePodSandbox(ctx, upd)
				if status.Code(err) == codes.Unimplemented {
					return nil // plugins older than the RPC never see it
				}
				return err
			})
		}
		if err != nil {
			if err = requestFailure(p, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// PostUpdatePodSandbox relays that the pod was updated; plugin failures
// are reported joined.
func (a *Adaptation) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.broadcast(ctx, api.Event_POST_UPDATE_POD_SANDBOX, pod, nil)
}

// StopPodSandbox relays the pod's stop to every subscribed plugin, even
// when some fail; the failures are reported joined.
func (a *Adaptation) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.broadcast(ctx, api.Event_STOP_POD_SANDBOX, pod, nil)
}

// RemovePodSandbox relays the pod's removal like StopPodSandbox.
func (a *Adaptation) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return a.broadcast(ctx, api.Event_REMOVE_POD_SANDBOX, pod, nil)
}

// PostCreateContainer relays that the container was created.
func (a *Adaptation) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return a.broadcast(ctx, api.Event_POST_CREATE_CONTAINER, pod, ctr)
}

// StartContainer relays that the container is about to start; plugin
// failures are reported joined (the caller decides whether to go on).
func (a *Adaptation) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return a.broadcast(ctx, api.Event_START_CONTAINER, pod, ctr)
}

// PostStartContainer relays that the container started.
func (a *Adaptation) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return a.broadcast(ctx, api.Event_POST_START_CONTAINER, pod, ctr)
}

// PostUpdateContainer relays that the container's resources changed.
func (a *Adaptation) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return a.broadcast(ctx, api.Event_POST_UPDATE_CONTAINER, pod, ctr)
}

// RemoveContainer relays the container's removal to every subscribed
// plugin, even when some fail; the failures are reported joined.
func (a *Adaptation) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return a.broadcast(ctx, api.Event_REMOVE_CONTAINER, pod, ctr)
}

// broadcast delivers a notification to every subscribed plugin in index
// order; a synchronizing plugin gets it queued.
func (a *Adaptation) broadcast(ctx context.Context, ev api.Event, pod *api.PodSandbox, ctr *api.Container) error {
	if !a.active() {
		return nil
	}
	ps, in, err := a.enter(ctx, pod)
	if err != nil {
		return err
	}
	defer in.done()
	var errs []error
	for _, p := range ps {
		switch ev {
		case api.Event_REMOVE_CONTAINER:
			p.forgetSeen(ctr.GetId())
		case api.Event_REMOVE_POD_SANDBOX:
			p.forgetSeen(pod.GetId())
		}
		if !p.subscribed(ev) || p.builtin != nil || p.enqueue(ev, pod, ctr) {
			continue
		}
		if err := p.notify(ctx, ev, pod, ctr); err != nil {
			if fault(err) {
				p.handleFault(err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CreateContainer asks the plugins, in index order, for adjustments to the
// container being created and for updates to other containers; each plugin
// sees the container as adjusted by the earlier ones. The validators then
// check the merged result. It returns the merged adjustment (never nil),
// the updates and the plugin that set each adjusted field (never nil); any
// plugin error, merge conflict or rejection fails it.
func (a *Adaptation) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*CreateResult, error) {
	adj, upds, owners, err := a.createContainer(ctx, pod, ctr)
	if err != nil {
		return nil, err
	}
	return &CreateResult{Adjust: adj, Update: upds, Owners: owners}, nil
}

// createContainer is CreateContainer.
func (a *Adaptation) createContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, *api.OwningPlugins, error) {
	if !a.active() {
		return &api.ContainerAdjustment{}, nil, api.NewOwningPlugins(), nil
	}
	ps, in, err := a.enter(ctx, pod)
	if err != nil {
		return nil, nil, nil, err
	}
	defer in.done()
	if err := a.checkRequired(ps); err != nil {
		return nil, nil, nil, fmt.Errorf("create container %s: %w", ctr.GetId(), err)
	}
	f := &flight{creating: true}
	a.flights.start(ctr.GetId(), f)
	defer a.flights.land(ctr.GetId(), f)

	const ev = api.Event_CREATE_CONTAINER
	// A failed merge fails the request, so the merger keeps no copies to
	// roll back to; the last plugin's changes need no adjusted container.
	m := newMerger(pod, ctr)
	m.oneShot = true
	last := -1
	for i, p := range ps {
		if p.subscribed(ev) && p.builtin == nil {
			last = i
		}
	}
	vs := validators(ps)
	var (
		consulted []*api.PluginInstance // only sent to validators
		evicts    []*api.ContainerEviction
	)
	for i, p := range ps[:last+1] {
		if !p.subscribed(ev) || p.builtin != nil {
			continue
		}
		rsp, answered, err := askCreate(ctx, p, pod, ctr, m)
		if err != nil {
			return nil, nil, nil, err
		}
		if !answered {
			continue
		}
		if len(vs) > 0 {
			consulted = append(consulted, &api.PluginInstance{Name: p.name, Index: p.idx})
		}
		if i == last {
			m.lastView()
		}
		if err := m.applyCreate(p.id(), rsp.GetAdjust(), rsp.GetUpdate()); err != nil {
			return nil, nil, nil, fmt.Errorf("create container %s: %w", ctr.GetId(), err)
		}
		evicts = append(evicts, rsp.GetEvict()...)
	}
	adj, upds, owners := m.result()
	if owners == nil {
		owners = api.NewOwningPlugins()
	}
	if len(vs) > 0 {
		if err := a.validate(ctx, vs, &api.ValidateContainerAdjustmentRequest{
			Pod: pod, Container: ctr, Adjust: adj, Update: upds, Owners: owners, Plugins: consulted,
		}); err != nil {
			return nil, nil, nil, fmt.Errorf("create container %s: %w", ctr.GetId(), err)
		}
	}
	a.evict(evicts)
	return adj, upds, owners, nil
}

// askCreate sends the creation of ctr to p with the container as the
// merger m has it so far. answered is false when p was not asked (it is
// synchronizing, gone, or saw ctr already) or its failure is tolerated.
func askCreate(ctx context.Context, p *plugin, pod *api.PodSandbox, ctr *api.Container, m *merger) (rsp *api.CreateContainerResponse, answered bool, err error) {
	const ev = api.Event_CREATE_CONTAINER
	// A synchronizing plugin gets the creation after its Synchronize,
	// too late to adjust the container (plugin.dedicated).
	if p.synchronizing() && p.enqueue(ev, pod, m.container()) {
		return nil, false, nil
	}
	ok, err := p.live()
	if err != nil {
		return nil, false, err
	}
	if !ok || p.alreadySeen(ctr.GetId()) {
		return nil, false, nil
	}
	// Marshalled before the merger changes again, so no copy is needed.
	req := &api.CreateContainerRequest{Pod: pod, Container: m.view()}
	err = p.call(ctx, ev.PrettyName(), func(ctx context.Context) error {
		var err error
		rsp, err = p.svc.CreateContainer(ctx, req)
		return err
	})
	if err != nil {
		return nil, false, requestFailure(p, err)
	}
	return rsp, true, nil
}

// validators returns the plugins of ps subscribed to validation.
func validators(ps []*plugin) []*plugin {
	var vs []*plugin
	for _, p := range ps {
		if p.subscribed(api.Event_VALIDATE_CONTAINER_ADJUSTMENT) {
			vs = append(vs, p)
		}
	}
	return vs
}

// validate runs the validators vs concurrently; any rejection, error or
// timeout fails.
func (a *Adaptation) validate(ctx context.Context, vs []*plugin, req *api.ValidateContainerAdjustmentRequest) error {
	errs := make([]error, len(vs))
	var wg sync.WaitGroup
	for i, p := range vs {
		run := func() {
			ok, err := p.live()
			if !ok || err != nil {
				errs[i] = err
				return
			}
			if err := p.validate(ctx, req); err != nil {
				if fault(err) {
					p.handleFault(err)
				}
				errs[i] = err
			}
		}
		if i == len(vs)-1 {
			run() // the last one on this goroutine
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// UpdateContainer asks the plugins about a change of the container's
// resources. It returns the merged updates (to this and other containers);
// a plugin error or merge conflict fails it.
func (a *Adaptation) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	if !a.active() {
		return nil, nil
	}
	ps, in, err := a.enter(ctx, pod)
	if err != nil {
		return nil, err
	}
	defer in.done()
	if err := a.checkRequired(ps); err != nil {
		return nil, fmt.Errorf("update container %s: %w", ctr.GetId(), err)
	}
	f := &flight{m: newMerger(pod, ctr)}
	a.flights.start(ctr.GetId(), f)
	defer a.flights.land(ctr.GetId(), f)
	var evicts []*api.ContainerEviction
	const ev = api.Event_UPDATE_CONTAINER
	for _, p := range ps {
		if !p.subscribed(ev) || p.builtin != nil {
			continue
		}
		// A synchronizing plugin is passed over; it learns of the change
		// from PostUpdateContainer, queued for it.
		ok, err := p.live()
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var rsp *api.UpdateContainerResponse
		err = p.call(ctx, ev.PrettyName(), func(ctx context.Context) error {
			var err error
			rsp, err = p.svc.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
			return err
		})
		if err != nil {
			if err = requestFailure(p, err); err != nil {
				return nil, err
			}
			continue
		}
		f.mu.Lock()
		err = f.m.applyUpdates(p.id(), rsp.GetUpdate())
		f.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("update container %s: %w", ctr.GetId(), err)
		}
		evicts = append(evicts, rsp.GetEvict()...)
	}
	f.mu.Lock()
	f.sealed = true
	upds := f.m.updates()
	f.mu.Unlock()
	a.evict(evicts)
	return upds, nil
}

// StopContainer relays the container's stop to every subscribed plugin,
// even when some fail, and returns the merged updates they asked for
// (to other containers) with the failures joined.
func (a *Adaptation) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	if !a.active() {
		return nil, nil
	}
	ps, in, err := a.enter(ctx, pod)
	if err != nil {
		return nil, err
	}
	defer in.done()
	f := &flight{m: newMerger(pod, ctr), stopping: true}
	a.flights.start(ctr.GetId(), f)
	defer a.flights.land(ctr.GetId(), f)
	var errs []error
	const ev = api.Event_STOP_CONTAINER
	for _, p := range ps {
		if !p.subscribed(ev) || p.builtin != nil || p.enqueue(ev, pod, ctr) {
			continue
		}
		var rsp *api.StopContainerResponse
		err := p.call(ctx, ev.PrettyName(), func(ctx context.Context) error {
			var err error
			rsp, err = p.svc.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
			return err
		})
		if err != nil {
			if fault(err) {
				p.handleFault(err)
			}
			errs = append(errs, err)
			continue
		}
		f.mu.Lock()
		err = f.m.applyUpdates(p.id(), rsp.GetUpdate())
		f.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", ctr.GetId(), err))
		}
	}
	f.mu.Lock()
	f.sealed = true
	upds := f.m.updates()
	f.mu.Unlock()
	return upds, errors.Join(errs...)
}

// evict hands evictions plugins asked for to the engine, on an owned
// goroutine: evicting may stop a container of the very pod whose event
// asked for it, which must first be over.
func (a *Adaptation) evict(evs []*api.ContainerEviction) {
	if len(evs) == 0 {
		return
	}
	evs = slices.Clone(evs)
	a.goRun(func() {
		for _, e := range evs {
			if err := a.eng.EvictContainer(a.ctx, e.GetContainerId(), e.GetReason()); err != nil {
				a.log.WarnContext(a.ctx, "nri eviction failed", "container_id", e.GetContainerId(), "error", err)
			}
		}
	})
}

// unsolicited applies an UpdateContainers request a plugin sent on its
// own. Each update and eviction is applied on its own: the ones that fail
// are returned, the others take effect. Updates are checked for conflicts
// (one update per container per request); an update for a container with an UpdateContainer event in
// progress is merged into that event's result (its outcome is the event's),
// so it neither races nor waits for it; one for a container being created
// or stopped is refused (returned as failed); the rest go to the Engine under per-container gates. It never
// waits for a plugin call, so a plugin may call it from any handler.
func (a *Adaptation) unsolicited(ctx context.Context, p *plugin, req *api.UpdateContainersRequest) ([]*api.ContainerUpdate, error) {
	var (
		failed []*api.ContainerUpdate
		direct []*api.ContainerUpdate
		ids    []string
		seen   = make(map[string]bool)
	)
	for _, u := range req.GetUpdate() {
		id := u.GetContainerId()
		if id == "" || seen[id] {
			a.log.WarnContext(ctx, "nri unsolicited update refused: no or duplicate container id", "plugin", p.id(), "container_id", id)
			failed = append(failed, u)
			continue
		}
		seen[id] = true
		if f := a.flights.get(id); f != nil {
			f.mu.Lock()
			switch {
			case f.creating, f.stopping:
				a.log.WarnContext(ctx, "nri unsolicited update refused: container is being created or stopped", "plugin", p.id(), "container_id", id)
				failed = append(failed, u)
				f.mu.Unlock()
				continue
			case f.m != nil && !f.sealed:
				err := f.m.applyUpdates(p.id(), []*api.ContainerUpdate{u})
				f.mu.Unlock()
				if err != nil {
					a.log.WarnContext(ctx, "nri unsolicited update conflicts", "plugin", p.id(), "container_id", id, "error", err)
					failed = append(failed, u)
				}
				continue
			}
			f.mu.Unlock()
		}
		direct = append(direct, u)
		ids = append(ids, id)
	}
	if len(direct) > 0 {
		unlock := a.gates.lock(ids)
		f, err := a.eng.UpdateContainers(ctx, direct)
		unlock()
		if err != nil {
			a.log.WarnContext(ctx, "nri unsolicited update failed", "plugin", p.id(), "error", err)
			f = direct
		}
		failed = append(failed, f...)
	}
	// Every eviction is tried; one that fails (an unknown container, one
	// the engine refuses) is reported like a failed update, as an entry of
	// the response's Failed list carrying only its container id: the
	// response has no other place for it, and an error would make the
	// plugin believe the whole batch failed.
	for _, e := range req.GetEvict() {
		id := e.GetContainerId()
		if err := a.eng.EvictContainer(ctx, id, e.GetReason()); err != nil {
			a.log.WarnContext(ctx, "nri eviction failed", "plugin", p.id(), "container_id", id, "error", err)
			failed = append(failed, &api.ContainerUpdate{ContainerId: id})
		}
	}
	return failed, nil
}
