package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
)

// nriVersion is the NRI protocol version crin speaks.
const nriVersion = "v0.12.5"

// Engine is what the adaptation needs from the container engine (the CRI
// hub implements it). The adaptation calls it with no lock held and never
// from inside a call the engine made into the adaptation on the same
// goroutine, but it may call it while another event method is in progress,
// including from a plugin's handler of that event: an implementation must
// not wait for an NRI event method to return.
type Engine interface {
	// Snapshot returns every pod and container for Synchronize. It must
	// include every pod whose RunPodSandbox and every container whose
	// CreateContainer event returned successfully and that was not removed
	// yet (it may include ones whose event is still in progress).
	Snapshot(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error)
	// UpdateContainers applies unsolicited updates and returns the ones
	// that failed; an error means none was applied.
	UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
	// EvictContainer stops a container on a plugin's request.
	EvictContainer(ctx context.Context, containerID, reason string) error
}

// Option configures an Adaptation.
type Option func(*Adaptation)

// WithMetrics sets where plugin call metrics go (default: discarded).
func WithMetrics(m Metrics) Option { return func(a *Adaptation) { a.metrics = m } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(a *Adaptation) { a.log = l } }

// WithRestartBackoff bounds the delay before a pre-installed plugin that
// failed is launched again; it doubles from lo up to hi (default
// DefaultRestartBackoff up to DefaultMaxRestartBackoff).
func WithRestartBackoff(lo, hi time.Duration) Option {
	return func(a *Adaptation) { a.backoffMin, a.backoffMax = lo, hi }
}

// WithShutdownGrace sets how long a launched plugin has between SIGTERM
// and SIGKILL.
func WithShutdownGrace(d time.Duration) Option { return func(a *Adaptation) { a.grace = d } }

// Adaptation connects crin to NRI plugins: it launches and accepts them,
// relays lifecycle events in plugin index order, merges and validates their
// adjustments and hands their unsolicited requests to the Engine. Events for
// one pod are ordered; events for different pods run in parallel; no lock is
// held across a plugin call.
type Adaptation struct {
	cfg        Config
	eng        Engine
	log        *slog.Logger
	metrics    Metrics
	backoffMin time.Duration
	backoffMax time.Duration
	grace      time.Duration
	required   []string

	// ctx is the daemon context given to Start; cancel stops background
	// work. Both are set once by Start.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts every goroutine the adaptation owns.
	wg sync.WaitGroup

	// mu guards the fields below. It is never held across a plugin call.
	mu sync.Mutex
	// plugins is the sorted list of listed plugins; it is replaced, never
	// modified, so an event can use the slice it got without the lock.
	plugins []*plugin
	// epoch counts events in progress that started with the current list.
	epoch *epoch
	// ids maps reserved identities ("NN-name") to their plugin.
	ids map[string]*plugin
	// live holds every plugin object not closed yet, listed or not.
	live     map[*plugin]struct{}
	listener net.Listener
	// sups holds the pre-installed plugins' restart records; set by Start.
	sups     []*supervisor
	started  bool
	stopping bool

	order   podOrder
	flights flightTable
	gates   gateTable
}

type epoch struct{ wg sync.WaitGroup }

// New returns an adaptation; nothing runs until Start. The error wraps
// errdefs.ErrInvalidArgument for a bad configuration.
func New(cfg Config, eng Engine, opts ...Option) (*Adaptation, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if eng == nil {
		return nil, fmt.Errorf("new nri adaptation: nil engine: %w", errdefs.ErrInvalidArgument)
	}
	a := &Adaptation{
		cfg:        cfg,
		eng:        eng,
		log:        slog.Default(),
		metrics:    NopMetrics{},
		backoffMin: DefaultRestartBackoff,
		backoffMax: DefaultMaxRestartBackoff,
		grace:      DefaultShutdownGrace,
		epoch:      &epoch{},
		ids:        make(map[string]*plugin),
		live:       make(map[*plugin]struct{}),
	}
	for _, o := range opts {
		o(a)
	}
	for name, o := range cfg.PluginOverrides {
		if o.Required {
			a.required = append(a.required, name)
		}
	}
	slices.Sort(a.required)
	return a, nil
}

