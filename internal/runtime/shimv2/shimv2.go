// Package shimv2 is the shimv2 backend of package runtime: containers run
// under a containerd shim v2 runtime (containerd-shim-runc-v2, kata,
// gVisor, ...) that crind drives over the shim's ttrpc task API
// (containerd.task.v2.Task).
//
// Each container has a state dir, StateDir/<id>, which is also its bundle:
// config.json, the shim's own log fifo, meta.json (the shim's address and
// pid, the log path, the start time), the pid file of its output logger
// and, once the container exited, the exit record in crin-shim's format.
//
// A container's output goes to a logger the shim starts (the shim's
// "binary" stdio scheme): crin-logger (package logger), which writes the
// CRI log with the writer crin-shim uses. It is the shim's child, not crind's, so output keeps
// reaching the log while crind is down, and a container that exits then
// loses none of it. A container created with stdin gets a stdin fifo the
// shim holds open; with no terminal its output goes through fifos to a
// crin-logger crind starts in a session of its own (containerd's runc
// shim copies a stdin only beside fifo output; see prepareStdio).
//
// Create starts the shim as containerd does ("<shim> -namespace NS
// -address A -publish-binary B -id ID start" in the bundle; it prints the
// address of its ttrpc socket), connects, and calls Create with no rootfs
// mounts (crind mounted the rootfs already; spec.root.path names it).
// Containers carrying the io.kubernetes.cri.sandbox-id annotation share the
// shim of their pod when the shim groups by it (containerd-shim-runc-v2
// does: its start returns the running pod shim's address; gVisor's does
// when the bundle's config.toml says so, which crind writes).
//
// Exits come from the task Wait RPC: crind does not serve the shim's event
// endpoint (the publish binary is /bin/true and TTRPC_ADDRESS is unset, so
// the shim's events are dropped; OOM kills are read from the container's
// memory cgroup counter, or its nearest ancestor's, when its exit is recorded). The -address passed to the shim names
// nothing that listens: it is StateDir, which scopes the shim's socket name
// to this crind and handler.
//
// After a crind restart a fresh Runtime on the same StateDir reads every
// container's meta.json and reconnects to the shim's address. A shim that is gone before its container's exit was recorded
// (its connection closed and its pid is no longer that shim) is never taken
// for a success: the shim's own "delete" command is run on the bundle
// (which deletes what is left of the container from the OCI runtime,
// killing it), and the exit is recorded with code 255 and
// runtime.ReasonShimDied.
package shimv2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/internal/topdir"
)

// Timeouts of the shimv2 backend.
const (
	// DefaultCallTimeout bounds one task RPC (Wait excepted) and one shim
	// command (start, delete).
	DefaultCallTimeout = time.Minute
	// deleteStopWait is how long Delete waits for a killed container.
	deleteStopWait = 10 * time.Second
	// shimExitWait is how long a shim gets to exit after Shutdown.
	shimExitWait = 3 * time.Second
	// ioDrainWait is how long output is still copied after an exit (an
	// exec's, or a container's by its logger).
	ioDrainWait = 2 * time.Second
	// shimGoneWait is how long a closed connection waits for the shim
	// process to disappear before the shim is declared dead.
	shimGoneWait = 5 * time.Second
)

// Files in a container's state dir besides crin-shim's exit record.
const (
	metaFile = "meta.json"
	shimLog  = "log" // the shim's own stderr (a fifo the shim opens)
	// privateLog is the CRI log of a container created without a log
	// path, for attach; the logger keeps it under privateLogMax (and one
	// earlier file as privateLog.1).
	privateLog = "output.log"
)

// privateLogMax caps privateLog.
const privateLogMax = 1 << 20

// Type URLs the shim decodes by name (containerd's typeurl registry).
const (
	runcOptionsURL = "containerd.runc.v1.Options"
	processURL     = "types.containerd.io/opencontainers/runtime-spec/1/Process"
	resourcesURL   = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources"
)

