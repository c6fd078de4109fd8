package shimv2

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
)

// Status asks the shim; with its exit recorded it reads the record, and
// with its shim dead it records the death (see the package doc).
func (r *Runtime) Status(ctx context.Context, id string) (runtime.Status, error) {
	return r.askShim(ctx, id, "status of", func(c *conn, dir string, m meta) (runtime.Status, bool, error) {
		cctx, cancel := r.callCtx(ctx)
		resp, err := c.task.State(cctx, &task.StateRequest{ID: id})
		cancel()
		if err == nil {
			st, err := r.statusOf(ctx, id, dir, m, resp)
			return st, true, err
		}
		err = fromShim(err)
		if errdefs.IsNotFound(err) {
			return runtime.Status{State: runtime.StateUnknown}, true, nil
		}
		return runtime.Status{}, false, err
	})
}

// askShim is Status's and Wait's common frame. A recorded exit answers at
// once. Otherwise ask puts the question to the live shim and says whether
// its answer (or error) is final; when it is not, or the shim cannot be
// reached, a shim found gone has its death recorded (shimDied), and a live
// one's error is returned as "<op> container <id>".
func (r *Runtime) askShim(ctx context.Context, id, op string, ask func(c *conn, dir string, m meta) (runtime.Status, bool, error)) (runtime.Status, error) {
	dir, m, err := r.known(id)
	if err != nil {
		return runtime.Status{}, err
	}
	if e, err := exitrec.Read(dir); err == nil {
		return runtime.StatusOfExit(e), nil
	}
	c, err := r.conn(ctx, m.Address)
	if err == nil {
		var st runtime.Status
		var final bool
		if st, final, err = ask(c, dir, m); final {
			return st, err
		}
	}
	if r.shimGone(ctx, m) {
		return r.shimDied(ctx, id, dir, m)
	}
	return runtime.Status{}, fmt.Errorf("%s container %s: %w", op, id, err)
}

func (r *Runtime) statusOf(ctx context.Context, id, dir string, m meta, resp *task.StateResponse) (runtime.Status, error) {
	st := runtime.Status{Pid: int(resp.GetPid()), StartedAt: m.StartedAt}
	switch resp.GetStatus() {
	case tasktypes.Status_CREATED:
		st.State = runtime.StateCreated
	case tasktypes.Status_RUNNING, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
		st.State = runtime.StateRunning
	case tasktypes.Status_STOPPED:
		return r.recordExit(ctx, id, dir, m, resp.GetExitStatus(), resp.GetExitedAt().AsTime())
	default:
		st.State = runtime.StateUnknown
	}
	return st, nil
}

// recordExit writes the exit record once the shim reported the exit, so
// it outlives the shim. It first gives the logger a moment to write the
// last of the output, so the log is whole when the exit is reported.
func (r *Runtime) recordExit(ctx context.Context, id, dir string, m meta, code uint32, at time.Time) (runtime.Status, error) {
	if e, err := exitrec.Read(dir); err == nil {
		return runtime.StatusOfExit(e), nil
	}
	waitLogger(ctx, dir, ioDrainWait)
	e := exitrec.Exit{Pid: m.Pid, ExitCode: int32(code), StartedAt: m.StartedAt, FinishedAt: at}
	if code > 128 && code < 128+65 {
		e.Signal = int(code - 128)
	}
	e.OOMKilled = oomKilled(m, code)
	if err := exitrec.Write(dir, e); err != nil {
		return runtime.Status{}, fmt.Errorf("container %s: record exit: %w", id, err)
	}
	r.log.InfoContext(ctx, "container exited", "container_id", id, "exit_code", e.ExitCode)
	return runtime.StatusOfExit(e), nil
}

// Wait blocks on the shim's Wait RPC. A shim that dies ends the wait at
// once (its connection closes): the container is then cleaned up and
// recorded as runtime.ReasonShimDied. A task its live shim does not know
// is errdefs.ErrNotFound (its exit is lost).
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	return r.askShim(ctx, id, "wait for", func(c *conn, dir string, m meta) (runtime.Status, bool, error) {
		resp, err := c.task.Wait(ctx, &task.WaitRequest{ID: id})
		if err == nil {
			st, err := r.recordExit(ctx, id, dir, m, resp.GetExitStatus(), resp.GetExitedAt().AsTime())
			return st, true, err
		}
		if ctx.Err() != nil {
			return runtime.Status{}, true, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
		}
		err = fromShim(err)
		if errdefs.IsNotFound(err) {
			// Its exit code is lost: never reported as a success.
			return runtime.Status{}, true, fmt.Errorf("wait for container %s: its shim no longer knows it: %w", id, err)
		}
		return runtime.Status{}, false, err
	})
}

// shimDied handles a container whose shim is gone before its exit was
// recorded, by runtime.RecordShimDied: the shim's delete command removes
// what is left of it from the OCI runtime (killing its processes), and
// the exit is recorded with code 255 and runtime.ReasonShimDied.
// Idempotent.
func (r *Runtime) shimDied(ctx context.Context, id, dir string, m meta) (runtime.Status, error) {
	r.diedMu.Lock()
	defer r.diedMu.Unlock()
	st, recorded, err := runtime.RecordShimDied(dir, func() exitrec.Exit {
		r.dropConn(m.Address)
		if err := r.shimDelete(ctx, id, dir); err != nil {
			r.log.WarnContext(ctx, "clean up container of a dead shim", "container_id", id, "error", err)
		}
		return exitrec.Exit{
			Pid: m.Pid, ExitCode: 255, StartedAt: m.StartedAt,
			Message: fmt.Sprintf("%s (pid %d) died before the container exited; crind deleted what was left of the container",
				filepath.Base(r.cfg.Binary), m.ShimPid),
		}
	})
	if err != nil {
		return runtime.Status{}, fmt.Errorf("container %s: %w", id, err)
	}
	if recorded {
		removeSocket(m.Address)
		r.log.WarnContext(ctx, "container's shim died", "container_id", id, "shim_pid", m.ShimPid, "message", st.Message)
	}
	return st, nil
}
