package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/serving"
	"github.com/crin-dev/crin/internal/store"
)

// streamShutdownWait bounds how long ServeStreams waits for the streams in
// flight once they were told to stop.
const streamShutdownWait = 10 * time.Second

// newStreamServer builds the streaming server whose URLs name addr, the
// address the caller's listener is bound to.
func newStreamServer(s *Service, addr string) (streaming.Server, *streamRuntime, error) {
	rt := &streamRuntime{s: s}
	rt.ctx, rt.cancel = context.WithCancel(s.ctx)
	cfg := streaming.DefaultConfig
	cfg.Addr = addr
	cfg.BaseURL = &url.URL{Scheme: "http", Host: addr}
	srv, err := streaming.NewServer(cfg, rt)
	if err != nil {
		rt.cancel()
		return nil, nil, fmt.Errorf("streaming server on %s: %w", addr, err)
	}
	return srv, rt, nil
}

// ServeStreams serves the exec, attach and port-forward URLs that the
// Exec, Attach and PortForward RPCs hand out, on lis (bound to
// Options.StreamAddress), until ctx ends. It then stops accepting, cancels
// the streams in flight (killing their exec'd processes) and waits for them.
// It returns nil after ctx ended, or the error that stopped serving. Without
// Options.StreamAddress it is errdefs.ErrNotImplemented.
func (s *Service) ServeStreams(ctx context.Context, lis net.Listener) error {
	if s.stream == nil {
		lis.Close()
		return fmt.Errorf("serve streams: no stream address configured: %w", errdefs.ErrNotImplemented)
	}
	hs := &http.Server{Handler: serving.RecoverHTTP(s.log, s.opts.Metrics, "stream", s.stream), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lis) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), streamShutdownWait)
	defer cancel()
	// Shutdown forgets hijacked connections (every stream is one); the
	// runtime adapter tracks and cancels those.
	_ = hs.Shutdown(sctx)
	if err == nil {
		err = <-errc
	}
	s.streamRT.close(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve streams: %w", err)
}

// streamRuntime is the streaming server's view of the Service: it runs the
// exec, attach and port-forward sessions the server has set up streams for.
type streamRuntime struct {
	s *Service
	// ctx ends when ServeStreams stops (or the Service closes); every
	// session's context derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards closed and the adding to sessions.
	mu       sync.Mutex
	closed   bool
	sessions sync.WaitGroup
}

var _ streaming.Runtime = (*streamRuntime)(nil)

// begin registers a session; the returned context ends with the session's
// own ctx or when the adapter closes. done must be called when it ends.
func (r *streamRuntime) begin(ctx context.Context) (context.Context, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, fmt.Errorf("streaming server is shutting down: %w", errdefs.ErrUnavailable)
	}
	r.sessions.Add(1)
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.ctx, cancel)
	return sctx, func() {
		stop()
		cancel()
		r.sessions.Done()
	}, nil
}

// close cancels the sessions and waits for them, at most until ctx ends.
func (r *streamRuntime) close(ctx context.Context) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	done := make(chan struct{})
	go func() {
		r.sessions.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.s.log.WarnContext(ctx, "streams still running after shutdown")
	}
}

// open begins a session (see begin) on the running container
// containerID, for Exec and Attach. done must be called when the session
// ends, not when open fails.
func (r *streamRuntime) open(ctx context.Context, containerID string) (context.Context, containerRef, runtime.Runtime, func(), error) {
	ctx, done, err := r.begin(ctx)
	if err != nil {
		return nil, containerRef{}, nil, nil, err
	}
	ref, rt, err := r.s.runningContainer(containerID)
	if err != nil {
		done()
		return nil, containerRef{}, nil, nil, err
	}
	return ctx, ref, rt, done, nil
}