// Config configures a shimv2 backend.
type Config struct {
	Name string // the runtime handler name, for logs and errors
	// Binary is the shim, e.g. /usr/bin/containerd-shim-runc-v2 (see
	// ResolveBinary).
	Binary string
	// StateDir holds one bundle per container.
	StateDir string
	// Namespace is passed to the shim (-namespace); "crin" when empty.
	Namespace string
	// Root is the OCI runtime's state dir, passed to a runc shim as its
	// root option.
	Root string
	// Options are the runc shim's options (binary_name, systemd_cgroup,
	// ...; see runcOptions). Only runc shims take options.
	Options map[string]string
	// LoggerBinary is crin-logger, run by the shim as each container's
	// output logger (package logger).
	LoggerBinary string
	// PublishBinary is the shim's -publish-binary; /bin/true when empty.
	PublishBinary string
	// CallTimeout bounds each RPC (DefaultCallTimeout when 0).
	CallTimeout time.Duration
	// PlaceShim, when set, moves a shim this backend just started (pid;
	// name is the id it groups by, the pod's) out of crind's cgroup, as
	// oci.Config.PlaceShim does for crin-shim: with the systemd
	// driver, into a scope of its own, so that a "systemctl kill" of
	// crind's unit spares the shim, its output loggers and so the
	// containers. A failure is logged; the shim runs on where it is.
	PlaceShim func(ctx context.Context, name string, pid int) error
	Logger    *slog.Logger
}

// Runtime is the shimv2 backend. Its state lives in StateDir, in the shims
// and in their loggers; in memory it keeps only connections, which a fresh
// Runtime on the same StateDir makes again.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	options *anypb.Any // nil for a shim that is neither runc's nor runsc's
	// ociBinary is the OCI runtime the shim drives, when crind knows it
	// (runc's and gVisor's shims): Features asks it.
	ociBinary string
	// fifoOutput: the shim takes no "binary" stdio (gVisor's), so every
	// container logs through fifos to a crin-logger crind starts.
	fifoOutput bool
	// shimStats: the containers' usage comes from the shim's Stats, not
	// from their cgroups (gVisor's: see Stats).
	shimStats bool
	// gvisor: the shim is gVisor's (runsc): see runscSpec.
	gvisor bool
	// podShim: the shim serves every container of a pod: runc's groups
	// them by the sandbox-id annotation, gVisor's too when its bundle
	// says so (writeRunscGrouping).
	podShim bool
	// sharedState is runtime state kept across containers in the
	// runtime's root, released with the last container (runsc's pinned
	// null network namespace for its gofers, a bind mount).
	sharedState string

	// mu guards conns and logs.
	mu    sync.Mutex
	conns map[string]*conn        // by shim address
	logs  map[string]*shimLogPipe // by container id
	// diedMu serializes shimDied, so two callers finding the same dead shim
	// clean up and record once.
	diedMu sync.Mutex
	wg     sync.WaitGroup
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a shimv2 backend and resumes draining the shim logs of the
// containers a previous crind left in StateDir. A bad config is
// errdefs.ErrInvalidArgument.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("runtime %s: state dir %q must be absolute: %w", cfg.Name, cfg.StateDir, errdefs.ErrInvalidArgument)
	}
	if cfg.Binary == "" || !filepath.IsAbs(cfg.Binary) {
		return nil, fmt.Errorf("runtime %s: shim binary %q must be absolute: %w", cfg.Name, cfg.Binary, errdefs.ErrInvalidArgument)
	}
	if cfg.LoggerBinary == "" || !filepath.IsAbs(cfg.LoggerBinary) {
		return nil, fmt.Errorf("runtime %s: logger binary %q must be absolute: %w", cfg.Name, cfg.LoggerBinary, errdefs.ErrInvalidArgument)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "crin"
	}
	if cfg.PublishBinary == "" {
		cfg.PublishBinary = "/bin/true"
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	r := &Runtime{
		cfg: cfg, log: cfg.Logger,
		conns: map[string]*conn{}, logs: map[string]*shimLogPipe{},
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}

	var err error
	if strings.HasPrefix(filepath.Base(cfg.Binary), "containerd-shim-runc-") {
		o, err := runcOptions(cfg.Options, cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("runtime %s: %w", cfg.Name, err)
		}
		data, err := proto.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("runtime %s: encode options: %w", cfg.Name, err)
		}
		r.options, r.podShim = &anypb.Any{TypeUrl: runcOptionsURL, Value: data}, true
		if r.ociBinary = cfg.Options["binary_name"]; r.ociBinary == "" {
			r.ociBinary = "runc"
		}
	} else if isRunscShim(cfg.Binary) {
		r.gvisor, r.fifoOutput, r.shimStats, r.podShim = true, true, true, true
		r.sharedState = filepath.Join(cfg.Root, cfg.Namespace, runscNullNetNS)
		if r.options, r.ociBinary, err = runscOptions(cfg.Options, cfg.Root); err != nil {
			return nil, fmt.Errorf("runtime %s: %w", cfg.Name, err)
		}
	} else if len(cfg.Options) > 0 {
		return nil, fmt.Errorf("runtime %s: options are only understood for containerd-shim-runc-* and containerd-shim-runsc-*: %w", cfg.Name, errdefs.ErrInvalidArgument)
	}
	for _, d := range []string{cfg.StateDir, cfg.Root} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runtime %s: make dir: %w", cfg.Name, err)
		}
		// A bundle per container, and the runtime's own dir per
		// container: spread them over the disk (package topdir).
		if err := topdir.Mark(d); err != nil {
			r.log.WarnContext(ctx, "mark top dir", "dir", d, "error", err)
		}
	}
	r.resume(ctx)
	return r, nil
}

