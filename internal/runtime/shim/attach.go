package shim

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Attach streams, from the shim: the frame header's first byte.
const (
	FrameStdout byte = 1
	FrameStderr byte = 2
	// FrameExit ends an OpExec stream: payload the process's exit code,
	// a big-endian int32 (128+signal when a signal killed it).
	FrameExit byte = 3
)

// Attach frames from the client: the frame header's first byte.
const (
	FrameStdin  byte = 1 // payload: input for the container's stdin
	FrameEOF    byte = 2 // the client's input ended; no payload
	FrameResize byte = 3 // payload: big-endian uint16 width, uint16 height
)

// Attach frame limits.
const (
	// MaxFrame caps one frame's payload.
	MaxFrame = 1 << 20
	// InputChunk is the most input a client sends in one frame.
	InputChunk = 32 << 10
)

// ErrAttachLagged reports an attached client that fell too far behind the
// container's output and was cut off.
var ErrAttachLagged = errors.New("attach: client fell behind the container's output and was disconnected")

// TerminalSize is a terminal's size in character cells.
type TerminalSize struct {
	Width  uint16
	Height uint16
}

// AttachStreams are an attach client's ends.
type AttachStreams struct {
	// Stdin, when set, feeds the container's stdin, if the container was
	// created with one and it is still open (with stdin_once, only the
	// first session that brings stdin gets it; later ones' input is
	// dropped). Its end (EOF or error) is reported to the shim, which
	// closes the container's stdin when it was created with stdin_once.
	Stdin io.Reader
	// Stdout and Stderr receive the container's output from the moment of
	// attaching; nil discards a stream. A container on a terminal has
	// only stdout.
	Stdout, Stderr io.Writer
	// Resize delivers terminal sizes for a container on a terminal; nil
	// means none.
	Resize <-chan TerminalSize
}

// Attach attaches to the container through the shim listening on socket:
// it copies what the container writes from now on to streams' writers and
// streams.Stdin to the container until the container has exited and its
// output drained (nil), ctx ends (ctx's error), the shim cuts the client
// off, or, for a client that wants no output, its stdin ended (nil).
// Errors of the request are classified like Call's.
//
// The copy from streams.Stdin runs on a goroutine that is not waited for:
// a Read blocked on a reader the caller owns cannot be interrupted. It ends
// at its next Read once Attach returned.
//
// On the wire, after the one-line Response to an OpAttach Request, the shim
// sends frames: one stream byte (1 stdout, 2 stderr), a big-endian uint32
// length, then that many bytes. A frame with stream 0 and a message as
// payload reports why the shim stopped early. The client sends frames of
// the same shape: 1 stdin data, 2 end of its stdin, 3 a terminal size.
func Attach(ctx context.Context, socket, id string, streams AttachStreams) error {
	conn, br, resp, err := openStream(ctx, socket, Request{Op: OpAttach, ID: id, Stdin: streams.Stdin != nil})
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	out := &frameWriter{c: conn}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	var inputEnded atomic.Bool
	noOutput := streams.Stdout == nil && streams.Stderr == nil
	if streams.Stdin != nil && (resp.Stdin || noOutput) {
		go func() {
			if resp.Stdin {
				sendInput(out, streams.Stdin)
			} else {
				_, _ = io.Copy(io.Discard, streams.Stdin)
			}
			if noOutput {
				inputEnded.Store(true)
				_ = conn.SetReadDeadline(time.Unix(1, 0))
			}
		}()
	}
	if resp.TTY && streams.Resize != nil {
		wg.Go(func() { sendResizes(out, streams.Resize, done) })
	}
	_, err = readFrames(br, OpAttach, streams.Stdout, streams.Stderr)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && inputEnded.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	}
	return err
}

// openStream dials the shim, sends req and reads its one-line answer, for
// the ops whose connection then carries frames. ctx bounds the exchange;
// errors are classified like Call's.
func openStream(ctx context.Context, socket string, req Request) (net.Conn, *bufio.Reader, Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, Response{}, fmt.Errorf("dial shim %s: %w", socket, ctx.Err())
		}
		return nil, nil, Response{}, fmt.Errorf("dial shim %s: %w: %w", socket, ErrShimGone, err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, nil, Response{}, callError(ctx, req.Op, err)
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, nil, Response{}, callError(ctx, req.Op, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, nil, Response{}, fmt.Errorf("shim %s: decode response: %w", req.Op, err)
	}
	if resp.Error != "" {
		return nil, nil, resp, fmt.Errorf("shim %s: %w", req.Op, codeError(resp.Code, resp.Error))
	}
	if !stop() {
		// ctx ended as the answer came: the deadline is set.
		return nil, nil, resp, fmt.Errorf("shim %s: %w", req.Op, ctx.Err())
	}
	ok = true
	return conn, br, resp, nil
}

// sendResizes sends the terminal sizes from sizes until done closes.
func sendResizes(out *frameWriter, sizes <-chan TerminalSize, done <-chan struct{}) {
	for {
		select {
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			var p [4]byte
			binary.BigEndian.PutUint16(p[:], sz.Width)
			binary.BigEndian.PutUint16(p[2:], sz.Height)
			if out.write(FrameResize, p[:]) != nil {
				return
			}
		case <-done:
			return
		}
	}
}

// sendInput copies r to the shim as stdin frames and reports its end.
func sendInput(out *frameWriter, r io.Reader) {
	buf := make([]byte, InputChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if out.write(FrameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = out.write(FrameEOF, nil)
			return
		}
	}
}

// readFrames copies the shim's output frames of op to stdout and stderr
// (nil discards) until the shim ends the stream, and returns the exit
// code when the shim sent one (FrameExit, OpExec's last frame).
func readFrames(br *bufio.Reader, op string, stdout, stderr io.Writer) (*int32, error) {
	var hdr [5]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, fmt.Errorf("shim %s: read: %w", op, err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > MaxFrame {
			return nil, fmt.Errorf("shim %s: frame of %d bytes", op, n)
		}
		if int(n) > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return nil, fmt.Errorf("shim %s: read: %w", op, err)
		}
		var w io.Writer
		switch hdr[0] {
		case FrameStdout:
			w = stdout
		case FrameStderr:
			w = stderr
		case FrameExit:
			if n != 4 {
				return nil, fmt.Errorf("shim %s: exit frame of %d bytes", op, n)
			}
			code := int32(binary.BigEndian.Uint32(buf))
			return &code, nil
		case 0:
			if string(buf[:n]) == ErrAttachLagged.Error() {
				return nil, ErrAttachLagged
			}
			return nil, fmt.Errorf("shim %s: %s", op, buf[:n])
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return nil, fmt.Errorf("%s: write client: %w", op, err)
		}
	}
}

// frameWriter writes whole frames to a connection shared by several
// goroutines.
type frameWriter struct {
	// mu serializes frames on c.
	mu sync.Mutex
	c  net.Conn
}

func (w *frameWriter) write(typ byte, p []byte) error {
	buf := make([]byte, 5+len(p))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:], uint32(len(p)))
	copy(buf[5:], p)
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.c.Write(buf)
	return err
}
