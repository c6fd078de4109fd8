package shim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// handshakeFD is the descriptor on which the shim reports the create result.
const handshakeFD = 3

// Timeouts for the runtime commands the shim runs itself.
const (
	createTimeout = 4 * time.Minute
	startTimeout  = time.Minute
	ioDrainWait   = 2 * time.Second
)

// Config is what one shim needs; the oci backend passes it as flags.
type Config struct {
	ID          string // container id
	Dir         string // state dir and bundle: config.json, exit, shim.log
	Runtime     string // OCI runtime binary
	RuntimeRoot string // the runtime's --root
	LogPath     string // CRI log; empty discards output
	// OOMScoreAdj, when set, becomes the shim's own oom_score_adj.
	OOMScoreAdj *int
	// Stdin keeps the container's stdin open for attach clients (a pipe,
	// or the terminal with TTY); without it stdin is /dev/null.
	Stdin bool
	// StdinOnce closes the container's stdin once the first attach
	// session that brought stdin ends.
	StdinOnce bool
	// TTY runs the container on a terminal (the bundle's process.terminal
	// must be true): the runtime hands the shim its master through a
	// console socket.
	TTY bool
}

// Args returns the command-line flags that make a shim use c.
func (c Config) Args() []string {
	args := []string{
		"-id", c.ID, "-dir", c.Dir, "-runtime", c.Runtime,
		"-root", c.RuntimeRoot, "-log", c.LogPath,
	}
	if c.OOMScoreAdj != nil {
		args = append(args, "-oom-score-adj", strconv.Itoa(*c.OOMScoreAdj))
	}
	if c.Stdin {
		args = append(args, "-stdin")
	}
	if c.StdinOnce {
		args = append(args, "-stdin-once")
	}
	if c.TTY {
		args = append(args, "-tty")
	}
	return args
}

func parseArgs(args []string) (Config, bool, error) {
	fs := flag.NewFlagSet("crin-shim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Main prints the error
	var c Config
	var oom string
	fs.StringVar(&c.ID, "id", "", "container id")
	fs.StringVar(&c.Dir, "dir", "", "container state directory (the bundle)")
	fs.StringVar(&c.Runtime, "runtime", "", "OCI runtime binary")
	fs.StringVar(&c.RuntimeRoot, "root", "", "OCI runtime --root")
	fs.StringVar(&c.LogPath, "log", "", "CRI log file")
	fs.StringVar(&oom, "oom-score-adj", "", "oom_score_adj for the shim")
	fs.BoolVar(&c.Stdin, "stdin", false, "keep the container's stdin open for attach")
	fs.BoolVar(&c.StdinOnce, "stdin-once", false, "close the container's stdin after the first attach with stdin")
	fs.BoolVar(&c.TTY, "tty", false, "run the container on a terminal")
	detached := fs.Bool("detached", false, "internal: run as the detached shim")
	if err := fs.Parse(args); err != nil {
		return c, false, err
	}
	if c.ID == "" || c.Dir == "" || c.Runtime == "" || c.RuntimeRoot == "" {
		return c, false, errors.New("-id, -dir, -runtime and -root are required")
	}
	if oom != "" {
		v, err := strconv.Atoi(oom)
		if err != nil {
			return c, false, fmt.Errorf("-oom-score-adj %q: %w", oom, err)
		}
		c.OOMScoreAdj = &v
	}
	return c, *detached, nil
}

// Main runs crin-shim with args (without the program name) and returns the
// exit status. Run by the oci backend with a pipe as descriptor 3, it starts
// a detached copy of itself in a new session and returns at once; the copy
// creates the container, writes a Handshake on descriptor 3, closes it, and
// serves the control socket until told to shut down. The runtime commands
// the shim runs take their timeouts from ctx.
func Main(ctx context.Context, args []string) int {
	cfg, detached, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crin-shim:", err)
		return 2
	}
	if !detached {
		if err := detach(cfg, args); err != nil {
			fmt.Fprintln(os.Stderr, "crin-shim:", err)
			return 1
		}
		return 0
	}
	return runDetached(ctx, cfg)
}