// Start launches the pre-installed plugins, waits until each registered and
// synchronized (or failed to) but at most Config.StartupWait, and starts
// accepting external plugins. A plugin still synchronizing afterwards gets
// the events that happen meanwhile queued for it alone; no CRI call waits
// for it. ctx is the daemon's context: cancelling it stops background
// work, Stop is still needed to shut plugins down.
func (a *Adaptation) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return fmt.Errorf("start nri: already started: %w", errdefs.ErrFailedPrecondition)
	}
	a.started = true
	a.ctx, a.cancel = context.WithCancel(ctx)
	a.mu.Unlock()
	if !a.cfg.Enable {
		a.log.InfoContext(ctx, "nri disabled")
		return nil
	}
	if a.cfg.DefaultValidator.Enable {
		a.addBuiltin(newDefaultValidator(a, a.cfg.DefaultValidator))
	}
	plugins, err := a.discover()
	if err != nil {
		return err
	}
	sups := make([]*supervisor, 0, len(plugins))
	for _, pi := range plugins {
		sups = append(sups, newSupervisor(pi))
	}
	a.mu.Lock()
	a.sups = sups
	a.mu.Unlock()
	for _, s := range sups {
		if !a.goRun(func() { a.supervise(s) }) {
			close(s.first)
		}
	}
	a.awaitFirst(ctx, sups)
	if !a.cfg.DisableConnections {
		if err := a.listen(); err != nil {
			return err
		}
	}
	return nil
}

// awaitFirst waits for the first attempt of every pre-installed plugin, at
// most StartupWait in all.
func (a *Adaptation) awaitFirst(ctx context.Context, sups []*supervisor) {
	t := time.NewTimer(a.cfg.StartupWait)
	defer t.Stop()
	for _, s := range sups {
		select {
		case <-s.first:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		var late []string
		for _, s := range sups {
			select {
			case <-s.first:
			default:
				late = append(late, s.pi.id())
			}
		}
		a.log.WarnContext(ctx, "nri serving before every pre-installed plugin is ready; events are queued for the late ones",
			"plugins", late, "startup_wait", a.cfg.StartupWait)
		return
	}
}

// Stop sends Shutdown to every plugin, closes the connections, terminates
// launched plugins (SIGTERM, then SIGKILL after the grace period) and waits
// for every goroutine of the adaptation. It returns ctx's error if that
// takes longer than ctx allows.
func (a *Adaptation) Stop(ctx context.Context) error {
	a.mu.Lock()
	if !a.started || a.stopping {
		a.mu.Unlock()
		return nil
	}
	a.stopping = true
	l := a.listener
	live := make([]*plugin, 0, len(a.live))
	for p := range a.live {
		live = append(live, p)
	}
	a.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	var wg sync.WaitGroup
	for _, p := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.shutdown(ctx)
		}()
	}
	wg.Wait()
	a.cancel()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop nri: %w", ctx.Err())
	}
	if l != nil {
		_ = os.Remove(a.cfg.SocketPath)
	}
	a.log.InfoContext(ctx, "nri stopped")
	return nil
}

// shutdown tells a configured plugin (ready, or still synchronizing: it
// heard of the pods already) that crin is going away, then closes it.
func (p *plugin) shutdown(ctx context.Context) {
	p.mu.Lock()
	configured := p.state == StateReady || p.state == StateSynchronizing
	p.mu.Unlock()
	if configured && p.builtin == nil {
		err := p.call(ctx, "Shutdown", func(ctx context.Context) error {
			_, err := p.svc.Shutdown(ctx, &api.Empty{})
			return err
		})
		if err != nil {
			p.log.WarnContext(ctx, "nri plugin shutdown failed", "plugin", p.id(), "error", err)
		}
	}
	p.close(errShutdown)
}

