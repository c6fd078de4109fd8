package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// shimDirPrefix starts the name of a pod shim's dir in StateDir; no
// container id starts with '.', so it never meets a container's dir.
const shimDirPrefix = ".pod-"

// createAttempts bounds how often Create tries a pod's shim again when the
// one it found was exiting or died.
const createAttempts = 3

// podLocks serialize, per shim dir, starting a pod's shim and removing its
// dir, so that two creates in one pod start one shim.
type podLocks struct {
	mu    sync.Mutex
	locks map[string]*podLock
}

type podLock struct {
	sync.Mutex
	users int
}

func (p *podLocks) lock(key string) func() {
	p.mu.Lock()
	if p.locks == nil {
		p.locks = make(map[string]*podLock)
	}
	l := p.locks[key]
	if l == nil {
		l = &podLock{}
		p.locks[key] = l
	}
	l.users++
	p.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		p.mu.Lock()
		if l.users--; l.users == 0 {
			delete(p.locks, key)
		}
		p.mu.Unlock()
	}
}

// shimDirOf is the dir of the shim of the pod req's container belongs to.
func (o *Runtime) shimDirOf(req runtime.CreateRequest) string {
	pod := req.PodID
	if runtime.CheckID(pod) != nil {
		pod = req.ID
	}
	return filepath.Join(o.cfg.StateDir, shimDirPrefix+pod)
}

// shimDirFor reads which shim supervises the container whose state dir
// is dir: the dir named in its shim.dir file (Create writes it before
// config.json), a pod's shim dir beside dir. A dir without one, or with
// anything else in it, has no shim: "", which shimSocket reports as
// shim.ErrShimGone. What it returns may be removed, so it is never a
// path from elsewhere.
func shimDirFor(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, shim.ShimDirFile))
	if err != nil {
		return ""
	}
	shimDir := string(data)
	pod, ok := strings.CutPrefix(filepath.Base(shimDir), shimDirPrefix)
	if !ok || shimDir != filepath.Join(filepath.Dir(dir), shimDirPrefix+pod) || runtime.CheckID(pod) != nil {
		return ""
	}
	return shimDir
}

// shimSocket is the socket of the shim of the container in dir.
func shimSocket(dir string) (string, error) {
	shimDir := shimDirFor(dir)
	if shimDir == "" {
		return "", errNoShimDir(dir)
	}
	return shim.SocketPath(shimDir), nil
}

// errNoShimDir is shim.ErrShimGone for the container in dir, which names
// no shim dir (shimDirFor).
func errNoShimDir(dir string) error {
	return fmt.Errorf("%w: %s has no %s", shim.ErrShimGone, dir, shim.ShimDirFile)
}

// liveShim returns the pid of the shim serving shimDir, or 0.
func liveShim(shimDir string) int {
	pid := readPid(filepath.Join(shimDir, shim.ShimPidFile))
	if pid > 0 && alive(pid) && isShimOf(pid, shimDir) {
		return pid
	}
	return 0
}

// podShimDir is the dir of pod podID's shim.
func (o *Runtime) podShimDir(podID string) (string, error) {
	if err := runtime.CheckID(podID); err != nil {
		return "", fmt.Errorf("pod id: %w", err)
	}
	return filepath.Join(o.cfg.StateDir, shimDirPrefix+podID), nil
}

// StartPodShim starts pod podID's shim unless one runs, so that starting
// the pod's first container is one request to it and one runtime command.
// RunPodSandbox calls it while the pod's network is set up.
func (o *Runtime) StartPodShim(ctx context.Context, podID string) error {
	dir, err := o.podShimDir(podID)
	if err != nil {
		return err
	}
	_, err = o.ensureShim(ctx, dir)
	return err
}

// ReleasePodShim makes pod podID's shim exit, and waits for it, when it
// holds no container (the pod was stopped or removed before it got one);
// a shim that holds a container stays, and one already exiting after its
// last container is not waited for. Neither is an error. A dead shim's dir
// is removed.
func (o *Runtime) ReleasePodShim(ctx context.Context, podID string) error {
	dir, err := o.podShimDir(podID)
	if err != nil {
		return err
	}
	unlock := o.pods.lock(dir)
	defer unlock()
	pid := liveShim(dir)
	if pid > 0 {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := shim.Do(sctx, shim.SocketPath(dir), shim.Request{Op: shim.OpRelease})
		cancel()
		switch {
		case err == nil && resp.ShimExiting:
			o.stopShim(ctx, pid)
		case errors.Is(err, shim.ErrShimExiting):
			return nil // it exits by itself: its last container is gone
		case errors.Is(err, shim.ErrShimGone):
			// It closed its socket: exiting, or killed. Once it is
			// gone its dir goes too (an exiting shim removes it
			// itself; a killed one cannot).
			if !waitGone(ctx, pid, releaseWait) {
				return nil // still exiting: it removes its dir itself
			}
		case errdefs.IsFailedPrecondition(err):
			return nil // it holds a container
		default:
			// A shim from before OpRelease, or one that did not answer:
			// it exits with its last container, or when idle.
			return fmt.Errorf("release pod shim: %w", err)
		}
	}
	removeDeadShimDirLocked(dir)
	return nil
}

