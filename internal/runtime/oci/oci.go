package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/internal/topdir"
)

// Default timeouts of the oci backend.
const (
	// DefaultCommandTimeout bounds one OCI runtime command.
	DefaultCommandTimeout = 2 * time.Minute
	// DefaultCreateTimeout bounds Create when ctx has no earlier deadline.
	DefaultCreateTimeout = 4 * time.Minute
	// deleteStopWait is how long Delete waits for a killed container.
	deleteStopWait = 10 * time.Second
	// shimExitWait is how long a shim gets to exit before it is killed.
	shimExitWait = 3 * time.Second
	// createGrace is how long a cancelled Create still waits for its shim.
	createGrace = 30 * time.Second
)

// Config configures an oci backend.
type Config struct {
	Name   string // the runtime handler name, for logs and errors
	Binary string // OCI runtime CLI, e.g. /usr/bin/runc
	Root   string // the CLI's --root (its state dir), e.g. /run/crin/runc/<name>
	// SystemdCgroup runs the CLI with --systemd-cgroup (the systemd cgroup
	// driver: specs' cgroupsPath in slice:prefix:name form).
	SystemdCgroup bool
	// PlaceShim, when set, moves a just started shim (pid; name is its
	// dir's, e.g. pod-<id>) out of crind's cgroup: with the systemd
	// driver, into a scope of its own, so that a "systemctl kill" of
	// crind's unit, which signals every process in its cgroup, spares
	// the shims and so the containers. A failure is logged; the shim
	// runs on where it is.
	PlaceShim  func(ctx context.Context, name string, pid int) error
	ShimBinary string // path to crin-shim
	StateDir   string // bundles and shim sockets live in StateDir/<id>
	// OOMScoreAdj is the oom_score_adj crind runs with; the shim sets its
	// own to this value so it is not killed before its container. Nil
	// leaves the shim with the value it inherits from crind.
	OOMScoreAdj *int
	// InitFromState: the process crin-shim waits for is not the
	// container's init but the runtime's own (crin-lxc's monitor, whose
	// exit is the container's), so Start reports the init's pid from
	// "<runtime> state": the pid crind pins a pod's namespaces from and
	// shows in ContainerStatus.
	InitFromState bool
	// CommandTimeout bounds each OCI runtime command (DefaultCommandTimeout
	// when 0).
	CommandTimeout time.Duration
	Logger         *slog.Logger
}

// Runtime is the oci backend: any OCI runtime CLI under crin-shim. It keeps no
// state in memory: everything lives in StateDir/<id> and in the shims, so
// a fresh Runtime on the same StateDir (after a crind restart) sees every
// container.
type Runtime struct {
	cfg Config
	log *slog.Logger
	// mu serializes shimDied, so two callers that find the same dead shim
	// (the exit monitor and a stop) kill and record once.
	mu sync.Mutex
	// pods serializes starting each pod's shim (oci_shim.go).
	pods podLocks
	// starts serializes, per container, the start of a pending
	// container with the signals that decide it is pending
	// (oci_pending.go).
	starts startLocks
	// beforeShimStart, when set, runs as a pending container's start
	// is about to ask the shim (tests inject interleavings with it).
	beforeShimStart func(id string)
	// primer readies the cgroup attach of the runtime commands to come
	// (attach_prime.go).
	primer *attachPrimer
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns an oci backend. It checks that the binary exists and runs,
// and creates StateDir and Root (mode 0700) when missing.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Name == "" {
		cfg.Name = filepath.Base(cfg.Binary)
	}
	if cfg.StateDir == "" || cfg.Root == "" {
		return nil, fmt.Errorf("runtime %s: state dir and root are required: %w", cfg.Name, errdefs.ErrInvalidArgument)
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: binary %q: %w", cfg.Name, cfg.Binary, errdefs.ErrInvalidArgument)
	}
	cfg.Binary = bin
	shimBin, err := exec.LookPath(cfg.ShimBinary)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: shim binary %q: %w", cfg.Name, cfg.ShimBinary, errdefs.ErrInvalidArgument)
	}
	cfg.ShimBinary = shimBin
	for _, d := range []string{cfg.StateDir, cfg.Root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runtime %s: make dir: %w", cfg.Name, err)
		}
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	o := &Runtime{cfg: cfg, log: cfg.Logger}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.log = o.log.With("runtime", cfg.Name)
	// A bundle and a shim dir per container and pod, and the runtime's
	// own dir per container: spread them over the disk (package topdir).
	for _, d := range []string{cfg.StateDir, cfg.Root} {
		if err := topdir.Mark(d); err != nil {
			o.log.WarnContext(ctx, "mark top dir", "dir", d, "error", err)
		}
	}
	o.primer = newAttachPrimer(o.log)
	o.removeLeftovers()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runtime %s: run %s --version: %w: %s", cfg.Name, bin, err, bytes.TrimSpace(out))
	}
	return o, nil
}

