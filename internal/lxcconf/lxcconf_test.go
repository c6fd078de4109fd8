package lxcconf

import (
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func ptr[T any](v T) *T { return &v }

// host has /proc/kcore (a file) and /proc/acpi (a dir), and the usual
// /dev/null; nothing else exists.
func testHost(v2 bool) Host {
	return Host{
		CgroupV2: v2,
		Stat: func(p string) (bool, bool) {
			switch p {
			case "/proc/kcore", "/etc/hosts":
				return true, false
			case "/proc/acpi", "/data dir":
				return true, true
			}
			return false, false
		},
		Device: func(p string, typ byte, major, minor int64) string {
			if typ == 'c' && major == 10 && minor == 229 {
				return "/dev/fuse"
			}
			return ""
		},
	}
}

var testOptions = Options{Bundle: "/b", RootfsMount: "/state/c1/rootfs", ReadonlyHook: "/bin/crin-lxc __readonly /state/c1", HooksHook: "/bin/crin-lxc __hooks /state/c1", SeccompFile: "/state/c1/seccomp", MonitorCgroup: "crin-lxc-monitor/c1"}

// testSpec is what crind writes for a container of a pod that shares
// its namespaces.
func testSpec() *specs.Spec {
	caps := []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: []string{"sh", "-c", "echo hello world"},
			Env:  []string{"PATH=/bin", "GREETING=hello there"},
			Cwd:  "/work dir",
			User: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{10, 20}},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096}, {Type: "RLIMIT_CORE", Soft: ^uint64(0), Hard: ^uint64(0)}},
			NoNewPrivileges: true,
			OOMScoreAdj:     ptr(500),
		},
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "pod1",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"newinstance"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"ro", "nosuid"}},
			{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts", Options: []string{"rbind", "ro", "nosuid"}},
			{Destination: "/data", Source: "/data dir", Options: []string{"rbind", "rprivate"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.MountNamespace},
				{Type: specs.PIDNamespace, Path: "/pins/p1/pid"},
				{Type: specs.NetworkNamespace, Path: "/netns/p1"},
				{Type: specs.IPCNamespace, Path: "/pins/p1/ipc"},
				{Type: specs.UTSNamespace, Path: "/pins/p1/uts"},
			},
			CgroupsPath:   "/kubepods/pod1/c1",
			Sysctl:        map[string]string{"net.ipv4.ip_forward": "1"},
			MaskedPaths:   []string{"/proc/kcore", "/proc/acpi", "/proc/missing"},
			ReadonlyPaths: []string{"/proc/sys"},
			Devices:       []specs.LinuxDevice{{Path: "/dev/my-fuse", Type: "c", Major: 10, Minor: 229}},
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}, {Allow: true, Type: "c", Major: ptr[int64](1), Minor: ptr[int64](3), Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: ptr[int64](64 << 20), Swap: ptr[int64](128 << 20)},
				CPU:     &specs.LinuxCPU{Shares: ptr[uint64](512), Quota: ptr[int64](50000), Period: ptr[uint64](100000)},
				Pids:    &specs.LinuxPids{Limit: ptr[int64](100)},
			},
		},
	}
}