// releaseWait is how long ReleasePodShim waits for a shim that closed its
// socket to be gone.
const releaseWait = 10 * time.Second

// createInShim asks the pod's shim to create (and, with opts.Start,
// start) container id, starting the shim when the pod has none. A shim
// that is exiting (its last container was just deleted) or died is waited
// for and replaced.
func (o *Runtime) createInShim(ctx context.Context, id, shimDir string, opts shim.CreateOptions) (shim.Response, error) {
	creq := shim.Request{Op: shim.OpCreate, ID: id, Create: &opts}
	var lastErr error
	for range createAttempts {
		pid, err := o.ensureShim(ctx, shimDir)
		if err != nil {
			return shim.Response{}, err
		}
		o.primer.prime(func() int { return pid })
		resp, err := o.callCreate(ctx, shimDir, creq)
		if resp.ShimExiting {
			o.stopShim(ctx, pid)
		}
		switch {
		case err == nil:
			return resp, nil
		case errors.Is(err, shim.ErrShimExiting):
		case errors.Is(err, shim.ErrShimGone) && ctx.Err() == nil:
			// It died, maybe midway: undo what it may have begun.
			if _, derr := o.run(ctx, runOpts{}, "delete", "--force", id); derr != nil && !isRuntimeNotExist(derr) {
				return resp, fmt.Errorf("%w (and deleting what it began failed: %w)", err, derr)
			}
		default:
			return resp, err
		}
		lastErr = err
		o.stopShim(ctx, pid)
	}
	return shim.Response{}, lastErr
}

// callCreate sends the create request. When ctx ends first it still waits
// up to createGrace for the answer, so the rollback knows what to undo (a
// runtime create cannot be interrupted cleanly).
func (o *Runtime) callCreate(ctx context.Context, shimDir string, req shim.Request) (shim.Response, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCreateTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(createGrace, cancel) })
	defer stop()
	resp, err := shim.Do(cctx, shim.SocketPath(shimDir), req)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("wait for shim: %w", ctx.Err())
	}
	return resp, err
}

// ensureShim returns the pid of the pod's live shim, starting one when
// there is none.
func (o *Runtime) ensureShim(ctx context.Context, shimDir string) (int, error) {
	unlock := o.pods.lock(shimDir)
	defer unlock()
	if pid := liveShim(shimDir); pid > 0 {
		return pid, nil
	}
	return o.launchShim(ctx, shimDir)
}

