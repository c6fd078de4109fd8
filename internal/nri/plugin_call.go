package nri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// call runs fn with the plugin's request timeout and classifies the
// outcome. It returns nil or a *PluginError.
func (p *plugin) call(ctx context.Context, ev string, fn func(context.Context) error) error {
	return p.callTimeout(ctx, ev, p.timeout, fn)
}

func (p *plugin) callTimeout(ctx context.Context, ev string, timeout time.Duration, fn func(context.Context) error) error {
	select {
	case <-p.closed:
		return &PluginError{Plugin: p.id(), Event: ev, Err: ErrPluginGone}
	default:
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	err := fn(cctx)
	timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
	cancel()
	d := time.Since(start)
	p.calls.Add(1)
	p.busy.Add(uint64(d))
	if err != nil {
		p.failures.Add(1)
	}
	if err == nil {
		p.a.metrics.ObservePluginCall(p.id(), ev, d, CallOK)
		return nil
	}
	switch {
	case ctx.Err() != nil:
		// The caller gave up; the plugin is not at fault.
		p.a.metrics.ObservePluginCall(p.id(), ev, d, CallError)
		return &PluginError{Plugin: p.id(), Event: ev, Err: ctx.Err()}
	case timedOut || status.Code(err) == codes.DeadlineExceeded:
		p.a.metrics.ObservePluginCall(p.id(), ev, d, CallTimeout)
		return &PluginError{Plugin: p.id(), Event: ev, Err: fmt.Errorf("%w after %s", ErrPluginTimeout, timeout)}
	case isTransport(err):
		p.a.metrics.ObservePluginCall(p.id(), ev, d, CallError)
		if cerr := p.mux.closedErr(); cerr != nil && !errors.Is(cerr, errShutdown) {
			err = cerr
		}
		return &PluginError{Plugin: p.id(), Event: ev, Err: fmt.Errorf("%w: %v", ErrPluginGone, err)}
	default:
		p.a.metrics.ObservePluginCall(p.id(), ev, d, CallError)
		if s, ok := status.FromError(err); ok {
			err = errors.New(s.Message())
		}
		return &PluginError{Plugin: p.id(), Event: ev, Err: err}
	}
}

// isTransport tells a broken connection from an error the plugin returned.
func isTransport(err error) bool {
	if _, ok := status.FromError(err); ok {
		return false
	}
	return true
}

// fault reports whether err (from call) is a failure of the plugin itself
// (timeout, lost connection, protocol error) rather than an answer.
func fault(err error) bool {
	return errors.Is(err, ErrPluginTimeout) || errors.Is(err, ErrPluginGone)
}

// handleFault applies the failure policy to a faulty call: it drops the
// plugin unless the policy keeps it (timeouts only) and reports whether the
// request must fail.
func (p *plugin) handleFault(err error) (failRequest bool) {
	keep := errors.Is(err, ErrPluginTimeout) && p.policy.KeepConnected
	if !keep && p.builtin == nil {
		p.log.Warn("nri plugin failed, disconnecting", "plugin", p.id(), "error", err)
		// Closing waits for the plugin's goroutines; the caller may be a
		// request the plugin's runtime service serves, so do it aside.
		p.a.goClose(p, err)
	}
	return p.policy.FailRequest || p.required
}

// ready reports whether the plugin finished its Synchronize and is
// connected.
func (p *plugin) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == StateReady
}

// synchronizing reports whether the plugin is in its Synchronize (a
// cheap check before building what enqueue would keep).
func (p *plugin) synchronizing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == StateSynchronizing
}

// alreadySeen reports whether id was part of the plugin's Synchronize,
// consuming the mark: a creation event for it must not be delivered too.
func (p *plugin) alreadySeen(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.seen[id]; ok {
		delete(p.seen, id)
		return true
	}
	return false
}

// forgetSeen drops id from the ids sent in Synchronize once it is removed:
// its creation event will not come any more. So seen holds no more than
// the pods and containers that lived at the plugin's Synchronize.
func (p *plugin) forgetSeen(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, id)
}

// enqueue queues an event if the plugin is synchronizing; drain delivers
// it once the plugin is ready. A queued CreateContainer can no longer
// adjust its container (see dedicated).
func (p *plugin) enqueue(ev api.Event, pod *api.PodSandbox, ctr *api.Container) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != StateSynchronizing {
		return false
	}
	p.queue = append(p.queue, queuedEvent{ev: ev, pod: pod, ctr: ctr})
	return true
}

