package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// PluginKind says how a plugin came to be.
type PluginKind string

// Plugin kinds.
const (
	// KindPreinstalled plugins are launched by crin from plugin_path.
	KindPreinstalled PluginKind = "preinstalled"
	// KindExternal plugins connected to socket_path on their own.
	KindExternal PluginKind = "external"
	// KindBuiltin plugins run inside crin (the default validator).
	KindBuiltin PluginKind = "builtin"
)

// PluginState is where a plugin is in its life.
type PluginState string

// Plugin states.
const (
	// StateConnecting: registering and being configured.
	StateConnecting PluginState = "connecting"
	// StateSynchronizing: receiving the pods and containers; events that
	// happen meanwhile are queued for it.
	StateSynchronizing PluginState = "synchronizing"
	// StateReady: receiving events.
	StateReady PluginState = "ready"
	// StateClosed: gone.
	StateClosed PluginState = "closed"
	// StateBackoff: a pre-installed plugin that failed (to start, to
	// synchronize, or later) waits to be launched again.
	StateBackoff PluginState = "backoff"
)

// PluginInfo describes one plugin for introspection.
type PluginInfo struct {
	Index          string
	Name           string
	Kind           PluginKind
	Events         []string
	State          PluginState
	FailurePolicy  FailurePolicy
	Required       bool
	RequestTimeout time.Duration
	// Calls, Failures and Latency (mean, over every call) describe the
	// requests sent to the plugin since it connected.
	Calls    uint64
	Failures uint64
	Latency  time.Duration
	// Restarts counts how often a pre-installed plugin was launched again
	// after a failure; LastError is the latest failure. While State is
	// StateBackoff, Backoff is the current delay and NextAttempt when it
	// ends. All zero for external and built-in plugins.
	Restarts    uint64
	LastError   string
	Backoff     time.Duration
	NextAttempt time.Time
}

// Errors of plugin calls, for errors.Is.
var (
	// ErrPluginTimeout: the plugin did not answer within its timeout.
	ErrPluginTimeout = fmt.Errorf("nri plugin timed out: %w", context.DeadlineExceeded)
	// ErrPluginGone: the plugin's connection is closed or broke.
	ErrPluginGone = fmt.Errorf("nri plugin disconnected: %w", errdefs.ErrUnavailable)
	// ErrRejected: a validator rejected a container adjustment.
	ErrRejected = fmt.Errorf("nri adjustment rejected: %w", errdefs.ErrFailedPrecondition)
)

// PluginError is the failure of one plugin to handle one event.
type PluginError struct {
	Plugin string // "NN-name"
	Event  string // NRI RPC name
	Err    error
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("nri plugin %s %s: %v", e.Plugin, e.Event, e.Err)
}

func (e *PluginError) Unwrap() error { return e.Err }

// builtinImpl is an in-process plugin: only validation is supported.
type builtinImpl interface {
	validate(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error
}

// plugin is one connected (or connecting) plugin.
type plugin struct {
	a    *Adaptation
	idx  string
	name string
	// ident is "idx-name" (or name), kept with idx and name by setIdent.
	ident string
	kind  PluginKind
	log   *slog.Logger

	// Set during the handshake, read-only once the plugin is listed.
	events   api.EventMask
	policy   FailurePolicy
	required bool
	timeout  time.Duration

	mux     *mux
	client  *ttrpc.Client
	svc     api.PluginService
	server  *ttrpc.Server
	builtin builtinImpl
	// sup is the restart record of a pre-installed plugin, else nil.
	sup *supervisor

	// legacy[ev] is set once the plugin answered Unimplemented for the
	// dedicated RPC of ev; it then gets ev through StateChange.
	legacy [api.Event_LAST]atomic.Bool

	// calls, failures and busy (nanoseconds) count requests for info().
	calls, failures, busy atomic.Uint64

	regC      chan struct{}
	serveDone chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	// closeErr is why the plugin closed; written once before closed is
	// closed, read only after.
	closeErr error

	// mu guards state, queue and seen.
	mu    sync.Mutex
	state PluginState
	// queue holds events that happened while synchronizing: no CRI call
	// waits for a plugin's Synchronize.
	queue []queuedEvent
	// seen holds the pod and container ids sent in Synchronize, so a
	// creation event racing the sync is not delivered twice.
	seen map[string]struct{}
}

type queuedEvent struct {
	ev  api.Event
	pod *api.PodSandbox
	ctr *api.Container
}

// id is the plugin's identity, "NN-name", as plugins see it in owners.
func (p *plugin) id() string { return p.ident }

// setIdent sets the index and name. It runs before the plugin is listed
// (and under p.mu once other goroutines know it), so events read them
// without the lock.
func (p *plugin) setIdent(idx, name string) {
	p.idx, p.name = idx, name
	p.ident = name
	if idx != "" {
		p.ident = idx + "-" + name
	}
}

func (p *plugin) subscribed(ev api.Event) bool { return p.events.IsSet(ev) }

func (p *plugin) info() PluginInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var evs []string
	for ev := api.Event_UNKNOWN + 1; ev < api.Event_LAST; ev++ {
		if p.events.IsSet(ev) {
			evs = append(evs, ev.PrettyName())
		}
	}
	info := PluginInfo{
		Index: p.idx, Name: p.name, Kind: p.kind, Events: evs, State: p.state,
		FailurePolicy: p.policy, Required: p.required, RequestTimeout: p.timeout,
		Calls: p.calls.Load(), Failures: p.failures.Load(),
	}
	if info.Calls > 0 {
		info.Latency = time.Duration(p.busy.Load() / info.Calls)
	}
	if p.sup != nil {
		p.sup.fill(&info)
	}
	return info
}