// resume drains again the shim log fifos of the containers that have not
// exited (their output never depended on crind: see the package doc).
func (r *Runtime) resume(ctx context.Context) {
	ids, err := r.List(ctx)
	if err != nil {
		r.log.WarnContext(ctx, "resume containers", "error", err)
		return
	}
	for _, id := range ids {
		dir := r.dir(id)
		if _, err := exitrec.Read(dir); err == nil {
			continue
		}
		if _, err := readMeta(dir); err != nil {
			continue // a create that crashed before the shim started
		}
		r.openShimLog(ctx, id, dir)
	}
}

// Close stops draining the shim logs and closes the connections to the
// shims (which keep their containers running and logging).
func (r *Runtime) Close() error {
	r.mu.Lock()
	logs, conns := r.logs, r.conns
	r.logs, r.conns = map[string]*shimLogPipe{}, map[string]*conn{}
	r.mu.Unlock()
	for _, l := range logs {
		l.close()
	}
	for _, c := range conns {
		c.client.Close()
	}
	r.wg.Wait()
	return nil
}

func (r *Runtime) dir(id string) string { return filepath.Join(r.cfg.StateDir, id) }

// known validates id and reads the container's meta.
func (r *Runtime) known(id string) (string, meta, error) {
	if err := runtime.CheckID(id); err != nil {
		return "", meta{}, err
	}
	dir := r.dir(id)
	m, err := readMeta(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", meta{}, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
		}
		return "", meta{}, fmt.Errorf("container %s: %w", id, err)
	}
	return dir, m, nil
}

func (r *Runtime) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.CallTimeout)
}

// Create writes the bundle, starts (or joins) a shim and creates the task.
// On error the task, a shim started for it alone and the bundle are gone.
func (r *Runtime) Create(ctx context.Context, req runtime.CreateRequest) (retErr error) {
	if req.RestoreFrom != "" {
		return fmt.Errorf("create container %s: the shimv2 backend cannot restore a checkpoint: %w", req.ID, errdefs.ErrFailedPrecondition)
	}
	dir, err := runtime.MakeBundleDir(r.cfg.StateDir, req)
	if err != nil {
		return err
	}
	m := meta{LogPath: req.LogPath, LogRoot: req.LogRoot}
	if m.LogPath == "" {
		// Attach follows the log: with none asked for, a small one of
		// the container's own (crin-shim fans output out live instead).
		m.LogPath, m.LogMax = filepath.Join(dir, privateLog), privateLogMax
	}
	defer func() {
		if retErr == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		r.teardown(rctx, req.ID, dir, m)
	}()
	if err := r.writeBundle(ctx, req, dir, m); err != nil {
		return fmt.Errorf("create container %s: %w", req.ID, err)
	}
	if m.Address, err = r.startShim(ctx, req.ID, dir); err != nil {
		return fmt.Errorf("create container %s: %w", req.ID, err)
	}
	if err := writeMeta(dir, m); err != nil {
		return fmt.Errorf("create container %s: %w", req.ID, err)
	}
	if err := r.createTask(ctx, req, dir, &m); err != nil {
		return fmt.Errorf("create container %s: %w", req.ID, err)
	}
	r.log.InfoContext(ctx, "container created", "container_id", req.ID, "pid", m.Pid, "shim_pid", m.ShimPid)
	return nil
}

