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
	// creation event racing the sync is not delivered twice: an id stays
	// until its creation event comes (alreadySeen) or its removal
	// (forgetSeen), as a pod or container still being created when the
	// snapshot was taken may have its creation event start only after
	// the plugin is ready.
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
