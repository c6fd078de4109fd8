package shimd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// Exec sessions (shim.OpExec): the shim runs "<runtime> exec --detach"
// with stdio it owns, so the exec'd process is its child (it is the
// subreaper the runtime's exit reparents the process to); it reaps the
// process and reports its real exit status last on the session's
// connection. A session whose client goes first (the connection closes or
// is half-closed) kills the process; so does the container's init exiting.

const (
	// execStartTimeout bounds "<runtime> exec --detach", which returns once
	// the process started.
	execStartTimeout = time.Minute
	// execInputPoll is how often a write to a process that does not read
	// its input checks whether the client is still there.
	execInputPoll = time.Second
	// execFilePrefix starts the names of an exec's files in the
	// container's dir.
	execFilePrefix = ".exec-"
)

// execProc is the process of one exec session.
type execProc struct {
	done chan struct{} // closed once the process was reaped

	// mu guards the fields below.
	mu     sync.Mutex
	pid    int  // 0 until the runtime started it
	pidfd  int  // -1: none (or closed once reaped)
	doKill bool // kill it as soon as it is known
	reaped bool
	code   int32 // the exit code, once reaped
}

func newExecProc() *execProc {
	return &execProc{done: make(chan struct{}), pidfd: -1}
}

// started records the process's pid and pidfd (-1 without one); a kill
// asked for before is done now.
func (e *execProc) started(pid, pidfd int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pid, e.pidfd = pid, pidfd
	if e.doKill {
		e.signalLocked()
	}
}

// kill SIGKILLs the process unless it was reaped; before it started, it
// is killed as it starts.
func (e *execProc) kill() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.doKill = true
	e.signalLocked()
}

// signalLocked sends SIGKILL through the pidfd, so a reused pid is never
// hit (by pid when there is no pidfd: until the reaper reported the
// process, the pid is still its). e.mu is held.
func (e *execProc) signalLocked() {
	switch {
	case e.reaped || e.pid <= 0:
	case e.pidfd >= 0:
		_ = unix.PidfdSendSignal(e.pidfd, unix.SIGKILL, nil, 0)
	default:
		_ = unix.Kill(e.pid, unix.SIGKILL)
	}
}

// exited records the process's status; the reaper calls it.
func (e *execProc) exited(ws unix.WaitStatus) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reaped {
		return
	}
	e.reaped = true
	e.code, _ = exitCode(ws)
	if e.pidfd >= 0 {
		_ = unix.Close(e.pidfd)
		e.pidfd = -1
	}
	close(e.done)
}

func (e *execProc) exitCode() int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.code
}

// addExec registers a session's process with its running container.
func (s *ctr) addExec(e *execProc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state != shim.StateRunning:
		return fmt.Errorf("exec in container %s: container is %s: %w", s.id, s.state, errdefs.ErrFailedPrecondition)
	case s.execsKilled:
		return fmt.Errorf("exec in container %s: container is exiting: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	if s.execs == nil {
		s.execs = make(map[*execProc]struct{})
	}
	s.execs[e] = struct{}{}
	return nil
}

func (s *ctr) removeExec(e *execProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.execs, e)
}

// killExecs kills every exec'd process of the container, now and as they
// start: its init is gone.
func (s *ctr) killExecs() {
	s.mu.Lock()
	s.execsKilled = true
	procs := make([]*execProc, 0, len(s.execs))
	for e := range s.execs {
		procs = append(procs, e)
	}
	s.mu.Unlock()
	for _, e := range procs {
		e.kill()
	}
}

// execOp answers a shim.OpExec request on c and, once the process runs,
// carries its session.
func (p *pod) execOp(c net.Conn, req shim.Request) {
	cc, err := p.lookup(req.ID)
	if err == nil && req.Exec == nil {
		err = fmt.Errorf("exec request without exec options: %w", errdefs.ErrInvalidArgument)
	}
	if err != nil {
		_ = writeResponse(c, errorResponse(err))
		return
	}
	cc.exec(c, *req.Exec)
}

