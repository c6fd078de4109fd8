package oci

// The oci backend's view of a container's state: from its shim, or without
// one from the recorded exit and the runtime's own state.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// Status asks the shim; without a shim it reads the recorded exit, and
// without that the runtime's own state (StateUnknown when it has none). A
// pending container is created, or stopped once killed.
func (o *Runtime) Status(ctx context.Context, id string) (runtime.Status, error) {
	if dir, err := o.known(id); err == nil && pending(dir) {
		return o.statusWithoutShim(ctx, id)
	}
	resp, err := o.call(ctx, id, shim.OpState)
	if err == nil {
		return statusOf(resp), nil
	}
	if !errors.Is(err, shim.ErrShimGone) {
		return runtime.Status{}, fmt.Errorf("status of container %s: %w", id, err)
	}
	return o.statusWithoutShim(ctx, id)
}

func (o *Runtime) statusWithoutShim(ctx context.Context, id string) (runtime.Status, error) {
	dir := o.dir(id)
	if e, err := exitrec.Read(dir); err == nil {
		return runtime.StatusOfExit(e), nil
	}
	if pending(dir) {
		return runtime.Status{State: runtime.StateCreated}, nil
	}
	if pid, gone := shimGone(dir); gone {
		return o.shimDied(ctx, id, dir, pid)
	}
	st, err := o.runtimeState(ctx, id)
	if err != nil {
		if isRuntimeNotExist(err) {
			return runtime.Status{State: runtime.StateUnknown}, nil
		}
		return runtime.Status{}, fmt.Errorf("status of container %s: %w", id, err)
	}
	switch st.Status {
	case "created":
		return runtime.Status{State: runtime.StateCreated, Pid: st.Pid}, nil
	case "running", "paused":
		return runtime.Status{State: runtime.StateRunning, Pid: st.Pid}, nil
	}
	// Stopped, but nobody saw how: the exit code is lost.
	return runtime.Status{State: runtime.StateUnknown}, nil
}

// shimGone reports whether the shim of the container in dir is dead: its
// pid file names a process that is gone or is no longer that shim. A dir
// without a pid file (a create that failed early) tells nothing.
func shimGone(dir string) (int, bool) {
	pid := readPid(filepath.Join(dir, shim.ShimPidFile))
	if pid <= 0 {
		return 0, false
	}
	shimDir := shimDirFor(dir)
	return pid, shimDir == "" || !alive(pid) || !isShimOf(pid, shimDir)
}

// shimDied handles a container whose shim died before recording its exit
// (killed, crashed, OOM-killed) by runtime.RecordShimDied: nobody reads
// its output or will reap it, so what is left of it is killed and removed
// from the runtime (settleShimDied), and the exit is recorded on the
// shim's behalf with exit code 255 and ReasonShimDied (docs/recovery.md).
// When the init is still a zombie that ended other than by SIGKILL, its
// own status is recorded instead (a process that wrote to its output
// after the shim died was killed by SIGPIPE: 141), with the same reason.
// A SIGKILLed one was killed along with what else the shim held (its
// pod's infra, whose PID namespace it shared): 255. It is idempotent: a
// second caller reads the first one's record.
func (o *Runtime) shimDied(ctx context.Context, id, dir string, shimPid int) (runtime.Status, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st, recorded, err := runtime.RecordShimDied(dir, func() exitrec.Exit {
		return o.settleShimDied(ctx, id, dir, shimPid)
	})
	if err != nil {
		return runtime.Status{}, fmt.Errorf("container %s: %w", id, err)
	}
	if recorded {
		o.log.WarnContext(ctx, "container's shim died", "container_id", id, "shim_pid", shimPid,
			"exit_code", st.ExitCode, "message", st.Message)
	}
	return st, nil
}

// settleShimDied kills and deletes what is left of a container whose shim
// died, and says how it ended, for runtime.RecordShimDied.
func (o *Runtime) settleShimDied(ctx context.Context, id, dir string, shimPid int) exitrec.Exit {
	initPid := readPid(filepath.Join(dir, shim.InitPidFile))
	e := exitrec.Exit{Pid: initPid, ExitCode: 255}
	var ws unix.WaitStatus
	zombie := false
	if initPid > 0 {
		ws, zombie = zombieExit(initPid)
	}
	st, serr := o.runtimeState(ctx, id)
	live := serr == nil && st.Status != "stopped"
	switch {
	case live:
		if _, err := o.run(ctx, runOpts{}, "kill", "--all", id, "9"); err != nil && !isRuntimeNotExist(err) {
			o.log.WarnContext(ctx, "kill container of a dead shim", "container_id", id, "error", err)
		}
		if st.Pid > 0 {
			waitGone(ctx, st.Pid, deleteStopWait)
		}
		e.Message = fmt.Sprintf("crin-shim (pid %d) died while the container was %s; crind killed the container", shimPid, st.Status)
	case zombie && ws.Signaled() && ws.Signal() == unix.SIGKILL:
		// Killed with what else the shim held (its pod's infra, whose
		// PID namespace it shared): the shim's death is the cause.
		e.Message = fmt.Sprintf("crin-shim (pid %d) died; then the container's process %s", shimPid, describeWait(ws))
	case zombie:
		code, sig := exitCode(ws)
		e.ExitCode, e.Signal = code, sig
		e.Message = fmt.Sprintf("crin-shim (pid %d) died; then the container's process %s", shimPid, describeWait(ws))
	default:
		e.Message = fmt.Sprintf("crin-shim (pid %d) died; the container's process exited unseen, its exit status is lost "+
			"(a process writing to its output is killed by SIGPIPE once the shim is gone)", shimPid)
	}
	if _, err := o.run(ctx, runOpts{}, "delete", "--force", id); err != nil && !isRuntimeNotExist(err) {
		o.log.WarnContext(ctx, "delete container of a dead shim", "container_id", id, "error", err)
	}
	return e
}

// exitCode is the shell convention: the status, or 128+signal.
func exitCode(ws unix.WaitStatus) (code int32, sig int) {
	if ws.Signaled() {
		return 128 + int32(ws.Signal()), int(ws.Signal())
	}
	return int32(ws.ExitStatus()), 0
}

func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), unix.SignalName(ws.Signal()))
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

func statusOf(r shim.Response) runtime.Status {
	if r.Exit != nil {
		return runtime.StatusOfExit(*r.Exit)
	}
	st := runtime.Status{State: runtime.StateUnknown, Pid: r.Pid, StartedAt: r.StartedAt}
	if r.State == shim.StateRunning {
		st.State = runtime.StateRunning
	}
	return st
}

// Wait blocks on the shim until the container exits. A shim that dies
// (SIGKILL, crash) ends the wait at once: the kernel closes its end of the
// wait's connection, and the container is then killed and recorded as
// ReasonShimDied (see shimDied). Without a shim it polls the recorded exit
// and the runtime's state.
func (o *Runtime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	if _, err := o.known(id); err != nil {
		return runtime.Status{}, err
	}
	resp, err := o.call(ctx, id, shim.OpWait)
	if err == nil {
		return statusOf(resp), nil
	}
	if ctx.Err() != nil {
		return runtime.Status{}, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
	}
	if !errors.Is(err, shim.ErrShimGone) {
		return runtime.Status{}, fmt.Errorf("wait for container %s: %w", id, err)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := o.statusWithoutShim(ctx, id)
		if err != nil {
			return runtime.Status{}, err
		}
		if st.State == runtime.StateStopped || st.State == runtime.StateUnknown {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return runtime.Status{}, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}
