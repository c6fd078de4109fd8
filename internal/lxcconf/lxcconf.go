// Package lxcconf translates an OCI runtime spec (the config.json crind
// writes into a bundle) into an LXC container configuration, for
// crin-lxc, the OCI-runtime-CLI adapter over liblxc (docs/runtimes.md,
// "LXC"). It is pure Go: crin-lxc links liblxc, this package does not,
// so the translation is tested without cgo and without LXC.
//
// What LXC cannot express is refused with an *UnsupportedError naming
// the spec field, never dropped.
package lxcconf

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// UnsupportedError is a spec field LXC cannot express.
type UnsupportedError struct {
	Field string // the spec field, e.g. "process.terminal"
	Why   string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("spec field %s: %s", e.Field, e.Why)
}

// ErrUnsupported is matched by every *UnsupportedError.
var ErrUnsupported = errors.New("not supported by lxc")

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

func unsupported(field, format string, args ...any) error {
	return &UnsupportedError{Field: field, Why: fmt.Sprintf(format, args...)}
}

// Item is one LXC configuration line, key = value.
type Item struct {
	Key, Value string
}

// Host is what the translation needs to know of the host.
type Host struct {
	// CgroupV2 is true on a unified (cgroup v2 only) hierarchy: limits
	// go to lxc.cgroup2.* keys; false on v1 and hybrid layouts.
	CgroupV2 bool
	// Stat says whether path exists on the host and is a directory; nil
	// means nothing exists. Masked paths are probed with it (they are
	// /proc and /sys paths, the same kernel's inside and out).
	Stat func(path string) (exists, dir bool)
	// Device is a host device node of the type ('c' or 'b') and numbers
	// asked, preferring one at path, or ""; nil means there is none.
	Device func(path string, typ byte, major, minor int64) string
}

// Options are the container's place on the host.
type Options struct {
	// Bundle is the bundle dir; a relative root.path is resolved in it.
	Bundle string
	// RootfsMount is where LXC mounts the rootfs while it sets the
	// container up (lxc.rootfs.mount).
	RootfsMount string
	// ReadonlyHook is the lxc.hook.start-host command that makes
	// Config.ReadonlyPaths read-only.
	ReadonlyHook string
	// HooksHook is the lxc.hook.start-host command that runs the spec's
	// prestart and createRuntime hooks.
	HooksHook string
	// SeccompFile is where the LXC seccomp profile is written, when the
	// spec has one.
	SeccompFile string
	// MonitorCgroup is the cgroup (relative to the hierarchy roots) the
	// LXC monitor process runs in while the container runs.
	MonitorCgroup string
}

// Config is a translated container.
type Config struct {
	Items []Item
	// Args is the container's process, handed to liblxc's start as an
	// argv: LXC would split lxc.init.cmd at spaces.
	Args []string
	// Join maps LXC namespace names (net, ipc, uts, pid) to the files of
	// namespaces the container joins: the monitor enters them before it
	// starts the container, which then keeps them (liblxc's
	// lxc.namespace.share takes a pid or a container, not a file).
	Join map[string]string
	// Seccomp is the LXC seccomp profile to write to Options.SeccompFile
	// ("" without one).
	Seccomp string
	// CgroupDir is the container's cgroup, relative to the hierarchy
	// roots, without a leading slash.
	CgroupDir string
	// ReadonlyPaths are linux.readonlyPaths (and "/" for a read-only
	// root), for the start-host hook.
	ReadonlyPaths []string
	// RecursiveReadonly are the destinations of mounts with the rro
	// option: the hook makes every mount below them read-only too.
	RecursiveReadonly []string
	// BindRemounts are bind mounts the hook remounts with their flags.
	BindRemounts []BindRemount
}

// Render is the configuration file LXC reads.
func (c *Config) Render() string {
	var b strings.Builder
	for _, it := range c.Items {
		b.WriteString(it.Key)
		b.WriteString(" = ")
		b.WriteString(it.Value)
		b.WriteByte('\n')
	}
	return b.String()
}

// Values are the values of key, in order.
func (c *Config) Values(key string) []string {
	var out []string
	for _, it := range c.Items {
		if it.Key == key {
			out = append(out, it.Value)
		}
	}
	return out
}