// writeBundle writes the spec, the shim's log fifo (read from now on) and
// meta.json, from which the logger reads the log path.
func (r *Runtime) writeBundle(ctx context.Context, req runtime.CreateRequest, dir string, m meta) error {
	spec := req.Spec
	if r.gvisor {
		spec = runscSpec(spec)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, shim.ConfigFile), data, 0o600); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	if r.gvisor {
		if err := writeRunscGrouping(dir); err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, shimLog), 0o600); err != nil {
		return fmt.Errorf("make fifo %s: %w", shimLog, err)
	}
	r.openShimLog(ctx, req.ID, dir)
	return writeMeta(dir, m)
}

// createTask connects to the shim at m.Address and creates the task, its
// output going to crin-logger (and its stdin, if any, to a fifo: see
// prepareStdio); m gains the shim's pid, the task's pid and
// the OOM counter's base, and is written after each.
func (r *Runtime) createTask(ctx context.Context, req runtime.CreateRequest, dir string, m *meta) error {
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return err
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	cr, err := c.task.Connect(cctx, &task.ConnectRequest{ID: req.ID})
	if err != nil {
		return fmt.Errorf("connect to shim: %w", fromShim(err))
	}
	m.ShimPid = int(cr.GetShimPid())
	if err := writeMeta(dir, *m); err != nil {
		return err
	}
	r.placeShim(ctx, req, m.Address, m.ShimPid)
	stdio, err := r.prepareStdio(ctx, req, dir, m)
	if err != nil {
		return err
	}
	if err := writeMeta(dir, *m); err != nil {
		return err
	}
	resp, err := c.task.Create(cctx, &task.CreateTaskRequest{
		ID:       req.ID,
		Bundle:   dir,
		Terminal: req.Spec.Process != nil && req.Spec.Process.Terminal,
		Stdin:    stdio.stdin,
		Stdout:   stdio.stdout,
		Stderr:   stdio.stderr,
		Options:  r.options,
	})
	if err != nil {
		return fromShim(err)
	}
	m.Pid = int(resp.GetPid())
	if req.Spec.Linux != nil {
		watchOOM(m, req.Spec.Linux.CgroupsPath)
	}
	return writeMeta(dir, *m)
}

// placeShim hands the shim at address to cfg.PlaceShim when no other
// container uses it yet (the pod's first, its infra container: the pod's
// later containers join the running shim), before the task's create
// starts the logger as the shim's child. A pod's shim is named after the
// pod; a shim of one container (one that does not group) after the
// container.
func (r *Runtime) placeShim(ctx context.Context, req runtime.CreateRequest, address string, pid int) {
	if r.cfg.PlaceShim == nil || pid <= 0 || r.sharedShim(req.ID, address) {
		return
	}
	name := req.ID
	if pod := req.PodID; pod != "" && r.podShim {
		name = pod
	}
	if err := r.cfg.PlaceShim(ctx, "v2-"+name, pid); err != nil {
		r.log.WarnContext(ctx, "shim left in crind's cgroup", "container_id", req.ID, "shim_pid", pid, "error", err)
	}
}

