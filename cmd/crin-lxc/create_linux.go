package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/lxcconf"
)

// startTimeout bounds start's wait for the container to run.
const startTimeout = time.Minute

// monitorCgroupParent holds the monitors' cgroups while their
// containers run (LXC removes each when its monitor ends).
const monitorCgroupParent = "crin-lxc-monitor"

// create translates the bundle and starts the monitor; with startNow
// ("run --detach") it starts the container too.
func (c *cli) create(args []string, startNow bool) (retErr error) {
	name := "create"
	if startNow {
		name = "run"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	bundle := fs.String("bundle", ".", "bundle dir")
	pidFile := fs.String("pid-file", "", "file to write the monitor's pid to")
	console := fs.String("console-socket", "", "socket to send the container's terminal to")
	_ = fs.Bool("detach", false, "run: return once started")
	_ = fs.Bool("no-pivot", false, "ignored")
	_ = fs.Bool("no-new-keyring", false, "ignored")
	rest, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	id := rest[0]
	spec, b, err := readBundle(*bundle)
	if err != nil {
		return err
	}
	dir, err := c.makeDir(id)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	v2 := isCgroup2()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg, err := lxcconf.Translate(spec, hostView(v2), lxcconf.Options{
		ReadonlyHook:  self + " __readonly " + dir,
		HooksHook:     self + " __hooks " + dir,
		Bundle:        b,
		RootfsMount:   filepath.Join(dir, "rootfs"),
		SeccompFile:   filepath.Join(dir, "seccomp"),
		MonitorCgroup: monitorCgroupParent + "/" + id,
	})
	if err != nil {
		return err
	}
	cfg.Items = append(cfg.Items,
		lxcconf.Item{Key: "lxc.log.file", Value: filepath.Join(dir, "lxc.log")},
		lxcconf.Item{Key: "lxc.log.level", Value: "ERROR"})
	st := &stateFile{ID: id, Bundle: b, Rootfs: spec.Root.Path, Created: time.Now().UTC(), CgroupDir: cfg.CgroupDir, CgroupV2: v2}
	if err := writeContainer(dir, cfg, v2); err != nil {
		return err
	}
	if err := c.lxc.Check(id); err != nil {
		return fmt.Errorf("%w: %s", err, lxcErrors(dir))
	}
	if err := attachConsole(spec.Process.Terminal, *console); err != nil {
		return err
	}
	pid, err := c.spawnMonitor(id, dir)
	if err != nil {
		return err
	}
	st.Monitor = pid
	if err := c.saveState(st); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return err
	}
	if *pidFile != "" {
		if err := writeFileAtomic(*pidFile, []byte(strconv.Itoa(pid)), 0o600); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return fmt.Errorf("write pid file: %w", err)
		}
	}
	if startNow {
		return c.startContainer(id, st)
	}
	return nil
}

// makeDir makes the container's state dir; it must be new.
func (c *cli) makeDir(id string) (string, error) {
	if err := os.MkdirAll(c.root, 0o700); err != nil {
		return "", err
	}
	dir := c.dir(id)
	if err := os.Mkdir(dir, 0o700); errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("container %s already exists", id)
	} else if err != nil {
		return "", err
	}
	return dir, nil
}

// readBundle reads the bundle's config.json; b is the bundle's absolute
// path.
func readBundle(bundle string) (spec *specs.Spec, b string, err error) {
	if b, err = filepath.Abs(bundle); err != nil {
		return nil, "", err
	}
	data, err := os.ReadFile(filepath.Join(b, "config.json"))
	if err != nil {
		return nil, "", fmt.Errorf("read bundle: %w", err)
	}
	spec = &specs.Spec{}
	if err := json.Unmarshal(data, spec); err != nil {
		return nil, "", fmt.Errorf("read bundle config.json: %w", err)
	}
	if spec.Process == nil || spec.Root == nil {
		return nil, "", errors.New("read bundle config.json: no process or root")
	}
	return spec, b, nil
}

