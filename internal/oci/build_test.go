package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var testHost = &Host{NofileHard: 4096}

func podConfig(no *runtimeapi.NamespaceOption) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1"},
		Hostname:    "web-0",
		Annotations: map[string]string{"a": "b", AnnotationContainerType: "spoofed"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: no},
		},
	}
}

func sandboxOpts(cfg *runtimeapi.PodSandboxConfig) SandboxOptions {
	return SandboxOptions{
		ID: "sb1", Config: cfg, Rootfs: "/run/crin/pause", PauseBinary: "/usr/lib/crin/crin-pause",
		NetNSPath: "/run/netns/cni-1", CgroupsPath: "/kubepods/pod1/sb1", Host: testHost,
	}
}

func containerOpts(t *testing.T, pod *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) ContainerOptions {
	return ContainerOptions{
		ID: "c1", Config: cfg, Sandbox: pod, Rootfs: fakeRootfs(t), SandboxID: "sb1",
		NetNSPath: "/run/netns/cni-1", CgroupsPath: "/kubepods/pod1/c1",
		IPCNSPath: "/run/crin/ns/sb1/ipc", UTSNSPath: "/run/crin/ns/sb1/uts", PIDNSPath: "/run/crin/ns/sb1/pid",
		Image: ImageConfig{Entrypoint: []string{"/app"}}, Host: testHost,
	}
}

func wantInvalid(t *testing.T, err error, substr string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("err = %v, want invalid argument", err)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Errorf("err = %q, want it to mention %q", err, substr)
	}
}

func TestSandboxSpec(t *testing.T) {
	cfg := podConfig(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER})
	o := sandboxOpts(cfg)
	o.OOMScoreAdjMin = -500
	s, err := SandboxSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"/pause"}, s.Process.Args); d != "" {
		t.Errorf("args: %s", d)
	}
	if !s.Root.Readonly || s.Root.Path != "/run/crin/pause" {
		t.Errorf("root = %+v, want read-only pause root", s.Root)
	}
	if !s.Process.NoNewPrivileges {
		t.Error("noNewPrivileges not set")
	}
	if c := s.Process.Capabilities; c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted) != 0 {
		t.Errorf("capabilities = %+v, want an empty (non-nil) set", c)
	}
	if s.Hostname != "web-0" {
		t.Errorf("hostname = %q", s.Hostname)
	}
	if s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != -500 {
		t.Errorf("oomScoreAdj = %v, want clamped to -500", s.Process.OOMScoreAdj)
	}
	var pauseMount *specs.Mount
	for i := range s.Mounts {
		if s.Mounts[i].Destination == "/pause" {
			pauseMount = &s.Mounts[i]
		}
	}
	if pauseMount == nil || pauseMount.Source != o.PauseBinary || !strings.Contains(strings.Join(pauseMount.Options, ","), "ro") {
		t.Errorf("/pause mount = %+v", pauseMount)
	}
	if s.Annotations[AnnotationContainerType] != ContainerTypeSandbox || s.Annotations["a"] != "b" ||
		s.Annotations[criSandboxIDKey] != "sb1" || s.Annotations[AnnotationSandboxUID] != "uid-1" {
		t.Errorf("annotations = %v", s.Annotations)
	}
	if s.Linux.CgroupsPath != o.CgroupsPath {
		t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
	}
	if r := s.Linux.Resources; r.CPU == nil || r.CPU.Shares == nil || *r.CPU.Shares != 2 {
		t.Errorf("resources = %+v, want minimum cpu shares", r)
	}
	if len(s.Linux.MaskedPaths) == 0 || len(s.Linux.ReadonlyPaths) == 0 {
		t.Error("default masked/readonly paths missing")
	}
	if s.Linux.Seccomp != nil {
		t.Error("seccomp set without a profile in the config")
	}
}

func TestSandboxSpecOOMDefault(t *testing.T) {
	o := sandboxOpts(podConfig(nil))
	o.OOMScoreAdjMin = -1000
	s, err := SandboxSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	if *s.Process.OOMScoreAdj != -998 {
		t.Errorf("oomScoreAdj = %d, want -998", *s.Process.OOMScoreAdj)
	}
}

