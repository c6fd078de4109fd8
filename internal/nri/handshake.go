package nri

// The handshake of a new plugin connection: registration, Configure,
// Synchronize (split into messages under the frame limit), and joining the
// event stream without missing or repeating a container.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

// register checks and reserves the identity a plugin registers with.
func (a *Adaptation) register(p *plugin, req *api.RegisterPluginRequest) error {
	idx, name := req.GetPluginIdx(), req.GetPluginName()
	p.mu.Lock()
	preset := p.kind == KindPreinstalled
	if preset {
		if idx != p.idx || name != p.name {
			p.log.Debug("nri launched plugin registered under another name, keeping its file name",
				"plugin", p.idx+"-"+p.name, "registered_as", idx+"-"+name)
		}
		idx, name = p.idx, p.name
	}
	p.mu.Unlock()
	if err := api.CheckPluginIndex(idx); err != nil {
		return fmt.Errorf("register nri plugin %q: %w: %w", name, err, errdefs.ErrInvalidArgument)
	}
	if err := api.CheckPluginName(name); err != nil {
		return fmt.Errorf("register nri plugin %q: %w: %w", name, err, errdefs.ErrInvalidArgument)
	}
	id := idx + "-" + name
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.live[p]; !ok {
		return fmt.Errorf("register nri plugin %s: %w", id, ErrPluginGone)
	}
	if q, ok := a.ids[id]; ok {
		if q == p {
			return fmt.Errorf("register nri plugin %s: registered twice: %w", id, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("register nri plugin %s: a plugin with this index and name is connected: %w", id, errdefs.ErrAlreadyExists)
	}
	a.ids[id] = p
	p.mu.Lock()
	p.setIdent(idx, name)
	p.mu.Unlock()
	return nil
}

// begin enters an event: it returns the plugin list to use and the epoch
// whose wg.Done must be called when the event is done.
func (a *Adaptation) begin() ([]*plugin, *epoch) {
	a.mu.Lock()
	ep := a.epoch
	ep.wg.Add(1)
	ps := a.plugins
	a.mu.Unlock()
	return ps, ep
}

// handshake waits for registration and configures the plugin.
func (a *Adaptation) handshake(p *plugin, config string) error {
	t := time.NewTimer(a.cfg.RegistrationTimeout)
	defer t.Stop()
	select {
	case <-p.regC:
	case <-t.C:
		return fmt.Errorf("nri plugin registration: no RegisterPlugin within %s: %w", a.cfg.RegistrationTimeout, ErrPluginTimeout)
	case <-p.closed:
		return fmt.Errorf("nri plugin registration: %w", ErrPluginGone)
	case <-a.ctx.Done():
		return fmt.Errorf("nri plugin registration: %w", a.ctx.Err())
	}
	pc, _ := a.cfg.override(p.idx, p.name)
	if pc.RequestTimeout > 0 {
		p.mu.Lock()
		p.timeout = pc.RequestTimeout
		p.mu.Unlock()
	}
	var rsp *api.ConfigureResponse
	err := p.callTimeout(a.ctx, "Configure", a.cfg.RegistrationTimeout, func(ctx context.Context) error {
		var err error
		rsp, err = p.svc.Configure(ctx, &api.ConfigureRequest{
			Config:              config,
			RuntimeName:         a.cfg.RuntimeName,
			RuntimeVersion:      a.cfg.RuntimeVersion,
			RegistrationTimeout: a.cfg.RegistrationTimeout.Milliseconds(),
			RequestTimeout:      p.timeout.Milliseconds(),
			NRIVersion:          nriVersion,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("configure nri plugin: %w", err)
	}
	mask := api.EventMask(rsp.GetEvents())
	if mask == 0 {
		mask = api.ValidEvents
	}
	if extra := mask &^ api.ValidEvents; extra != 0 {
		p.log.Warn("nri plugin subscribed to unknown events, ignoring them", "plugin", p.id(), "mask", fmt.Sprintf("0x%x", int32(extra)))
		mask &= api.ValidEvents
	}
	policy := a.cfg.DefaultFailurePolicy
	if fp := rsp.GetFailurePolicy(); fp != nil {
		policy = FailurePolicy{FailRequest: fp.GetFailRequest(), KeepConnected: fp.GetKeepConnected()}
	}
	if pc.FailurePolicy != nil {
		policy = *pc.FailurePolicy
	}
	// Events read these without the lock once the plugin is listed (join
	// lists it under a.mu, after this); Plugins reads them any time.
	p.mu.Lock()
	p.events, p.policy, p.required = mask, policy, pc.Required
	p.mu.Unlock()
	return nil
}

// join lists p, synchronizes it and makes it ready. Events that start
// after p is listed see it: notifications are queued for it, requests wait
// for it to be ready. Events that started before are waited for, so the
// snapshot taken afterwards reflects them: every pod and container reaches
// p exactly once, through Synchronize or through a later event.
func (a *Adaptation) join(p *plugin) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.SyncTimeout)
	defer cancel()
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		return fmt.Errorf("synchronize nri plugin: %w", errShutdown)
	}
	p.mu.Lock()
	if p.state == StateClosed {
		p.mu.Unlock()
		a.mu.Unlock()
		return fmt.Errorf("synchronize nri plugin: %w", ErrPluginGone)
	}
	p.state = StateSynchronizing
	p.mu.Unlock()
	old := a.epoch
	a.epoch = &epoch{}
	ps := slices.Clone(a.plugins)
	ps = append(ps, p)
	slices.SortStableFunc(ps, func(x, y *plugin) int { return strings.Compare(x.idx+"-"+x.name, y.idx+"-"+y.name) })
	a.plugins = ps
	a.mu.Unlock()

	if err := waitGroup(ctx, &old.wg); err != nil {
		return fmt.Errorf("synchronize nri plugin: wait for events in progress: %w", err)
	}
	pods, ctrs, err := a.eng.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("synchronize nri plugin: snapshot: %w", err)
	}
	seen := make(map[string]struct{}, len(pods)+len(ctrs))
	for _, x := range pods {
		seen[x.GetId()] = struct{}{}
	}
	for _, x := range ctrs {
		seen[x.GetId()] = struct{}{}
	}
	p.mu.Lock()
	p.seen = seen
	p.mu.Unlock()
	upds, err := p.synchronize(ctx, pods, ctrs)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("synchronize nri plugin %s: no answer within plugin_sync_timeout %s: %w", p.id(), a.cfg.SyncTimeout, ErrPluginTimeout)
		}
		return err
	}
	if len(upds) > 0 {
		failed, err := a.eng.UpdateContainers(ctx, upds)
		if err != nil || len(failed) > 0 {
			p.log.WarnContext(ctx, "nri synchronize updates failed", "failed", len(failed), "error", err)
		}
	}
	p.drain(a.ctx)
	p.log.InfoContext(ctx, "nri plugin ready", "kind", string(p.kind), "events", p.events.PrettyString(),
		"pods", len(pods), "containers", len(ctrs))
	return nil
}