// detach starts the real shim in its own session, detached from the caller,
// so that the caller only has to reap this short-lived process.
func detach(cfg Config, args []string) error {
	hs := os.NewFile(handshakeFD, "handshake")
	if hs == nil {
		return errors.New("no handshake descriptor 3")
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, ShimLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open shim log: %w", err)
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	cmd := exec.Command(self, append([]string{"-detached"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.ExtraFiles = []*os.File{hs}
	cmd.Dir = cfg.Dir
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start detached shim: %w", err)
	}
	return cmd.Process.Release()
}

// handshake is descriptor 3, on which the detached shim reports once.
type handshake struct {
	f *os.File // nil once reported
}

// report writes h (with the shim's pid) and closes the descriptor; later
// calls do nothing.
func (hs *handshake) report(h Handshake) {
	if hs.f == nil {
		return
	}
	h.ShimPid = os.Getpid()
	data, _ := json.Marshal(h)
	_, _ = hs.f.Write(append(data, '\n'))
	_ = hs.f.Close()
	hs.f = nil
}

func runDetached(ctx context.Context, cfg Config) int {
	unix.CloseOnExec(handshakeFD)
	hs := &handshake{f: os.NewFile(handshakeFD, "handshake")}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("container_id", cfg.ID)
	signal.Ignore(unix.SIGHUP, unix.SIGPIPE)

	if err := prepareProcess(log, cfg); err != nil {
		hs.report(Handshake{Error: err.Error()})
		return 1
	}
	sock := SocketPath(cfg.Dir)
	l, err := listen(sock)
	if err != nil {
		hs.report(Handshake{Error: err.Error()})
		return 1
	}
	defer os.Remove(sock)

	logw, err := OpenLog(cfg.LogPath, LogOptions{OnError: func(err error) { log.Warn("container log", "error", err) }})
	if err != nil {
		_ = l.Close()
		hs.report(Handshake{Error: err.Error()})
		return 1
	}
	defer logw.Close()

	rp := newReaper()
	c, err := create(ctx, cfg)
	if err != nil {
		rp.stop()
		_ = l.Close()
		hs.report(Handshake{Error: err.Error()})
		return 1
	}
	log.Info("container created", "pid", c.pid)

	in := c.stdio(cfg)
	defer in.release()
	if c.term != nil {
		defer c.term.Close()
	}
	supervise(log, cfg, supervised{c: c, rp: rp, l: l, logw: logw, in: in}, hs)
	log.Info("shim exiting")
	return 0
}

// prepareProcess writes the shim's pid file, sets its oom_score_adj and
// makes it the subreaper of the container's processes.
func prepareProcess(log *slog.Logger, cfg Config) error {
	if err := os.WriteFile(filepath.Join(cfg.Dir, ShimPidFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fmt.Errorf("write shim pid: %w", err)
	}
	if cfg.OOMScoreAdj != nil {
		// Raising is always allowed; lowering needs CAP_SYS_RESOURCE,
		// which root may lack. Neither outcome stops the container.
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(*cfg.OOMScoreAdj)), 0); err != nil {
			log.Warn("set oom_score_adj", "value", *cfg.OOMScoreAdj, "error", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// supervised is what the shim runs once the container is created.
type supervised struct {
	c    *created
	rp   *reaper
	l    net.Listener // the control socket
	logw *LogWriter
	in   *stdio
}

// supervise serves the control socket for the created container, records
// its exit when it comes, and returns once the server was told to quit and
// everything it started has finished. It reports success on hs once
// serving.
func supervise(log *slog.Logger, cfg Config, s supervised, hs *handshake) {
	c, rp := s.c, s.rp
	srv := newServer(log, c.pid, func() (int, error) { return startContainer(cfg, rp, c.pid) }, s.logw, s.in)
	ioDone := copyOutput(log, s.logw, srv.fan, c)
	oom := newOOMWatch(log, c.pid)
	initExited := make(chan unix.WaitStatus, 1)
	rp.watch(c.pid, func(ws unix.WaitStatus) { initExited <- ws })
	rp.run()

	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		recordExit(log, cfg, srv, oom, <-initExited, c.pid, ioDone)
	}()

	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.serve(s.l)
	}()
	hs.report(Handshake{Pid: c.pid})

	<-srv.quit
	_ = s.l.Close()
	<-served
	<-recorded
	rp.stop()
}

// copyOutput copies both streams into the log, and to attached clients,
// until every process holding the pipes is gone; the returned channel
// closes then. A terminal's output is all stdout.
func copyOutput(log *slog.Logger, logw *LogWriter, fan *fanout, c *created) <-chan struct{} {
	done := make(chan struct{})
	if c.term != nil {
		go func() {
			defer close(done)
			if err := logw.Copy(StreamStdout, io.TeeReader(hangupReader{c.term}, fan.writer(attachStdout))); err != nil {
				log.Warn("copy terminal output", "error", err)
			}
		}()
		return done
	}
	go func() {
		defer close(done)
		errc := make(chan error, 1)
		go func() { errc <- logw.Copy(StreamStderr, io.TeeReader(c.stderr, fan.writer(attachStderr))) }()
		if err := logw.Copy(StreamStdout, io.TeeReader(c.stdout, fan.writer(attachStdout))); err != nil {
			log.Warn("copy stdout", "error", err)
		}
		if err := <-errc; err != nil {
			log.Warn("copy stderr", "error", err)
		}
	}()
	return done
}

// oomWatch remembers the container's OOM kill counter at create time.
type oomWatch struct {
	file string // empty when there is no counter to read
	base uint64
}

func newOOMWatch(log *slog.Logger, pid int) oomWatch {
	file, err := oomCounterFile(pid)
	if err != nil {
		log.Warn("no oom counter", "error", err)
		return oomWatch{}
	}
	base, err := readOOMKills(file)
	if err != nil {
		log.Warn("read oom counter", "error", err)
		return oomWatch{}
	}
	return oomWatch{file: file, base: base}
}

// killed reports whether the kernel OOM-killed a process of the container
// since create. It must run before the runtime deletes the cgroup.
func (w oomWatch) killed() bool {
	if w.file == "" {
		return false
	}
	n, err := readOOMKills(w.file)
	return err == nil && n > w.base
}

// recordExit writes the exit file once the output drained (or ioDrainWait
// passed) and then tells the server, so a waiter sees the whole log.
func recordExit(log *slog.Logger, cfg Config, srv *server, oom oomWatch, ws unix.WaitStatus, pid int, ioDone <-chan struct{}) {
	finished := time.Now()
	code, sig := exitCode(ws)
	e := Exit{Pid: pid, ExitCode: code, Signal: sig, StartedAt: srv.startedTime(), FinishedAt: finished, OOMKilled: oom.killed()}
	select {
	case <-ioDone:
	case <-time.After(ioDrainWait):
		log.Warn("container output still open after exit")
	}
	// Attached clients have seen all the output there is to see; input
	// has nowhere to go (this also unblocks a client's write to a full
	// stdin pipe).
	srv.stdio.release()
	srv.fan.close()
	if err := WriteExit(cfg.Dir, e); err != nil {
		log.Error("record exit", "error", err)
	}
	log.Info("container exited", "exit_code", e.ExitCode, "oom_killed", e.OOMKilled)
	srv.setExited(e)
}

func listen(sock string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return nil, fmt.Errorf("make socket dir: %w", err)
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", sock, err)
	}
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(true)
	}
	return l, nil
}

type created struct {
	pid            int
	stdout, stderr *os.File // nil with a terminal
	stdin          *os.File // the stdin pipe's write end; nil without
	term           *os.File // the terminal's master; nil without
}

// stdio is the container's input as the attach server sees it.
func (c *created) stdio(cfg Config) *stdio {
	s := &stdio{in: c.stdin, term: c.term, once: cfg.StdinOnce}
	if c.term != nil {
		if cfg.Stdin {
			s.in = c.term
		}
		s.resize = func(w, h uint16) error { return setTerminalSize(c.term, w, h) }
		s.eof = func() error { return sendTerminalEOF(c.term) }
	}
	return s
}

// runtimeArgv is the runtime command line with the global flags.
func runtimeArgv(cfg Config, args ...string) []string {
	return append([]string{cfg.Runtime, "--root", cfg.RuntimeRoot,
		"--log", filepath.Join(cfg.Dir, RuntimeLog), "--log-format", "json"}, args...)
}

// logSize is where the next runtime log messages will start.
func logSize(cfg Config) int64 {
	fi, err := os.Stat(filepath.Join(cfg.Dir, RuntimeLog))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// runtimeError reads what the runtime logged since offset.
func runtimeError(cfg Config, offset int64, extra string) string {
	var msgs []string
	if f, err := os.Open(filepath.Join(cfg.Dir, RuntimeLog)); err == nil {
		data, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
		_ = f.Close()
		if m := ParseRuntimeLog(data); m != "" {
			msgs = append(msgs, m)
		}
	}
	if extra = strings.TrimSpace(extra); extra != "" {
		msgs = append(msgs, extra)
	}
	return strings.Join(msgs, "; ")
}

// create runs "runtime create" with the container's stdout and stderr on
// pipes the shim keeps (and its stdin on one too with cfg.Stdin), or, with
// cfg.TTY, receives the container's terminal from the runtime on a console
// socket; the container's init stays behind as its child.
func create(ctx context.Context, cfg Config) (_ *created, retErr error) {
	var closers []*os.File
	defer func() {
		if retErr != nil {
			for _, f := range closers {
				_ = f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	c := &created{}
	stdinR := null
	if cfg.Stdin && !cfg.TTY {
		if stdinR, c.stdin, err = pipe(); err != nil {
			return nil, err
		}
	}
	var console *consoleSocket
	if cfg.TTY {
		if console, err = listenConsole(ConsoleSocketPath(cfg.Dir)); err != nil {
			return nil, err
		}
		defer console.close()
	}

	off := logSize(cfg)
	pidFile := filepath.Join(cfg.Dir, InitPidFile)
	runErr := runCreate(ctx, cfg, pidFile, console, [3]*os.File{stdinR, outW, errW})
	outW.Close()
	errW.Close()
	if stdinR != null {
		stdinR.Close()
	}
	if runErr != nil {
		return nil, createFailed(ctx, cfg, off, errR, runErr)
	}
	if console != nil {
		// The runtime sent the terminal before create returned.
		if c.term, err = console.receive(5 * time.Second); err != nil {
			forceDelete(ctx, cfg)
			return nil, fmt.Errorf("receive the container's terminal: %w", err)
		}
		closers = append(closers, c.term)
		// The container's stdio is the terminal; the pipes only
		// carried the runtime's own output.
		outR.Close()
		errR.Close()
	} else {
		c.stdout, c.stderr = outR, errR
	}
	data, err := os.ReadFile(pidFile)
	if err == nil {
		c.pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	if err != nil || c.pid <= 0 {
		forceDelete(ctx, cfg)
		return nil, fmt.Errorf("read init pid: %v", err)
	}
	return c, nil
}

// runCreate runs "runtime create" with stdio as the container's stdin,
// stdout and stderr, and the console socket when there is one.
func runCreate(ctx context.Context, cfg Config, pidFile string, console *consoleSocket, stdio [3]*os.File) error {
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	args := []string{"create", "--bundle", cfg.Dir, "--pid-file", pidFile}
	if console != nil {
		args = append(args, "--console-socket", console.path)
	}
	argv := runtimeArgv(cfg, append(args, cfg.ID)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio[0], stdio[1], stdio[2]
	cmd.Dir = cfg.Dir
	return cmd.Run()
}

// createFailed removes what a failed "runtime create" may have left and
// returns its error with what the runtime said: in its log since offset,
// or on stderr, which is the container's stderr pipe errR.
func createFailed(ctx context.Context, cfg Config, offset int64, errR *os.File, runErr error) error {
	_ = errR.SetReadDeadline(time.Now().Add(time.Second))
	stderr, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
	msg := runtimeError(cfg, offset, string(stderr))
	forceDelete(ctx, cfg)
	if msg == "" {
		msg = runErr.Error()
	}
	return fmt.Errorf("%s create: %s", filepath.Base(cfg.Runtime), msg)
}

// forceDelete removes the container from the runtime after a failed create,
// even when ctx is done. The reaper is not running yet, so exec.Cmd may
// wait for it.
func forceDelete(ctx context.Context, cfg Config) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	argv := runtimeArgv(cfg, "delete", "--force", cfg.ID)
	_ = exec.CommandContext(ctx, argv[0], argv[1:]...).Run()
}

// startContainer runs "runtime start"; the reaper collects it.
func startContainer(cfg Config, rp *reaper, pid int) (int, error) {
	off := logSize(cfg)
	runPid, done, err := rp.spawn(runtimeArgv(cfg, "start", cfg.ID), cfg.Dir)
	if err != nil {
		return 0, fmt.Errorf("run %s start: %w", cfg.Runtime, err)
	}
	var ws unix.WaitStatus
	select {
	case ws = <-done:
	case <-time.After(startTimeout):
		_ = unix.Kill(runPid, unix.SIGKILL)
		<-done
		return 0, fmt.Errorf("%s start: timed out after %s", filepath.Base(cfg.Runtime), startTimeout)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		msg := runtimeError(cfg, off, "")
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", ws.ExitStatus())
		}
		return 0, fmt.Errorf("%s start: %s", filepath.Base(cfg.Runtime), msg)
	}
	return pid, nil
}
