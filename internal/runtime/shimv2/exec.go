package shimv2

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/crin-dev/crin/internal/runtime"
)

var _ runtime.StreamExecer = (*Runtime)(nil)

// cappedBuffer keeps the first max bytes written to it and drops the rest
// (the writer is never blocked: the process must not stall on its output).
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); b.max <= 0 || room >= len(p) {
		b.buf.Write(p)
	} else if room > 0 {
		b.buf.Write(p[:room])
	}
	return len(p), nil
}

// Exec runs req through the shim's Exec, Start and Wait and collects its
// output from two fifos. When req.Timeout expires the process is killed
// and the error wraps context.DeadlineExceeded.
func (r *Runtime) Exec(ctx context.Context, id string, req runtime.ExecRequest) (runtime.ExecResult, error) {
	var res runtime.ExecResult
	if len(req.Args) == 0 {
		return res, fmt.Errorf("exec in container %s: no args: %w", id, errdefs.ErrInvalidArgument)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	stdout, stderr := &cappedBuffer{max: req.MaxOutput}, &cappedBuffer{max: req.MaxOutput}
	code, err := r.runExec(ctx, id, execIO{args: req.Args, stdout: stdout, stderr: stderr})
	res.Stdout, res.Stderr, res.ExitCode = stdout.buf.Bytes(), stderr.buf.Bytes(), code
	return res, err
}

// ExecStream runs an interactive process through the shim: stdin, stdout
// and stderr go through fifos (with TTY the shim's terminal carries the
// output on the stdout fifo), the end of req.Stdin closes the process's
// stdin (CloseIO), and req.Resize is relayed with ResizePty.
func (r *Runtime) ExecStream(ctx context.Context, id string, req runtime.StreamExecRequest) (int32, error) {
	if len(req.Args) == 0 {
		return 0, fmt.Errorf("exec in container %s: no args: %w", id, errdefs.ErrInvalidArgument)
	}
	st, err := r.Status(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if st.State != runtime.StateRunning {
		return 0, fmt.Errorf("exec in container %s: container is %s: %w", id, st.State, errdefs.ErrFailedPrecondition)
	}
	return r.runExec(ctx, id, execIO{
		args: req.Args, tty: req.TTY, stdin: req.Stdin, stdout: req.Stdout, stderr: req.Stderr, resize: req.Resize,
	})
}

// execIO is what runExec connects an exec'd process to.
type execIO struct {
	args           []string
	tty            bool
	stdin          io.Reader // nil: no stdin
	stdout, stderr io.Writer // nil: discarded
	resize         <-chan runtime.TerminalSize
}

// execFifos are the fifos of one exec: crind reads out and errOut (holding
// write ends of its own until the shim opened its ends, as for a
// container) and writes the one at inPath (relayExecInput).
type execFifos struct {
	paths   []string
	readers []*os.File
	holders []*os.File
	inPath  string
}

func (f *execFifos) releaseHolders() {
	for _, h := range f.holders {
		_ = h.Close()
	}
	f.holders = nil
}

func (f *execFifos) close() {
	f.releaseHolders()
	for _, x := range f.readers {
		_ = x.Close()
	}
	for _, p := range append(f.paths, f.inPath) {
		if p != "" {
			_ = os.Remove(p)
		}
	}
}

// makeExecFifos makes the fifos of exec execID in dir: stdout, stderr
// unless tty, stdin when wanted.
func makeExecFifos(dir, execID string, tty, stdin bool) (*execFifos, error) {
	f := &execFifos{}
	streams := []string{"stdout", "stderr"}
	if tty {
		streams = streams[:1]
	}
	for _, s := range streams {
		p := filepath.Join(dir, "."+execID+"-"+s)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return f, err
		}
		f.paths = append(f.paths, p)
		rd, err := openFifoReader(p)
		if err != nil {
			return f, err
		}
		f.readers = append(f.readers, rd)
		h, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return f, err
		}
		f.holders = append(f.holders, h)
	}
	if stdin {
		f.inPath = filepath.Join(dir, "."+execID+"-stdin")
		if err := syscall.Mkfifo(f.inPath, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// copyExecOutput copies each reader to the matching writer (nil: dropped)
// in the background. The returned func waits (at most d) for the copies
// to reach end of file, then stops them; the writers may be read only
// after it returned.
func copyExecOutput(readers []*os.File, stdout, stderr io.Writer) (wait func(d time.Duration)) {
	outs := []io.Writer{stdout, stderr}
	copied := make(chan struct{}, len(readers))
	for i, f := range readers {
		w := outs[i]
		if w == nil {
			w = io.Discard
		}
		go func() {
			_, _ = io.Copy(w, f)
			copied <- struct{}{}
		}()
	}
	return func(d time.Duration) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		n := 0
		for ; n < len(readers); n++ {
			select {
			case <-copied:
				continue
			case <-timer.C:
			}
			break
		}
		for _, f := range readers {
			_ = f.Close()
		}
		for ; n < len(readers); n++ {
			<-copied
		}
	}
}

// runExec runs one exec'd process through the shim and returns its exit
// code once it exited and its output was copied (bounded by ioDrainWait:
// a background process may keep the output open). When ctx ends first the
// process is killed and the error wraps ctx.Err().
func (r *Runtime) runExec(ctx context.Context, id string, x execIO) (int32, error) {
	dir, m, err := r.known(id)
	if err != nil {
		return -1, err
	}
	procAny, err := execProcess(dir, x.args, x.tty)
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	execID := "exec-" + hex.EncodeToString(rnd[:])
	fifos, err := makeExecFifos(dir, execID, x.tty, x.stdin != nil)
	defer fifos.close()
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}

	waitCopies := copyExecOutput(fifos.readers, x.stdout, x.stderr)

	bg := context.WithoutCancel(ctx)
	req := &task.ExecProcessRequest{ID: id, ExecID: execID, Terminal: x.tty, Stdin: fifos.inPath, Stdout: fifos.paths[0], Spec: procAny}
	if len(fifos.paths) > 1 {
		req.Stderr = fifos.paths[1]
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := c.task.Exec(cctx, req); err != nil {
		waitCopies(0)
		return -1, fmt.Errorf("exec in container %s: %w", id, fromShim(err))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(bg, r.cfg.CallTimeout)
		defer cancel()
		if _, err := c.task.Delete(dctx, &task.DeleteRequest{ID: id, ExecID: execID}); err != nil {
			if err = fromShim(err); !errdefs.IsNotFound(err) {
				r.log.WarnContext(ctx, "delete exec process", "container_id", id, "exec_id", execID, "error", err)
			}
		}
	}()
	if _, err := c.task.Start(cctx, &task.StartRequest{ID: id, ExecID: execID}); err != nil {
		waitCopies(0)
		return -1, fmt.Errorf("exec in container %s: %w", id, fromShim(err))
	}
	fifos.releaseHolders()
	stop := r.relayExecInput(ctx, c, id, execID, fifos.inPath, x)
	defer stop()

	resp, werr := c.task.Wait(ctx, &task.WaitRequest{ID: id, ExecID: execID})
	if werr != nil && ctx.Err() != nil {
		kctx, kcancel := context.WithTimeout(bg, r.cfg.CallTimeout)
		_, _ = c.task.Kill(kctx, &task.KillRequest{ID: id, ExecID: execID, Signal: uint32(syscall.SIGKILL)})
		_, _ = c.task.Wait(kctx, &task.WaitRequest{ID: id, ExecID: execID})
		kcancel()
		waitCopies(ioDrainWait)
		return -1, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	}
	if werr != nil {
		waitCopies(0)
		return -1, fmt.Errorf("exec in container %s: %w", id, fromShim(werr))
	}
	waitCopies(ioDrainWait)
	return int32(resp.GetExitStatus()), nil
}

// relayExecInput copies x.stdin into the exec's stdin fifo at inPath
// (closing the process's stdin at its end) and relays terminal sizes.
// stop ends both and waits for the resize relay; the stdin copy may sit
// in a read of the client's stream, which the caller's stream ends, so it
// is not waited for: its next write fails.
//
// The fifo is opened write-only, which waits for the shim's read end. The
// shim opens its ends of an exec's stdin in the background after Start
// answers, and a fifo that no process holds open drops what is in it: a
// write end of crind's own opened earlier and closed at the end of a short
// input could be the fifo's last, losing the input, and the shim's read
// end, opened after that, would then wait for a writer for ever (the
// process never gets its input or its end of file).
func (r *Runtime) relayExecInput(ctx context.Context, c *conn, id, execID, inPath string, x execIO) (stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	var stopped atomic.Bool
	opened := make(chan struct{}) // the write-only open returned
	if inPath != "" {
		go func() {
			in, err := os.OpenFile(inPath, os.O_WRONLY, 0)
			close(opened)
			if err != nil {
				r.log.DebugContext(ctx, "open exec stdin", "container_id", id, "exec_id", execID, "error", err)
				return
			}
			if stopped.Load() {
				// Opened by stop's release: the session is over.
				_ = in.Close()
				return
			}
			_, _ = io.Copy(in, x.stdin)
			// The shim's copy into the process sees the end once every
			// write end is closed: crind's, then (CloseIO) the shim's own.
			_ = in.Close()
			cctx, ccancel := r.callCtx(context.WithoutCancel(rctx))
			defer ccancel()
			if _, err := c.task.CloseIO(cctx, &task.CloseIORequest{ID: id, ExecID: execID, Stdin: true}); err != nil {
				r.log.DebugContext(ctx, "close exec stdin", "container_id", id, "exec_id", execID, "error", fromShim(err))
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if x.resize != nil {
			r.relayResizes(rctx, c, id, execID, x.resize)
		}
	}()
	return func() {
		stopped.Store(true)
		if inPath != "" {
			// The write-only open waits for a reader, and the shim may
			// never have opened its end: a read end held until that open
			// returned lets it return (before the caller removes the
			// fifo, so it is never left waiting).
			if rd, err := os.OpenFile(inPath, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				<-opened
				_ = rd.Close()
			}
		}
		cancel()
		<-done
	}
}

// execProcess is runtime.ExecProcess, as the shim takes it.
func execProcess(dir string, args []string, tty bool) (*anypb.Any, error) {
	data, err := runtime.ExecProcess(dir, args, tty)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: processURL, Value: data}, nil
}