func TestTranslate(t *testing.T) {
	c, err := Translate(testSpec(), testHost(false), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"lxc.rootfs.path":                        {"dir:/b/rootfs"},
		"lxc.namespace.clone":                    {"mnt cgroup"},
		"lxc.uts.name":                           {"pod1"},
		"lxc.environment":                        {"PATH=/bin", "GREETING=hello there"},
		"lxc.init.cwd":                           {"/work dir"},
		"lxc.init.uid":                           {"1000"},
		"lxc.init.gid":                           {"1000"},
		"lxc.init.groups":                        {"10,20"},
		"lxc.cap.keep":                           {"chown kill net_bind_service"},
		"lxc.prlimit.nofile":                     {"1024:4096"},
		"lxc.prlimit.core":                       {"unlimited:unlimited"},
		"lxc.no_new_privs":                       {"1"},
		"lxc.proc.oom_score_adj":                 {"500"},
		"lxc.sysctl.net.ipv4.ip_forward":         {"1"},
		"lxc.mount.auto":                         {"cgroup:ro"},
		"lxc.cgroup.dir.container":               {"kubepods/pod1/c1"},
		"lxc.cgroup.dir.monitor":                 {"crin-lxc-monitor/c1"},
		"lxc.cgroup.devices.deny":                {"a"},
		"lxc.cgroup.devices.allow":               {"c 1:3 rwm"},
		"lxc.cgroup.memory.limit_in_bytes":       {"67108864"},
		"lxc.cgroup.memory.memsw.limit_in_bytes": {"134217728"},
		"lxc.cgroup.cpu.shares":                  {"512"},
		"lxc.cgroup.cpu.cfs_period_us":           {"100000"},
		"lxc.cgroup.cpu.cfs_quota_us":            {"50000"},
		"lxc.cgroup.pids.max":                    {"100"},
		"lxc.apparmor.profile":                   {"unconfined"},
		"lxc.console.path":                       {"none"},
		"lxc.autodev":                            {"0"},
	}
	for k, v := range want {
		if got := c.Values(k); !slices.Equal(got, v) {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !slices.Equal(c.Args, []string{"sh", "-c", "echo hello world"}) {
		t.Errorf("args = %q: the argv goes to liblxc whole, not through lxc.init.cmd", c.Args)
	}
	if len(c.Values("lxc.init.cmd")) != 0 {
		t.Error("lxc.init.cmd is set: LXC would split it at spaces")
	}
	wantJoin := map[string]string{"pid": "/pins/p1/pid", "net": "/netns/p1", "ipc": "/pins/p1/ipc", "uts": "/pins/p1/uts"}
	for k, v := range wantJoin {
		if c.Join[k] != v {
			t.Errorf("join %s = %q, want %q", k, c.Join[k], v)
		}
	}
	entries := c.Values("lxc.mount.entry")
	for _, e := range []string{
		"proc proc proc nosuid,noexec,nodev,create=dir 0 0",
		"tmpfs dev tmpfs nosuid,mode=755,create=dir 0 0",
		"/etc/hosts etc/hosts none rbind,ro,nosuid,create=file 0 0",
		`/data\040dir data none rbind,rprivate,create=dir 0 0`,
		"/dev/null proc/kcore none bind,optional 0 0",
		"tmpfs proc/acpi tmpfs ro,optional 0 0",
		"/dev/null dev/null none bind,create=file 0 0",
		"/dev/fuse dev/my-fuse none bind,create=file 0 0",
	} {
		if !slices.Contains(entries, e) {
			t.Errorf("no mount entry %q in\n%s", e, strings.Join(entries, "\n"))
		}
	}
	for _, e := range entries {
		if strings.Contains(e, "devpts") || strings.Contains(e, "missing") {
			t.Errorf("mount entry %q: /dev/pts is LXC's, a missing masked path is skipped", e)
		}
	}
	if want := []BindRemount{{Path: "/etc/hosts", Flags: unix.MS_RDONLY | unix.MS_NOSUID}}; !slices.Equal(c.BindRemounts, want) {
		t.Errorf("bind remounts = %v, want %v", c.BindRemounts, want)
	}
	if !slices.Equal(c.ReadonlyPaths, []string{"/", "/proc/sys"}) {
		t.Errorf("read-only paths = %q", c.ReadonlyPaths)
	}
	if !strings.Contains(c.Render(), "lxc.init.cwd = /work dir\n") {
		t.Errorf("render:\n%s", c.Render())
	}
}

func TestTranslateNewNamespaces(t *testing.T) {
	s := testSpec()
	s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.MountNamespace}, {Type: specs.PIDNamespace}, {Type: specs.UTSNamespace}, {Type: specs.IPCNamespace}, {Type: specs.NetworkNamespace, Path: "/netns/p1"}}
	c, err := Translate(s, testHost(false), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Values("lxc.namespace.clone"); !slices.Equal(got, []string{"mnt pid uts ipc cgroup"}) {
		t.Errorf("clone = %q", got)
	}
	if len(c.Join) != 1 || c.Join["net"] != "/netns/p1" {
		t.Errorf("join = %v", c.Join)
	}
}

// Every refusal names the spec field.
func TestTranslateRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		edit        func(*specs.Spec)
	}{
		{"rootfs propagation", "linux.rootfsPropagation", func(s *specs.Spec) { s.Linux.RootfsPropagation = "shared" }},
		{"hooks", "hooks.createContainer", func(s *specs.Spec) { s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/x"}}} }},
		{"user namespace", "linux.namespaces[5]", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		}},
		{"joined mount namespace", "linux.namespaces[0].path", func(s *specs.Spec) { s.Linux.Namespaces[0].Path = "/x" }},
		{"no mount namespace", "linux.namespaces", func(s *specs.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[1:] }},
		{"ambient", "process.capabilities.ambient", func(s *specs.Spec) { s.Process.Capabilities.Ambient = []string{"CAP_KILL"} }},
		{"effective apart", "process.capabilities.effective", func(s *specs.Spec) { s.Process.Capabilities.Effective = nil }},
		{"umask", "process.user.umask", func(s *specs.Spec) { s.Process.User.Umask = ptr[uint32](0o077) }},
		{"env newline", "process.env[1]", func(s *specs.Spec) { s.Process.Env[1] = "A=b\nc" }},
		{"env trailing space", "process.env[1]", func(s *specs.Spec) { s.Process.Env[1] = "A=b " }},
		{"selinux", "process.selinuxLabel", func(s *specs.Spec) { s.Process.SelinuxLabel = "x" }},
		{"systemd cgroup", "linux.cgroupsPath", func(s *specs.Spec) { s.Linux.CgroupsPath = "kubepods.slice:crin:c1" }},
		{"device not on host", "linux.devices[0]", func(s *specs.Spec) { s.Linux.Devices[0].Minor = 1 }},
		{"tmpcopyup", "mounts[1].options", func(s *specs.Spec) { s.Mounts[1].Options = append(s.Mounts[1].Options, "tmpcopyup") }},
		{"rrw", "mounts[1].options", func(s *specs.Spec) { s.Mounts[1].Options = append(s.Mounts[1].Options, "rrw") }},
		{"unified on v1", "linux.resources.unified", func(s *specs.Spec) { s.Linux.Resources.Unified = map[string]string{"memory.high": "1"} }},
		{"rdt", "linux.intelRdt", func(s *specs.Spec) { s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "x"} }},
		{"seccomp notify", "linux.seccomp.syscalls[0].action", func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"mount"}, Action: specs.ActNotify}}}
		}},
		{"seccomp flags", "linux.seccomp.flags", func(s *specs.Spec) {
			s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Flags: []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_LOG"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			tc.edit(s)
			_, err := Translate(s, testHost(false), testOptions)
			var ue *UnsupportedError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v, want an UnsupportedError", err)
			}
			if ue.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("field = %q (%v), want %q", ue.Field, err, tc.field)
			}
		})
	}
}

