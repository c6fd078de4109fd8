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

	"github.com/containerd/errdefs"
)

// Attach streams, from the shim: the frame header's first byte.
const (
	attachStdout byte = 1
	attachStderr byte = 2
)

// Attach frames from the client: the frame header's first byte.
const (
	inputStdin  byte = 1 // payload: input for the container's stdin
	inputEOF    byte = 2 // the client's input ended; no payload
	inputResize byte = 3 // payload: big-endian uint16 width, uint16 height
)

// Attach limits.
const (
	// attachQueue is how many output chunks an attached client may lag
	// behind before it is cut off; the container never waits for it.
	attachQueue = 256
	// maxFrame caps one frame's payload.
	maxFrame = 1 << 20
	// attachWriteTimeout bounds one frame write to a client.
	attachWriteTimeout = 10 * time.Second
	// inputChunk is the most input a client sends in one frame.
	inputChunk = 32 << 10
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
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("dial shim %s: %w", socket, ctx.Err())
		}
		return fmt.Errorf("dial shim %s: %w: %w", socket, ErrShimGone, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if err := json.NewEncoder(conn).Encode(Request{Op: OpAttach, ID: id, Stdin: streams.Stdin != nil}); err != nil {
		return callError(ctx, OpAttach, err)
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return callError(ctx, OpAttach, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return fmt.Errorf("shim %s: decode response: %w", OpAttach, err)
	}
	if resp.Error != "" {
		return fmt.Errorf("shim %s: %w", OpAttach, codeError(resp.Code, resp.Error))
	}

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
		wg.Go(func() {
			for {
				select {
				case sz, ok := <-streams.Resize:
					if !ok {
						return
					}
					var p [4]byte
					binary.BigEndian.PutUint16(p[:], sz.Width)
					binary.BigEndian.PutUint16(p[2:], sz.Height)
					if out.write(inputResize, p[:]) != nil {
						return
					}
				case <-done:
					return
				}
			}
		})
	}
	err = readOutput(br, streams)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && inputEnded.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	}
	return err
}

// sendInput copies r to the shim as stdin frames and reports its end.
func sendInput(out *frameWriter, r io.Reader) {
	buf := make([]byte, inputChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if out.write(inputStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = out.write(inputEOF, nil)
			return
		}
	}
}

// readOutput copies the shim's output frames to streams until the shim
// ends the stream.
func readOutput(br *bufio.Reader, streams AttachStreams) error {
	var hdr [5]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("shim %s: read: %w", OpAttach, err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxFrame {
			return fmt.Errorf("shim %s: frame of %d bytes", OpAttach, n)
		}
		if int(n) > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return fmt.Errorf("shim %s: read: %w", OpAttach, err)
		}
		var w io.Writer
		switch hdr[0] {
		case attachStdout:
			w = streams.Stdout
		case attachStderr:
			w = streams.Stderr
		case 0:
			if string(buf[:n]) == ErrAttachLagged.Error() {
				return ErrAttachLagged
			}
			return fmt.Errorf("shim %s: %s", OpAttach, buf[:n])
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return fmt.Errorf("attach: write client: %w", err)
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

// frame is one chunk of output for attached clients.
type frame struct {
	stream byte
	data   []byte
}

// fanout hands the container's output to attached clients without ever
// making the container wait: a client whose queue is full is cut off.
type fanout struct {
	// mu guards subs and closed.
	mu     sync.Mutex
	subs   map[*attachSub]struct{}
	closed bool
}

// attachSub is one attached client. ch is closed when the output ended or
// the client lagged (lagged says which).
type attachSub struct {
	ch     chan frame
	lagged bool
}

func newFanout() *fanout {
	return &fanout{subs: map[*attachSub]struct{}{}}
}

// writer returns an io.Writer that copies to every attached client as
// stream. It never fails and never blocks on a client.
func (f *fanout) writer(stream byte) io.Writer {
	return fanoutWriter{f: f, stream: stream}
}

type fanoutWriter struct {
	f      *fanout
	stream byte
}

func (w fanoutWriter) Write(p []byte) (int, error) {
	w.f.publish(w.stream, p)
	return len(p), nil
}

func (f *fanout) publish(stream byte, p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) == 0 || len(p) == 0 {
		return
	}
	fr := frame{stream: stream, data: append([]byte(nil), p...)}
	for sub := range f.subs {
		select {
		case sub.ch <- fr:
		default:
			sub.lagged = true
			close(sub.ch)
			delete(f.subs, sub)
		}
	}
}

// subscribe adds a client; false when the output already ended.
func (f *fanout) subscribe() (*attachSub, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, false
	}
	sub := &attachSub{ch: make(chan frame, attachQueue)}
	f.subs[sub] = struct{}{}
	return sub, true
}