// checkExec refuses exec files outside the container's dir dir.
func checkExec(dir string, o shim.ExecOptions) error {
	dir = filepath.Clean(dir)
	for _, f := range []struct{ name, path string }{{"process", o.Process}, {"pid file", o.PidFile}, {"log", o.Log}} {
		if !filepath.IsAbs(f.path) || filepath.Dir(f.path) != dir || !strings.HasPrefix(filepath.Base(f.path), execFilePrefix) {
			return fmt.Errorf("exec %s %q: not a %s* file in %s: %w", f.name, f.path, execFilePrefix, dir, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// exec runs one session: it starts the process, answers, copies the
// streams both ways until the process is reaped, and ends with its exit
// code. It returns once every goroutine of the session ended.
func (s *ctr) exec(c net.Conn, o shim.ExecOptions) {
	if err := checkExec(s.cfg.Dir, o); err != nil {
		_ = writeResponse(c, errorResponse(err))
		return
	}
	e := newExecProc()
	if err := s.addExec(e); err != nil {
		_ = writeResponse(c, errorResponse(err))
		return
	}
	defer s.removeExec(e)
	eio, err := startExec(s.cfg, s.rp, o, e)
	// The runtime is done with them (should crind die, nobody else
	// removes them before the container).
	for _, f := range []string{o.Process, o.PidFile, o.Log} {
		_ = os.Remove(f)
	}
	if err != nil {
		_ = writeResponse(c, errorResponse(err))
		return
	}
	defer eio.close()
	// A process started as the init exited is killed here at the latest.
	s.mu.Lock()
	if s.execsKilled {
		e.kill()
	}
	s.mu.Unlock()
	s.log.Debug("exec started", "pid", e.pid, "tty", o.TTY)
	resp := shim.Response{State: shim.StateRunning, Pid: e.pid, TTY: o.TTY, Stdin: eio.stdin != nil}
	if err := writeResponse(c, resp); err != nil {
		e.kill()
	}
	s.streamExec(c, e, eio)
}

// streamExec copies the process's output to c as frames, and c's input
// frames to the process, until the process was reaped and its output
// drained; then it sends the exit code. The client going away kills the
// process.
func (s *ctr) streamExec(c net.Conn, e *execProc, eio *execIO) {
	var wmu sync.Mutex // serializes frames on c
	send := func(stream byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return writeFrames(c, stream, p)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		eio.copyOutput(send, e.kill)
	}()
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		s.execInput(c, eio)
		// The client went away (or the session is over): nothing may
		// outlive its session.
		e.kill()
	}()

	<-e.done
	select {
	case <-copied:
	case <-time.After(ioDrainWait):
		// A process the exec'd one left behind holds the output open.
		eio.closeOutput()
		<-copied
	}
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(e.exitCode()))
	_ = send(shim.FrameExit, p[:])
	eio.closeStdin()
	_ = c.Close()
	<-inputDone
	s.log.Debug("exec exited", "pid", e.pid, "exit_code", e.exitCode())
}

// execInput reads the client's frames and forwards them to the process
// until the client goes away or the connection is closed.
func (s *ctr) execInput(c net.Conn, eio *execIO) {
	readFrames(c, s.log, "exec", func(typ byte, p []byte) bool {
		switch typ {
		case shim.FrameStdin:
			if err := eio.write(c, p); errors.Is(err, errClientGone) {
				return false
			}
		case shim.FrameEOF:
			// A terminal has no end of input of its own.
			if eio.term == nil {
				eio.closeStdin()
			}
		case shim.FrameResize:
			if len(p) != 4 || eio.term == nil {
				return true
			}
			w, h := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
			if err := setTerminalSize(eio.term, w, h); err != nil {
				s.log.Warn("exec: resize terminal", "error", err)
			}
		}
		return true
	})
}

// errClientGone reports an exec client that closed its connection while
// its input waited for the process to read.
var errClientGone = errors.New("exec client went away")

// execIO is what the shim holds of an exec'd process's stdio.
type execIO struct {
	stdin          *os.File // the stdin pipe's write end, or term; nil: none
	stdout, stderr *os.File // pipes' read ends; nil with a terminal
	term           *os.File // the terminal's master; nil without

	stdinOnce sync.Once
	// broken says the process's stdin refused input (it closed it).
	broken bool
}

// write forwards input to the process. While the process does not read,
// it checks now and then that the client c is still there, so a client
// that left is noticed (errClientGone) even then. Input for a process that
// closed its stdin is dropped.
func (x *execIO) write(c net.Conn, p []byte) error {
	if x.stdin == nil || x.broken {
		return nil
	}
	for len(p) > 0 {
		_ = x.stdin.SetWriteDeadline(time.Now().Add(execInputPoll))
		n, err := x.stdin.Write(p)
		p = p[n:]
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if peerClosed(c) {
				return errClientGone
			}
		default:
			x.broken = true
			return nil
		}
	}
	return nil
}

// copyOutput sends the process's output as frames until every holder of
// its stdio closed it. When the client cannot take it, the output is
// still drained (so the process never blocks on it) and gone is called.
func (x *execIO) copyOutput(send func(byte, []byte) error, gone func()) {
	var mu sync.Mutex
	failed := false
	pump := func(r io.Reader, stream byte) {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				mu.Lock()
				ok := !failed
				mu.Unlock()
				if ok && send(stream, buf[:n]) != nil {
					mu.Lock()
					failed = true
					mu.Unlock()
					gone()
				}
			}
			if err != nil {
				return
			}
		}
	}
	if x.term != nil {
		pump(hangupReader{x.term}, shim.FrameStdout)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { pump(x.stderr, shim.FrameStderr) })
	pump(x.stdout, shim.FrameStdout)
	wg.Wait()
}