// launchShim starts crin-shim for shimDir in a session of its own and
// waits for it to serve its socket. crind reaps it when it exits; after
// a crind restart, init does.
func (o *Runtime) launchShim(ctx context.Context, shimDir string) (int, error) {
	if err := os.MkdirAll(shimDir, 0o700); err != nil {
		return 0, fmt.Errorf("make shim dir: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	logf, err := os.OpenFile(filepath.Join(shimDir, shim.ShimLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("open shim log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	cfg := shim.Config{Dir: shimDir, Runtime: o.cfg.Binary, RuntimeRoot: o.cfg.Root, OOMScoreAdj: o.cfg.OOMScoreAdj, SystemdCgroup: o.cfg.SystemdCgroup}
	cmd := exec.Command(o.cfg.ShimBinary, cfg.Args()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Dir = shimDir
	cmd.Env = shim.Env()
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return 0, fmt.Errorf("start shim: %w", err)
	}
	reapChild(cmd.Process)
	if o.cfg.PlaceShim != nil {
		// Out of crind's own cgroup before it runs anything: a kill of
		// every process of crind's unit must not reach the shims.
		name := strings.TrimPrefix(filepath.Base(shimDir), ".")
		if err := o.cfg.PlaceShim(ctx, name, cmd.Process.Pid); err != nil {
			o.log.WarnContext(ctx, "shim left in crind's cgroup", "shim", name, "pid", cmd.Process.Pid, "error", err)
		}
	}

	_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
	stop := context.AfterFunc(ctx, func() { _ = r.SetReadDeadline(time.Now()) })
	defer stop()
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	var hs shim.Handshake
	if err == nil {
		err = json.Unmarshal(bytes.TrimSpace(data), &hs)
	}
	switch {
	case err == nil && hs.Error != "":
		err = errors.New(hs.Error)
	case err == nil && hs.ShimPid != cmd.Process.Pid:
		err = fmt.Errorf("handshake %q", data)
	}
	if err != nil {
		// Killed and waited for, so that its dir goes now: a pod torn
		// down while its shim was starting (a cancelled RunPodSandbox)
		// leaves neither. The pod's lock is held (ensureShim).
		_ = cmd.Process.Kill()
		waitGone(context.WithoutCancel(ctx), cmd.Process.Pid, shimExitWait)
		removeDeadShimDirLocked(shimDir)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return 0, fmt.Errorf("start shim: %w", err)
	}
	return hs.ShimPid, nil
}

// dropFromShim has the container's shim let go of the exited container
// (the shim deleted it from the runtime when it exited); when that was
// its last, the shim exits and removes its dir by itself. Without a live
// shim, or when the shim's delete failed, the runtime delete is run here,
// and a dead shim's dir is removed.
func (o *Runtime) dropFromShim(ctx context.Context, id, dir string) error {
	shimDir := shimDirFor(dir)
	pid := readPid(filepath.Join(dir, shim.ShimPidFile))
	deleted := false
	if shimDir != "" && pid > 0 && alive(pid) && isShimOf(pid, shimDir) {
		resp, err := o.shimDelete(ctx, id, shimDir)
		if errdefs.IsFailedPrecondition(err) {
			// The shim runs it still, though the caller saw it stopped
			// (an exit on record). Deleting it behind the shim's back
			// would leave it counted there for good, and the shim
			// would never exit: kill it through the shim, which drops
			// it once it recorded the exit.
			o.log.WarnContext(ctx, "delete: the shim still runs the container; killing it", "container_id", id, "error", err)
			resp, err = o.killAndDrop(ctx, id, shimDir)
		}
		deleted = err == nil
		switch {
		case resp.ShimExiting && err == nil:
			// It exits and removes its dir by itself, at once: it
			// holds nothing more. Waited for, so that a pod's removal
			// returns with its shim gone; not killed when slow (it
			// may still be writing what it owes), since a create in
			// the pod before it is gone is refused by it, and waits
			// for it then (createInShim).
			if !waitGone(ctx, pid, shimExitWait) {
				o.log.WarnContext(ctx, "delete: the pod's shim is slow to exit after its last container", "container_id", id, "shim_pid", pid)
			}
			return nil
		case err != nil && !errors.Is(err, shim.ErrShimGone) && !errdefs.IsNotFound(err):
			o.log.WarnContext(ctx, "delete: shim", "container_id", id, "error", err)
		}
	}
	if !deleted {
		if _, err := o.run(ctx, runOpts{}, "delete", "--force", id); err != nil && !isRuntimeNotExist(err) {
			return err
		}
	}
	if shimDir != "" {
		o.removeDeadShimDir(shimDir)
	}
	return nil
}

// shimDelete asks the shim in shimDir to drop container id (shim.OpDelete).
func (o *Runtime) shimDelete(ctx context.Context, id, shimDir string) (shim.Response, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return shim.Do(sctx, shim.SocketPath(shimDir), shim.Request{Op: shim.OpDelete, ID: id})
}

// killAndDrop kills container id, which its shim still runs, waits for
// the shim to record its exit, and has the shim drop it.
func (o *Runtime) killAndDrop(ctx context.Context, id, shimDir string) (shim.Response, error) {
	sock := shim.SocketPath(shimDir)
	_, err := shim.Do(ctx, sock, shim.Request{Op: shim.OpKill, ID: id, Signal: int(unix.SIGKILL), All: true})
	if errors.Is(err, shim.ErrUnsupported) {
		_, err = o.run(ctx, runOpts{}, "kill", "--all", id, "9")
		if isRuntimeNotExist(err) {
			err = nil
		}
	}
	if err != nil {
		o.log.WarnContext(ctx, "delete: kill", "container_id", id, "error", err)
	}
	deadline := time.Now().Add(deleteStopWait)
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		_, werr := shim.Call(wctx, sock, id, shim.OpWait)
		cancel()
		resp, err := o.shimDelete(ctx, id, shimDir)
		if !errdefs.IsFailedPrecondition(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return resp, err
		}
		if werr != nil {
			// The wait could not be made: do not spin on it.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// removeDeadShimDir removes shimDir unless a shim serves it. A shim
// removes its own dir when it exits; this covers one that died, or never
// got to serve (crind killed while starting it). The pod's next shim
// makes the dir again.
func (o *Runtime) removeDeadShimDir(shimDir string) {
	unlock := o.pods.lock(shimDir)
	defer unlock()
	removeDeadShimDirLocked(shimDir)
}

// removeDeadShimDirLocked is removeDeadShimDir; the pod's lock is held.
func removeDeadShimDirLocked(shimDir string) {
	if liveShim(shimDir) == 0 {
		_ = os.Remove(shim.SocketPath(shimDir))
		_ = os.RemoveAll(shimDir)
	}
}

// removeLeftovers removes, at start-up, what a crind killed at the wrong
// moment or a shim killed while crind was down left in StateDir: the dirs
// of pod shims that are not running, and the runtime log files of
// commands that were running (run's .runtime-log-*).
func (o *Runtime) removeLeftovers() {
	ents, err := os.ReadDir(o.cfg.StateDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		switch name := e.Name(); {
		case e.IsDir() && strings.HasPrefix(name, shimDirPrefix):
			o.removeDeadShimDir(filepath.Join(o.cfg.StateDir, name))
		case !e.IsDir() && strings.HasPrefix(name, runtimeLogPrefix):
			_ = os.Remove(filepath.Join(o.cfg.StateDir, name))
		}
	}
}