// Exec runs cmd in a running container with the client's streams. A
// non-zero exit is reported as an exit error, which the streaming server
// passes to the client as the command's exit code.
func (r *streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) (err error) {
	defer serving.RecoverSession(ctx, r.s.log, r.s.opts.Metrics, "exec", &err)
	ctx, rec, rt, done, err := r.open(ctx, containerID)
	if err != nil {
		return err
	}
	defer done()
	se, ok := rt.(runtime.StreamExecer)
	if !ok {
		return fmt.Errorf("exec in %s: runtime cannot stream: %w", rec.ID, errdefs.ErrNotImplemented)
	}
	sizes, stopSizes := relaySizes(ctx, resize)
	defer stopSizes()
	req := runtime.StreamExecRequest{Args: cmd, TTY: tty, Resize: sizes}
	if in != nil {
		req.Stdin = in
	}
	if out != nil {
		req.Stdout = out
	}
	if errOut != nil && !tty {
		req.Stderr = errOut
	}
	r.s.log.DebugContext(ctx, "exec stream", "container_id", rec.ID, "tty", tty, "cmd", cmd)
	code, err := se.ExecStream(ctx, rec.ID, req)
	if err != nil {
		return fmt.Errorf("exec in %s: %w", rec.ID, err)
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: int(code)}
	}
	return nil
}

// Attach connects the client to a running container's stdio: its output,
// its stdin when it was created with one, and its terminal's size.
func (r *streamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) (err error) {
	defer serving.RecoverSession(ctx, r.s.log, r.s.opts.Metrics, "attach", &err)
	ctx, rec, rt, done, err := r.open(ctx, containerID)
	if err != nil {
		return err
	}
	defer done()
	at, ok := rt.(runtime.Attacher)
	if !ok {
		return fmt.Errorf("attach to %s: runtime cannot attach: %w", rec.ID, errdefs.ErrNotImplemented)
	}
	var req runtime.AttachRequest
	if in != nil && rec.Stdin {
		req.Stdin = in
	}
	if out != nil {
		req.Stdout = out
	}
	if errOut != nil && !rec.TTY {
		req.Stderr = errOut
	}
	if rec.TTY {
		sizes, stopSizes := relaySizes(ctx, resize)
		defer stopSizes()
		req.Resize = sizes
	}
	r.s.log.DebugContext(ctx, "attach stream", "container_id", rec.ID, "stdin", req.Stdin != nil, "tty", rec.TTY)
	if err := at.Attach(ctx, rec.ID, req); err != nil && ctx.Err() == nil {
		return fmt.Errorf("attach to %s: %w", rec.ID, err)
	}
	return nil
}

// runningContainer finds a running container and its runtime: unknown is
// NotFound, not running FailedPrecondition.
func (s *Service) runningContainer(id string) (containerRef, runtime.Runtime, error) {
	c, err := s.getContainerExact(id)
	if err != nil {
		return containerRef{}, nil, err
	}
	return s.running(c)
}

// running is runningContainer for a container already found, for RPCs
// that check their request between the two (an unknown container is
// NotFound before a bad request is InvalidArgument, which is before a
// stopped container is FailedPrecondition).
func (s *Service) running(c *container) (containerRef, runtime.Runtime, error) {
	c.mu.Lock()
	rec := c.rec
	state := rec.State
	c.mu.Unlock()
	if state != store.ContainerRunning {
		return containerRef{}, nil, fmt.Errorf("container %s is %s, not running: %w", rec.ID, state, errdefs.ErrFailedPrecondition)
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
		return containerRef{}, nil, err
	}
	return containerRef{ID: rec.ID, Stdin: c.config.GetStdin(), TTY: c.config.GetTty()}, rt, nil
}

// containerRef names a container outside its lock, with what attach needs
// of its (immutable) config.
type containerRef struct {
	ID    string
	Stdin bool // created with stdin kept open
	TTY   bool // runs on a terminal
}

// relaySizes turns the streaming server's resize events into the runtime's;
// stop ends the relay and waits for it.
func relaySizes(ctx context.Context, in <-chan remotecommand.TerminalSize) (<-chan runtime.TerminalSize, func()) {
	if in == nil {
		return nil, func() {}
	}
	out := make(chan runtime.TerminalSize)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- runtime.TerminalSize{Width: sz.Width, Height: sz.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, func() {
		cancel()
		<-done
	}
}
