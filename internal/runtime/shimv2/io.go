package shimv2

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// containerIO copies a container's stdout and stderr fifos into its CRI
// log until the shim closes them.
type containerIO struct {
	lw      *shim.LogWriter
	readers []*os.File
	// holders are crind's own write ends, held from before the shim
	// starts until its Create returned: without a writer a fifo reads as
	// EOF at once, and the shim opens its write end only during Create.
	holders []*os.File
	done    chan struct{} // closed when both copies ended

	// subMu guards subs and ended: the attached clients.
	subMu sync.Mutex
	subs  map[*attachSub]struct{}
	ended bool
}

// attachSub is one attached client: the output chunks to send it, closed
// when the output ended or the client lagged.
type attachSub struct {
	ch     chan outChunk
	lagged bool
}

type outChunk struct {
	stream int // 0 stdout, 1 stderr
	data   []byte
}

// attachBacklog is how many output chunks an attached client may fall
// behind before it is cut off (the container is never slowed for it).
const attachBacklog = 256

// teeReader hands what the log copy reads to the attached clients.
type teeReader struct {
	r      io.Reader
	cio    *containerIO
	stream int
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.cio.publish(t.stream, p[:n])
	}
	return n, err
}

func (c *containerIO) publish(stream int, p []byte) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if len(c.subs) == 0 {
		return
	}
	chunk := outChunk{stream: stream, data: bytes.Clone(p)}
	for s := range c.subs {
		select {
		case s.ch <- chunk:
		default:
			s.lagged = true
			close(s.ch)
			delete(c.subs, s)
		}
	}
}

// subscribe adds a client; nil once the output has ended.
func (c *containerIO) subscribe() *attachSub {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.ended {
		return nil
	}
	if c.subs == nil {
		c.subs = map[*attachSub]struct{}{}
	}
	s := &attachSub{ch: make(chan outChunk, attachBacklog)}
	c.subs[s] = struct{}{}
	return s
}

func (c *containerIO) unsubscribe(s *attachSub) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if _, ok := c.subs[s]; ok {
		delete(c.subs, s)
		close(s.ch)
	}
}

// endSubs tells every client the output has ended.
func (c *containerIO) endSubs() {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.ended = true
	for s := range c.subs {
		close(s.ch)
		delete(c.subs, s)
	}
}

func (c *containerIO) releaseHolders() {
	for _, h := range c.holders {
		_ = h.Close()
	}
	c.holders = nil
}

// close stops the copies now.
func (c *containerIO) close() {
	c.releaseHolders()
	for _, f := range c.readers {
		_ = f.Close()
	}
	<-c.done
	_ = c.lw.Close()
}

// openFifoReader opens the read end of a fifo without blocking for a
// writer; the file goes through the poller, so Close ends a blocked Read.
func openFifoReader(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// openIO opens the container's fifos and log and starts copying. hold
// keeps crind's own write ends open until createdIO (a new container whose
// shim has not opened its end yet).
func (r *Runtime) openIO(ctx context.Context, id, dir, logPath string, hold bool) (retErr error) {
	ctx = context.WithoutCancel(ctx)
	lw, err := shim.OpenLog(logPath, shim.LogOptions{OnError: func(err error) {
		r.log.WarnContext(ctx, "write container log", "container_id", id, "error", err)
	}})
	if err != nil {
		return err
	}
	cio := &containerIO{lw: lw, done: make(chan struct{})}
	defer func() {
		if retErr != nil {
			cio.releaseHolders()
			for _, f := range cio.readers {
				_ = f.Close()
			}
			_ = lw.Close()
		}
	}()
	streams := []string{shim.StreamStdout, shim.StreamStderr}
	for _, name := range []string{stdoutFifo, stderrFifo} {
		f, err := openFifoReader(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		cio.readers = append(cio.readers, f)
		if hold {
			h, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				return fmt.Errorf("hold %s: %w", name, err)
			}
			cio.holders = append(cio.holders, h)
		}
	}
	var wg sync.WaitGroup
	for i, f := range cio.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = lw.Copy(streams[i], &teeReader{r: f, cio: cio, stream: i})
		}()
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		wg.Wait()
		cio.endSubs()
		close(cio.done)
	}()
	r.mu.Lock()
	r.ios[id] = cio
	r.mu.Unlock()
	return nil
}

// createdIO drops crind's write ends once the shim holds its own.
func (r *Runtime) createdIO(id string) {
	r.mu.Lock()
	cio := r.ios[id]
	r.mu.Unlock()
	if cio != nil {
		cio.releaseHolders()
	}
}

// closeIO lets the copies drain what the shim wrote (bounded), then stops
// them and closes the log.
func (r *Runtime) closeIO(id string) {
	r.mu.Lock()
	cio := r.ios[id]
	delete(r.ios, id)
	r.mu.Unlock()
	if cio == nil {
		return
	}
	cio.releaseHolders()
	select {
	case <-cio.done:
	case <-time.After(ioDrainWait):
	}
	cio.close()
}

// shimLogPipe drains a shim's own log fifo into crind's log. It holds the
// fifo open for reading and writing, so the shim never blocks on it nor
// sees it end.
type shimLogPipe struct {
	f    *os.File
	done chan struct{}
}

func (l *shimLogPipe) close() {
	_ = l.f.Close()
	<-l.done
}

// openShimLog starts draining dir's shim log fifo (a shim opens it as its
// stderr, and fails to start without it).
func (r *Runtime) openShimLog(ctx context.Context, id, dir string) {
	f, err := os.OpenFile(filepath.Join(dir, shimLog), os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		r.log.WarnContext(ctx, "open shim log", "container_id", id, "error", err)
		return
	}
	l := &shimLogPipe{f: f, done: make(chan struct{})}
	ctx = context.WithoutCancel(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(l.done)
		br := bufio.NewReaderSize(f, 16<<10)
		for {
			// An overlong line is logged in pieces; the fifo is always
			// drained, or the shim would block writing to it.
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				r.log.DebugContext(ctx, "shim log", "container_id", id, "line", string(bytes.TrimRight(line, "\n")))
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return
			}
		}
	}()
	r.mu.Lock()
	old := r.logs[id]
	r.logs[id] = l
	r.mu.Unlock()
	if old != nil {
		old.close()
	}
}

func (r *Runtime) closeShimLog(id string) {
	r.mu.Lock()
	l := r.logs[id]
	delete(r.logs, id)
	r.mu.Unlock()
	if l != nil {
		l.close()
	}
}
