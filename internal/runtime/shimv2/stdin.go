package shimv2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shimv2/logger"
)

// Fifos in the bundle of a container created with stdin.
const (
	// stdinFifo is the container's stdin. The shim holds a write end of
	// its own from the task's create until CloseIO or the task's delete,
	// so the container's stdin stays open while no client is attached and
	// while crind is down; an attach with stdin writes into it.
	stdinFifo = "stdin.fifo"
	// stdoutFifo and stderrFifo carry the output of a container with
	// stdin and no terminal: containerd's runc shim copies a task's stdin
	// only when its stdio are fifos, not with the "binary" scheme.
	stdoutFifo = "stdout.fifo"
	stderrFifo = "stderr.fifo"
	// stdinTaken marks that a stdin_once container's one stdin session
	// began (made with O_EXCL: one session wins even across a restart).
	stdinTaken = "stdin.taken"
)

// loggerStartWait bounds how long crind waits for a logger it started
// to say it is ready.
const loggerStartWait = 30 * time.Second

// loggerStopWait is how long a logger gets to exit after SIGTERM before it
// is killed.
const loggerStopWait = 3 * time.Second

// taskStdio is the stdio of a task's create request.
type taskStdio struct {
	stdin, stdout, stderr string
}

// prepareStdio makes the fifos of a container created with stdin and
// returns the stdio of its task. A container without stdin, or one on a
// terminal (whose stdin the shim copies into the terminal beside a
// "binary" stdout), logs through a crin-logger the shim starts; one with
// stdin and no terminal through a crin-logger crind starts on the output
// fifos (startFifoLogger), which m records.
//
// gVisor's shim knows no "binary" scheme (it takes fifos or files): its
// containers always log through fifos and a crin-logger crind starts.
func (r *Runtime) prepareStdio(ctx context.Context, req runtime.CreateRequest, dir string, m *meta) (taskStdio, error) {
	out := logger.URI(r.cfg.LoggerBinary, dir)
	st := taskStdio{stdout: out, stderr: out}
	terminal := req.Spec.Process != nil && req.Spec.Process.Terminal
	if req.Stdin {
		st.stdin = filepath.Join(dir, stdinFifo)
		if err := unix.Mkfifo(st.stdin, 0o600); err != nil {
			return st, fmt.Errorf("make fifo %s: %w", stdinFifo, err)
		}
		m.Stdin, m.StdinOnce = true, req.StdinOnce
	}
	if !r.fifoOutput && (!req.Stdin || terminal) {
		return st, nil
	}
	st.stdout, st.stderr = filepath.Join(dir, stdoutFifo), filepath.Join(dir, stderrFifo)
	if err := r.startFifoLogger(ctx, req, dir, st.stdout, st.stderr); err != nil {
		return st, err
	}
	if terminal {
		st.stderr = "" // the terminal carries both
	}
	return st, nil
}

// startFifoLogger starts crin-logger on the output fifos of the container
// in dir, as the shim starts it for the "binary" scheme (fds 3 and 4 the
// output, fd 5 closed when ready), but as a process of its own session:
// it outlives crind, so a container keeps logging while crind is down.
// It holds both fifos open for reading and writing, so it never reads an
// end: teardown stops it, as the shim's task delete stops the logger the
// shim started.
func (r *Runtime) startFifoLogger(ctx context.Context, req runtime.CreateRequest, dir string, paths ...string) (retErr error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for _, p := range paths {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return fmt.Errorf("make fifo %s: %w", filepath.Base(p), err)
		}
		// Read-write: opens at once, with or without the shim's end.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open fifo %s: %w", filepath.Base(p), err)
		}
		files = append(files, f)
	}
	ready, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start logger: %w", err)
	}
	defer ready.Close()
	cmd := exec.Command(r.cfg.LoggerBinary, logger.DirFlag, dir)
	cmd.ExtraFiles = append(files, readyW)
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = readyW.Close()
	if err != nil {
		return fmt.Errorf("start logger: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reaped here while crind lives
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
		}
	}()
	_ = ready.SetReadDeadline(time.Now().Add(loggerStartWait))
	if _, err := io.Copy(io.Discard, ready); err != nil {
		return fmt.Errorf("start logger: not ready: %w", err)
	}
	if loggerPid(dir) != cmd.Process.Pid {
		return fmt.Errorf("start logger: it exited before it was ready (see crind's log for the logger's error)")
	}
	if r.cfg.PlaceShim != nil {
		if err := r.cfg.PlaceShim(ctx, "v2-logger-"+req.ID, cmd.Process.Pid); err != nil {
			r.log.WarnContext(ctx, "logger left in crind's cgroup", "container_id", req.ID, "pid", cmd.Process.Pid, "error", err)
		}
	}
	return nil
}

