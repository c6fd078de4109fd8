package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// streamDrainWait bounds how long an interactive exec's output is still
// copied after the runtime exited (a background process may hold it open).
const streamDrainWait = 2 * time.Second

// TerminalSize is a terminal's size in character cells.
type TerminalSize = shim.TerminalSize

// StreamExecRequest is an interactive process to run in a container. Like
// ExecRequest, the process inherits the container's process spec with Args
// replaced.
type StreamExecRequest struct {
	Args []string
	// Stdin feeds the process; nil gives it /dev/null. Its end (EOF) closes
	// the process's stdin (without TTY; a terminal has no end of input).
	Stdin io.Reader
	// Stdout and Stderr receive the output; nil discards it. With TTY the
	// terminal carries both and Stderr is not used.
	Stdout, Stderr io.Writer
	// TTY runs the process on a new pseudo-terminal.
	TTY bool
	// Resize delivers terminal sizes (TTY only); nil means none.
	Resize <-chan TerminalSize
}

// StreamExecer is the optional capability of running interactive processes
// in a container. It is found by type assertion on a Runtime.
type StreamExecer interface {
	// ExecStream runs req in the running container id, copying its streams,
	// and returns its exit code once it exited and its output was copied.
	// A process that ran and failed is not an error. When ctx ends the
	// process is killed and the error wraps ctx.Err(). An unknown container
	// is errdefs.ErrNotFound, one that is not running
	// errdefs.ErrFailedPrecondition.
	ExecStream(ctx context.Context, id string, req StreamExecRequest) (int32, error)
}

var _ StreamExecer = (*OCI)(nil)

// ExecStream runs "<runtime> exec" in the foreground with the caller's
// streams. With TTY, the runtime itself gets a pseudo-terminal crind
// allocated as its stdio and controlling terminal: it relays between that
// terminal and the one it makes for the process, and copies size changes
// across when SIGWINCH tells it of them. (A --console-socket would hand
// crind the process's terminal directly, but the runtime accepts one only
// with --detach, and a detached exec's exit status goes to whichever
// subreaper adopts it, not to crind.)
func (o *OCI) ExecStream(ctx context.Context, id string, req StreamExecRequest) (int32, error) {
	if len(req.Args) == 0 {
		return 0, fmt.Errorf("exec in container %s: no args: %w", id, errdefs.ErrInvalidArgument)
	}
	dir, err := o.known(id)
	if err != nil {
		return 0, err
	}
	st, err := o.Status(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if st.State != StateRunning {
		return 0, fmt.Errorf("exec in container %s: container is %s: %w", id, st.State, errdefs.ErrFailedPrecondition)
	}
	proc, err := streamProcess(dir, req.Args, req.TTY)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", id, err)
	}
	procFile, pidFile, logFile, cleanup, err := execFiles(dir, proc)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", id, err)
	}
	defer cleanup()
	argv := []string{"--root", o.cfg.Root, "--log", logFile, "--log-format", "json", "exec"}
	if req.TTY {
		argv = append(argv, "--tty")
	}
	argv = append(argv, "--process", procFile, "--pid-file", pidFile, id)
	cmd := exec.Command(o.cfg.Binary, argv...)
	cmd.Dir = dir

	var waitErr error
	if req.TTY {
		waitErr, err = runOnTerminal(ctx, cmd, pidFile, req)
	} else {
		waitErr, err = runWithPipes(ctx, cmd, pidFile, req)
	}
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if waitErr == nil || errors.Is(waitErr, exec.ErrWaitDelay) {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return -1, fmt.Errorf("exec in container %s: %w", id, waitErr)
	}
	// The runtime exits with the process's status; it logs an error only
	// when it failed itself (no such binary, ...).
	if msg := runtimeMessage(logFile, nil); msg != "" {
		return -1, fmt.Errorf("exec in container %s: %w", id,
			&RuntimeError{Runtime: o.cfg.Name, Args: []string{"exec"}, Msg: msg, Err: waitErr})
	}
	return int32(ee.ExitCode()), nil
}

