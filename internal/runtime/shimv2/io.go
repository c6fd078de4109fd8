package shimv2

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// openFifoReader opens the read end of a fifo without blocking for a
// writer; the file goes through the poller, so Close ends a blocked Read.
func openFifoReader(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
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