// Plugins lists the plugins known now, in invocation order.
func (a *Adaptation) Plugins() []PluginInfo {
	a.mu.Lock()
	ps := make([]*plugin, 0, len(a.live))
	covered := make(map[*supervisor]bool)
	for p := range a.live {
		ps = append(ps, p)
		if p.sup != nil {
			covered[p.sup] = true
		}
	}
	sups := a.sups
	a.mu.Unlock()
	infos := make([]PluginInfo, 0, len(ps))
	for _, p := range ps {
		infos = append(infos, p.info())
	}
	// A pre-installed plugin between attempts has no plugin object.
	for _, s := range sups {
		if !covered[s] {
			infos = append(infos, s.info(a))
		}
	}
	slices.SortFunc(infos, func(x, y PluginInfo) int {
		return strings.Compare(x.Index+"-"+x.Name, y.Index+"-"+y.Name)
	})
	return infos
}

// goRun runs fn on a goroutine the adaptation owns, unless it is stopping.
func (a *Adaptation) goRun(fn func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return false
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn()
	}()
	return true
}

// goClose closes p on an owned goroutine: the caller may be one of the
// goroutines close waits for.
func (a *Adaptation) goClose(p *plugin, reason error) {
	a.mu.Lock()
	_, live := a.live[p]
	if live {
		a.wg.Add(1)
	}
	a.mu.Unlock()
	if !live {
		return
	}
	go func() {
		defer a.wg.Done()
		p.close(reason)
	}()
}

// track records a new plugin object and reserves n owned goroutines for it.
func (a *Adaptation) track(p *plugin, n int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return false
	}
	a.live[p] = struct{}{}
	a.wg.Add(n)
	return true
}

// untrack forgets p everywhere: identity, list, live set.
func (a *Adaptation) untrack(p *plugin) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.live, p)
	for id, q := range a.ids {
		if q == p {
			delete(a.ids, id)
		}
	}
	if i := slices.Index(a.plugins, p); i >= 0 {
		a.plugins = slices.Delete(slices.Clone(a.plugins), i, i+1)
	}
}

// listen accepts external plugins on the socket.
func (a *Adaptation) listen() error {
	path := a.cfg.SocketPath
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create nri socket dir %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("chmod nri socket dir %s: %w", dir, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("nri socket %s: exists and is not a socket: %w", path, errdefs.ErrAlreadyExists)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove stale nri socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen nri socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return fmt.Errorf("chmod nri socket %s: %w", path, err)
	}
	a.mu.Lock()
	stopping := a.stopping
	if !stopping {
		a.listener = l
	}
	a.mu.Unlock()
	if stopping {
		_ = l.Close()
		return fmt.Errorf("listen nri socket: %w", errShutdown)
	}
	a.goRun(func() { a.accept(l) })
	a.log.InfoContext(a.ctx, "nri accepting external plugins", "socket", path)
	return nil
}

func (a *Adaptation) accept(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.WarnContext(a.ctx, "nri accept failed", "error", err)
			select {
			case <-a.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !a.goRun(func() { a.serveExternal(conn) }) {
			_ = conn.Close()
		}
	}
}

func (a *Adaptation) serveExternal(conn net.Conn) {
	p, err := a.newConnPlugin(conn, KindExternal, nil, "", "")
	if err != nil {
		a.log.WarnContext(a.ctx, "nri external plugin refused", "error", err)
		return
	}
	if err := a.connect(p, ""); err != nil {
		a.log.WarnContext(a.ctx, "nri external plugin failed to connect", "error", err)
	}
}

// addBuiltin lists an in-process validator; it is ready at once.
func (a *Adaptation) addBuiltin(p *plugin) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live[p] = struct{}{}
	a.plugins = append(slices.Clone(a.plugins), p)
}