// stopLogger stops the logger of the container in dir if it still runs:
// one crind started, or one a dead shim left behind.
func stopLogger(ctx context.Context, dir string) {
	pid := loggerPid(dir)
	if pid == 0 {
		return
	}
	_ = unix.Kill(pid, unix.SIGTERM)
	deadline := time.Now().Add(loggerStopWait)
	for loggerPid(dir) == pid && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if loggerPid(dir) == pid {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// relayAttachInput copies in to the stdin of the container in dir until
// in ends, and then, for a stdin_once container, closes the container's
// stdin (CloseIO: the shim drops its own write end, and the container
// reads the end once crind's is closed too). Of a stdin_once container
// only the first session's input is delivered; later ones' is read and
// dropped, as the oci backend does.
func (r *Runtime) relayAttachInput(ctx context.Context, c *conn, id, dir string, m meta, in io.Reader) {
	if m.StdinOnce {
		f, err := os.OpenFile(filepath.Join(dir, stdinTaken), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			_, _ = io.Copy(io.Discard, in)
			return
		}
		_ = f.Close()
	}
	w, err := openStdinFifo(ctx, filepath.Join(dir, stdinFifo))
	if err != nil {
		r.log.WarnContext(ctx, "attach: the container's stdin cannot be opened; the client's input is dropped", "container_id", id, "error", err)
		_, _ = io.Copy(io.Discard, in)
		return
	}
	_, err = io.Copy(w, in)
	if err != nil && !errors.Is(err, io.EOF) {
		r.log.DebugContext(ctx, "copy to container stdin", "container_id", id, "error", err)
	}
	_ = w.Close()
	if !m.StdinOnce {
		return
	}
	cctx, cancel := r.callCtx(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := c.task.CloseIO(cctx, &task.CloseIORequest{ID: id, Stdin: true}); err != nil {
		r.log.DebugContext(ctx, "close container stdin", "container_id", id, "error", fromShim(err))
	}
}

// stdinOpenWait bounds how long an attach waits for the shim's read end of
// a container's stdin fifo.
const stdinOpenWait = 10 * time.Second

// openStdinFifo opens the stdin fifo at path for writing without
// blocking. The shim opens its read end in the background during the
// task's create, so until it has (ENXIO) the open is tried again, for at
// most stdinOpenWait; a shim that is gone never opens it.
func openStdinFifo(ctx context.Context, path string) (*os.File, error) {
	deadline := time.Now().Add(stdinOpenWait)
	for {
		w, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0)
		if err == nil || !errors.Is(err, unix.ENXIO) || time.Now().After(deadline) {
			return w, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// relayResizes hands the terminal sizes from sizes to the shim, for the
// container's terminal (execID "") or an exec's, until ctx ends or sizes
// closes.
func (r *Runtime) relayResizes(ctx context.Context, c *conn, id, execID string, sizes <-chan runtime.TerminalSize) {
	for {
		select {
		case <-ctx.Done():
			return
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			cctx, cancel := r.callCtx(ctx)
			_, err := c.task.ResizePty(cctx, &task.ResizePtyRequest{ID: id, ExecID: execID, Width: uint32(sz.Width), Height: uint32(sz.Height)})
			cancel()
			if err != nil {
				r.log.DebugContext(ctx, "resize terminal", "container_id", id, "exec_id", execID, "error", fromShim(err))
			}
		}
	}
}