// Close waits for the work the backend runs in the background (a cgroup
// attach primed ahead of the runtime). Containers and shims live on.
func (o *Runtime) Close() error {
	o.primer.close()
	return nil
}

func (o *Runtime) dir(id string) string { return filepath.Join(o.cfg.StateDir, id) }

// StateDir is the directory holding one state dir per container (crind's
// start-up sweep finds orphaned shims by it).
func (o *Runtime) StateDir() string { return o.cfg.StateDir }

// PodsWithoutInfra reports true: containers of this backend join a pod's
// namespaces by their pinned paths, so a pod that does not share its PID
// namespace needs no infra container here (docs/state-machines.md).
func (o *Runtime) PodsWithoutInfra() bool { return true }

// known validates id and checks that the container's state dir exists.
func (o *Runtime) known(id string) (string, error) {
	if err := runtime.CheckID(id); err != nil {
		return "", err
	}
	dir := o.dir(id)
	if _, err := os.Stat(filepath.Join(dir, shim.ConfigFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
		}
		return "", fmt.Errorf("container %s: %w", id, err)
	}
	return dir, nil
}

// Create writes the bundle: config.json, the dir of the pod's shim and
// what the shim needs to know of the container (createFile). The runtime
// sees the container only at Start, which creates and starts it in one
// runtime command: until then it is "pending", a container the runtime
// does not know, which Status reports as created (see pending). On error
// nothing is left. An id in use is errdefs.ErrAlreadyExists; a bad id or
// spec is errdefs.ErrInvalidArgument.
func (o *Runtime) Create(ctx context.Context, req runtime.CreateRequest) (retErr error) {
	// Start, next, runs the runtime: its cgroup attach will find the
	// lock warm.
	shimDir := o.shimDirOf(req)
	o.primer.prime(func() int { return liveShim(shimDir) })
	dir, err := runtime.MakeBundleDir(o.cfg.StateDir, req)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			o.removeDir(context.WithoutCancel(ctx), req.ID, dir)
		}
	}()
	spec := req.SpecJSON
	if req.RestoreFrom != "" {
		if err := restoreCgroupConfig(dir, req.Spec); err != nil {
			return fmt.Errorf("create container %s: %w", req.ID, err)
		}
		spec = nil // the spec gained an annotation
	}
	if spec == nil {
		if spec, err = json.Marshal(req.Spec); err != nil {
			return fmt.Errorf("create container %s: encode spec: %w", req.ID, err)
		}
	}
	opts, err := json.Marshal(shim.CreateOptions{
		Bundle: dir, LogPath: req.LogPath, LogRoot: req.LogRoot, Stdin: req.Stdin, StdinOnce: req.StdinOnce,
		TTY: req.Spec.Process != nil && req.Spec.Process.Terminal, PrivatePID: privatePID(req.Spec),
		Restore: req.RestoreFrom,
	})
	if err != nil {
		return fmt.Errorf("create container %s: encode options: %w", req.ID, err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{shim.ShimDirFile, []byte(shimDir)}, {createFile, opts}, {shim.ConfigFile, spec}} {
		// config.json last: its presence makes the container known
		// (known, runtime.ListBundles), with the other two in place.
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("create container %s: write bundle: %w", req.ID, err)
		}
	}
	o.log.DebugContext(ctx, "container bundle written", "container_id", req.ID)
	return nil
}

