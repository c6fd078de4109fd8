package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/lxcconf"
)

// status is the OCI state of a container: created (the monitor waits
// for start), running, paused, stopped.
func (c *cli) status(id string, st *stateFile) (string, int) {
	if _, err := os.Stat(filepath.Join(c.dir(id), "ran")); err != nil && alive(st.Monitor) {
		s, err := c.lxc.State(id)
		switch {
		case err == nil && s == "RUNNING":
			return "running", c.lxc.InitPid(id)
		case err == nil && s == "FROZEN":
			return "paused", c.lxc.InitPid(id)
		case err == nil && s != "STOPPED":
			// STARTING, STOPPING: the monitor is at it.
			return "running", c.lxc.InitPid(id)
		}
		if !c.startRequested(id) {
			return "created", st.Monitor
		}
		return "running", st.Monitor
	}
	return "stopped", 0
}

// startRequested: the monitor read start's byte.
func (c *cli) startRequested(id string) bool {
	_, err := os.Stat(filepath.Join(c.dir(id), "started"))
	return err == nil
}

func (c *cli) state(args []string) error {
	rest, err := parse(flag.NewFlagSet("state", flag.ContinueOnError), args, 1)
	if err != nil {
		return err
	}
	st, err := c.load(rest[0])
	if err != nil {
		return err
	}
	status, pid := c.status(rest[0], st)
	out, err := json.MarshalIndent(specs.State{
		Version: specs.Version, ID: st.ID, Status: specs.ContainerState(status), Pid: pid, Bundle: st.Bundle,
	}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", out)
	return err
}

func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

// kill signals the container's init (a container not started yet: its
// monitor); with --all every process in the container's cgroup.
func (c *cli) kill(args []string) error {
	fs := flag.NewFlagSet("kill", flag.ContinueOnError)
	all := fs.Bool("all", false, "signal every process of the container")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 1 {
		rest = append(rest, "SIGTERM")
	}
	if len(rest) != 2 {
		return fmt.Errorf("kill: want an id and a signal, got %q", rest)
	}
	if err := checkID(rest[0]); err != nil {
		return err
	}
	id := rest[0]
	sig, err := parseSignal(rest[1])
	if err != nil {
		return err
	}
	st, err := c.load(id)
	if err != nil {
		return err
	}
	status, pid := c.status(id, st)
	if status == "stopped" {
		return fmt.Errorf("container %s is not running", id)
	}
	if status == "created" {
		// The monitor is the container's only process.
		return unix.Kill(st.Monitor, sig)
	}
	if *all {
		c.killCgroup(st, sig)
	}
	if pid > 0 {
		if err := unix.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("signal init %d: %w", pid, err)
		}
	}
	return nil
}

// cgroupDirs are the container's cgroup dirs: one per v1 hierarchy (or
// the v2 one).
func cgroupDirs(st *stateFile) []string { return hierarchyDirs(st.CgroupDir, st.CgroupV2) }

// hierarchyDirs are the dirs of cgroup rel in every hierarchy.
func hierarchyDirs(rel string, v2 bool) []string {
	if v2 {
		return []string{filepath.Join("/sys/fs/cgroup", rel)}
	}
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() || e.Type()&os.ModeSymlink == 0 {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), rel))
			}
		}
	}
	return dirs
}

// cgroupPids are the pids in the container's cgroup and below it.
func cgroupPids(st *stateFile) []int {
	seen := map[int]bool{}
	for _, d := range cgroupDirs(st) {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for f := range strings.FieldsSeq(string(data)) {
				if n, err := strconv.Atoi(f); err == nil {
					seen[n] = true
				}
			}
			return nil
		})
		if len(seen) > 0 {
			break
		}
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids
}

func (c *cli) killCgroup(st *stateFile, sig syscall.Signal) {
	for _, p := range cgroupPids(st) {
		_ = unix.Kill(p, sig)
	}
}

