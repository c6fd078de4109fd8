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
	"sync"
	"time"
)

// Attach streams: the frame header's first byte.
const (
	attachStdout byte = 1
	attachStderr byte = 2
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
)

// ErrAttachLagged reports an attached client that fell too far behind the
// container's output and was cut off.
var ErrAttachLagged = errors.New("attach: client fell behind the container's output and was disconnected")

// Attach attaches to the container's output through the shim listening on
// socket: it copies what the container writes from now on to stdout and
// stderr (nil discards a stream) until the container has exited and its
// output drained (nil), ctx ends (ctx's error), or the shim cuts the client
// off. Errors of the request are classified like Call's.
//
// On the wire, after the one-line Response to an OpAttach Request, the shim
// sends frames: one stream byte (1 stdout, 2 stderr), a big-endian uint32
// length, then that many bytes. A frame with stream 0 and a message as
// payload reports why the shim stopped early.
func Attach(ctx context.Context, socket string, stdout, stderr io.Writer) error {
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

	if err := json.NewEncoder(conn).Encode(Request{Op: OpAttach}); err != nil {
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
	var hdr [5]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
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
			w = stdout
		case attachStderr:
			w = stderr
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

// streamAttach sends the output frames to c until the output ends, the
// client goes away, or it lags.
func (s *server) streamAttach(c net.Conn) {
	sub, ok := s.fan.subscribe()
	if !ok {
		return
	}
	gone := make(chan struct{})
	go func() {
		_, _ = c.Read(make([]byte, 1))
		close(gone)
	}()
	defer s.fan.unsubscribe(sub)
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