// runWithPipes runs cmd with its stdin on a pipe fed from req.Stdin and its
// output copied to req.Stdout and req.Stderr. It returns cmd's wait error,
// or an error when cmd did not start or ctx ended (the process is killed).
func runWithPipes(ctx context.Context, cmd *exec.Cmd, pidFile string, req StreamExecRequest) (waitErr, err error) {
	cmd.Stdout, cmd.Stderr = req.Stdout, req.Stderr
	cmd.WaitDelay = streamDrainWait
	var stdinW *os.File
	if req.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		cmd.Stdin, stdinW = r, w
	}
	if err := cmd.Start(); err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return nil, err
	}
	if stdinW != nil {
		// Not waited for: it may sit in a read of the client's stream,
		// which ends when the stream does (the streaming server closes
		// the connection once the exec returns). Closing stdinW makes its
		// next write fail, so it never outlives that.
		go func() {
			_, _ = io.Copy(stdinW, req.Stdin)
			stdinW.Close()
		}()
		defer stdinW.Close()
	}
	return waitExec(ctx, cmd, pidFile)
}

// waitExec waits for a started runtime exec, killing the process when ctx
// ends first.
func waitExec(ctx context.Context, cmd *exec.Cmd, pidFile string) (waitErr, err error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case waitErr = <-done:
		return waitErr, nil
	case <-ctx.Done():
		// The runtime's status after the kill says nothing ctx's end
		// does not.
		_ = killExec(pidFile, cmd, done)
		return nil, ctx.Err()
	}
}

// runOnTerminal runs cmd with a new pseudo-terminal as its stdio and
// controlling terminal, copying req.Stdin to it and its output to
// req.Stdout, and applying req.Resize to it.
func runOnTerminal(ctx context.Context, cmd *exec.Cmd, pidFile string, req StreamExecRequest) (waitErr, err error) {
	master, slave, err := openPTY()
	if err != nil {
		return nil, err
	}
	defer master.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	slave.Close()
	if err != nil {
		return nil, err
	}

	out := req.Stdout
	if out == nil {
		out = io.Discard
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		// Reading the master fails with EIO once the runtime, the only
		// holder of the other side, has exited: that is the end.
		_, _ = io.Copy(out, master)
	}()
	if req.Stdin != nil {
		// Not waited for, like the stdin copy of runWithPipes; writes
		// fail once master is closed.
		go func() { _, _ = io.Copy(master, req.Stdin) }()
	}
	stopResize := make(chan struct{})
	resized := make(chan struct{})
	go func() {
		defer close(resized)
		for {
			select {
			case <-stopResize:
				return
			case sz, ok := <-req.Resize:
				if !ok {
					return
				}
				_ = setTerminalSize(master, sz)
			}
		}
	}()
	waitErr, err = waitExec(ctx, cmd, pidFile)
	close(stopResize)
	<-resized
	select {
	case <-copied:
	case <-time.After(streamDrainWait):
		master.Close()
		<-copied
	}
	return waitErr, err
}

// openPTY opens a new pseudo-terminal pair. The master is pollable, so a
// Close interrupts a blocked read.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	var n int
	cerr := control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlock pty: %w", err)
		}
		var err error
		n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN)
		if err != nil {
			return fmt.Errorf("pty number: %w", err)
		}
		return nil
	})
	if cerr != nil {
		master.Close()
		return nil, nil, cerr
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open pty slave: %w", err)
	}
	if err := control(slave, makeRaw); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, fmt.Errorf("pty raw mode: %w", err)
	}
	return master, slave, nil
}

// makeRaw puts a terminal in raw mode (as cfmakeraw does). The runtime
// does too, but only once it got going: input the client sent before then
// would be echoed a second time. (runc's raw mode turns output processing
// back on, so this terminal maps \n to \r\n while the process's terminal
// has that mapping cleared; output the process wrote before runc cleared
// it ends in \r\r\n, which displays the same.)
func makeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// setTerminalSize sets a terminal's size; the kernel then sends SIGWINCH to
// the terminal's foreground process group.
func setTerminalSize(f *os.File, sz TerminalSize) error {
	return control(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Height, Col: sz.Width})
	})
}

// control runs fn on f's descriptor without taking it out of the poller
// (as f.Fd would).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// streamProcess is the container's process spec with args replaced and a
// terminal requested or not, as JSON.
func streamProcess(dir string, args []string, tty bool) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, shim.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("decode bundle: %w", err)
	}
	if spec.Process == nil {
		return nil, fmt.Errorf("bundle has no process: %w", errdefs.ErrFailedPrecondition)
	}
	p := *spec.Process
	p.Args = args
	p.Terminal = tty
	p.ConsoleSize = nil
	if tty && !hasEnv(p.Env, "TERM") {
		p.Env = append(append([]string(nil), p.Env...), "TERM=xterm")
	}
	return json.Marshal(&p)
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
			return true
		}
	}
	return false
}