func TestRecursiveReadonly(t *testing.T) {
	s := testSpec()
	s.Mounts[5].Options = []string{"rbind", "rprivate", "rro"}
	c, err := Translate(s, testHost(false), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Values("lxc.mount.entry"), `/data\040dir data none rbind,rprivate,ro,create=dir 0 0`) {
		t.Errorf("entries %q", c.Values("lxc.mount.entry"))
	}
	if !slices.Equal(c.RecursiveReadonly, []string{"/data"}) {
		t.Errorf("recursive read-only = %q", c.RecursiveReadonly)
	}
}

func TestHooks(t *testing.T) {
	s := testSpec()
	s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/h"}}, Poststop: []specs.Hook{{Path: "/p"}}}
	c, err := Translate(s, testHost(false), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/crin-lxc __hooks /state/c1", "/bin/crin-lxc __readonly /state/c1"}
	if got := c.Values("lxc.hook.start-host"); !slices.Equal(got, want) {
		t.Errorf("start-host hooks = %q, want %q", got, want)
	}
}

func TestResourcesV2(t *testing.T) {
	r := testSpec().Linux.Resources
	r.Unified = map[string]string{"memory.high": "50000000"}
	items, err := Resources(r, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range items {
		got[it.File] = it.Value
	}
	for k, v := range map[string]string{
		"memory.max": "67108864", "memory.swap.max": "67108864", "cpu.weight": "20",
		"cpu.max": "50000 100000", "pids.max": "100", "memory.high": "50000000",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestSeccomp(t *testing.T) {
	s := testSpec()
	s.Linux.Seccomp = &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: ptr[uint](38),
		Syscalls: []specs.LinuxSyscall{
			{Names: []string{"read", "write"}, Action: specs.ActAllow},
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 8, Op: specs.OpEqualTo}}},
			{Names: []string{"kexec_load"}, Action: specs.ActErrno},
			{Names: []string{"ptrace"}, Action: specs.ActErrno, ErrnoRet: ptr[uint](38)},
		},
	}
	c, err := Translate(s, testHost(false), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	want := "2\nallowlist errno 38\n[all]\nread allow\nwrite allow\npersonality allow [0,8,SCMP_CMP_EQ,0]\nkexec_load errno 1\n"
	if c.Seccomp != want {
		t.Errorf("profile:\n%s\nwant:\n%s", c.Seccomp, want)
	}
	if got := c.Values("lxc.seccomp.profile"); !slices.Equal(got, []string{"/state/c1/seccomp"}) {
		t.Errorf("lxc.seccomp.profile = %q", got)
	}
	s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"mount"}, Action: specs.ActErrno}}}
	if c, err = Translate(s, testHost(false), testOptions); err != nil {
		t.Fatal(err)
	}
	if want := "2\ndenylist\n[all]\nmount errno 1\n"; c.Seccomp != want {
		t.Errorf("profile:\n%s\nwant:\n%s", c.Seccomp, want)
	}
}

func TestFstabEscape(t *testing.T) {
	if got := fstabEntry("/a b\\c", "/x\ty", "none", []string{"bind"}); got != `/a\040b\134c x\011y none bind 0 0` {
		t.Errorf("entry = %q", got)
	}
}
