// Package cri is crind's hub: it implements the CRI v1 RuntimeService and
// ImageService, which internal/serving serves, and orchestrates the spokes
// (store, image, oci, runtime, cni, podenv for a pod's host environment:
// its dir and files, namespace pins, user namespace, cgroup removal; and
// podstats for the stats and metrics kubelet reads) for every call. One
// file per RPC; the state machines are described in
// docs/state-machines.md.
//
// What crind does on start-up before it serves (reload the records,
// reattach to the shims, record the exits nobody saw, sweep orphans) is a
// recovery (recover.go), which asks the hub only through a recoveryHub.
//
// What NRI plugins may ask of crind on their own (nri.Engine: Snapshot,
// UpdateContainers, EvictContainer) is served by the adapter NRIEngine
// returns (nri_engine.go), under the lock rules at the top of nri.go.
//
// Cleanup steps that fail (a rollback's runtime delete or rootfs release,
// a pod cgroup, id-mapped mounts) are journaled and retried by
// internal/cleanup (a cleanup.Journal); the hub hands them over and owns
// the retry loop's goroutine.
//
// Checkpoint and restore are internal/checkpoint's work (a
// checkpoint.Manager); the hub answers those RPCs and is the
// checkpoint.Hub the Manager makes pods and containers through.
package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/cleanup"
	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/podenv"
	"github.com/crin-dev/crin/internal/podstats"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/serving"
	"github.com/crin-dev/crin/internal/store"
)

// Images is what the hub needs of the image service.
type Images interface {
	Pull(ctx context.Context, ref string, auth *image.Auth) (*image.Image, error)
	Get(ref string) (*image.Image, error)
	List() []*image.Image
	Remove(ctx context.Context, ref string) error
	FsInfo() (image.FsUsage, error)
	PrepareRootfs(ctx context.Context, containerID, imageID string) (string, error)
	ReleaseRootfs(ctx context.Context, containerID string) error
	Rootfs(ctx context.Context, containerID string) (string, error)
	// PrepareVolume mounts an image volume of a container; ReleaseRootfs
	// releases it with the rootfs.
	PrepareVolume(ctx context.Context, containerID, name, ref string) (*image.Volume, error)
	// RootfsDiff writes the container's writable layer as an OCI layer
	// tar, leaving out the paths in exclude (a checkpoint's diff).
	RootfsDiff(ctx context.Context, containerID string, w io.Writer, exclude []string) error
	// ApplyRootfsDiff applies such a tar to a new container's writable
	// layer (a restore's).
	ApplyRootfsDiff(ctx context.Context, containerID string, r io.Reader) error
}

// Network is what the hub needs of pod networking.
type Network interface {
	Status() error
	Setup(ctx context.Context, pod cni.Pod) (*cni.Result, error)
	Teardown(ctx context.Context, pod cni.Pod) error
	SetPodCIDR(cidr string) error
}

// Options wire a Service.
type Options struct {
	Store    *store.Store
	Images   Images
	Network  Network
	Runtimes map[string]runtime.Runtime
	// DefaultRuntime is used when a pod names no handler.
	DefaultRuntime string
	// RootDir holds per-pod files (hostname, hosts, resolv.conf, shm).
	RootDir string
	// NetNSDir is where pod network namespaces are pinned.
	NetNSDir string
	// NSDir is where a pod's other namespaces are pinned, in NSDir/<pod
	// id>/{ipc,uts,pid}; empty means "ns" beside NetNSDir.
	NSDir string
	// Pinner pins them; nil means bind mounts (tests give a fake).
	Pinner podenv.Pinner
	// UserNSDir holds the id-mapped mounts of pods in user namespaces
	// (docs/userns.md); crind makes it 0711, and every directory above
	// it must let any id through. Empty: user namespaces are not offered.
	UserNSDir string
	// PauseRoot is the shared read-only rootfs of infra containers.
	PauseRoot   string
	PauseBinary string
	// CgroupParent is used for pods that name none: a path with the
	// cgroupfs driver, a slice with systemd.
	CgroupParent string
	// CgroupDriver is how pod and container cgroups are named and made
	// (internal/cgroup); empty means cgroupfs.
	CgroupDriver cgroup.Driver
	// Units stops systemd units: the pod slices crind made and leftover
	// scopes, with the systemd driver. Nil with cgroupfs.
	Units              podenv.UnitStopper
	SeccompProfileRoot string
	// RestoreArchives lets CreateContainer restore a container from a
	// checkpoint archive given as its image (config
	// restore_from_archives).
	RestoreArchives bool
	// OOMScoreAdjMin is crind's own oom_score_adj.
	OOMScoreAdjMin int
	// StreamAddress is the host:port the listener given to ServeStreams is
	// bound to (port resolved); the exec, attach and port-forward URLs name
	// it. Empty disables streaming.
	StreamAddress string
	Version       string
	Logger        *slog.Logger
	// Metrics, when set, counts panics of the streaming server.
	Metrics *serving.Metrics
	// CDISpecDirs, BlockioClass and RdtClass are what NRI adjustments may
	// use (see oci.AdjustOptions).
	CDISpecDirs  []string
	BlockioClass func(name string) (*specs.LinuxBlockIO, error)
	RdtClass     func(name string) (*specs.LinuxIntelRdt, error)
	// CgroupFS is where the cgroup hierarchies are mounted; empty means
	// /sys/fs/cgroup (unit tests point it elsewhere: the start-up sweep
	// removes pod cgroups no record owns under CgroupParent).
	CgroupFS string
	// StatsPeriod is how often writable layers are measured and CPU
	// sampled (internal/podstats); zero means podstats.DefaultPeriod.
	StatsPeriod time.Duration
	// ReleaseMemoryAfter is how long pod and container lifecycle events
	// must have been quiet before the Go heap's free pages are returned to
	// the OS (runRelease); zero never does.
	ReleaseMemoryAfter time.Duration
}

