//go:build integration

package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// usernsHostID is where the test pods' root is mapped on the host.
const usernsHostID = 1 << 20

// usernsDaemon starts crind on dirs every mapped id can traverse (the
// harness makes its base dir 0700, as MkdirTemp does; user namespaces
// need the path to crind's user namespace dir open to all ids). The NRI
// socket goes elsewhere: crind makes its directory 0700.
func usernsDaemon(t *testing.T) *daemon {
	t.Helper()
	nriDir, err := os.MkdirTemp("", "crinnri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(nriDir) })
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf("[nri]\nsocket_path = %q\n", filepath.Join(nriDir, "nri.sock"))})
	if err := os.Chmod(filepath.Dir(d.state), 0o711); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d.start()
	return d
}

func usernsOptions(host uint32) *runtimeapi.UserNamespace {
	m := []*runtimeapi.IDMapping{{HostId: host, ContainerId: 0, Length: 65536}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
}

// TestUserNamespacePod runs a pod with hostUsers: false on runc 1.1 (which
// cannot id-map mounts itself) and checks what a user sees: root inside
// is an unprivileged id on the host, files root owns on the host (in the
// image, in a volume) are root's inside, the volume is writable and what
// is written there is root's on the host, the pod's network (owned by its
// user namespace: sysctls and sysfs work) is reachable, and nothing is
// left after removal.
func TestUserNamespacePod(t *testing.T) {
	runsOn(t, oci)
	d := usernsDaemon(t)
	ctx := ctxT(t)
	st, err := d.rs.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.RuntimeHandlers {
		if (h.Name == "" || h.Name == "runc") && !h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q does not advertise user namespaces", h.Name)
		}
	}

	vol, err := os.MkdirTemp("", "crinvol")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(vol) })
	// 0700 and root's: only an id-mapped mount lets the container's root in.
	if err := os.WriteFile(filepath.Join(vol, "host-file"), []byte("from-host\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("userns")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: usernsOptions(usernsHostID)},
	}
	// A network sysctl can be set only in a network namespace the pod's
	// user namespace owns.
	podCfg.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
	pod := d.runPod(t, podCfg)

	cfg := containerConfig("app", ref, "sleep", "600")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: usernsOptions(usernsHostID)},
	}
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: vol}}
	id := d.runContainer(t, pod, podCfg, cfg)

	if got := d.execOut(t, id, "id", "-u"); got != "0" {
		t.Errorf("id -u inside = %q, want 0", got)
	}
	wantMap := fmt.Sprintf("0 %d 65536", usernsHostID)
	for _, f := range []string{"uid_map", "gid_map"} {
		if got := strings.Join(strings.Fields(d.execOut(t, id, "cat", "/proc/self/"+f)), " "); got != wantMap {
			t.Errorf("/proc/self/%s = %q, want %q", f, got, wantMap)
		}
	}
	// On the host the container's processes run as the mapped ids.
	pid := containerPid(t, d, pod, id)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "Uid" || k == "Gid") {
			for _, f := range strings.Fields(v) {
				if f != fmt.Sprint(usernsHostID) {
					t.Errorf("host /proc/%d/status %s:%s, want every id %d", pid, k, v, usernsHostID)
					break
				}
			}
		}
	}
	// Files root owns: in the image, in the volume, the pod's files.
	for _, p := range []string{"/bin/busybox", "/etc", "/vol", "/vol/host-file", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname"} {
		if got := d.execOut(t, id, "stat", "-c", "%u:%g", p); got != "0:0" {
			t.Errorf("owner of %s inside = %s, want 0:0", p, got)
		}
	}
	if got := d.execOut(t, id, "cat", "/vol/host-file"); got != "from-host" {
		t.Errorf("/vol/host-file = %q", got)
	}
	// On the host, the id-mapped clones (which show host root's files as
	// the pod's) are reachable by the pod's mapped root only.
	var dst unix.Stat_t
	if err := unix.Stat(filepath.Join(d.state+"-userns", pod), &dst); err != nil {
		t.Fatal(err)
	}
	if dst.Uid != usernsHostID || dst.Mode&0o077 != 0 {
		t.Errorf("the pod's id-mapped mount dir is %d, mode %o; want owned by %d, closed to others", dst.Uid, dst.Mode&0o777, usernsHostID)
	}
	// Written inside as root: root's on the host too.
	d.execOut(t, id, "sh", "-c", "echo from-container > /vol/ctr-file")
	var fst unix.Stat_t
	if err := unix.Stat(filepath.Join(vol, "ctr-file"), &fst); err != nil {
		t.Fatalf("file written in the volume: %v", err)
	}
	if fst.Uid != 0 || fst.Gid != 0 {
		t.Errorf("file the container's root wrote is %d:%d on the host, want 0:0", fst.Uid, fst.Gid)
	}
	// The rootfs and /dev/shm are writable; /proc, /sys and /dev work.
	d.execOut(t, id, "sh", "-c", "echo x > /rootfs-file && touch /dev/shm/x && test -c /dev/null && echo y > /dev/null")
	if got := d.execOut(t, id, "stat", "-c", "%u", "/rootfs-file"); got != "0" {
		t.Errorf("owner of a file written to the rootfs = %s, want 0", got)
	}
	if got := d.execOut(t, id, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"); got != "0" {
		t.Errorf("pod sysctl net.ipv4.ip_unprivileged_port_start = %q inside, want 0", got)
	}
	if got := d.execOut(t, id, "ls", "/sys/class/net"); !strings.Contains(got, "eth0") {
		t.Errorf("/sys/class/net = %q: not the pod's network namespace", got)
	}

	// The pod's network works: its IP is on eth0, and the host reaches a
	// server in it.
	ps, err := d.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP(ps.Status.GetNetwork().GetIp())
	if ip == nil || !d.net.Subnet.Contains(ip) {
		t.Fatalf("pod IP %q not in the test network %s", ps.Status.GetNetwork().GetIp(), d.net.Subnet)
	}
	if got := d.execOut(t, id, "sh", "-c", "ip -4 addr show eth0 | grep -o 'inet [0-9.]*'"); got != "inet "+ip.String() {
		t.Errorf("eth0 in the pod: %q, want inet %s", got, ip)
	}
	d.execOut(t, id, "httpd", "-p", "8080", "-h", "/vol")
	body := httpGetEventually(t, "http://"+net.JoinHostPort(ip.String(), "8080")+"/ctr-file")
	if strings.TrimSpace(body) != "from-container" {
		t.Errorf("GET from the pod = %q", body)
	}

	// Port forwarding enters the pod's network namespace, which its user
	// namespace owns.
	pf, err := d.rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{8080}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	conn := dialStream(t, pf.Url, portForwardV1)
	h := http.Header{}
	h.Set("streamType", "error")
	h.Set("port", "8080")
	h.Set("requestID", "0")
	if _, err := conn.CreateStream(h); err != nil {
		t.Fatal(err)
	}
	h.Set("streamType", "data")
	data, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(data, "GET /ctr-file HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if fwd, err := io.ReadAll(data); err != nil || !strings.Contains(string(fwd), "from-container") {
		t.Errorf("forwarded GET = %q, %v", fwd, err)
	}
	conn.Close()

	// A volume on a filesystem that cannot be id-mapped (sysfs) is
	// FailedPrecondition naming it, and the create, which failed after
	// the rootfs was id-mapped, leaves nothing of it behind.
	bad := containerConfig("bad", ref, "true")
	bad.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: vol}, {ContainerPath: "/hostsys", HostPath: "/sys/kernel"}}
	_, err = d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg})
	if code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "/sys/kernel") {
		t.Errorf("CreateContainer with a sysfs volume: %v, want FailedPrecondition naming /sys/kernel", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state+"-userns", pod, "c")); len(ents) != 1 {
		t.Errorf("%d container entries in the pod's user namespace dir after a failed create, want 1 (the running one)", len(ents))
	}

	// A crind restart keeps the container working; the sweep leaves its
	// mounts alone and removes what no record owns.
	orphan := filepath.Join(d.state+"-userns", strings.Repeat("ab", 32))
	if err := os.MkdirAll(filepath.Join(orphan, "m", "0"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(vol, filepath.Join(orphan, "m", "0"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	d.kill()
	d.start()
	if got := d.execOut(t, id, "cat", "/vol/host-file"); got != "from-host" {
		t.Errorf("after a crind restart /vol/host-file = %q", got)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphaned id-mapped mounts %s were not swept: %v", orphan, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "host-file")); err != nil {
		t.Errorf("the sweep reached through the orphan's mount: %v", err)
	}

	for _, call := range []func() error{
		func() error {
			_, err := d.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
			return err
		},
		func() error {
			_, err := d.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	checkNoUserNSLeaks(t, d)
}

// checkNoUserNSLeaks fails when crind's user namespace dir still holds a
// mount or a pod's entry.
func checkNoUserNSLeaks(t *testing.T, d *daemon) {
	t.Helper()
	dir := d.state + "-userns"
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("leaked id-mapped mount: %s", f[4])
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("leaked user namespace dir entry: %s", e.Name())
	}
}

// containerPid reads the host pid of a container's process from its
// cgroup (crind's cgroup parent/<pod>/<container>).
func containerPid(t *testing.T, d *daemon, pod, id string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", d.cgroup, pod, id, "cgroup.procs"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
			return pid
		}
	}
	t.Fatalf("no process of container %s in its cgroup", id)
	return 0
}

func httpGetEventually(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	var body string
	poll.Until(t, time.Minute, "GET "+url, func() (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return true, ""
	})
	return body
}

// TestUserNamespaceUnavailable checks that a node where the mapped ids
// cannot reach crind's user namespace dir (here the harness's 0700 base
// dir) does not advertise user namespaces and refuses such pods with
// FailedPrecondition saying why, while other pods run.
func TestUserNamespaceUnavailable(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	st, err := d.rs.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.RuntimeHandlers {
		if h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q advertises user namespaces on a node that cannot give them", h.Name)
		}
	}
	cfg := podConfig("no-userns")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: usernsOptions(usernsHostID)}}
	_, err = d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	_ = os.RemoveAll(cfg.LogDirectory)
	if code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "does not let the mapped ids reach") {
		t.Errorf("RunPodSandbox: %v, want FailedPrecondition saying why", err)
	}
	d.runPod(t, podConfig("plain"))
}

