//go:build integration

package integration

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pods without an infra process (docs/state-machines.md): a pod that does
// not share its PID namespace gets its network, IPC and UTS namespaces
// from crind, pinned as files, and no crin-pause; its one crin-shim runs
// while it has containers.

// kubeletNamespaces are the namespace options kubelet sends for a pod
// without hostNetwork/hostIPC/hostPID/shareProcessNamespace and for its
// containers (the zero value of pid, POD, would share the PID namespace).
func kubeletNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
}

func noInfraPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: kubeletNamespaces()}
	return cfg
}

func noInfraContainerConfig(name, image string, cmd ...string) *runtimeapi.ContainerConfig {
	cfg := containerConfig(name, image, cmd...)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: kubeletNamespaces()}
	return cfg
}

// podPid is the "pid" of a pod's verbose status: its infra process, or 0.
func (d *daemon) podPid(t *testing.T, pod string) int {
	t.Helper()
	info := d.podStatus(t, pod).Info["info"]
	i := strings.Index(info, `"pid":`)
	if i < 0 {
		return 0 // omitted: zero
	}
	rest := strings.TrimLeft(info[i+len(`"pid":`):], " ")
	end := strings.IndexAny(rest, ",}")
	pid, err := strconv.Atoi(strings.TrimSpace(rest[:end]))
	if err != nil {
		t.Fatalf("pid in verbose info %q: %v", info, err)
	}
	return pid
}

// podProcesses lists "pid comm" of every process in pod's cgroup tree.
func (d *daemon) podProcesses(t *testing.T, pod string) []string {
	t.Helper()
	var out []string
	root := filepath.Join("/sys/fs/cgroup/pids", d.cgroup, pod)
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile(filepath.Join("/proc", f, "comm"))
			out = append(out, f+" "+strings.TrimSpace(string(comm)))
		}
		return nil
	})
	return out
}

// shimsNaming lists the crin-shim processes whose command line names id
// (a pod's, by its shim dir). A child a shim forked and has not yet
// exec'd (the runtime it runs) still shows the shim's name and command
// line: it is no shim of its own, and left out.
func shimsNaming(id string) []string {
	ppid := map[string]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.TrimSpace(string(comm)) == "crin-shim" && strings.Contains(string(cmdline), id) {
			ppid[e.Name()] = parentPid(e.Name())
		}
	}
	var out []string
	for pid, parent := range ppid {
		if _, forked := ppid[parent]; !forked {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// parentPid is the ppid in /proc/<pid>/stat, or "".
func parentPid(pid string) string {
	stat, _ := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// checkNoInfra fails unless pod has no infra process and shims crin-shim
// processes (its one shim, from RunPodSandbox until its last container is
// removed): nothing runs in its cgroup but its containers' processes.
func (d *daemon) checkNoInfra(t *testing.T, pod string, shims int) {
	t.Helper()
	if pid := d.podPid(t, pod); pid != 0 {
		t.Errorf("pod has infra pid %d, want none", pid)
	}
	if _, err := os.Stat(filepath.Join(d.state, "c", pod)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod has a runtime state dir (an infra container): %v", err)
	}
	if got := shimsNaming(pod); len(got) != shims {
		t.Errorf("crin-shim processes of the pod: %v, want %d", got, shims)
	}
	for _, p := range d.podProcesses(t, pod) {
		if strings.HasSuffix(p, " pause") || strings.HasSuffix(p, " crin-pause") {
			t.Errorf("an infra process runs in the pod's cgroup: %s", p)
		}
	}
}

// nsLink is what /proc/self/ns/<kind> reads in a process of the pinned
// namespace at pin.
func nsLink(t *testing.T, kind, pin string) string {
	t.Helper()
	return fmt.Sprintf("%s:[%d]", kind, nsInode(t, pin))
}

// TestNoInfraPod runs a pod the way kubelet asks for one that does not
// share its PID namespace: it has no infra process and one shim, started
// by RunPodSandbox, for all its containers, its
// containers share its pinned IPC and UTS namespaces (and the
// hostname), its IP serves, it stays READY across a crind killed with
// SIGKILL and its containers keep joining it, and removal leaves no pins.
func TestNoInfraPod(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := noInfraPodConfig("noinfra")
	pod := d.runPod(t, podCfg)
	d.checkNoInfra(t, pod, 1)

	web := d.runContainer(t, pod, podCfg, noInfraContainerConfig("web", ref, "sh", "-c",
		"mkdir -p /tmp/www && echo hello-from-noinfra > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"))
	side := d.runContainer(t, pod, podCfg, noInfraContainerConfig("side", ref, "sleep", "1000"))
	d.checkNoInfra(t, pod, 1)
	if procs := d.podProcesses(t, pod); len(procs) != 2 {
		t.Errorf("processes in the pod's cgroup: %q, want the two containers' only", procs)
	}
	// Pod stats read the pod cgroup, which exists with its containers.
	st, err := d.rs.PodSandboxStats(ctxT(t), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatalf("PodSandboxStats: %v", err)
	}
	if l := st.GetStats().GetLinux(); l.GetMemory() == nil || l.GetProcess().GetProcessCount().GetValue() != 2 {
		t.Errorf("pod stats: memory %v, process count %v; want memory figures and the 2 containers' processes",
			l.GetMemory(), l.GetProcess().GetProcessCount())
	}
	pins := filepath.Join(d.state, "ns", pod)
	for _, id := range []string{web, side} {
		for _, kind := range []string{"ipc", "uts"} {
			want := nsLink(t, kind, filepath.Join(pins, kind))
			if got := d.execOut(t, id, "readlink", "/proc/self/ns/"+kind); got != want {
				t.Errorf("container's %s namespace %s, pinned %s", kind, got, want)
			}
		}
		if got := d.execOut(t, id, "hostname"); got != "noinfra" {
			t.Errorf("hostname in a container: %q, want noinfra", got)
		}
	}

	ip := d.podStatus(t, pod).Status.GetNetwork().GetIp()
	if parsed := net.ParseIP(ip); parsed == nil || !d.net.Subnet.Contains(parsed) {
		t.Fatalf("pod IP %q not in the test network %s", ip, d.net.Subnet)
	}
	getPod(t, ip, "hello-from-noinfra")

	d.kill()
	d.start()
	if st := d.podStatus(t, pod).Status.State; st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after crind was killed and restarted: %v, want READY", st)
	}
	d.checkNoInfra(t, pod, 1)
	late := d.runContainer(t, pod, podCfg, noInfraContainerConfig("late", ref, "sleep", "1000"))
	if got, want := d.execOut(t, late, "readlink", "/proc/self/ns/ipc"), nsLink(t, "ipc", filepath.Join(pins, "ipc")); got != want {
		t.Errorf("container created after the restart: ipc %s, pinned %s", got, want)
	}
	getPod(t, ip, "hello-from-noinfra")

	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if st := d.podStatus(t, pod).Status.State; st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod after StopPodSandbox: %v, want NOTREADY", st)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	for _, p := range []string{pins, filepath.Join(d.state, "netns", pod)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after RemovePodSandbox: %v", p, err)
		}
	}
	// cleanupAll checks for leaks (mounts, cgroups, shims).
}