func nsTypes(ns []specs.LinuxNamespace) map[specs.LinuxNamespaceType]string {
	m := map[specs.LinuxNamespaceType]string{}
	for _, n := range ns {
		m[n.Type] = n.Path
	}
	return m
}

func TestSandboxNamespaces(t *testing.T) {
	tests := []struct {
		name     string
		no       *runtimeapi.NamespaceOption
		want     map[specs.LinuxNamespaceType]string
		hostname string
	}{
		{
			name: "pod",
			no:   &runtimeapi.NamespaceOption{},
			want: map[specs.LinuxNamespaceType]string{
				"mount": "", "network": "/run/netns/cni-1", "uts": "", "ipc": "", "pid": "",
			},
			hostname: "web-0",
		},
		{
			name: "container pid mode still gets a pid namespace",
			no:   &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			want: map[specs.LinuxNamespaceType]string{
				"mount": "", "network": "/run/netns/cni-1", "uts": "", "ipc": "", "pid": "",
			},
			hostname: "web-0",
		},
		{
			name: "host everything",
			no: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE,
			},
			want: map[specs.LinuxNamespaceType]string{"mount": ""},
		},
		{
			name:     "host ipc only",
			no:       &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE},
			want:     map[specs.LinuxNamespaceType]string{"mount": "", "network": "/run/netns/cni-1", "uts": "", "pid": ""},
			hostname: "web-0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SandboxSpec(sandboxOpts(podConfig(tc.no)))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, nsTypes(s.Linux.Namespaces)); d != "" {
				t.Errorf("namespaces (-want +got):\n%s", d)
			}
			if s.Hostname != tc.hostname {
				t.Errorf("hostname = %q, want %q", s.Hostname, tc.hostname)
			}
		})
	}
}

func TestContainerNamespaces(t *testing.T) {
	pod := func(net, ipc, pid runtimeapi.NamespaceMode) *runtimeapi.PodSandboxConfig {
		return podConfig(&runtimeapi.NamespaceOption{Network: net, Ipc: ipc, Pid: pid})
	}
	const (
		P = runtimeapi.NamespaceMode_POD
		C = runtimeapi.NamespaceMode_CONTAINER
		N = runtimeapi.NamespaceMode_NODE
		T = runtimeapi.NamespaceMode_TARGET
	)
	tests := []struct {
		name    string
		pod     *runtimeapi.PodSandboxConfig
		pid     runtimeapi.NamespaceMode
		netns   string
		target  int
		want    map[specs.LinuxNamespaceType]string
		wantErr string
	}{
		{
			name: "pod pid", pod: pod(P, P, P), pid: P, netns: "/run/netns/x",
			want: map[specs.LinuxNamespaceType]string{
				"mount": "", "network": "/run/netns/x", "uts": "/run/crin/ns/sb1/uts", "ipc": "/run/crin/ns/sb1/ipc", "pid": "/run/crin/ns/sb1/pid",
			},
		},
		{
			name: "container pid", pod: pod(P, P, C), pid: C, netns: "/run/netns/x",
			want: map[specs.LinuxNamespaceType]string{
				"mount": "", "network": "/run/netns/x", "uts": "/run/crin/ns/sb1/uts", "ipc": "/run/crin/ns/sb1/ipc", "pid": "",
			},
		},
		{name: "network not pinned", pod: pod(P, P, C), pid: C, wantErr: "network namespace is not pinned"},
		{
			name: "host network and ipc", pod: pod(N, N, C), pid: C,
			want: map[specs.LinuxNamespaceType]string{"mount": "", "pid": ""},
		},
		{
			name: "host pid", pod: pod(P, P, N), pid: N, netns: "/run/netns/x",
			want: map[specs.LinuxNamespaceType]string{
				"mount": "", "network": "/run/netns/x", "uts": "/run/crin/ns/sb1/uts", "ipc": "/run/crin/ns/sb1/ipc",
			},
		},
		{
			name: "target", pod: pod(P, P, C), pid: T, netns: "/run/netns/x", target: 77,
			want: map[specs.LinuxNamespaceType]string{
				"mount": "", "network": "/run/netns/x", "uts": "/run/crin/ns/sb1/uts", "ipc": "/run/crin/ns/sb1/ipc", "pid": "/proc/77/ns/pid",
			},
		},
		{name: "target not running", pod: pod(P, P, C), pid: T, netns: "/run/netns/x", wantErr: "target_id"},
		{name: "host pid without host pod", pod: pod(P, P, C), pid: N, netns: "/run/netns/x", wantErr: "namespace_options.pid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: tc.pid},
			}}}
			o := containerOpts(t, tc.pod, cfg)
			o.NetNSPath, o.TargetPid = tc.netns, tc.target
			s, err := ContainerSpec(o)
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, nsTypes(s.Linux.Namespaces)); d != "" {
				t.Errorf("namespaces (-want +got):\n%s", d)
			}
		})
	}
}