// TestUserNamespaceRefused checks that bad user namespace options are
// InvalidArgument naming the field, and that nothing is left of them.
func TestUserNamespaceRefused(t *testing.T) {
	runsOn(t, oci)
	d := usernsDaemon(t)
	ctx := ctxT(t)
	m := func(host, ctr, n uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: host, ContainerId: ctr, Length: n}}
	}
	ok := m(usernsHostID, 0, 65536)
	tests := []struct {
		name string
		u    *runtimeapi.UserNamespace
		want string
	}{
		{"host root", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m(0, 0, 65536), Gids: ok}, "uids[0].host_id 0"},
		{"root unmapped", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ok, Gids: m(usernsHostID, 1000, 10)}, "gids[0].container_id 1000"},
		{"overflow", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m(1<<32-10, 0, 65536), Gids: ok}, "uids[0]: host_id"},
		{"no mappings", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}, "uids: 0 mappings"},
		{"container mode", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER, Uids: ok, Gids: ok}, "mode CONTAINER"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := podConfig("bad-userns")
			cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: tc.u}}
			_, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RunPodSandbox: %v, want InvalidArgument naming %q", err, tc.want)
			}
			_ = os.RemoveAll(cfg.LogDirectory)
		})
	}
	checkNoUserNSLeaks(t, d)
}
