package nri

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"
)

// preinstalled is a plugin found in plugin_path.
type preinstalled struct {
	idx, name, path, config string
}

func (pi preinstalled) id() string { return pi.idx + "-" + pi.name }

// discover lists the executables named NN-name in plugin_path with their
// configuration; badly named files are logged and skipped.
func (a *Adaptation) discover() ([]preinstalled, error) {
	if a.cfg.PluginPath == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(a.cfg.PluginPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover nri plugins in %s: %w", a.cfg.PluginPath, err)
	}
	var out []preinstalled
	for _, e := range entries {
		if why := notLaunchable(filepath.Join(a.cfg.PluginPath, e.Name())); why != "" {
			a.log.Warn("nri plugin skipped: "+why, "file", e.Name())
			continue
		}
		idx, name, err := api.ParsePluginName(e.Name())
		if err == nil {
			err = api.CheckPluginName(name)
		}
		if err != nil {
			a.log.Warn("nri plugin skipped: bad file name, want NN-name", "file", e.Name(), "error", err)
			continue
		}
		pi := preinstalled{idx: idx, name: name, path: filepath.Join(a.cfg.PluginPath, e.Name())}
		if pi.config, err = a.pluginConfig(idx, name); err != nil {
			a.log.Warn("nri plugin skipped: unreadable config", "plugin", pi.id(), "error", err)
			continue
		}
		out = append(out, pi)
	}
	return out, nil
}

// notLaunchable says why path cannot be run as a plugin, or "". A symlink
// is followed: plugins are often installed as links to a packaged binary.
func notLaunchable(path string) string {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err.Error()
	case fi.IsDir():
		return "a directory"
	case !fi.Mode().IsRegular():
		return "not a regular file"
	case fi.Mode().Perm()&0o111 == 0:
		return "not executable"
	}
	return ""
}

// pluginConfig reads NN-name.conf, else name.conf, from plugin_config_path.
func (a *Adaptation) pluginConfig(idx, name string) (string, error) {
	if a.cfg.PluginConfigPath == "" {
		return "", nil
	}
	for _, f := range []string{idx + "-" + name + ".conf", name + ".conf"} {
		b, err := os.ReadFile(filepath.Join(a.cfg.PluginConfigPath, f))
		if err == nil {
			return string(b), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("read nri plugin config %s: %w", f, err)
		}
	}
	return "", nil
}

// proc is a launched plugin process.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// launch starts the plugin with one end of a socketpair as fd 3 and wires
// the other end as its connection.
func (a *Adaptation) launch(sup *supervisor) (*plugin, *proc, error) {
	pi := sup.pi
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("launch nri plugin %s: socketpair: %w", pi.id(), err)
	}
	local := os.NewFile(uintptr(fds[0]), "nri-"+pi.id())
	peer := os.NewFile(uintptr(fds[1]), "nri-"+pi.id()+"-peer")
	conn, err := net.FileConn(local)
	_ = local.Close()
	if err != nil {
		_ = peer.Close()
		return nil, nil, fmt.Errorf("launch nri plugin %s: %w", pi.id(), err)
	}
	cmd := exec.Command(pi.path)
	cmd.Env = append(os.Environ(),
		api.PluginNameEnvVar+"="+pi.name,
		api.PluginIdxEnvVar+"="+pi.idx,
		api.PluginSocketEnvVar+"=3",
	)
	cmd.ExtraFiles = []*os.File{peer}
	out := &lineLogger{log: a.log, plugin: pi.id()}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second
	// The plugin dies with crind even when crind is killed outright, so a
	// restarted crind does not meet a stale copy holding devices or state.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr := &proc{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	if !a.goRun(func() { pr.run(a.log, pi.id(), started) }) {
		_ = peer.Close()
		_ = conn.Close()
		return nil, nil, fmt.Errorf("launch nri plugin %s: %w", pi.id(), errShutdown)
	}
	err = <-started
	_ = peer.Close()
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("launch nri plugin %s: %w", pi.id(), err)
	}
	p, err := a.newConnPlugin(conn, KindPreinstalled, sup, pi.idx, pi.name)
	if err != nil {
		a.terminate(pr)
		return nil, nil, err
	}
	return p, pr, nil
}

// run starts the process, reports the outcome on started and, if it
// started, waits for it and closes pr.exited. The kernel sends the
// parent-death signal when the thread that forked the child exits, not the
// process, and the Go runtime does end threads (one whose locked goroutine
// returns without unlocking, for one). So the fork and the whole life of
// the plugin stay on one OS thread locked to this goroutine: that thread
// ends only after the plugin is reaped, or when crind itself dies.
func (pr *proc) run(log *slog.Logger, id string, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := pr.cmd.Start(); err != nil {
		close(pr.exited)
		started <- err
		return
	}
	started <- nil
	err := pr.cmd.Wait()
	log.Debug("nri plugin process exited", "plugin", id, "error", err)
	close(pr.exited)
}

// terminate stops a launched process: SIGTERM, then SIGKILL after the
// grace period. It returns once the process is reaped.
func (a *Adaptation) terminate(pr *proc) {
	select {
	case <-pr.exited:
		return
	default:
	}
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(a.grace)
	defer t.Stop()
	select {
	case <-pr.exited:
		return
	case <-t.C:
	}
	_ = pr.cmd.Process.Kill()
	<-pr.exited
}

func (a *Adaptation) isStopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping || a.ctx.Err() != nil
}

// lineLogger logs a plugin's output line by line.
type lineLogger struct {
	log    *slog.Logger
	plugin string
	buf    []byte
}

func (l *lineLogger) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.log.Debug("nri plugin output", "plugin", l.plugin, "line", string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 4096 {
		l.log.Debug("nri plugin output", "plugin", l.plugin, "line", string(l.buf))
		l.buf = l.buf[:0]
	}
	return len(b), nil
}