// newConnPlugin wires the mux, the ttrpc client (conn 1) and the ttrpc
// server of the Runtime service (conn 2) for conn. sup is the restart
// record of a launched plugin, whose idx and name are preset; both are
// empty for external ones.
func (a *Adaptation) newConnPlugin(conn net.Conn, kind PluginKind, sup *supervisor, idx, name string) (*plugin, error) {
	p := &plugin{
		a: a, kind: kind, sup: sup,
		log:       a.log.With("plugin_kind", string(kind)),
		regC:      make(chan struct{}, 1),
		serveDone: make(chan struct{}),
		closed:    make(chan struct{}),
		state:     StateConnecting,
		timeout:   a.cfg.RequestTimeout,
	}
	p.setIdent(idx, name)
	p.mux = newMux(conn, nil, pluginServiceConn, pluginServiceConn, runtimeServiceConn)
	c1, err := p.mux.open(pluginServiceConn)
	if err != nil {
		p.mux.Close()
		return nil, err
	}
	c2, err := p.mux.open(runtimeServiceConn)
	if err != nil {
		p.mux.Close()
		return nil, err
	}
	srv, err := ttrpc.NewServer(ttrpc.WithUnaryServerInterceptor(a.recoverCalls))
	if err != nil {
		p.mux.Close()
		return nil, fmt.Errorf("create nri runtime service: %w", err)
	}
	api.RegisterRuntimeService(srv, &runtimeService{p: p})
	p.server = srv
	p.client = ttrpc.NewClient(c1)
	p.svc = api.NewPluginClient(p.client)

	if !a.track(p, 2) {
		_ = p.mux.Close()
		return nil, fmt.Errorf("accept nri plugin: %w", errShutdown)
	}
	go func() {
		defer a.wg.Done()
		defer close(p.serveDone)
		if err := srv.Serve(a.ctx, newConnListener(c2)); err != nil && !errors.Is(err, ttrpc.ErrServerClosed) {
			p.log.DebugContext(a.ctx, "nri runtime service stopped", "error", err)
		}
	}()
	go func() {
		// The watcher turns a broken connection into a closed plugin.
		defer a.wg.Done()
		select {
		case <-p.mux.done:
			p.close(p.mux.closedErr())
		case <-p.closed:
		}
	}()
	return p, nil
}

// close removes the plugin and tears its connection down. It waits for the
// plugin's goroutines; it must not run on one of them.
func (p *plugin) close(reason error) {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		id := p.id()
		wasReady := p.state == StateReady
		prev := p.state
		p.state = StateClosed
		p.queue = nil
		p.mu.Unlock()
		p.a.untrack(p)
		if p.builtin == nil {
			_ = p.mux.Close()
			_ = p.server.Close()
			<-p.serveDone
			_ = p.client.Close()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(p.a.ctx), 5*time.Second)
			_ = p.client.UserOnCloseWait(ctx)
			cancel()
		}
		p.closeErr = reason
		close(p.closed)
		switch {
		case reason == nil, errors.Is(reason, errShutdown):
			p.log.Info("nri plugin closed", "plugin", id)
		case wasReady || prev == StateSynchronizing:
			p.log.Warn("nri plugin disconnected", "plugin", id, "error", reason)
		default:
			p.log.Info("nri plugin connection closed", "plugin", id, "error", reason)
		}
	})
}

var errShutdown = errors.New("nri shutting down")

// runtimeService serves the Runtime service to one plugin (conn 2).
type runtimeService struct {
	p *plugin
}

// RegisterPlugin checks and reserves the plugin's identity.
func (rs *runtimeService) RegisterPlugin(ctx context.Context, req *api.RegisterPluginRequest) (*api.Empty, error) {
	p := rs.p
	if err := p.a.register(p, req); err != nil {
		p.log.WarnContext(ctx, "nri plugin registration refused", "plugin_name", req.GetPluginName(), "plugin_idx", req.GetPluginIdx(), "error", err)
		return nil, err
	}
	select {
	case p.regC <- struct{}{}:
	default:
	}
	return &api.Empty{}, nil
}

// UpdateContainers applies an unsolicited update request of the plugin.
func (rs *runtimeService) UpdateContainers(ctx context.Context, req *api.UpdateContainersRequest) (*api.UpdateContainersResponse, error) {
	failed, err := rs.p.a.unsolicited(ctx, rs.p, req)
	return &api.UpdateContainersResponse{Failed: failed}, err
}

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
				p.state = StateReady
				p.seen = nil
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