// closeStdin ends the process's input: its pipe is closed (which also
// interrupts a write blocked on it). A terminal stays open for its output.
func (x *execIO) closeStdin() {
	if x.stdin == nil || x.stdin == x.term {
		return
	}
	x.stdinOnce.Do(func() { _ = x.stdin.Close() })
}

// closeOutput stops the output copy (its reads fail).
func (x *execIO) closeOutput() {
	for _, f := range []*os.File{x.stdout, x.stderr, x.term} {
		if f != nil {
			_ = f.Close()
		}
	}
}

func (x *execIO) close() {
	x.closeStdin()
	x.closeOutput()
}

// execFailed kills what a failed (or timed out) "<runtime> exec" may
// have started, and returns its error with what the runtime said (in its
// log, or on stderr, errR).
func execFailed(cfg ctrConfig, rp *reaper, o shim.ExecOptions, e *execProc, since time.Time, errR *os.File, err error) error {
	if pid := readPidFile(o.PidFile); pid > 0 {
		watchExec(rp, e, pid, since)
		e.kill()
	}
	_ = errR.SetReadDeadline(time.Now().Add(time.Second))
	stderr, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
	if msg := runtimeLogError(o.Log, 0, string(stderr)); msg != "" {
		err = errors.New(msg)
	}
	return fmt.Errorf("%s exec: %w", filepath.Base(cfg.Runtime), err)
}

// startExec runs "<runtime> exec --detach" for o with pipes the shim keeps
// as the process's stdio (or, with o.TTY, receives the terminal the
// runtime made for it), and has the reaper report the process's exit to
// e. The process is the shim's child once the runtime exited.
func startExec(cfg ctrConfig, rp *reaper, o shim.ExecOptions, e *execProc) (_ *execIO, retErr error) {
	pp, err := newProcPipes(o.Stdin && !o.TTY)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			pp.close()
		}
	}()
	x := &execIO{stdin: pp.stdinW}
	args := []string{"exec", "--process", o.Process, "--detach", "--pid-file", o.PidFile}
	var console *consoleSocket
	if o.TTY {
		if console, err = listenConsole(shim.ExecConsoleSocketPath(o.Process)); err != nil {
			return nil, err
		}
		defer console.close()
		args = append(args, "--console-socket", console.path)
	}
	argv := append(append([]string{cfg.Runtime}, cfg.globalFlags()...), "--log", o.Log, "--log-format", "json")
	argv = append(argv, append(args, cfg.ID)...)

	since := time.Now()
	stdio := pp.child()
	ws, err := rp.runFor(execStartTimeout, argv, cfg.Dir, stdio[:]...)
	pp.started()
	if err == nil && (!ws.Exited() || ws.ExitStatus() != 0) {
		err = errors.New(describeStatus(ws))
	}
	if err != nil {
		return nil, execFailed(cfg, rp, o, e, since, pp.errR, err)
	}
	pid := readPidFile(o.PidFile)
	if pid <= 0 {
		return nil, fmt.Errorf("%s exec: no pid in %s", filepath.Base(cfg.Runtime), o.PidFile)
	}
	watchExec(rp, e, pid, since)
	if console != nil {
		// The runtime sent the terminal before it returned.
		term, err := console.receive(5 * time.Second)
		if err != nil {
			e.kill()
			return nil, fmt.Errorf("receive the exec's terminal: %w", err)
		}
		x.term = term
		if o.Stdin {
			x.stdin = term
		}
		pp.closeOutput()
	} else {
		x.stdout, x.stderr = pp.outR, pp.errR
	}
	return x, nil
}

// watchExec has the reaper report the exit of the exec'd process pid,
// which the runtime started after since, to e. The pidfd is opened first:
// were the process reaped before, the reaper reports it at once and the
// pidfd, which may then name another process, is never used.
func watchExec(rp *reaper, e *execProc, pid int, since time.Time) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fd = -1
	}
	e.started(pid, fd)
	rp.watch(pid, since, e.exited)
}

// readPidFile reads a pid the runtime wrote; 0 when there is none.
func readPidFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return pid
}

// peerClosed reports whether the client of c shut its end down (it closed
// the connection, or half-closed it), without reading what it sent.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			closed = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return closed
}

// writeFrames writes p as frames of stream, split when larger than
// shim.MaxFrame (one empty frame when p is empty). It sets no deadline: an
// exec client that reads slowly slows the process, as a terminal would;
// one that is gone fails the write (attach sets its own, writeFrame).
func writeFrames(c net.Conn, stream byte, p []byte) error {
	var hdr [5]byte
	for {
		n := min(len(p), shim.MaxFrame)
		hdr[0] = stream
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		bufs := net.Buffers{hdr[:], p[:n]}
		if _, err := bufs.WriteTo(c); err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}