// attachConsole gives this process (and so the monitor, or the attached
// process) a terminal sent to the console socket, when the process asks
// for one.
func attachConsole(terminal bool, socket string) error {
	if terminal != (socket != "") {
		return errors.New("process.terminal and --console-socket go together")
	}
	if socket == "" {
		return nil
	}
	t, err := sendConsole(socket)
	if err != nil {
		return err
	}
	return useTerminal(t)
}

// writeContainer writes the LXC config, the seccomp profile, the run
// file the monitor reads, the rootfs mount point and the start fifo, and
// on cgroup v1 readies the cpuset cgroups above the container's.
func writeContainer(dir string, cfg *lxcconf.Config, v2 bool) error {
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(cfg.Render()), 0o600); err != nil {
		return err
	}
	if cfg.Seccomp != "" {
		if err := os.WriteFile(filepath.Join(dir, "seccomp"), []byte(cfg.Seccomp), 0o600); err != nil {
			return err
		}
	}
	var run bytes.Buffer
	word := func(s string) { run.WriteString(s); run.WriteByte(0) }
	word(strconv.Itoa(len(cfg.Args)))
	for _, a := range cfg.Args {
		if strings.ContainsRune(a, 0) {
			return errors.New("spec field process.args: a NUL in an argument")
		}
		word(a)
	}
	for _, t := range []string{"net", "ipc", "uts", "pid"} {
		if p, ok := cfg.Join[t]; ok {
			word(t)
			word(p)
		}
	}
	if len(cfg.ReadonlyPaths) > 0 || len(cfg.RecursiveReadonly) > 0 || len(cfg.BindRemounts) > 0 {
		// 'p': the path read-only; 'r': the path and every mount below
		// it read-only; 'b<flags>:': the bind mount remounted with flags.
		var ro bytes.Buffer
		for _, b := range cfg.BindRemounts {
			ro.WriteString("b" + strconv.FormatUint(b.Flags, 10) + ":" + b.Path)
			ro.WriteByte(0)
		}
		for _, p := range cfg.ReadonlyPaths {
			ro.WriteString("p" + p)
			ro.WriteByte(0)
		}
		for _, p := range cfg.RecursiveReadonly {
			ro.WriteString("r" + p)
			ro.WriteByte(0)
		}
		if err := os.WriteFile(filepath.Join(dir, "readonly"), ro.Bytes(), 0o600); err != nil {
			return err
		}
	}
	if !v2 {
		// The monitor's holder keeps the memory cgroup, and its OOM
		// counter, until crin-shim has read it (crin_lxc.c).
		word("memcg")
		word(filepath.Join("/sys/fs/cgroup/memory", cfg.CgroupDir, "cgroup.procs"))
	}
	if err := os.WriteFile(filepath.Join(dir, "run"), run.Bytes(), 0o600); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o700); err != nil {
		return err
	}
	if err := unix.Mkfifo(filepath.Join(dir, "start"), 0o600); err != nil {
		return err
	}
	if v2 {
		return nil
	}
	return prepareCpuset(cpusetRoot(), cfg.CgroupDir)
}

func (c *cli) saveState(st *stateFile) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(c.dir(st.ID), "state.json"), data, 0o600)
}