// delete removes the container; --force kills it first. It waits for the
// monitor, which removes the container's cgroups as it ends, and removes
// what is left of them.
func (c *cli) delete(args []string) error {
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	force := fs.Bool("force", false, "kill a running container")
	rest, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	id := rest[0]
	st, err := c.load(id)
	if err != nil {
		if errors.Is(err, errNotExist) {
			// A create that failed half-way leaves at most the dir.
			if _, serr := os.Stat(c.dir(id)); serr == nil {
				return os.RemoveAll(c.dir(id))
			}
		}
		return err
	}
	status, _ := c.status(id, st)
	if status != "stopped" && !*force {
		return fmt.Errorf("container %s is %s: delete it with --force", id, status)
	}
	if status == "paused" {
		_ = c.lxc.Freeze(id, false)
	}
	if status != "stopped" {
		c.killCgroup(st, unix.SIGKILL)
		if pid := c.lxc.InitPid(id); pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if status == "created" {
			_ = unix.Kill(st.Monitor, unix.SIGKILL)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(st.Monitor) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if alive(st.Monitor) {
		_ = unix.Kill(st.Monitor, unix.SIGKILL)
	}
	c.killCgroup(st, unix.SIGKILL)
	removeCgroups(cgroupDirs(st))
	// The monitor's: liblxc leaves it when the monitor was killed.
	removeCgroups(hierarchyDirs(monitorCgroupParent+"/"+id, st.CgroupV2))
	if _, err := os.Stat(filepath.Join(c.dir(id), "started")); err == nil {
		c.postHooks(st, "poststop", specs.StateStopped, 0)
	}
	return os.RemoveAll(c.dir(id))
}

// removeCgroups removes what the monitor left of the container's cgroups
// (it was killed): leaves first, a few tries while the last processes
// die.
func removeCgroups(roots []string) {
	for try := 0; try < 50; try++ {
		left := false
		for _, d := range roots {
			var dirs []string
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
					left = true
				}
			}
		}
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cli) pause(args []string, on bool) error {
	name := "resume"
	if on {
		name = "pause"
	}
	rest, err := parse(flag.NewFlagSet(name, flag.ContinueOnError), args, 1)
	if err != nil {
		return err
	}
	if _, err := c.load(rest[0]); err != nil {
		return err
	}
	return c.lxc.Freeze(rest[0], on)
}

// exec runs a process in the running container through liblxc's attach
// and writes its pid; it is this process's child, so the calling shim
// inherits it when crin-lxc exits.
func (c *cli) exec(args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	procFile := fs.String("process", "", "process.json")
	pidFile := fs.String("pid-file", "", "file to write the process's pid to")
	_ = fs.Bool("detach", false, "return once started")
	console := fs.String("console-socket", "", "socket to send the process's terminal to")
	rest, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	id := rest[0]
	data, err := os.ReadFile(*procFile)
	if err != nil {
		return fmt.Errorf("read process: %w", err)
	}
	var p specs.Process
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("read process: %w", err)
	}
	if len(p.Args) == 0 {
		return errors.New("spec field process.args: empty")
	}
	st, err := c.load(id)
	if err != nil {
		return err
	}
	if status, _ := c.status(id, st); status != "running" {
		return fmt.Errorf("container %s is %s, not running", id, status)
	}
	if err := attachConsole(p.Terminal, *console); err != nil {
		return err
	}
	pid, err := c.lxc.Attach(id, attachOptions{
		Args: p.Args, Env: p.Env, Cwd: p.Cwd, UID: p.User.UID, GID: p.User.GID,
		Groups: p.User.AdditionalGids, NoNewPrivs: p.NoNewPrivileges,
	})
	if err != nil {
		return err
	}
	if *pidFile != "" {
		if err := writeFileAtomic(*pidFile, []byte(strconv.Itoa(pid)), 0o600); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return fmt.Errorf("write pid file: %w", err)
		}
	}
	return nil
}

// update writes the cgroup files of the new resources (JSON on stdin,
// or the file named by --resources).
func (c *cli) update(args []string) error {
	fs := flag.NewFlagSet("update", flag.ContinueOnError)
	resources := fs.String("resources", "-", "resources JSON, - for stdin")
	rest, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	st, err := c.load(rest[0])
	if err != nil {
		return err
	}
	var data []byte
	if *resources == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*resources)
	}
	if err != nil {
		return err
	}
	var r specs.LinuxResources
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("read resources: %w", err)
	}
	items, err := lxcconf.Resources(&r, st.CgroupV2)
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := writeCgroup(st, it); err != nil {
			return err
		}
	}
	return nil
}

// writeCgroup writes one file of the container's cgroup; a v1 memory
// limit below the memory+swap limit in place is retried after the
// other ones (the kernel wants memsw >= limit at every step).
func writeCgroup(st *stateFile, it lxcconf.CgroupItem) error {
	p := filepath.Join("/sys/fs/cgroup", st.CgroupDir, it.File)
	if !st.CgroupV2 {
		ctl, _, _ := strings.Cut(it.File, ".")
		p = filepath.Join("/sys/fs/cgroup", ctl, st.CgroupDir, it.File)
	}
	err := os.WriteFile(p, []byte(it.Value), 0)
	if err != nil && it.File == "memory.memsw.limit_in_bytes" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// features is the runtime-spec features document: what crin-lxc
// translates, and nothing it refuses.
func (c *cli) features() error {
	yes, no := true, false
	f := features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         []string{"prestart", "createRuntime", "poststart", "poststop"},
		MountOptions: []string{"ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "sync", "async",
			"dirsync", "remount", "mand", "nomand", "atime", "noatime", "diratime", "nodiratime", "bind", "rbind",
			"relatime", "norelatime", "strictatime", "nostrictatime", "private", "rprivate", "shared", "rshared",
			"slave", "rslave", "unbindable", "runbindable", "rro"},
		Linux: &features.Linux{
			Namespaces:   []string{"pid", "network", "ipc", "uts", "mount", "cgroup"},
			Capabilities: capNames(),
			Cgroup:       &features.Cgroup{V1: &yes, V2: &yes, Systemd: &no, SystemdUser: &no, Rdma: &no},
			Seccomp: &features.Seccomp{
				Enabled: &yes,
				Actions: []string{"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP"},
				Operators: []string{"SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ", "SCMP_CMP_GE",
					"SCMP_CMP_GT", "SCMP_CMP_MASKED_EQ"},
				Archs:          []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"},
				KnownFlags:     []string{},
				SupportedFlags: []string{},
			},
			Apparmor:        &features.Apparmor{Enabled: &yes},
			Selinux:         &features.Selinux{Enabled: &no},
			IntelRdt:        &features.IntelRdt{Enabled: &no},
			MountExtensions: &features.MountExtensions{IDMap: &features.IDMap{Enabled: &no}},
		},
		Annotations: map[string]string{"org.crin.lxc.liblxc": "5"},
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", out)
	return err
}

// capNames are the capabilities of this kernel, by name.
func capNames() []string {
	data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	last := 40
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			last = n
		}
	}
	names := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
		"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
		"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
		"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
		"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
		"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN",
		"CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
		"CAP_CHECKPOINT_RESTORE"}
	if last+1 < len(names) {
		names = names[:last+1]
	}
	return names
}
