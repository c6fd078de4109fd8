package shimd

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// ctr is the shim's view of one of its containers.
type ctr struct {
	id    string
	log   *slog.Logger
	logw  *crilog.Writer
	fan   *fanout // the container's output, for attached clients
	stdio *stdio  // the container's input; nil when it has none
	// release closes what the shim holds of the container (its log,
	// input, terminal, pidfd) once it is dropped.
	release func()
	// pidfd refers to the container's init (-1: none); privatePID says
	// the container has a PID namespace of its own (OpKill).
	pidfd      int
	privatePID bool
	// took is how long the runtime command that created it took.
	took time.Duration
	// cfg and rp run its exec sessions' runtime commands (OpExec).
	cfg ctrConfig
	rp  *reaper

	// mu guards the fields below.
	mu        sync.Mutex
	state     string
	pid       int
	startedAt time.Time
	exit      *exitrec.Exit
	// execs are its exec sessions' processes; execsKilled says the init
	// is gone, so every process of a session is killed as it starts.
	execs       map[*execProc]struct{}
	execsKilled bool

	exited chan struct{} // closed once exit is set
	// deleted is closed once the shim ran "<runtime> delete" after the
	// exit; deleteErr is what that returned.
	deleted   chan struct{}
	deleteErr error
}

// newCtr makes the shim's record of a container the runtime created and
// started at startedAt; in is its input (nil when the container has no
// stdin and no terminal).
func newCtr(log *slog.Logger, id string, pid int, startedAt time.Time, logw *crilog.Writer, in *stdio) *ctr {
	return &ctr{
		id:        id,
		log:       log,
		startedAt: startedAt,
		logw:      logw,
		fan:       newFanout(),
		stdio:     in,
		release:   func() {},
		pidfd:     -1,
		state:     shim.StateRunning,
		pid:       pid,
		exited:    make(chan struct{}),
		deleted:   make(chan struct{}),
	}
}

// setExited records how the container ended and wakes every waiter.
func (s *ctr) setExited(e exitrec.Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exit != nil {
		return
	}
	s.state = shim.StateStopped
	s.exit = &e
	close(s.exited)
}

// startedTime reports when start was requested (zero if never).
func (s *ctr) startedTime() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startedAt
}

func (s *ctr) currentState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// dispatch answers the ops about one container that need no more than
// the request line: state, wait, reopen_log. done closes when the
// client gives up (it closed its end).
func (s *ctr) dispatch(op string, done <-chan struct{}) shim.Response {
	var err error
	switch op {
	case shim.OpState:
		return s.snapshot()
	case shim.OpWait:
		select {
		case <-s.exited:
		case <-done:
		}
		return s.snapshot()
	case shim.OpReopenLog:
		err = s.logw.Reopen()
	default:
		err = fmt.Errorf("unknown op %q: %w", op, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return errorResponse(err)
	}
	return s.snapshot()
}

func (s *ctr) snapshot() shim.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := shim.Response{State: s.state, Pid: s.pid, StartedAt: s.startedAt}
	if s.exit != nil {
		e := *s.exit
		r.Exit = &e
	}
	return r
}

func errorResponse(err error) shim.Response {
	return shim.Response{Error: err.Error(), Code: shim.ErrorCode(err)}
}

// kill sends sig to the container's init through its pidfd, so a reused
// pid is never signalled. A container that exited is not an error. all
// is done here only when killing the init ends every process of the
// container (a PID namespace of its own); otherwise, as without a pidfd,
// it is shim.ErrUnsupported and the client asks the runtime.
func (s *ctr) kill(sig int, all bool) error {
	// Under mu: closePidfd cannot close the descriptor while it is used.
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.exit != nil:
		return nil
	case s.pidfd < 0 || (all && !s.privatePID):
		return fmt.Errorf("signal container %s: %w", s.id, shim.ErrUnsupported)
	}
	err := unix.PidfdSendSignal(s.pidfd, unix.Signal(sig), nil, 0)
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal container %s: %w", s.id, err)
	}
	return nil
}

// closePidfd closes the init's pidfd once the container is dropped.
func (s *ctr) closePidfd() {
	s.mu.Lock()
	fd := s.pidfd
	s.pidfd = -1
	s.mu.Unlock()
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}
