package shim

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ExecKillWait bounds how long Exec, once ctx ended, waits for the shim to
// report the process killed (its exit frame) before it gives up.
const ExecKillWait = 5 * time.Second

// ExecStreams are an exec client's ends.
type ExecStreams struct {
	// Stdin, when set, feeds the process's stdin; its end (EOF or error)
	// closes that stdin, unless the process runs on a terminal, which has
	// no end of input. Nil gives the process /dev/null.
	Stdin io.Reader
	// Stdout and Stderr receive the process's output; nil discards a
	// stream. A process on a terminal has only stdout.
	Stdout, Stderr io.Writer
	// Resize delivers terminal sizes (TTY only); nil means none.
	Resize <-chan TerminalSize
}

// Exec runs the process opts describes in container id under the shim
// listening on socket (OpExec), copies its streams, and returns its exit
// code (128+signal when a signal killed it) once it exited and its output
// was copied. A process that ran and failed is not an error. When ctx ends
// first, Exec half-closes the connection, which makes the shim kill the
// process; it still copies the output until the shim reports the process
// gone (at most ExecKillWait), and returns ctx's error. Errors of the
// request are classified like Call's: a container the shim does not know
// is errdefs.ErrNotFound, one that is not running
// errdefs.ErrFailedPrecondition; a runtime that could not start the
// process is an unclassified error with the runtime's message.
//
// The copy from streams.Stdin runs on a goroutine that is not waited for,
// as in Attach.
//
// On the wire, after the one-line Response (Pid, and TTY), the shim sends
// frames like Attach's: stdout, stderr, and last a FrameExit; the client
// sends stdin, end-of-stdin and resize frames. The connection closing, or
// the client's half-close, before the exit frame kills the process.
func Exec(ctx context.Context, socket, id string, opts ExecOptions, streams ExecStreams) (int32, error) {
	opts.Stdin = streams.Stdin != nil
	conn, br, resp, err := openStream(ctx, socket, Request{Op: OpExec, ID: id, Exec: &opts})
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	// The process dies with the connection; its last output and exit
	// frame still come, so the caller sees what it wrote before the end.
	stop := context.AfterFunc(ctx, func() {
		if uc, ok := conn.(*net.UnixConn); ok && uc.CloseWrite() == nil {
			_ = conn.SetReadDeadline(time.Now().Add(ExecKillWait))
			return
		}
		_ = conn.SetDeadline(time.Unix(1, 0))
	})
	defer stop()

	out := &frameWriter{c: conn}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	if streams.Stdin != nil {
		go sendInput(out, streams.Stdin)
	}
	if resp.TTY && streams.Resize != nil {
		wg.Go(func() { sendResizes(out, streams.Resize, done) })
	}
	code, err := readFrames(br, OpExec, streams.Stdout, streams.Stderr)
	switch {
	case ctx.Err() != nil:
		return -1, ctx.Err()
	case err != nil:
		return -1, err
	case code == nil:
		// The shim closed the connection without an exit: it died.
		return -1, fmt.Errorf("shim %s: no exit status: %w", OpExec, ErrShimGone)
	}
	return *code, nil
}