// Service implements the CRI RuntimeService and ImageService.
type Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	opts     Options
	log      *slog.Logger
	features map[string]*features.Features
	// notReady holds, per runtime handler, why its runtime cannot run
	// containers on this host (runtime.Checker, asked once at start-up).
	// Written only in New.
	notReady map[string]error
	// ckpt checkpoints and restores containers and pods (checkpoint.go).
	ckpt *checkpoint.Manager
	// env makes and removes the pods' host environment: pod dirs,
	// namespace pins, user namespaces, pod cgroups.
	env *podenv.Env

	// ctx bounds the background exit monitors; cancel stops them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// objects holds the visible pods and containers and finds them by id.
	objects

	// cleanups journals the cleanup steps that failed and retries them
	// (its Run is started by sweep, once recovery is done).
	cleanups *cleanup.Journal

	// nri is the attached adaptation; nil until AttachNRI.
	nri atomic.Pointer[nriRef]

	// stream hands out and serves streaming URLs; nil when disabled.
	stream   streaming.Server
	streamRT *streamRuntime

	// stats reads the stats and metrics and runs the stats sampler.
	stats *podstats.Collector
	// events fans container events out to GetContainerEvents (events.go).
	events *broker
	// releaseKick wakes runRelease (events.go); nil when
	// Options.ReleaseMemoryAfter is zero.
	releaseKick chan struct{}
}

// sandbox is a pod crind knows. See nri.go for the lock order and why it
// cannot deadlock with NRI.
type sandbox struct {
	// op serializes lifecycle operations on the pod (create a container in
	// it, stop, remove, update resources). It may be held across NRI
	// calls, so nothing an NRI plugin can trigger ever takes it.
	op sync.Mutex
	// mu guards rec and config for short reads. Writers hold op and mu;
	// readers hold either. Never held across a call into another component.
	mu     sync.Mutex
	rec    *store.Sandbox
	config *runtimeapi.PodSandboxConfig
	// nri is the pod as NRI plugins see it; immutable, replaced whole.
	nri encodedPod
	// removed is set (under op) once RemovePodSandbox finished.
	removed bool
}

// container is a container crind knows. See nri.go for the lock order.
type container struct {
	// op serializes start, update and remove. It may be held across NRI
	// calls and runtime calls, so nothing an NRI plugin can trigger ever
	// takes it.
	op sync.Mutex
	// upd serializes resource updates (kubelet's, plugins' through
	// UpdateContainers or another container's event), from reading the
	// recorded resources through the runtime update to recording the new
	// ones. It is held across the runtime update, never across an NRI call
	// or a wait for another lock but mu.
	upd sync.Mutex
	// mu guards rec and the fields below, for reads and record writes
	// only: it is never held across a runtime call, an NRI call or a wait
	// for an exit, so status, list and NRI Snapshot never wait for the
	// runtime.
	mu     sync.Mutex
	rec    *store.Container
	config *runtimeapi.ContainerConfig // immutable
	// base is the spec-derived NRI view of the container in its proto
	// wire form (a third of the memory of the message itself, which
	// nriContainerLocked decodes for each event); immutable.
	base []byte
	// done is closed when the exit monitor has recorded the exit.
	done chan struct{}
	// removed is set once the container was removed: nothing may persist
	// its record again.
	removed bool
	// stopNotify is made by whoever delivers NRI StopContainer for the
	// container and closed when that is done (exactly-once delivery).
	stopNotify chan struct{}
	// user is the identity the process runs as, from the final spec
	// (userLocked); immutable.
	user *runtimeapi.ContainerUser
}