// TestContainerNeedsPins: a container never joins a pod namespace by
// anything but its pinned path.
func TestContainerNeedsPins(t *testing.T) {
	tests := []struct {
		name, want string
		unset      func(*ContainerOptions)
	}{
		{"ipc", "ipc namespace is not pinned", func(o *ContainerOptions) { o.IPCNSPath = "" }},
		{"uts", "uts namespace is not pinned", func(o *ContainerOptions) { o.UTSNSPath = "" }},
		{"pid", "pid namespace is not pinned", func(o *ContainerOptions) { o.PIDNSPath = "" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := containerOpts(t, podConfig(nil), &runtimeapi.ContainerConfig{})
			tc.unset(&o)
			_, err := ContainerSpec(o)
			wantInvalid(t, err, tc.want)
		})
	}
}

func TestSysctls(t *testing.T) {
	tests := []struct {
		name    string
		sysctls map[string]string
		no      *runtimeapi.NamespaceOption
		wantErr string
	}{
		{name: "namespaced", sysctls: map[string]string{
			"net.ipv4.ip_forward": "1", "kernel.shmmax": "1000", "kernel.msgmax": "10",
			"kernel.sem": "250 32000 32 128", "fs.mqueue.msg_max": "10", "net/ipv4/conf/eth0/forwarding": "1",
		}},
		{name: "not namespaced", sysctls: map[string]string{"kernel.foo": "1"}, wantErr: `linux.sysctls["kernel.foo"]: not a namespaced sysctl`},
		{name: "vm", sysctls: map[string]string{"vm.overcommit_memory": "1"}, wantErr: "not a namespaced sysctl"},
		{name: "bad name", sysctls: map[string]string{"net..ipv4": "1"}, wantErr: "not a valid sysctl name"},
		{name: "traversal", sysctls: map[string]string{"net/../../etc": "1"}, wantErr: "not a valid sysctl name"},
		{name: "upper case", sysctls: map[string]string{"NET.ipv4": "1"}, wantErr: "not a valid sysctl name"},
		{name: "newline value", sysctls: map[string]string{"net.ipv4.ip_forward": "1\n2"}, wantErr: "not a valid sysctl value"},
		{name: "net with host network", sysctls: map[string]string{"net.ipv4.ip_forward": "1"},
			no: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}, wantErr: "host network"},
		{name: "ipc with host ipc", sysctls: map[string]string{"kernel.shmmax": "1"},
			no: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}, wantErr: "host IPC"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := podConfig(tc.no)
			cfg.Linux.Sysctls = tc.sysctls
			s, err := SandboxSpec(sandboxOpts(cfg))
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.sysctls, s.Linux.Sysctl); d != "" {
				t.Errorf("sysctls (-want +got):\n%s", d)
			}
			// Containers carry the pod's sysctls too.
			c, err := ContainerSpec(containerOpts(t, cfg, &runtimeapi.ContainerConfig{}))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.sysctls, c.Linux.Sysctl); d != "" {
				t.Errorf("container sysctls (-want +got):\n%s", d)
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name    string
		add     []string
		drop    []string
		ambient []string
		want    []string
		wantErr string
	}{
		{name: "default", want: defaultCapabilities},
		{name: "add with and without prefix", add: []string{"NET_ADMIN", "CAP_SYS_TIME", "sys_nice"},
			want: append(append([]string{}, defaultCapabilities...), "CAP_NET_ADMIN", "CAP_SYS_TIME", "CAP_SYS_NICE")},
		{name: "drop", drop: []string{"CHOWN", "CAP_NET_RAW"}, want: []string{
			"CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_SETGID", "CAP_SETUID",
			"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}},
		{name: "drop all add one", add: []string{"NET_BIND_SERVICE"}, drop: []string{"ALL"}, want: []string{"CAP_NET_BIND_SERVICE"}},
		{name: "add all", add: []string{"ALL"}, want: knownCapabilities},
		{name: "add all drop one", add: []string{"all"}, drop: []string{"SYS_ADMIN"},
			want: func() []string {
				var out []string
				for _, c := range knownCapabilities {
					if c != "CAP_SYS_ADMIN" {
						out = append(out, c)
					}
				}
				return out
			}()},
		{name: "unknown add", add: []string{"CAP_FLY"}, wantErr: `add_capabilities[0] "CAP_FLY": unknown capability`},
		{name: "unknown drop", drop: []string{"x"}, wantErr: `drop_capabilities[0] "x"`},
		{name: "ambient", add: []string{"NET_ADMIN"}, ambient: []string{"NET_ADMIN"},
			want: append(append([]string{}, defaultCapabilities...), "CAP_NET_ADMIN")},
		{name: "ambient not held", ambient: []string{"SYS_ADMIN"}, wantErr: "not in the container's capabilities"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Capabilities: &runtimeapi.Capability{AddCapabilities: tc.add, DropCapabilities: tc.drop, AddAmbientCapabilities: tc.ambient},
			}}}
			s, err := ContainerSpec(containerOpts(t, podConfig(nil), cfg))
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := s.Process.Capabilities
			for set, got := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("%s (-want +got):\n%s", set, d)
				}
			}
			if len(tc.ambient) > 0 && (len(c.Ambient) != 1 || len(c.Inheritable) != 1) {
				t.Errorf("ambient = %v inheritable = %v", c.Ambient, c.Inheritable)
			}
		})
	}
}