// waitGroup waits for wg until ctx ends. crin-shim has a twin bounded by a
// duration (shimd's waitGroup): the shim links no more than it needs, so
// it does not import this package.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncMsgLimit keeps one Synchronize message well under the 4 MiB ttrpc
// limit, leaving room for the request envelope.
const syncMsgLimit = 4<<20 - 64<<10

// splitSync cuts pods and containers into messages of at most limit bytes.
func splitSync(pods []*api.PodSandbox, ctrs []*api.Container, limit int) ([]*api.SynchronizeRequest, error) {
	var (
		msgs []*api.SynchronizeRequest
		cur  = &api.SynchronizeRequest{}
		size int
	)
	add := func(n int) error {
		n += 6 // field tag and length prefix
		if n > limit {
			return fmt.Errorf("synchronize: object of %d bytes exceeds the message limit: %w", n, errdefs.ErrResourceExhausted)
		}
		if size+n > limit {
			msgs = append(msgs, cur)
			cur, size = &api.SynchronizeRequest{}, 0
		}
		size += n
		return nil
	}
	for _, x := range pods {
		if err := add(proto.Size(x)); err != nil {
			return nil, err
		}
		cur.Pods = append(cur.Pods, x)
	}
	for _, x := range ctrs {
		if err := add(proto.Size(x)); err != nil {
			return nil, err
		}
		cur.Containers = append(cur.Containers, x)
	}
	msgs = append(msgs, cur)
	for _, m := range msgs[:len(msgs)-1] {
		m.More = true
	}
	return msgs, nil
}

// synchronize sends the state, split when large, and returns the updates
// the plugin asked for.
func (p *plugin) synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	msgs, err := splitSync(pods, ctrs, syncMsgLimit)
	if err != nil {
		return nil, err
	}
	for _, req := range msgs {
		var rsp *api.SynchronizeResponse
		err := p.callTimeout(ctx, "Synchronize", p.a.cfg.SyncTimeout, func(ctx context.Context) error {
			var err error
			rsp, err = p.svc.Synchronize(ctx, req)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("synchronize nri plugin: %w", err)
		}
		if !req.More {
			return rsp.GetUpdate(), nil
		}
		if !rsp.GetMore() || len(rsp.GetUpdate()) > 0 {
			return nil, fmt.Errorf("synchronize nri plugin %s: %d messages needed, plugin does not take split state: %w",
				p.id(), len(msgs), errdefs.ErrNotImplemented)
		}
	}
	return nil, nil
}

// connect runs the handshake and the join of a new connection and closes
// the plugin on failure.
func (a *Adaptation) connect(p *plugin, config string) error {
	if err := a.handshake(p, config); err != nil {
		p.close(err)
		return err
	}
	if err := a.join(p); err != nil {
		p.close(err)
		return err
	}
	return nil
}