// New builds the service and recovers state from the store and the shims.
func New(ctx context.Context, o Options) (*Service, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Service{
		opts:     o,
		log:      o.Logger,
		features: map[string]*features.Features{},
		notReady: map[string]error{},
		objects: objects{
			sandboxes:   map[string]*sandbox{},
			containers:  map[string]*container{},
			pendingPods: map[string]*api.PodSandbox{},
			pendingCtrs: map[string]*api.Container{},
		},
		events: newBroker(eventBuffer),
	}
	if o.ReleaseMemoryAfter > 0 {
		// Made before recovery: its exit monitors may emit events.
		s.releaseKick = make(chan struct{}, 1)
	}
	s.env = podenv.New(ctx, podenv.Config{
		RootDir:      o.RootDir,
		NetNSDir:     o.NetNSDir,
		NSDir:        o.NSDir,
		Pinner:       o.Pinner,
		UserNSDir:    o.UserNSDir,
		PauseBinary:  o.PauseBinary,
		CgroupParent: o.CgroupParent,
		CgroupDriver: o.CgroupDriver,
		Units:        o.Units,
		CgroupFS:     o.CgroupFS,
		Defer: func(ctx context.Context, c store.Cleanup, cause error) {
			s.cleanups.Defer(ctx, c, cause)
		},
		Logger: o.Logger,
	})
	s.cleanups = cleanup.New(cleanup.Config{
		Store:    o.Store,
		Runtimes: o.Runtimes,
		Images:   o.Images,
		Env:      s.env,
		Known:    s.knownID,
		Logger:   o.Logger,
	})
	s.stats = podstats.New(podstats.Config{Source: statsSource{s}, Images: o.Images, Period: o.StatsPeriod, Logger: o.Logger})
	s.ckpt = newCheckpoints(s, nil)
	s.ctx, s.cancel = context.WithCancel(ctx)
	if o.StreamAddress != "" {
		var err error
		if s.stream, s.streamRT, err = newStreamServer(s, o.StreamAddress); err != nil {
			s.cancel()
			return nil, err
		}
	}
	for name, rt := range o.Runtimes {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		f, err := rt.Features(fctx)
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "runtime features unknown, assuming OCI 1.0", "runtime", name, "error", err)
			f = nil
		}
		s.features[name] = f
		if c, ok := rt.(runtime.Checker); ok {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := c.Check(cctx); err != nil {
				s.log.WarnContext(ctx, "runtime handler not ready", "runtime", name, "error", err)
				s.notReady[name] = err
			}
			cancel()
		}
	}
	if err := newRecovery(s).run(ctx); err != nil {
		s.cancel()
		return nil, fmt.Errorf("recover state: %w", err)
	}
	s.goOwned(func() { s.stats.Run(s.ctx) })
	if s.releaseKick != nil {
		s.goOwned(func() { runRelease(s.ctx, s.releaseKick, o.ReleaseMemoryAfter, debug.FreeOSMemory) })
	}
	return s, nil
}

// Close stops the background exit monitors and evictions. Containers keep
// running.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.events.close()
	s.wg.Wait()
	return nil
}

// goOwned runs fn on a goroutine the Service owns (Close waits for it),
// unless the Service is closed.
func (s *Service) goOwned(fn func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

func newID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// runtimeFor returns the runtime for a handler, else the default one.
func (s *Service) runtimeFor(handler string) (string, runtime.Runtime, error) {
	name := handler
	if name == "" {
		name = s.opts.DefaultRuntime
	}
	if name == "" {
		name = "runc"
	}
	rt, ok := s.opts.Runtimes[name]
	if !ok {
		return "", nil, fmt.Errorf("runtime_handler %q: unknown runtime handler (configured: %s): %w",
			handler, strings.Join(s.runtimeNames(), ", "), errdefs.ErrInvalidArgument)
	}
	if err := s.notReady[name]; err != nil {
		return "", nil, fmt.Errorf("runtime_handler %q: not ready: %v: %w", name, err, errdefs.ErrFailedPrecondition)
	}
	return name, rt, nil
}

// cleanupContext is the context a rollback or teardown runs in: it survives
// the caller's cancellation but has its own deadline.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
}

// rollback runs undo steps in reverse order and logs (does not return)
// their errors, since the caller is already returning the original error.
type rollback struct {
	steps []func(context.Context) error
	names []string
}

func (r *rollback) add(name string, f func(context.Context) error) {
	r.steps = append(r.steps, f)
	r.names = append(r.names, name)
}

func (r *rollback) run(ctx context.Context, log *slog.Logger) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	for i := len(r.steps) - 1; i >= 0; i-- {
		if err := r.steps[i](ctx); err != nil {
			log.WarnContext(ctx, "rollback step failed", "step", r.names[i], "error", err)
		}
	}
}