// translator accumulates one translation.
type translator struct {
	s     *specs.Spec
	h     Host
	o     Options
	c     *Config
	clone []string
}

func (t *translator) add(key, value string) { t.c.Items = append(t.c.Items, Item{key, value}) }

// Translate turns spec into an LXC configuration for container id.
func Translate(s *specs.Spec, h Host, o Options) (*Config, error) {
	if s.Process == nil {
		return nil, unsupported("process", "a container needs a process")
	}
	if s.Root == nil || s.Root.Path == "" {
		return nil, unsupported("root.path", "a container needs a root file system")
	}
	if s.Linux == nil {
		return nil, unsupported("linux", "lxc runs Linux containers only")
	}
	t := &translator{s: s, h: h, o: o, c: &Config{Join: map[string]string{}}}
	steps := []func() error{t.base, t.namespaces, t.process, t.mounts, t.devices, t.linuxMisc, t.cgroups, t.seccomp}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	t.add("lxc.namespace.clone", strings.Join(t.clone, " "))
	return t.c, nil
}

// base is the rootfs, the console and what LXC would add by itself.
func (t *translator) base() error {
	if err := t.hooks(); err != nil {
		return err
	}
	root := t.s.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(t.o.Bundle, root)
	}
	if err := plainValue("root.path", root); err != nil {
		return err
	}
	t.add("lxc.rootfs.path", "dir:"+root)
	t.add("lxc.rootfs.mount", t.o.RootfsMount)
	// A read-only root is made so by the start-host hook with the
	// read-only paths (mounts.go): the mount entries' create=dir and
	// create=file need it writable.
	if t.s.Root.Readonly {
		t.c.ReadonlyPaths = append(t.c.ReadonlyPaths, "/")
	}
	// The container's stdio is the monitor's: no console, no ttys.
	t.add("lxc.console.path", "none")
	t.add("lxc.tty.max", "0")
	// /dev comes from the spec's mounts and devices, not LXC's autodev;
	// a devpts instance of the container's own is LXC's (it replaces the
	// spec's /dev/pts entry, see mounts).
	t.add("lxc.autodev", "0")
	t.add("lxc.pty.max", "1024")
	t.add("lxc.net.0.type", "none")
	// No AppArmor on the hosts crin runs LXC on; a profile the spec names
	// is passed on (and fails the start where AppArmor is off).
	profile := t.s.Process.ApparmorProfile
	if profile == "" {
		profile = "unconfined"
	}
	t.add("lxc.apparmor.profile", profile)
	if t.s.Process.SelinuxLabel != "" {
		return unsupported("process.selinuxLabel", "SELinux labels are not supported by crin-lxc")
	}
	if t.s.Linux.MountLabel != "" {
		return unsupported("linux.mountLabel", "SELinux labels are not supported by crin-lxc")
	}
	return nil
}

// hooks: prestart and createRuntime hooks run from a start-host hook
// (Options.HooksHook), once the container's namespaces exist, before its
// process starts; crin-lxc's start and delete run poststart and poststop
// hooks. createContainer and startContainer hooks, which run inside the
// container's mount namespace, are refused.
func (t *translator) hooks() error {
	h := t.s.Hooks
	if h == nil {
		return nil
	}
	switch {
	case len(h.CreateContainer) > 0:
		return unsupported("hooks.createContainer", "crin-lxc runs no hooks in the container's mount namespace")
	case len(h.StartContainer) > 0:
		return unsupported("hooks.startContainer", "crin-lxc runs no hooks in the container's mount namespace")
	}
	if len(h.Prestart) > 0 || len(h.CreateRuntime) > 0 { //nolint:staticcheck // prestart still comes from NRI plugins
		if t.o.HooksHook == "" {
			return unsupported("hooks.createRuntime", "no hook to run them from")
		}
		t.add("lxc.hook.start-host", t.o.HooksHook)
	}
	return nil
}

// plainValue refuses what an LXC config line cannot carry: a newline, or
// white space at either end (LXC trims it).
func plainValue(field, v string) error {
	if strings.ContainsAny(v, "\n\r\x00") || strings.TrimSpace(v) != v {
		return unsupported(field, "%q cannot be written in an LXC config line (a newline, a NUL or white space at an end)", v)
	}
	return nil
}