func (o *Runtime) removeDir(ctx context.Context, id, dir string) {
	if sock := shim.ConsoleSocketPath(dir); !strings.HasPrefix(sock, dir+string(filepath.Separator)) {
		_ = os.Remove(sock)
	}
	if err := os.RemoveAll(dir); err != nil {
		o.log.WarnContext(ctx, "remove container state", "container_id", id, "error", err)
	}
}

// call sends op about id to the container's shim. A shim that does not
// know the container (it is not the one that created it) is
// shim.ErrShimGone too.
func (o *Runtime) call(ctx context.Context, id, op string) (shim.Response, error) {
	dir, err := o.known(id)
	if err != nil {
		return shim.Response{}, err
	}
	sock, err := shimSocket(dir)
	if err != nil {
		return shim.Response{}, err
	}
	resp, err := shim.Call(ctx, sock, id, op)
	if errdefs.IsNotFound(err) {
		err = fmt.Errorf("%w: %s", shim.ErrShimGone, err.Error())
	}
	return resp, err
}

// Start has the pod's shim create and start a pending container (see
// Create) in one runtime command. A container that is no longer pending
// (it was started, or it was killed before it started) is
// errdefs.ErrFailedPrecondition. A Signal of the container waits for the
// start of a pending one (startLocks).
func (o *Runtime) Start(ctx context.Context, id string) (int, error) {
	dir, err := o.known(id)
	if err != nil {
		return 0, err
	}
	unlock, err := o.starts.lock(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("start container %s: %w", id, err)
	}
	defer unlock()
	if !pending(dir) {
		return 0, fmt.Errorf("start container %s: it was started before: %w", id, errdefs.ErrFailedPrecondition)
	}
	if _, err := exitrec.Read(dir); err == nil {
		return 0, fmt.Errorf("start container %s: it was killed before it started: %w", id, errdefs.ErrFailedPrecondition)
	}
	pid, err := o.startPending(ctx, id, dir)
	if err != nil {
		return 0, fmt.Errorf("start container %s: %w", id, err)
	}
	restoredCgroupConfig(dir)
	pid = o.initPid(ctx, id, pid)
	o.log.InfoContext(ctx, "container started", "container_id", id, "pid", pid)
	return pid, nil
}

// initPid is the started container's init: pid (the one the shim waits
// for), or with InitFromState the one "<runtime> state" reports while
// the container runs. A container that already exited keeps pid.
func (o *Runtime) initPid(ctx context.Context, id string, pid int) int {
	if !o.cfg.InitFromState {
		return pid
	}
	st, err := o.runtimeState(ctx, id)
	if err != nil || st.Pid <= 0 || st.Status != "running" {
		return pid
	}
	return st.Pid
}

// Signal runs "<runtime> kill". A container that has already stopped is
// not an error; one that never started (pending) is recorded killed by
// SIGKILL. A signal that comes while the container starts waits for the
// start, and then reaches the started container.
func (o *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal, opts runtime.SignalOptions) error {
	dir, err := o.known(id)
	if err != nil {
		return err
	}
	unlock, err := o.starts.lock(ctx, id)
	if err != nil {
		return fmt.Errorf("signal container %s: wait for its start: %w", id, err)
	}
	if pending(dir) {
		defer unlock()
		return o.signalPending(id, dir, sig)
	}
	unlock()
	// An exited container has nothing left to signal (its shim deletes
	// it from the runtime as it exits); the caller only wanted it to stop.
	if _, err := exitrec.Read(dir); err == nil {
		return nil
	}
	// The shim signals the init through a pidfd, without a runtime
	// command; it leaves "all" of a container sharing a PID namespace,
	// and anything when it is gone, to the runtime.
	sock, err := shimSocket(dir)
	if err == nil {
		_, err = shim.Do(ctx, sock, shim.Request{Op: shim.OpKill, ID: id, Signal: int(sig), All: opts.All})
	}
	if err == nil {
		return nil
	} else if !errors.Is(err, shim.ErrUnsupported) && !errors.Is(err, shim.ErrShimGone) && !errdefs.IsNotFound(err) && !errdefs.IsInvalidArgument(err) {
		return fmt.Errorf("signal container %s: %w", id, err)
	}
	args := []string{"kill"}
	if opts.All {
		args = append(args, "--all")
	}
	args = append(args, id, strconv.Itoa(int(sig)))
	if _, err := o.run(ctx, runOpts{}, args...); err != nil {
		// The runtime refuses to signal a stopped container.
		if isRuntimeNotExist(err) {
			return nil
		}
		if _, rerr := exitrec.Read(dir); rerr == nil {
			return nil
		}
		if st, serr := o.runtimeState(ctx, id); (serr == nil && st.Status == "stopped") || isRuntimeNotExist(serr) {
			return nil
		}
		return fmt.Errorf("signal container %s: %w", id, err)
	}
	return nil
}