// Start starts a created container.
func (r *Runtime) Start(ctx context.Context, id string) (int, error) {
	dir, m, err := r.known(id)
	if err != nil {
		return 0, err
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return 0, fmt.Errorf("start container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	resp, err := c.task.Start(cctx, &task.StartRequest{ID: id})
	if err != nil {
		return 0, fmt.Errorf("start container %s: %w", id, fromShim(err))
	}
	m.Pid, m.StartedAt = int(resp.GetPid()), time.Now()
	if err := writeMeta(dir, m); err != nil {
		r.log.WarnContext(ctx, "record start", "container_id", id, "error", err)
	}
	r.log.InfoContext(ctx, "container started", "container_id", id, "pid", m.Pid)
	return m.Pid, nil
}

// Signal sends sig through the shim. A stopped container is not an error.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal, opts runtime.SignalOptions) error {
	_, m, err := r.known(id)
	if err != nil {
		return err
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return fmt.Errorf("signal container %s: %w", id, err)
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	_, err = c.task.Kill(cctx, &task.KillRequest{ID: id, Signal: uint32(sig), All: opts.All})
	if err = fromShim(err); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("signal container %s: %w", id, err)
	}
	return nil
}

// Delete kills a live container, deletes the task, shuts its shim down
// when no other container uses it, and removes the bundle. An unknown id
// is not an error (CRI RemoveContainer: "If the container has already been
// removed, it must not return an error").
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := runtime.CheckID(id); err != nil {
		return err
	}
	dir := r.dir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	m, err := readMeta(dir)
	if err != nil {
		// A create that crashed before recording its shim: the shim, if
		// one was started, wrote its address and pid into the bundle.
		r.teardown(ctx, id, dir, meta{})
		return nil
	}
	st, err := r.Status(ctx, id)
	if err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	if st.State == runtime.StateCreated || st.State == runtime.StateRunning {
		if err := r.Signal(ctx, id, syscall.SIGKILL, runtime.SignalOptions{All: true}); err != nil {
			r.log.WarnContext(ctx, "delete: kill", "container_id", id, "error", err)
		}
		wctx, cancel := context.WithTimeout(ctx, deleteStopWait)
		_, werr := r.Wait(wctx, id)
		cancel()
		if werr != nil {
			return fmt.Errorf("delete container %s: wait for it to die: %w", id, werr)
		}
	}
	r.teardown(ctx, id, dir, m)
	r.log.InfoContext(ctx, "container deleted", "container_id", id)
	return nil
}

// Update sends the new resources to the shim.
func (r *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	_, m, err := r.known(id)
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("update container %s: no resources: %w", id, errdefs.ErrInvalidArgument)
	}
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return fmt.Errorf("update container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := c.task.Update(cctx, &task.UpdateTaskRequest{ID: id, Resources: &anypb.Any{TypeUrl: resourcesURL, Value: data}}); err != nil {
		return fmt.Errorf("update container %s: %w", id, fromShim(err))
	}
	return nil
}

// ReopenLog has the container's logger reopen its CRI log (SIGUSR1) and
// waits until the log file exists again. A container whose logger is gone
// (its output ended) is errdefs.ErrFailedPrecondition.
func (r *Runtime) ReopenLog(ctx context.Context, id string) error {
	dir, m, err := r.known(id)
	if err != nil {
		return err
	}
	if err := reopenLog(ctx, dir, m.LogPath); err != nil {
		if errors.Is(err, errLoggerGone) || errors.Is(err, crilog.ErrLogPath) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	return nil
}

// List returns the ids that have a bundle in StateDir.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	return runtime.ListBundles(r.cfg.StateDir)
}

// Features are those of the OCI runtime a runc or gVisor shim drives
// ("<runc> features", with the binary_name option or runc from $PATH;
// "<runsc> features"). Other shims are errdefs.ErrNotImplemented: the shim
// v2 API has no features call (crind then assumes an OCI 1.0 runtime).
func (r *Runtime) Features(ctx context.Context) (*features.Features, error) {
	bin := r.ociBinary
	if bin == "" {
		return nil, fmt.Errorf("runtime %s: shim v2 runtimes do not report OCI features: %w", r.cfg.Name, errdefs.ErrNotImplemented)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(fctx, bin, "features").Output()
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %s features: %w", r.cfg.Name, bin, err)
	}
	var f features.Features
	if err := json.Unmarshal(out, &f); err != nil {
		return nil, fmt.Errorf("runtime %s: %s features: decode: %w", r.cfg.Name, bin, err)
	}
	if r.gvisor {
		correctRunscFeatures(&f)
	}
	return &f, nil
}