// lxcNamespaces are LXC's names of the spec's namespace types.
var lxcNamespaces = map[specs.LinuxNamespaceType]string{
	specs.MountNamespace: "mnt", specs.PIDNamespace: "pid", specs.NetworkNamespace: "net",
	specs.IPCNamespace: "ipc", specs.UTSNamespace: "uts", specs.CgroupNamespace: "cgroup",
	specs.UserNamespace: "user", specs.TimeNamespace: "time",
}

// namespaces: new ones are lxc.namespace.clone; joined ones (by path)
// are entered by the monitor and kept.
func (t *translator) namespaces() error {
	mount := false
	for i, ns := range t.s.Linux.Namespaces {
		field := fmt.Sprintf("linux.namespaces[%d]", i)
		name, ok := lxcNamespaces[ns.Type]
		if !ok {
			return unsupported(field, "unknown namespace type %q", ns.Type)
		}
		switch {
		case ns.Type == specs.UserNamespace:
			return unsupported(field, "user namespaces are not supported by crin-lxc")
		case ns.Type == specs.MountNamespace:
			if ns.Path != "" {
				return unsupported(field+".path", "joining a mount namespace is not supported by lxc")
			}
			mount = true
		case ns.Path == "":
		case ns.Type == specs.NetworkNamespace || ns.Type == specs.IPCNamespace ||
			ns.Type == specs.UTSNamespace || ns.Type == specs.PIDNamespace:
			t.c.Join[name] = ns.Path
			continue
		default:
			return unsupported(field+".path", "joining a %s namespace is not supported by crin-lxc", ns.Type)
		}
		if !slices.Contains(t.clone, name) {
			t.clone = append(t.clone, name)
		}
	}
	if !mount {
		return unsupported("linux.namespaces", "lxc always runs a container in a mount namespace of its own")
	}
	if len(t.s.Linux.UIDMappings) > 0 || len(t.s.Linux.GIDMappings) > 0 {
		return unsupported("linux.uidMappings", "user namespaces are not supported by crin-lxc")
	}
	if len(t.s.Linux.TimeOffsets) > 0 {
		return unsupported("linux.timeOffsets", "time namespace offsets are not supported by crin-lxc")
	}
	if h := t.s.Hostname; h != "" {
		if !slices.Contains(t.clone, "uts") {
			if _, joined := t.c.Join["uts"]; !joined {
				return unsupported("hostname", "setting a hostname needs a UTS namespace of the container's")
			}
		}
		if err := plainValue("hostname", h); err != nil {
			return err
		}
		t.add("lxc.uts.name", h)
	}
	if t.s.Domainname != "" {
		return unsupported("domainname", "lxc cannot set a NIS domain name")
	}
	return nil
}

// process: the argv, environment, user, working dir, capabilities,
// rlimits, no_new_privs.
func (t *translator) process() error {
	p := t.s.Process
	if len(p.Args) == 0 {
		if p.CommandLine != "" {
			return unsupported("process.commandLine", "a Windows command line")
		}
		return unsupported("process.args", "a container needs a command")
	}
	t.c.Args = slices.Clone(p.Args)
	for i, e := range p.Env {
		field := fmt.Sprintf("process.env[%d]", i)
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return unsupported(field, "%q is not KEY=VALUE", e)
		}
		if err := plainValue(field, e); err != nil {
			return err
		}
		t.add("lxc.environment", e)
	}
	if p.Cwd != "" {
		if err := plainValue("process.cwd", p.Cwd); err != nil {
			return err
		}
		t.add("lxc.init.cwd", p.Cwd)
	}
	if err := t.user(); err != nil {
		return err
	}
	if err := t.capabilities(); err != nil {
		return err
	}
	for i, rl := range p.Rlimits {
		name, ok := strings.CutPrefix(rl.Type, "RLIMIT_")
		if !ok || name == "" {
			return unsupported(fmt.Sprintf("process.rlimits[%d].type", i), "%q is not an RLIMIT_ name", rl.Type)
		}
		t.add("lxc.prlimit."+strings.ToLower(name), limitValue(rl.Soft)+":"+limitValue(rl.Hard))
	}
	if p.NoNewPrivileges {
		t.add("lxc.no_new_privs", "1")
	}
	if p.OOMScoreAdj != nil {
		t.add("lxc.proc.oom_score_adj", strconv.Itoa(*p.OOMScoreAdj))
	}
	switch {
	case p.Scheduler != nil:
		return unsupported("process.scheduler", "lxc cannot set a scheduling policy")
	case p.IOPriority != nil:
		return unsupported("process.ioPriority", "lxc cannot set an I/O priority")
	case p.ExecCPUAffinity != nil:
		return unsupported("process.execCPUAffinity", "lxc cannot set a CPU affinity")
	}
	return nil
}

