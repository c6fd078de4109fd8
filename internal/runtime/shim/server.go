package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// States a shim reports.
const (
	StateCreated = "created"
	StateRunning = "running"
	StateStopped = "stopped"
)

// maxRequest caps a request line.
const maxRequest = 4096

// starter starts the created container and returns its init pid.
type starter func() (int, error)

// server is the shim's view of its container and the control socket.
type server struct {
	log   *slog.Logger
	start starter
	logw  *LogWriter
	fan   *fanout // the container's output, for attached clients
	stdio *stdio  // the container's input; nil when it has none

	// startMu serializes start requests.
	startMu sync.Mutex

	// mu guards the fields below.
	mu        sync.Mutex
	state     string
	pid       int
	startedAt time.Time
	exit      *Exit

	exited   chan struct{} // closed once exit is set
	quit     chan struct{} // closed by a shutdown request
	quitOnce sync.Once
	conns    sync.WaitGroup
}

// newServer makes the server of a created container; in is its input
// (nil when the container has no stdin and no terminal).
func newServer(log *slog.Logger, pid int, start starter, logw *LogWriter, in *stdio) *server {
	return &server{
		log:    log,
		start:  start,
		logw:   logw,
		fan:    newFanout(),
		stdio:  in,
		state:  StateCreated,
		pid:    pid,
		exited: make(chan struct{}),
		quit:   make(chan struct{}),
	}
}

// setExited records how the container ended and wakes every waiter.
func (s *server) setExited(e Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exit != nil {
		return
	}
	s.state = StateStopped
	s.exit = &e
	close(s.exited)
}

// startedTime reports when start was requested (zero if never).
func (s *server) startedTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startedAt
}

// serve answers connections on l until l is closed; it returns after every
// connection it accepted has been answered.
func (s *server) serve(l net.Listener) {
	defer s.conns.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.conns.Go(func() { s.handle(c) })
	}
}

func (s *server) handle(c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(io.LimitReader(c, maxRequest)).ReadBytes('\n')
	if err != nil {
		return
	}
	var req Request
	var resp Response
	var sess attachSession
	switch err := json.Unmarshal(line, &req); {
	case err != nil:
		resp = Response{Error: fmt.Sprintf("decode request: %v", err), Code: CodeInvalidArgument}
	case req.Op == OpAttach:
		resp, sess = s.attach(req)
	default:
		resp = s.dispatch(req.Op, c)
	}
	data, _ := json.Marshal(resp)
	_, _ = c.Write(append(data, '\n'))
	if req.Op == OpAttach && resp.Error == "" {
		s.streamAttach(c, sess)
	}
	if req.Op == OpShutdown && resp.Error == "" {
		s.quitOnce.Do(func() { close(s.quit) })
	}
}

func (s *server) dispatch(op string, c net.Conn) Response {
	var err error
	switch op {
	case OpState:
		return s.snapshot()
	case OpWait:
		// The caller gives up by closing its end; notice that so an
		// abandoned wait does not hold a goroutine until the exit.
		gone := make(chan struct{})
		go func() {
			_, _ = c.Read(make([]byte, 1))
			close(gone)
		}()
		select {
		case <-s.exited:
		case <-gone:
		}
		return s.snapshot()
	case OpStart:
		err = s.doStart()
	case OpReopenLog:
		err = s.logw.Reopen()
	case OpShutdown:
		s.mu.Lock()
		st := s.state
		s.mu.Unlock()
		if st != StateStopped {
			err = fmt.Errorf("container is %s: %w", st, errdefs.ErrFailedPrecondition)
		}
	default:
		err = fmt.Errorf("unknown op %q: %w", op, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return Response{Error: err.Error(), Code: errorCode(err)}
	}
	return s.snapshot()
}

func (s *server) snapshot() Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Response{State: s.state, Pid: s.pid, StartedAt: s.startedAt}
	if s.exit != nil {
		e := *s.exit
		r.Exit = &e
	}
	return r
}

func (s *server) doStart() error {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	s.mu.Lock()
	if s.state != StateCreated {
		st := s.state
		s.mu.Unlock()
		return fmt.Errorf("container is %s, not created: %w", st, errdefs.ErrFailedPrecondition)
	}
	s.startedAt = time.Now()
	s.mu.Unlock()

	_, err := s.start()

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.exit == nil {
			s.startedAt = time.Time{}
		}
		return err
	}
	if s.state == StateCreated {
		s.state = StateRunning
	}
	return nil
}