// getPod GETs /index.html from the pod at ip, port 8080, retrying until it
// answers, and checks the body.
func getPod(t *testing.T, ip, want string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get("http://" + net.JoinHostPort(ip, "8080") + "/index.html")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("GET from the pod = %q, want %q", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod at %s unreachable from the host: %v", ip, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSharedPIDPodHasInfra: a pod that shares its PID namespace still has
// crin-pause as the PID 1 its containers see.
func TestSharedPIDPodHasInfra(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("sharedpid") // pid mode POD
	pod := d.runPod(t, podCfg)
	infra := d.podPid(t, pod)
	if infra <= 0 {
		t.Fatalf("a pod sharing its PID namespace has no infra pid")
	}
	id := d.runContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sleep", "1000"))
	if got := d.execOut(t, id, "cat", "/proc/1/comm"); got != "pause" {
		t.Errorf("PID 1 of the shared PID namespace: %q, want pause", got)
	}
}

// TestNoInfraUserNamespacePod runs a pod with hostUsers: false the way
// kubelet asks for it (pid CONTAINER): no infra process, its IPC and UTS
// namespaces are pinned and owned by its user namespace (an IPC sysctl
// is set inside and the container may change its hostname), and removal
// leaves no pins.
func TestNoInfraUserNamespacePod(t *testing.T) {
	runsOn(t, oci)
	d := usernsDaemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	ns := kubeletNamespaces()
	ns.UsernsOptions = usernsOptions(usernsHostID)
	podCfg := podConfig("nsuser")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	// An IPC sysctl: only writable in an IPC namespace the pod's user
	// namespace owns.
	podCfg.Linux.Sysctls = map[string]string{"kernel.shm_rmid_forced": "1"}
	pod := d.runPod(t, podCfg)
	d.checkNoInfra(t, pod, 1)

	cfg := containerConfig("app", ref, "sleep", "600")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns,
		Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"CAP_SYS_ADMIN"}}}
	id := d.runContainer(t, pod, podCfg, cfg)
	d.checkNoInfra(t, pod, 1)
	pins := filepath.Join(d.state, "ns", pod)
	for _, kind := range []string{"ipc", "uts", "user"} {
		if got, want := d.execOut(t, id, "readlink", "/proc/self/ns/"+kind), nsLink(t, kind, filepath.Join(pins, kind)); got != want {
			t.Errorf("container's %s namespace %s, pinned %s", kind, got, want)
		}
	}
	if got := d.execOut(t, id, "cat", "/proc/sys/kernel/shm_rmid_forced"); got != "1" {
		t.Errorf("kernel.shm_rmid_forced inside = %q, want 1", got)
	}
	if got := d.execOut(t, id, "hostname"); got != "nsuser" {
		t.Errorf("hostname inside = %q, want nsuser", got)
	}
	// Root of the pod's user namespace with CAP_SYS_ADMIN may rename its
	// own UTS namespace only if that namespace belongs to it.
	d.execOut(t, id, "hostname", "renamed")
	if got := d.execOut(t, id, "hostname"); got != "renamed" {
		t.Errorf("hostname after renaming inside = %q, want renamed", got)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is left after RemovePodSandbox: %v", pins, err)
	}
}