func TestPrivileged(t *testing.T) {
	pod := podConfig(nil)
	cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		Privileged: true,
		Seccomp:    &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}}}
	_, err := ContainerSpec(containerOpts(t, pod, cfg))
	wantInvalid(t, err, "the pod is not privileged")

	pod.Linux.SecurityContext.Privileged = true
	s, err := ContainerSpec(containerOpts(t, pod, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(knownCapabilities, s.Process.Capabilities.Bounding); d != "" {
		t.Errorf("capabilities (-want +got):\n%s", d)
	}
	if len(s.Linux.MaskedPaths) != 0 || len(s.Linux.ReadonlyPaths) != 0 {
		t.Errorf("masked %v readonly %v, want none", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if s.Linux.Seccomp != nil {
		t.Error("privileged container has a seccomp filter")
	}
	if d := cmp.Diff([]specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}, s.Linux.Resources.Devices); d != "" {
		t.Errorf("device rules (-want +got):\n%s", d)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys" && !strings.Contains(strings.Join(m.Options, ","), "rw") {
			t.Errorf("/sys options %v, want rw", m.Options)
		}
	}
	// Every host device is there.
	if _, err := os.Stat("/dev/null"); err == nil {
		var found bool
		for _, d := range s.Linux.Devices {
			found = found || d.Path == "/dev/null"
		}
		if !found {
			t.Error("/dev/null missing from devices")
		}
	}
}

func TestContainerSpecBasics(t *testing.T) {
	pod := podConfig(nil)
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: "app"},
		Image:       &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "docker.io/library/app:1"},
		Args:        []string{"--serve"},
		Annotations: map[string]string{"x": "y", "io.kubernetes.cri.container-type": "sandbox"},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{
				CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 1 << 30,
				MemorySwapLimitInBytes: 2 << 30, OomScoreAdj: -999, CpusetCpus: "0-1", CpusetMems: "0",
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}},
			},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				RunAsUser: &runtimeapi.Int64Value{Value: 1000}, NoNewPrivs: true, ReadonlyRootfs: true,
				MaskedPaths: []string{"/proc/foo"},
			},
		},
	}
	o := containerOpts(t, pod, cfg)
	o.HostsPath, o.ResolvConfPath, o.ShmPath = "/run/crin/sb1/hosts", "/run/crin/sb1/resolv.conf", "/run/crin/sb1/shm"
	o.OOMScoreAdjMin = -100
	s, err := ContainerSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"/app", "--serve"}, s.Process.Args); d != "" {
		t.Errorf("args: %s", d)
	}
	if s.Process.User.UID != 1000 || s.Process.User.GID != 1000 {
		t.Errorf("user = %+v", s.Process.User)
	}
	if !s.Process.NoNewPrivileges || !s.Root.Readonly || s.Process.Terminal {
		t.Errorf("noNewPrivileges %v, root %+v, terminal %v", s.Process.NoNewPrivileges, s.Root, s.Process.Terminal)
	}
	if *s.Process.OOMScoreAdj != -100 {
		t.Errorf("oomScoreAdj = %d, want clamped to -100", *s.Process.OOMScoreAdj)
	}
	if d := cmp.Diff([]string{"/proc/foo"}, s.Linux.MaskedPaths); d != "" {
		t.Errorf("masked paths: %s", d)
	}
	if d := cmp.Diff(defaultReadonlyPaths, s.Linux.ReadonlyPaths); d != "" {
		t.Errorf("readonly paths: %s", d)
	}
	r := s.Linux.Resources
	if *r.CPU.Period != 100000 || *r.CPU.Quota != 50000 || *r.CPU.Shares != 512 || r.CPU.Cpus != "0-1" || r.CPU.Mems != "0" ||
		*r.Memory.Limit != 1<<30 || *r.Memory.Swap != 2<<30 || len(r.HugepageLimits) != 1 {
		t.Errorf("resources = cpu %+v memory %+v hugepages %+v", r.CPU, r.Memory, r.HugepageLimits)
	}
	if s.Annotations[AnnotationImageName] != "docker.io/library/app:1" || s.Annotations["x"] != "y" ||
		s.Annotations[criContainerTypeKey] != ContainerTypeContainer || s.Annotations[AnnotationContainerName] != "app" {
		t.Errorf("annotations = %v", s.Annotations)
	}
	if s.Hostname != "web-0" {
		t.Errorf("hostname = %q", s.Hostname)
	}
	if d := cmp.Diff([]specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}}, s.Process.Rlimits); d != "" {
		t.Errorf("rlimits: %s", d)
	}

	mounts := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = m
	}
	for _, dst := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/etc/hosts", "/etc/resolv.conf"} {
		if _, ok := mounts[dst]; !ok {
			t.Errorf("no mount at %s", dst)
		}
	}
	if _, ok := mounts["/etc/hostname"]; ok {
		t.Error("/etc/hostname mounted without a HostnamePath")
	}
	if m := mounts["/dev/shm"]; m.Source != o.ShmPath || m.Type != "bind" {
		t.Errorf("/dev/shm = %+v, want bind of %s", m, o.ShmPath)
	}
	if m := mounts["/etc/hosts"]; !strings.Contains(strings.Join(m.Options, ","), "ro") {
		t.Errorf("/etc/hosts options %v, want ro with a read-only rootfs", m.Options)
	}
}