// spawnMonitor starts "crin-lxc __monitor", which the C constructor in
// crin_lxc.c takes over before Go starts. It keeps this process's
// stdio: the container's.
func (c *cli) spawnMonitor(id, dir string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self, "__monitor", c.root, id, dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start monitor: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

// start tells the monitor to start the container and waits until it
// runs (or ran already), or failed.
func (c *cli) start(args []string) error {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	rest, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	st, err := c.load(rest[0])
	if err != nil {
		return err
	}
	return c.startContainer(rest[0], st)
}

func (c *cli) startContainer(id string, st *stateFile) error {
	dir := c.dir(id)
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		return fmt.Errorf("container %s has run already", id)
	}
	deadline := time.Now().Add(startTimeout)
	// O_NONBLOCK: with no monitor reading the open fails with ENXIO
	// instead of hanging: a monitor just spawned (run) has not opened
	// its end yet, a dead one never will.
	var f *os.File
	var err error
	for {
		f, err = os.OpenFile(filepath.Join(dir, "start"), os.O_WRONLY|unix.O_NONBLOCK, 0)
		if err == nil || !errors.Is(err, unix.ENXIO) || !alive(st.Monitor) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("container %s is not waiting to start: %w", id, err)
	}
	_, err = f.Write([]byte{0})
	f.Close()
	if err != nil {
		return fmt.Errorf("signal the monitor: %w", err)
	}
	for time.Now().Before(deadline) {
		if msg, err := os.ReadFile(filepath.Join(dir, "start-error")); err == nil {
			if hm, err := os.ReadFile(filepath.Join(dir, hookError)); err == nil && len(hm) > 0 {
				msg = hm
			}
			return fmt.Errorf("start container %s: %s%s", id, msg, withLXCErrors(dir))
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			return nil
		}
		if s, err := c.lxc.State(id); err == nil && (s == "RUNNING" || s == "FROZEN") {
			c.postHooks(st, "poststart", specs.StateRunning, c.lxc.InitPid(id))
			return nil
		}
		if !alive(st.Monitor) {
			if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
				return nil
			}
			if hm, err := os.ReadFile(filepath.Join(dir, hookError)); err == nil && len(hm) > 0 {
				return fmt.Errorf("start container %s: %s%s", id, hm, withLXCErrors(dir))
			}
			return fmt.Errorf("start container %s: the monitor ended%s", id, withLXCErrors(dir))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("start container %s: not running after %v", id, startTimeout)
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i > 0 && i+2 < len(data) && data[i+2] != 'Z' && data[i+2] != 'X'
}

// lxcErrors are the error lines of LXC's log, shortened.
func lxcErrors(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "lxc.log"))
	if err != nil {
		return ""
	}
	var msgs []string
	for line := range strings.Lines(string(data)) {
		if !strings.Contains(line, " ERROR ") {
			continue
		}
		// "... ERROR    conf - ../src/lxc/conf.c:fn:123 - message"
		if i := strings.LastIndex(line, " - "); i >= 0 {
			line = line[i+3:]
		}
		msgs = append(msgs, strings.TrimSpace(line))
	}
	if len(msgs) > 4 {
		msgs = msgs[:4]
	}
	return strings.Join(msgs, "; ")
}

func withLXCErrors(dir string) string {
	if m := lxcErrors(dir); m != "" {
		return " (lxc: " + m + ")"
	}
	return ""
}

// hostView is what the translation asks of the host.
func hostView(v2 bool) lxcconf.Host {
	return lxcconf.Host{
		CgroupV2: v2,
		Stat: func(p string) (bool, bool) {
			fi, err := os.Stat(p)
			if err != nil {
				return false, false
			}
			return true, fi.IsDir()
		},
		Device: hostDevice,
	}
}

// hostDevice is a host node of type typ and numbers major:minor: at p,
// else the first one in /dev and the dirs right below it.
func hostDevice(p string, typ byte, major, minor int64) string {
	want := uint32(unix.S_IFCHR)
	if typ == 'b' {
		want = unix.S_IFBLK
	}
	is := func(path string) bool {
		var st unix.Stat_t
		return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == want &&
			int64(unix.Major(st.Rdev)) == major && int64(unix.Minor(st.Rdev)) == minor
	}
	if is(p) {
		return p
	}
	for _, pattern := range []string{"/dev/*", "/dev/*/*"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if is(m) {
				return m
			}
		}
	}
	return ""
}

// isCgroup2 reports a unified hierarchy at /sys/fs/cgroup.
func isCgroup2() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}