// drain delivers queued events in order, then marks the plugin ready.
func (p *plugin) drain(ctx context.Context) {
	for {
		p.mu.Lock()
		q := p.queue
		p.queue = nil
		if len(q) == 0 {
			if p.state == StateSynchronizing {
				// seen stays: a pod or container that was pending in
				// the snapshot may have its creation event still to
				// come (forgetSeen).
				p.state = StateReady
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for _, e := range q {
			if created := createdID(e); created != "" && p.alreadySeen(created) {
				continue // it was in the Synchronize
			}
			if err := p.notify(ctx, e.ev, e.pod, e.ctr); err != nil {
				p.log.WarnContext(ctx, "nri queued event failed", "plugin", p.id(), "event", e.ev.PrettyName(), "error", err)
				if fault(err) {
					p.handleFault(err)
				}
			}
		}
	}
}

// createdID is the id of the pod or container a queued creation event is
// about, else "".
func createdID(e queuedEvent) string {
	switch e.ev {
	case api.Event_RUN_POD_SANDBOX:
		return e.pod.GetId()
	case api.Event_CREATE_CONTAINER:
		return e.ctr.GetId()
	}
	return ""
}

// notify delivers a notification event (one whose answer carries nothing
// but an error), falling back to StateChange for old plugins.
func (p *plugin) notify(ctx context.Context, ev api.Event, pod *api.PodSandbox, ctr *api.Container) error {
	if p.builtin != nil {
		return nil
	}
	return p.call(ctx, ev.PrettyName(), func(ctx context.Context) error {
		if !p.legacy[ev].Load() {
			err := p.dedicated(ctx, ev, pod, ctr)
			if status.Code(err) != codes.Unimplemented {
				return err
			}
			p.legacy[ev].Store(true)
			p.log.WarnContext(ctx, "nri plugin lacks a dedicated RPC, using StateChange", "plugin", p.id(), "event", ev.PrettyName())
		}
		if !hasStateChange(ev) {
			return nil
		}
		_, err := p.svc.StateChange(ctx, &api.StateChangeEvent{Event: ev, Pod: pod, Container: ctr})
		return err
	})
}

func hasStateChange(ev api.Event) bool {
	switch ev {
	case api.Event_RUN_POD_SANDBOX, api.Event_POST_UPDATE_POD_SANDBOX, api.Event_STOP_POD_SANDBOX,
		api.Event_REMOVE_POD_SANDBOX, api.Event_POST_CREATE_CONTAINER, api.Event_START_CONTAINER,
		api.Event_POST_START_CONTAINER, api.Event_POST_UPDATE_CONTAINER, api.Event_REMOVE_CONTAINER:
		return true
	}
	return false
}

func (p *plugin) dedicated(ctx context.Context, ev api.Event, pod *api.PodSandbox, ctr *api.Container) error {
	var err error
	switch ev {
	case api.Event_RUN_POD_SANDBOX:
		_, err = p.svc.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
	case api.Event_POST_UPDATE_POD_SANDBOX:
		_, err = p.svc.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod})
	case api.Event_STOP_POD_SANDBOX:
		_, err = p.svc.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
	case api.Event_REMOVE_POD_SANDBOX:
		_, err = p.svc.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
	case api.Event_POST_CREATE_CONTAINER:
		_, err = p.svc.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr})
	case api.Event_START_CONTAINER:
		_, err = p.svc.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr})
	case api.Event_POST_START_CONTAINER:
		_, err = p.svc.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr})
	case api.Event_POST_UPDATE_CONTAINER:
		_, err = p.svc.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
	case api.Event_REMOVE_CONTAINER:
		_, err = p.svc.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr})
	case api.Event_CREATE_CONTAINER:
		// Only a creation queued during Synchronize comes here: the
		// container was created without this plugin, so its adjustment is
		// dropped (and logged); its updates and evictions are applied, as
		// a Synchronize's are.
		var rsp *api.CreateContainerResponse
		rsp, err = p.svc.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
		if err != nil {
			break
		}
		if adj := rsp.GetAdjust(); adj != nil && !proto.Equal(adj, &api.ContainerAdjustment{}) {
			p.log.WarnContext(ctx, "nri adjustment dropped: the container was created while the plugin synchronized",
				"plugin", p.id(), "container_id", ctr.GetId())
		}
		p.lateUpdates(ctx, ev, rsp.GetUpdate())
		p.a.evict(rsp.GetEvict())
	case api.Event_STOP_CONTAINER:
		// Only a stop queued during Synchronize comes here; the updates it
		// asks for can no longer join the event's result.
		var rsp *api.StopContainerResponse
		rsp, err = p.svc.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
		if err == nil {
			p.lateUpdates(ctx, ev, rsp.GetUpdate())
		}
	default:
		return fmt.Errorf("event %s is not a notification: %w", ev.PrettyName(), errdefs.ErrInvalidArgument)
	}
	return err
}

// lateUpdates applies the updates a plugin asked for in answer to a queued
// event, under the same per-container gates as unsolicited ones.
func (p *plugin) lateUpdates(ctx context.Context, ev api.Event, upds []*api.ContainerUpdate) {
	if len(upds) == 0 {
		return
	}
	ids := make([]string, 0, len(upds))
	for _, u := range upds {
		ids = append(ids, u.GetContainerId())
	}
	unlock := p.a.gates.lock(ids)
	failed, err := p.a.eng.UpdateContainers(ctx, upds)
	unlock()
	if err != nil || len(failed) > 0 {
		p.log.WarnContext(ctx, "nri queued event's updates failed", "plugin", p.id(), "event", ev.PrettyName(), "failed", len(failed), "error", err)
	}
}

// validate asks a validator about a merged adjustment. A rejection is a
// *PluginError wrapping ErrRejected.
func (p *plugin) validate(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	ev := api.Event_VALIDATE_CONTAINER_ADJUSTMENT.PrettyName()
	var reject error
	err := p.call(ctx, ev, func(ctx context.Context) error {
		if p.builtin != nil {
			reject = p.builtin.validate(ctx, req)
			return nil
		}
		rsp, err := p.svc.ValidateContainerAdjustment(ctx, req)
		if status.Code(err) == codes.Unimplemented {
			return nil
		}
		if err != nil {
			return err
		}
		if rsp.GetReject() {
			reject = errors.New(rsp.GetReason())
		}
		return nil
	})
	if err != nil {
		return err
	}
	if reject != nil {
		return &PluginError{Plugin: p.id(), Event: ev, Err: fmt.Errorf("%w: %w", ErrRejected, reject)}
	}
	return nil
}