func TestResourcesValidation(t *testing.T) {
	tests := []struct {
		name    string
		r       *runtimeapi.LinuxContainerResources
		v2      bool
		noHuge  bool
		wantErr string
		notImpl bool // refused as something the host cannot do
	}{
		{name: "small quota", r: &runtimeapi.LinuxContainerResources{CpuQuota: 10}, wantErr: "linux.resources.cpu_quota 10"},
		{name: "unlimited quota", r: &runtimeapi.LinuxContainerResources{CpuQuota: -1}},
		{name: "period", r: &runtimeapi.LinuxContainerResources{CpuPeriod: 5}, wantErr: "cpu_period 5"},
		{name: "shares", r: &runtimeapi.LinuxContainerResources{CpuShares: 1 << 20}, wantErr: "cpu_shares"},
		{name: "negative memory", r: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -2}, wantErr: "memory_limit_in_bytes -2"},
		{name: "swap below memory", r: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 100 << 20, MemorySwapLimitInBytes: 50 << 20}, wantErr: "memory_swap_limit_in_bytes"},
		{name: "cpuset", r: &runtimeapi.LinuxContainerResources{CpusetCpus: "0-1;rm"}, wantErr: `cpuset_cpus "0-1;rm"`},
		{name: "hugepage size", r: &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2M"}}}, wantErr: "page_size"},
		{name: "hugepages", r: &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB"}, {PageSize: "1GB"}}}},
		{name: "hugepages without hugetlb", r: &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB"}, {PageSize: "1GB"}}}, noHuge: true},
		{name: "bad hugepage size without hugetlb", r: &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2M"}}}, noHuge: true, wantErr: "page_size"},
		{name: "oom out of range", r: &runtimeapi.LinuxContainerResources{OomScoreAdj: 1001}, wantErr: "oom_score_adj 1001"},
		{name: "unified on v1", r: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1G"}}, wantErr: "needs cgroup v2", notImpl: true},
		{name: "unified on v2", r: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1G"}}, v2: true},
		{name: "unified path", r: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"../memory.high": "1"}}, v2: true, wantErr: "not a controller file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{Resources: tc.r}}
			o := containerOpts(t, podConfig(nil), cfg)
			o.Host = &Host{CgroupV2: tc.v2, NoHugetlb: tc.noHuge}
			s, err := ContainerSpec(o)
			if tc.notImpl {
				if !errors.Is(err, errdefs.ErrNotImplemented) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want not implemented mentioning %q", err, tc.wantErr)
				}
				return
			}
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := len(tc.r.HugepageLimits); tc.noHuge && len(s.Linux.Resources.HugepageLimits) != 0 || !tc.noHuge && len(s.Linux.Resources.HugepageLimits) != want {
				t.Errorf("hugepage limits %v with NoHugetlb %v, from %d asked", s.Linux.Resources.HugepageLimits, tc.noHuge, want)
			}
			if tc.v2 && s.Linux.Resources.Unified["memory.high"] != "1G" {
				t.Errorf("unified = %v", s.Linux.Resources.Unified)
			}
			if p, ok := nsTypes(s.Linux.Namespaces)["cgroup"]; ok != tc.v2 || p != "" {
				t.Errorf("cgroup namespace: present %v path %q, want present %v and new", ok, p, tc.v2)
			}
		})
	}
}

func TestPreparePauseRoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pause")
	for range 2 { // idempotent
		if err := PreparePauseRoot(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"proc", "dev", "sys", "etc"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", d, err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "pause"))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("pause mountpoint: %v %v", fi, err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v", fi.Mode())
	}

	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.MkdirAll(filepath.Join(bad, "pause"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PreparePauseRoot(bad); err == nil {
		t.Error("a directory at pause: no error")
	}
}

func TestCapabilitiesLimitedByHost(t *testing.T) {
	held := capabilitiesFromMask(0x1fffeffffff) // this machine: no CAP_SYS_RESOURCE
	if len(held) != len(knownCapabilities)-1 || slices.Contains(held, "CAP_SYS_RESOURCE") {
		t.Fatalf("capabilitiesFromMask = %v", held)
	}
	host := &Host{Capabilities: held}
	caps := func(c *runtimeapi.Capability, privileged bool) (*specs.LinuxCapabilities, error) {
		pod := podConfig(nil)
		pod.Linux.SecurityContext.Privileged = privileged
		cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			Capabilities: c, Privileged: privileged,
		}}}
		o := containerOpts(t, pod, cfg)
		o.Host = host
		s, err := ContainerSpec(o)
		if err != nil {
			return nil, err
		}
		return s.Process.Capabilities, nil
	}
	for _, tc := range []struct {
		name       string
		c          *runtimeapi.Capability
		privileged bool
	}{
		{name: "privileged", privileged: true},
		{name: "add all", c: &runtimeapi.Capability{AddCapabilities: []string{"ALL"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := caps(tc.c, tc.privileged)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(held, got.Bounding); d != "" {
				t.Errorf("bounding (-want +got):\n%s", d)
			}
		})
	}
	_, err := caps(&runtimeapi.Capability{AddCapabilities: []string{"SYS_RESOURCE"}}, false)
	wantInvalid(t, err, "bounding set")
}
