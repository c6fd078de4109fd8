package shimd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// shim.Attach limits on the shim's side.
const (
	// attachQueue is how many output chunks an attached client may lag
	// behind before it is cut off; the container never waits for it.
	attachQueue = 256
	// attachWriteTimeout bounds one frame write to a client.
	attachWriteTimeout = 10 * time.Second
)

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

// attach answers an shim.OpAttach request and registers the session's input.
func (s *ctr) attach(req shim.Request) (shim.Response, attachSession) {
	resp := s.snapshot()
	if resp.State == shim.StateStopped {
		err := fmt.Errorf("container is %s: %w", resp.State, errdefs.ErrFailedPrecondition)
		return shim.Response{Error: err.Error(), Code: shim.ErrorCode(err)}, attachSession{}
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
					_ = writeFrame(c, frame{data: []byte(shim.ErrAttachLagged.Error())})
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
	readFrames(c, s.log, "attach", func(typ byte, p []byte) bool {
		switch typ {
		case shim.FrameStdin:
			if !sess.stdin {
				return true
			}
			if err := s.stdio.write(p); err != nil && !errors.Is(err, errNoStdin) {
				s.log.Debug("attach: forward input", "error", err)
			}
		case shim.FrameEOF:
			if sess.closesStdin {
				s.closeStdin()
			}
		case shim.FrameResize:
			if len(p) != 4 || !s.stdio.hasTerminal() {
				return true
			}
			w, h := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
			if err := s.stdio.setSize(w, h); err != nil {
				s.log.Warn("attach: resize terminal", "error", err)
			}
		}
		return true
	})
}

// readFrames reads a client's input frames (attach and exec sessions)
// and hands each to handle, until the client goes away, a frame is too
// big, or handle returns false. The payload is only valid during the call.
func readFrames(c net.Conn, log *slog.Logger, what string, handle func(typ byte, p []byte) bool) {
	br := bufio.NewReader(c)
	var hdr [5]byte
	buf := make([]byte, shim.InputChunk)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > shim.MaxFrame {
			log.Warn(what+": oversized input frame", "bytes", n)
			return
		}
		if int(n) > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return
		}
		if !handle(hdr[0], buf[:n]) {
			return
		}
	}
}

// closeStdin closes the container's stdin for stdin_once.
func (s *ctr) closeStdin() {
	if err := s.stdio.closeInput(); err != nil {
		s.log.Warn("close container stdin", "error", err)
	}
}

// writeFrame writes fr to an attach client, which must read it within
// attachWriteTimeout. An output frame without data is not sent.
func writeFrame(c net.Conn, fr frame) error {
	if len(fr.data) == 0 && fr.stream != 0 {
		return nil
	}
	_ = c.SetWriteDeadline(time.Now().Add(attachWriteTimeout))
	return writeFrames(c, fr.stream, fr.data)
}