func limitValue(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

func (t *translator) user() error {
	u := t.s.Process.User
	if u.Username != "" {
		return unsupported("process.user.username", "a user name (Windows)")
	}
	if u.Umask != nil && *u.Umask != 0o022 {
		return unsupported("process.user.umask", "lxc starts containers with umask 0022, not %#o", *u.Umask)
	}
	t.add("lxc.init.uid", strconv.FormatUint(uint64(u.UID), 10))
	t.add("lxc.init.gid", strconv.FormatUint(uint64(u.GID), 10))
	if len(u.AdditionalGids) > 0 {
		gids := make([]string, len(u.AdditionalGids))
		for i, g := range u.AdditionalGids {
			gids[i] = strconv.FormatUint(uint64(g), 10)
		}
		t.add("lxc.init.groups", strings.Join(gids, ","))
	}
	return nil
}

// capabilities: LXC keeps one set (lxc.cap.keep: the bounding set, and
// the effective and permitted sets of a root init); a spec whose sets
// differ cannot be expressed.
func (t *translator) capabilities() error {
	c := t.s.Process.Capabilities
	if c == nil {
		t.add("lxc.cap.keep", "none")
		return nil
	}
	set := c.Bounding
	for field, other := range map[string][]string{"effective": c.Effective, "permitted": c.Permitted} {
		if !sameSet(set, other) {
			return unsupported("process.capabilities."+field, "lxc keeps one capability set; %s differs from bounding", field)
		}
	}
	if len(c.Ambient) > 0 {
		return unsupported("process.capabilities.ambient", "lxc cannot set ambient capabilities")
	}
	if len(c.Inheritable) > 0 && !sameSet(set, c.Inheritable) {
		return unsupported("process.capabilities.inheritable", "lxc cannot set inheritable capabilities apart from the bounding set")
	}
	if len(set) == 0 {
		t.add("lxc.cap.keep", "none")
		return nil
	}
	names := make([]string, 0, len(set))
	for i, cp := range set {
		n, ok := strings.CutPrefix(cp, "CAP_")
		if !ok || n == "" {
			return unsupported(fmt.Sprintf("process.capabilities.bounding[%d]", i), "%q is not a CAP_ name", cp)
		}
		names = append(names, strings.ToLower(n))
	}
	t.add("lxc.cap.keep", strings.Join(names, " "))
	return nil
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// linuxMisc: sysctls and what LXC cannot do.
func (t *translator) linuxMisc() error {
	l := t.s.Linux
	keys := make([]string, 0, len(l.Sysctl))
	for k := range l.Sysctl {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field := fmt.Sprintf("linux.sysctl[%q]", k)
		if strings.ContainsAny(k, " =\t\n") || k == "" {
			return unsupported(field, "not a sysctl name")
		}
		if err := plainValue(field, l.Sysctl[k]); err != nil {
			return err
		}
		t.add("lxc.sysctl."+k, l.Sysctl[k])
	}
	switch {
	case l.IntelRdt != nil:
		return unsupported("linux.intelRdt", "lxc cannot place a container in an RDT class")
	case l.Personality != nil:
		return unsupported("linux.personality", "crin-lxc does not set a personality")
	case len(l.NetDevices) > 0:
		return unsupported("linux.netDevices", "crin-lxc does not move network devices")
	case l.MemoryPolicy != nil:
		return unsupported("linux.memoryPolicy", "lxc cannot set a memory policy")
	}
	switch l.RootfsPropagation {
	case "", "private", "rprivate", "slave", "rslave":
	default:
		return unsupported("linux.rootfsPropagation", "%q: lxc's rootfs is private", l.RootfsPropagation)
	}
	return nil
}