// unsubscribe removes a client that went away.
func (f *fanout) unsubscribe(sub *attachSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[sub]; ok {
		delete(f.subs, sub)
		close(sub.ch)
	}
}

// wasLagged reports whether sub was cut off for lagging.
func (f *fanout) wasLagged(sub *attachSub) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sub.lagged
}

// close ends every client's stream once the output ended.
func (f *fanout) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	for sub := range f.subs {
		close(sub.ch)
		delete(f.subs, sub)
	}
}

// attachSession is what one attach session may do besides reading output.
type attachSession struct {
	stdin       bool // its input goes to the container's stdin
	closesStdin bool // stdin_once: its end closes the container's stdin
}

// attach answers an OpAttach request and registers the session's input.
func (s *ctr) attach(req Request) (Response, attachSession) {
	resp := s.snapshot()
	if resp.State == StateStopped {
		err := fmt.Errorf("container is %s: %w", resp.State, errdefs.ErrFailedPrecondition)
		return Response{Error: err.Error(), Code: errorCode(err)}, attachSession{}
	}
	var sess attachSession
	sess.stdin, sess.closesStdin = s.stdio.session(req.Stdin)
	resp.Stdin, resp.TTY = sess.stdin, s.stdio.hasTerminal()
	return resp, sess
}

// streamAttach sends the output frames to c and forwards the client's
// input until the output ends, the client goes away, or it lags. A
// stdin_once session closes the container's stdin when it ends.
func (s *ctr) streamAttach(c net.Conn, sess attachSession) {
	if sess.closesStdin {
		defer s.closeStdin()
	}
	sub, ok := s.fan.subscribe()
	if !ok {
		return
	}
	defer s.fan.unsubscribe(sub)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		s.readInput(c, sess)
	}()
	// The input reader ends once c is closed, or, when it is blocked on a
	// container that reads no input, once the container takes the input
	// or its stdin closes (at the latest when it exits): input the shim
	// took from a client that left is still delivered, then a stdin_once
	// session's end closes the container's stdin.
	defer func() {
		_ = c.Close()
		<-gone
	}()
	for {
		select {
		case fr, ok := <-sub.ch:
			if !ok {
				if s.fan.wasLagged(sub) {
					_ = writeFrame(c, frame{data: []byte(ErrAttachLagged.Error())})
				}
				return
			}
			if err := writeFrame(c, fr); err != nil {
				return
			}
		case <-gone:
			return
		}
	}
}

// readInput reads the client's frames until it goes away.
func (s *ctr) readInput(c net.Conn, sess attachSession) {
	br := bufio.NewReader(c)
	var hdr [5]byte
	buf := make([]byte, inputChunk)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxFrame {
			s.log.Warn("attach: oversized input frame", "bytes", n)
			return
		}
		if int(n) > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return
		}
		switch hdr[0] {
		case inputStdin:
			if !sess.stdin {
				continue
			}
			if err := s.stdio.write(buf[:n]); err != nil && !errors.Is(err, errNoStdin) {
				s.log.Debug("attach: forward input", "error", err)
			}
		case inputEOF:
			if sess.closesStdin {
				s.closeStdin()
			}
		case inputResize:
			if n != 4 || !s.stdio.hasTerminal() {
				continue
			}
			w, h := binary.BigEndian.Uint16(buf), binary.BigEndian.Uint16(buf[2:])
			if err := s.stdio.setSize(w, h); err != nil {
				s.log.Warn("attach: resize terminal", "error", err)
			}
		}
	}
}

// closeStdin closes the container's stdin for stdin_once.
func (s *ctr) closeStdin() {
	if err := s.stdio.closeInput(); err != nil {
		s.log.Warn("close container stdin", "error", err)
	}
}

func writeFrame(c net.Conn, fr frame) error {
	_ = c.SetWriteDeadline(time.Now().Add(attachWriteTimeout))
	for len(fr.data) > 0 || fr.stream == 0 {
		n := min(len(fr.data), maxFrame)
		buf := make([]byte, 5+n)
		buf[0] = fr.stream
		binary.BigEndian.PutUint32(buf[1:], uint32(n))
		copy(buf[5:], fr.data[:n])
		if _, err := c.Write(buf); err != nil {
			return err
		}
		fr.data = fr.data[n:]
		if fr.stream == 0 {
			break
		}
	}
	return nil
}
