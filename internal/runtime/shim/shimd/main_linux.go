package shimd

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
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// handshakeFD is the descriptor on which the shim reports that it serves.
const handshakeFD = 3

// Timeouts of the shim.
const (
	createTimeout = 4 * time.Minute
	startTimeout  = time.Minute
	deleteTimeout = time.Minute
	ioDrainWait   = 2 * time.Second
	// exitDeleteWait bounds how long an exit waits to be recorded for
	// the runtime delete that follows it.
	exitDeleteWait = 5 * time.Second
	// idleExit is how long a shim that was never asked to create a
	// container waits before it exits (crind died after starting it).
	idleExit = time.Minute
	// bgWait bounds how long an exiting shim waits for its exit records
	// and runtime deletes to finish.
	bgWait = 2 * deleteTimeout
)

func parseArgs(args []string) (shim.Config, error) {
	fs := flag.NewFlagSet("crin-shim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Main prints the error
	var c shim.Config
	var oom string
	fs.StringVar(&c.Dir, "dir", "", "the shim's dir (pid, socket, log)")
	fs.StringVar(&c.Runtime, "runtime", "", "OCI runtime binary")
	fs.StringVar(&c.RuntimeRoot, "root", "", "OCI runtime --root")
	fs.StringVar(&oom, "oom-score-adj", "", "oom_score_adj for the shim")
	fs.BoolVar(&c.SystemdCgroup, "systemd-cgroup", false, "run the OCI runtime with --systemd-cgroup")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.Dir == "" || c.Runtime == "" || c.RuntimeRoot == "" {
		return c, errors.New("-dir, -runtime and -root are required")
	}
	if oom != "" {
		v, err := strconv.Atoi(oom)
		if err != nil {
			return c, fmt.Errorf("-oom-score-adj %q: %w", oom, err)
		}
		c.OOMScoreAdj = &v
	}
	return c, nil
}

// Main runs crin-shim with args (without the program name) and returns the
// exit status. The oci backend starts it in a session of its own, with
// descriptor 3 a pipe on which the shim reports once it serves its
// socket; it serves until its last container is deleted. The runtime
// commands it runs take their timeouts from ctx.
func Main(ctx context.Context, args []string) int {
	tuneGC()
	cfg, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crin-shim:", err)
		return 2
	}
	return run(ctx, cfg)
}

// handshake is descriptor 3, on which the shim reports once.
type handshake struct {
	f *os.File // nil once reported
}

// report writes h (with the shim's pid) and closes the descriptor; later
// calls do nothing.
func (hs *handshake) report(h shim.Handshake) {
	if hs.f == nil {
		return
	}
	h.ShimPid = os.Getpid()
	data, _ := json.Marshal(h)
	_, _ = hs.f.Write(append(data, '\n'))
	_ = hs.f.Close()
	hs.f = nil
}

func run(ctx context.Context, cfg shim.Config) int {
	unix.CloseOnExec(handshakeFD)
	hs := &handshake{f: os.NewFile(handshakeFD, "handshake")}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("shim_dir", filepath.Base(cfg.Dir))
	signal.Ignore(unix.SIGHUP, unix.SIGPIPE)

	if err := prepareProcess(log, cfg); err != nil {
		hs.report(shim.Handshake{Error: err.Error()})
		return 1
	}
	sock := shim.SocketPath(cfg.Dir)
	l, err := listen(sock)
	if err != nil {
		hs.report(shim.Handshake{Error: err.Error()})
		return 1
	}
	rp := newReaper()
	rp.run()
	var p *pod
	p = newPod(log, func(id string, o shim.CreateOptions) (*ctr, error) {
		return newContainer(ctx, log.With("container_id", id), containerConfig(cfg, id, o), rp, &p.bg)
	})
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.serve(l)
	}()
	p.exitWhenIdle(idleExit)
	hs.report(shim.Handshake{})
	log.Info("shim serving")

	<-p.quit
	_ = l.Close()
	<-served
	waitGroup(&p.bg, bgWait)
	rp.stop()
	log.Info("shim exiting")
	// Nothing refers to the dir any more (its containers were dropped),
	// and crind starts the pod's next shim only once this one is gone.
	if err := os.RemoveAll(cfg.Dir); err != nil {
		log.Warn("remove shim dir", "error", err)
	}
	return 0
}

// waitGroup waits for wg, at most d. internal/nri has a twin bounded by a
// context; the shim keeps its own rather than link that package.
func waitGroup(wg interface{ Wait() }, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// prepareProcess writes the shim's pid file, sets its oom_score_adj and
// makes it the subreaper of the containers' processes.
func prepareProcess(log *slog.Logger, cfg shim.Config) error {
	if err := os.WriteFile(filepath.Join(cfg.Dir, shim.ShimPidFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fmt.Errorf("write shim pid: %w", err)
	}
	if cfg.OOMScoreAdj != nil {
		// Raising is always allowed; lowering needs CAP_SYS_RESOURCE,
		// which root may lack. Neither outcome stops the shim.
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(*cfg.OOMScoreAdj)), 0); err != nil {
			log.Warn("set oom_score_adj", "value", *cfg.OOMScoreAdj, "error", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
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

// shimGCPercent is the shim's GOGC: its live heap is tens of KiB per
// container, so Go's default (the heap may grow to 4 MiB before the first
// collection) would leave most of a shim's resident memory to garbage.
const shimGCPercent = 25

// tuneGC sets the shim's GC target unless GOGC is set, and unsets the
// variables crind set only for the shim itself (shim.UnsetEnv), so the
// runtime commands it runs do not inherit them.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(shimGCPercent)
	}
	for _, name := range strings.Fields(os.Getenv(shim.UnsetEnv)) {
		_ = os.Unsetenv(name)
	}
	_ = os.Unsetenv(shim.UnsetEnv)
}
