package shimd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// ctrConfig is one container of the shim.
type ctrConfig struct {
	ID          string
	Dir         string // the container's state dir and bundle
	Runtime     string
	RuntimeRoot string
	// RuntimeFlags are the runtime's global flags (shim.Config.RuntimeFlags).
	RuntimeFlags []string
	shim.CreateOptions
}

func containerConfig(cfg shim.Config, id string, o shim.CreateOptions) ctrConfig {
	return ctrConfig{ID: id, Dir: o.Bundle, Runtime: cfg.Runtime, RuntimeRoot: cfg.RuntimeRoot, RuntimeFlags: cfg.RuntimeFlags(), CreateOptions: o}
}

// newContainer creates the container cfg describes ("<runtime> create"),
// and supervises it from then on: its output goes to its CRI log and to
// attached clients, its exit is recorded (bg counts the goroutine doing
// that), after which the runtime deletes it.
func newContainer(ctx context.Context, log *slog.Logger, cfg ctrConfig, rp *reaper, bg *sync.WaitGroup) (*ctr, error) {
	// The container's shim.pid names the shim that supervises it, so
	// crind tells its death from its pod's next shim.
	if err := os.WriteFile(filepath.Join(cfg.Dir, shim.ShimPidFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("write shim pid: %w", err)
	}
	logw, err := crilog.Open(cfg.LogPath, crilog.Options{Root: cfg.LogRoot, OnError: func(err error) { log.Warn("container log", "error", err) }})
	if err != nil {
		return nil, err
	}
	// The counters' bases are read before the runtime runs the init:
	// "<runtime> run" starts it, and a container that blows its limit
	// at once is OOM-killed before run returns (TestOOMKilled lost it
	// on a loaded machine when the base was read after).
	oom := prepareOOMWatch(log, specOOMCounterFile(cfg.Dir))
	startedAt := time.Now()
	c, err := create(ctx, cfg, rp)
	took := time.Since(startedAt)
	if err != nil {
		_ = logw.Close()
		// Not this shim's: crind may try again with another.
		_ = os.Remove(filepath.Join(cfg.Dir, shim.ShimPidFile))
		return nil, err
	}
	log.Info("container started", "pid", c.pid)
	in := c.stdio(cfg)
	cc := newCtr(log, cfg.ID, c.pid, startedAt, logw, in)
	cc.took = took
	cc.cfg, cc.rp = cfg, rp
	if fd, err := unix.PidfdOpen(c.pid, 0); err == nil {
		cc.pidfd = fd
	}
	cc.privatePID = cfg.PrivatePID
	cc.release = func() {
		in.release()
		if c.term != nil {
			_ = c.term.Close()
		}
		_ = logw.Close()
		cc.closePidfd()
	}
	ioDone := copyOutput(log, logw, cc.fan, c)
	oom = oom.orPid(log, c.pid)
	bg.Add(1)
	rp.watch(c.pid, startedAt, func(ws unix.WaitStatus) {
		// An exec'd process outlives the init when the PID namespace is
		// shared; none may outlive its container.
		cc.killExecs()
		code, sig := exitCode(ws)
		// The OOM counter is read before the runtime delete removes the
		// cgroup; the delete runs while the output drains, and the exit
		// is recorded once both are done, so that a RemoveContainer
		// right after a stop finds the runtime's work done.
		e := exitrec.Exit{Pid: c.pid, ExitCode: code, Signal: sig, StartedAt: cc.startedTime(),
			FinishedAt: time.Now(), OOMKilled: oom.killed(sig == int(unix.SIGKILL))}
		bg.Add(1)
		go func() {
			defer bg.Done()
			deleteExited(log, cfg, cc, rp)
		}()
		go func() {
			defer bg.Done()
			recordExit(log, cfg, cc, e, ioDone)
		}()
	})
	return cc, nil
}

// copyOutput copies both streams into the log, and to attached clients,
// until every process holding the pipes is gone; the returned channel
// closes then. A terminal's output is all stdout.
func copyOutput(log *slog.Logger, logw *crilog.Writer, fan *fanout, c *created) <-chan struct{} {
	done := make(chan struct{})
	if c.term != nil {
		go func() {
			defer close(done)
			if err := logw.Copy(crilog.StreamStdout, io.TeeReader(hangupReader{c.term}, fan.writer(shim.FrameStdout))); err != nil {
				log.Warn("copy terminal output", "error", err)
			}
		}()
		return done
	}
	go func() {
		defer close(done)
		errc := make(chan error, 1)
		go func() { errc <- logw.Copy(crilog.StreamStderr, io.TeeReader(c.stderr, fan.writer(shim.FrameStderr))) }()
		if err := logw.Copy(crilog.StreamStdout, io.TeeReader(c.stdout, fan.writer(shim.FrameStdout))); err != nil {
			log.Warn("copy stdout", "error", err)
		}
		if err := <-errc; err != nil {
			log.Warn("copy stderr", "error", err)
		}
		_ = c.stdout.Close()
		_ = c.stderr.Close()
	}()
	return done
}

// oomWatch remembers the container's OOM kill counter at create time,
// and on cgroup v2 its ancestors' (crun's scope above its container
// subgroup, the pod's cgroup), which count the kills of every cgroup
// below them and outlive the container's.
type oomWatch struct {
	file string // empty when there is no counter to read
	base uint64
	// ancestors: memory.events of the cgroups above, nearest first (v2).
	ancestors []oomCounter
}

// oomCounter is one memory.events file and its oom_kill at create time.
type oomCounter struct {
	file string
	base uint64
}

// oomAncestors is how many cgroups above the container's are watched:
// crun's scope and the pod's cgroup, and one more.
const oomAncestors = 3

// prepareOOMWatch reads, before the runtime starts the container, the
// OOM kill counter of specFile (from the spec's cgroupsPath, "" if crind
// cannot name it) and of its ancestors on v2. A specFile that does not
// exist yet is a cgroup the runtime makes at start: its count starts at
// 0.
func prepareOOMWatch(log *slog.Logger, specFile string) oomWatch {
	if specFile == "" {
		return oomWatch{}
	}
	return newOOMWatch(log, specFile, true)
}

// orPid is w, or a watch of the memory cgroup pid is in, read now (a
// kill between the start and now is missed), when no counter was named
// before the start, or when the systemd scope named from the spec
// (specOOMCounterFile) is not where the runtime put the init. The init
// may be gone already (OOM-killed at once): w stands then.
func (w oomWatch) orPid(log *slog.Logger, pid int) oomWatch {
	if w.file != "" && !strings.HasSuffix(filepath.Dir(w.file), ".scope") {
		return w // a cgroupfs path: the runtime makes it where the spec says
	}
	file, err := oomCounterFile(pid)
	if err != nil {
		if w.file == "" {
			log.Warn("no oom counter", "error", err)
		}
		return w
	}
	if w.file != "" {
		scope := filepath.Dir(w.file)
		if file == w.file || strings.HasPrefix(file, scope+"/") {
			return w // the scope, or crun's subgroup in it
		}
		log.Warn("the init is not in the scope its spec names; watching its own cgroup", "scope", scope, "cgroup_file", file)
	}
	return newOOMWatch(log, file, false)
}

// newOOMWatch watches file; beforeStart says the container's cgroup may
// not exist yet (its count then starts at 0).
func newOOMWatch(log *slog.Logger, file string, beforeStart bool) oomWatch {
	base, err := shim.ReadOOMKills(file)
	if errors.Is(err, os.ErrNotExist) && beforeStart {
		base, err = 0, nil
	}
	if err != nil {
		log.Warn("read oom counter", "error", err)
		return oomWatch{}
	}
	w := oomWatch{file: file, base: base}
	if filepath.Base(file) == "memory.events" {
		dir := filepath.Dir(file)
		for range oomAncestors {
			dir = filepath.Dir(dir)
			if dir == cgroupRoot || !strings.HasPrefix(dir, cgroupRoot+"/") {
				break
			}
			f := filepath.Join(dir, "memory.events")
			if b, err := shim.ReadOOMKills(f); err == nil {
				w.ancestors = append(w.ancestors, oomCounter{file: f, base: b})
			}
		}
	}
	return w
}

// killed reports whether the kernel OOM-killed a process of the container
// since create; sigkilled says the container's init died of SIGKILL. It
// reads the container's counter, which must happen before the cgroup is
// removed. With the systemd driver that is not crind's to order: systemd
// stops a container's scope, and removes its cgroup, as soon as the last
// process in it is gone, which can be before the shim has reaped the
// init. The pod's counter then tells instead, for an init killed by
// SIGKILL: the nearest ancestor still there (the pod's, or with crun the
// scope above its subgroup) went up since create only if a process below
// it was OOM-killed (another container of the pod OOM-killed in the same
// window would be taken for this one's).
func (w oomWatch) killed(sigkilled bool) bool {
	if w.file == "" {
		return false
	}
	n, err := shim.ReadOOMKills(w.file)
	if err == nil {
		return n > w.base
	}
	if !sigkilled {
		return false
	}
	for _, a := range w.ancestors {
		if n, err := shim.ReadOOMKills(a.file); err == nil {
			return n > a.base
		}
	}
	return false
}

// recordExit writes the exit file once the output drained (or ioDrainWait
// passed) and the runtime deleted the container (or exitDeleteWait
// passed), and then tells the waiters, so a waiter sees the whole log.
func recordExit(log *slog.Logger, cfg ctrConfig, cc *ctr, e exitrec.Exit, ioDone <-chan struct{}) {
	select {
	case <-ioDone:
	case <-time.After(ioDrainWait):
		log.Warn("container output still open after exit")
	}
	select {
	case <-cc.deleted:
	case <-time.After(exitDeleteWait):
		log.Warn("runtime delete still running after exit")
	}
	// Attached clients have seen all the output there is to see; input
	// has nowhere to go (this also unblocks a client's write to a full
	// stdin pipe).
	cc.stdio.release()
	cc.fan.close()
	if err := exitrec.Write(cfg.Dir, e); err != nil {
		log.Error("record exit", "error", err)
	}
	log.Info("container exited", "exit_code", e.ExitCode, "oom_killed", e.OOMKilled)
	cc.setExited(e)
}

// deleteExited runs "<runtime> delete" for the exited container (which
// also kills what is left of it where its PID namespace is shared), so
// that removing it later costs no runtime command; shim.OpDelete waits for it.
func deleteExited(log *slog.Logger, cfg ctrConfig, cc *ctr, rp *reaper) {
	defer close(cc.deleted)
	off := logSize(cfg)
	ws, err := rp.runFor(deleteTimeout, runtimeArgv(cfg, "delete", "--force", cfg.ID), cfg.Dir)
	if err == nil && (!ws.Exited() || ws.ExitStatus() != 0) {
		msg := runtimeError(cfg, off, "")
		if msg == "" || !strings.Contains(msg, "does not exist") {
			if msg == "" {
				msg = fmt.Sprintf("exit status %d", ws.ExitStatus())
			}
			err = fmt.Errorf("%s delete: %s", filepath.Base(cfg.Runtime), msg)
		}
	}
	if err != nil {
		log.Warn("delete exited container from the runtime", "error", err)
		cc.deleteErr = err
	}
}

type created struct {
	pid            int
	stdout, stderr *os.File // nil with a terminal
	stdin          *os.File // the stdin pipe's write end; nil without
	term           *os.File // the terminal's master; nil without
}

// stdio is the container's input as the attach server sees it.
func (c *created) stdio(cfg ctrConfig) *stdio {
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
func runtimeArgv(cfg ctrConfig, args ...string) []string {
	argv := append([]string{cfg.Runtime}, cfg.globalFlags()...)
	argv = append(argv, "--log", filepath.Join(cfg.Dir, shim.RuntimeLog), "--log-format", "json")
	return append(argv, args...)
}

// globalFlags are the runtime's flags before its command: --root (and
// --systemd-cgroup with the systemd driver).
func (cfg ctrConfig) globalFlags() []string {
	if cfg.RuntimeFlags != nil {
		return cfg.RuntimeFlags
	}
	return []string{"--root", cfg.RuntimeRoot}
}

// logSize is where the next runtime log messages will start.
func logSize(cfg ctrConfig) int64 {
	fi, err := os.Stat(filepath.Join(cfg.Dir, shim.RuntimeLog))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// runtimeError reads what the runtime logged since offset.
func runtimeError(cfg ctrConfig, offset int64, extra string) string {
	return runtimeLogError(filepath.Join(cfg.Dir, shim.RuntimeLog), offset, extra)
}

// runtimeLogError reads what the runtime logged to path since offset, and
// adds extra (what it wrote to stderr).
func runtimeLogError(path string, offset int64, extra string) string {
	var msgs []string
	if f, err := os.Open(path); err == nil {
		data, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
		_ = f.Close()
		if m := shim.ParseRuntimeLog(data); m != "" {
			msgs = append(msgs, m)
		}
	}
	// The runtime may write the same error to both.
	if extra = strings.TrimSpace(extra); extra != "" && (len(msgs) == 0 || !strings.Contains(extra, msgs[0])) {
		msgs = append(msgs, extra)
	}
	return strings.Join(msgs, "; ")
}

// create runs "runtime create" with the container's stdout and stderr on
// pipes the shim keeps (and its stdin on one too with cfg.Stdin), or, with
// cfg.TTY, receives the container's terminal from the runtime on a console
// socket; the container's init stays behind as the shim's child.
func create(ctx context.Context, cfg ctrConfig, rp *reaper) (_ *created, retErr error) {
	pp, err := newProcPipes(cfg.Stdin && !cfg.TTY)
	if err != nil {
		return nil, err
	}
	c := &created{stdin: pp.stdinW}
	defer func() {
		if retErr != nil {
			pp.close()
			if c.term != nil {
				_ = c.term.Close()
			}
		}
	}()
	var console *consoleSocket
	if cfg.TTY {
		if console, err = listenConsole(shim.ConsoleSocketPath(cfg.Dir)); err != nil {
			return nil, err
		}
		defer console.close()
	}

	off := logSize(cfg)
	pidFile := filepath.Join(cfg.Dir, shim.InitPidFile)
	runErr := runCreate(cfg, rp, pidFile, console, pp.child())
	pp.started()
	if runErr != nil {
		return nil, createFailed(ctx, cfg, rp, off, pp.errR, runErr)
	}
	if console != nil {
		// The runtime sent the terminal before create returned.
		if c.term, err = console.receive(5 * time.Second); err != nil {
			forceDelete(cfg, rp)
			return nil, fmt.Errorf("receive the container's terminal: %w", err)
		}
		// The container's stdio is the terminal; the pipes only
		// carried the runtime's own output.
		pp.closeOutput()
	} else {
		c.stdout, c.stderr = pp.outR, pp.errR
	}
	if c.pid = readPidFile(pidFile); c.pid <= 0 {
		forceDelete(cfg, rp)
		return nil, fmt.Errorf("read init pid: no pid in %s", pidFile)
	}
	return c, nil
}

// runCreate runs "runtime run --detach" ("runtime restore --detach" with
// cfg.Restore), which creates and starts the container in one command,
// with stdio as the container's stdin, stdout and stderr, and the console
// socket when there is one.
func runCreate(cfg ctrConfig, rp *reaper, pidFile string, console *consoleSocket, stdio [3]*os.File) error {
	args := []string{"run", "--detach", "--bundle", cfg.Dir, "--pid-file", pidFile}
	if cfg.Restore != "" {
		// crun 1.21 opens the work dir and does not make it.
		work := filepath.Join(cfg.Dir, shim.RestoreWorkDir)
		if err := os.MkdirAll(work, 0o700); err != nil {
			return err
		}
		args = []string{"restore", "--detach", "--bundle", cfg.Dir, "--pid-file", pidFile,
			"--image-path", cfg.Restore, "--work-path", work}
	}
	if console != nil {
		args = append(args, "--console-socket", console.path)
	}
	ws, err := rp.runFor(createTimeout, runtimeArgv(cfg, append(args, cfg.ID)...), cfg.Dir, stdio[:]...)
	if err != nil {
		return err
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("%s %s: %s", filepath.Base(cfg.Runtime), args[0], describeStatus(ws))
	}
	return nil
}

func describeStatus(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// createFailed removes what a failed "runtime create" may have left and
// returns its error with what the runtime said: in its log since offset,
// or on stderr, which is the container's stderr pipe errR.
func createFailed(_ context.Context, cfg ctrConfig, rp *reaper, offset int64, errR *os.File, runErr error) error {
	_ = errR.SetReadDeadline(time.Now().Add(time.Second))
	stderr, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
	msg := runtimeError(cfg, offset, string(stderr))
	forceDelete(cfg, rp)
	if msg == "" {
		return runErr
	}
	op := "run"
	if cfg.Restore != "" {
		op = "restore"
		if log := restoreLog(cfg); log != "" {
			msg += "; CRIU: " + log
		}
	}
	return fmt.Errorf("%s %s: %s", filepath.Base(cfg.Runtime), op, msg)
}

// restoreLog is the last error lines of CRIU's restore log, if any (such
// as "Can't fork for 11: File exists": a pid the restored processes had
// is taken in the PID namespace they are restored into).
func restoreLog(cfg ctrConfig) string {
	data, err := os.ReadFile(filepath.Join(cfg.Dir, shim.RestoreWorkDir, "restore.log"))
	if err != nil {
		return ""
	}
	var errs []string
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, "Error") {
			errs = append(errs, strings.TrimSpace(line))
		}
	}
	if len(errs) > 3 {
		errs = errs[len(errs)-3:]
	}
	return strings.Join(errs, "; ")
}

// forceDelete removes the container from the runtime after a failed create.
func forceDelete(cfg ctrConfig, rp *reaper) {
	_, _ = rp.runFor(30*time.Second, runtimeArgv(cfg, "delete", "--force", cfg.ID), cfg.Dir)
}

// procPipes are the stdio pipes of a process the runtime starts for the
// shim (a container's init, an exec'd process): the process gets stdinR,
// outW and errW; the shim keeps outR, errR and stdinW.
type procPipes struct {
	outR, outW, errR, errW *os.File
	stdinR, stdinW         *os.File // nil without stdin: the process gets /dev/null
}

// newProcPipes makes them, the stdin pipe only when stdin is set.
func newProcPipes(stdin bool) (*procPipes, error) {
	p := &procPipes{}
	var err error
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.errR, p.errW, err = os.Pipe(); err == nil && stdin {
		p.stdinR, p.stdinW, err = os.Pipe()
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// child is the process's stdin, stdout and stderr, for the runtime.
func (p *procPipes) child() [3]*os.File { return [3]*os.File{p.stdinR, p.outW, p.errW} }

// started closes the process's ends once the runtime ran: it has its own
// copies.
func (p *procPipes) started() {
	closeFiles(p.outW, p.errW, p.stdinR)
	p.outW, p.errW, p.stdinR = nil, nil, nil
}

// closeOutput closes the shim's output ends, when the process's output
// goes to a terminal instead (the pipes only carried the runtime's own).
func (p *procPipes) closeOutput() {
	closeFiles(p.outR, p.errR)
	p.outR, p.errR = nil, nil
}

// close closes every end still open (a failed start).
func (p *procPipes) close() {
	closeFiles(p.outR, p.outW, p.errR, p.errW, p.stdinR, p.stdinW)
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}