// Delete kills the container if it lives, has its shim drop it (the shim
// deleted it from the runtime when it exited, and exits itself after its
// last container), and removes its state dir. An unknown id is not an error
// (CRI RemoveContainer: "If the container has already been removed, it must
// not return an error").
func (o *Runtime) Delete(ctx context.Context, id string) error {
	if err := runtime.CheckID(id); err != nil {
		return err
	}
	dir := o.dir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// A recorded exit says it stopped, without asking its shim.
	var st runtime.Status
	_, err := exitrec.Read(dir)
	if err != nil {
		st, err = o.Status(ctx, id)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	if err == nil && (st.State == runtime.StateCreated || st.State == runtime.StateRunning) {
		if err := o.Signal(ctx, id, unix.SIGKILL, runtime.SignalOptions{All: true}); err != nil {
			o.log.WarnContext(ctx, "delete: kill", "container_id", id, "error", err)
		}
		wctx, cancel := context.WithTimeout(ctx, deleteStopWait)
		_, werr := o.Wait(wctx, id)
		cancel()
		if werr != nil {
			return fmt.Errorf("delete container %s: wait for it to die: %w", id, werr)
		}
	}
	if !pending(dir) {
		if err := o.dropFromShim(ctx, id, dir); err != nil {
			return fmt.Errorf("delete container %s: %w", id, err)
		}
	} else if shimDir := shimDirFor(dir); shimDir != "" {
		o.removeDeadShimDir(shimDir)
	}
	o.removeRuntimeLeftovers(ctx, id)
	o.removeDir(ctx, id, dir)
	o.log.InfoContext(ctx, "container deleted", "container_id", id)
	return nil
}

// ReopenLog asks the shim to reopen the container's log file. A container
// without a live shim is errdefs.ErrFailedPrecondition.
func (o *Runtime) ReopenLog(ctx context.Context, id string) error {
	if _, err := o.call(ctx, id, shim.OpReopenLog); err != nil {
		if errors.Is(err, shim.ErrShimGone) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	return nil
}

// List returns the ids that have a bundle in StateDir.
func (o *Runtime) List(ctx context.Context) ([]string, error) {
	return runtime.ListBundles(o.cfg.StateDir)
}

// stopShim waits for the shim at pid to exit and kills it if it does not.
// The pid is checked to still be a crin-shim before it is signalled.
func (o *Runtime) stopShim(ctx context.Context, pid int) {
	if waitGone(ctx, pid, shimExitWait) {
		return
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || !strings.HasPrefix(exe, o.cfg.ShimBinary) {
		return
	}
	o.log.WarnContext(ctx, "killing shim that did not exit", "shim_pid", pid)
	_ = unix.Kill(pid, unix.SIGKILL)
	waitGone(ctx, pid, shimExitWait)
}

// readPid reads a pid file; 0 when missing or bad.
func readPid(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// privatePID reports whether spec gives the container a new PID namespace
// (not one joined by path, nor the host's).
func privatePID(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return false
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace {
			return ns.Path == ""
		}
	}
	return false
}
