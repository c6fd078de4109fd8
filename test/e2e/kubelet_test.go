//go:build e2e

package e2e

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// kubeletVersion is the kubelet test/e2e/kubelet/tools pins.
const kubeletVersion = "v1.37.2"

// kubeletBinary is where test/e2e/kubelet/build.sh puts the kubelet
// (CRIN_KUBELET overrides it, for the script and for the tests alike).
func kubeletBinary() string {
	if p := os.Getenv("CRIN_KUBELET"); p != "" {
		return p
	}
	return harness.CacheBinary("kubelet-" + kubeletVersion)
}

// kernelTunables are the /proc/sys files kubelet's container manager
// writes (setupKernelTunables, with protectKernelDefaults false). Kubelet
// sees stand-ins for them, bind-mounted in its private mount namespace.
var kernelTunables = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// hostPaths are kubelet's default or hard-coded paths on the host; the
// node's kubelet must create none of them (its config moves the others
// under the node's dir, its mount namespace hides /var/lib and /var/log).
var hostPaths = []string{
	"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/etc/kubernetes",
	"/var/run/kubernetes", "/run/kubernetes", "/usr/libexec/kubernetes",
}

// node is one standalone kubelet on top of one crind.
type node struct {
	t         *testing.T
	base      string
	name      string // --hostname-override; static pods are named <manifest>-<name>
	cgroup    string // kubelet's cgroupRoot and crind's cgroup parent
	registry  string
	image     string // busybox in the registry
	crind     *crind
	kubelet   string // binary
	root      string // kubelet --root-dir, a shared bind mount on itself
	manifests string
	podLogs   string
	standins  string // stand-ins for kernelTunables
	cfgPath   string
	port      int
	healthz   int
	logPath   string
	cmd       *exec.Cmd
	exited    chan struct{}
	client    *http.Client
	// hostPathsBefore are the hostPaths the host already had.
	hostPathsBefore map[string]bool
	// portmapChains records whether the nat table had portmap's chains
	// before (if not, the node removes them when it is done).
	portmapChains bool
	// opts are the options the node was started with.
	opts nodeOptions
}

// nodeOptions change a node from the default.
type nodeOptions struct {
	// featureGates are kubelet's featureGates.
	featureGates map[string]bool
	// kubeconfig, when set, points kubelet at an API server
	// (harness.StartControlPlane): it registers its node and runs the
	// pods bound to it besides its static pods.
	kubeconfig string
	// crindConfig is appended to crind's config (runtime handlers).
	crindConfig string
}

// startNode starts crind and a kubelet on it, and registers the cleanup
// that kills kubelet and removes everything either of them created.
func startNode(t *testing.T) *node {
	t.Helper()
	return startNodeWith(t, nodeOptions{})
}

// startNodeWith is startNode with options.
func startNodeWith(t *testing.T, o nodeOptions) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e tests need root")
	}
	bin := kubeletBinary()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no kubelet at %s: run test/e2e/kubelet/build.sh first (make e2e does)", bin)
	}
	base, err := os.MkdirTemp("", "crine2e")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{
		opts:      o,
		t:         t,
		base:      base,
		name:      "crine2e-" + harness.RandHex(3),
		cgroup:    "/crine2e-" + harness.RandHex(4),
		kubelet:   bin,
		root:      filepath.Join(base, "kubelet"),
		manifests: filepath.Join(base, "manifests"),
		podLogs:   filepath.Join(base, "pod-logs"),
		standins:  filepath.Join(base, "sysctl"),
		logPath:   filepath.Join(base, "kubelet.log"),
		client: &http.Client{
			Timeout:   2 * time.Minute,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		},
	}
	t.Cleanup(n.cleanup)
	n.hostPathsBefore = map[string]bool{}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			n.hostPathsBefore[p] = true
		}
	}
	n.portmapChains = hasPortmapChains()
	n.registry = imagetest.StartRegistry(t)
	imagetest.Push(t, n.registry, "library/busybox:latest", imagetest.Busybox(t))
	n.image = n.registry + "/library/busybox:latest"
	for _, d := range []string{n.root, n.manifests, n.podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.makeCgroup()
	n.crind = newCrind(t, base, n.cgroup, n.registry, o.crindConfig)
	n.writeStandins()
	n.writeConfig(o)
	// Mounts kubelet makes under its root dir must reach crind, which runs
	// in the host's mount namespace: the root dir is a shared mount, so
	// its copy in kubelet's namespace stays its peer.
	if err := syscall.Mount(n.root, n.root, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", n.root, err)
	}
	if err := syscall.Mount("", n.root, "", syscall.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", n.root, err)
	}
	n.startKubelet(t)
	return n
}

// makeCgroup creates the test cgroup in every v1 hierarchy (kubelet wants
// its cgroupRoot to exist), with the cpuset of the root.
func (n *node) makeCgroup() {
	t := n.t
	for _, ctl := range cgroupHierarchies() {
		dir := filepath.Join(ctl, n.cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("create test cgroup: %v", err)
		}
		if filepath.Base(ctl) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(ctl, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			}
		}
	}
}

// cgroupHierarchies lists the cgroup mounts under /sys/fs/cgroup (every v1
// hierarchy, and the v2 mount of a hybrid host).
func cgroupHierarchies() []string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && (f[i+1] == "cgroup" || f[i+1] == "cgroup2") && strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
				out = append(out, f[4])
			}
		}
	}
	return out
}

// writeStandins copies the host's current value of every kernel tunable
// kubelet would change into a file kubelet sees in its place.
func (n *node) writeStandins() {
	t := n.t
	for _, f := range kernelTunables {
		b, err := os.ReadFile(filepath.Join("/proc/sys", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{n.standins, n.standins + ".orig"} {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeConfig writes kubelet's KubeletConfiguration: standalone, static
// pods only, everything under the node's temp dir, its endpoints on
// 127.0.0.1 with anonymous access, and nothing that reaches outside the
// test (no iptables chains, no kernel tunables, no eviction or image GC
// driven by the host's disk).
func (n *node) writeConfig(o nodeOptions) {
	t := n.t
	n.port, n.healthz = harness.FreePort(t), harness.FreePort(t)
	resolv := filepath.Join(n.base, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch e2e.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := "unix://" + n.crind.socket
	cfg := map[string]any{
		"kind":                     "KubeletConfiguration",
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"staticPodPath":            n.manifests,
		"fileCheckFrequency":       "2s",
		"syncFrequency":            "10s",
		"failCgroupV1":             false,
		"failSwapOn":               false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               n.cgroup,
		"cgroupsPerQOS":            true,
		"enforceNodeAllocatable":   []string{"pods"},
		"containerRuntimeEndpoint": sock,
		"imageServiceEndpoint":     sock,
		"address":                  "127.0.0.1",
		"port":                     n.port,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              n.healthz,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"podLogsDir":                  n.podLogs,
		"resolvConf":                  resolv,
		"volumePluginDir":             filepath.Join(n.base, "volume-plugins"),
		"makeIPTablesUtilChains":      false,
		"protectKernelDefaults":       false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		"serializeImagePulls": false,
	}
	if len(o.featureGates) > 0 {
		cfg["featureGates"] = o.featureGates
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	n.cfgPath = filepath.Join(n.base, "kubelet-config.json")
	if err := os.WriteFile(n.cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kubeletWrapper runs in kubelet's new mount namespace, a copy of the
// host's. It turns every mount but kubelet's root dir into a slave (or
// leaves it private), so nothing mounted in this namespace reaches the
// host while kubelet's mounts under its root dir (a shared mount, peer of
// the host's) still reach crind. Then it puts the stand-ins over the
// kernel tunables, hides /var/lib and /var/log behind tmpfs mounts (kubelet's
// device manager socket is hard-coded to /var/lib/kubelet/device-plugins,
// its container log symlinks to /var/log/containers), and becomes kubelet.
const kubeletWrapper = `set -e
standins=$1; root=$2; shift 2
awk -v r="$root" '$5 != r {print $5}' /proc/self/mountinfo | while read -r m; do
	mount --make-slave "$m" 2>/dev/null || true
done
mount --make-slave /
mount --make-slave /proc
for f in $(cd "$standins" && find . -type f | sed 's|^[.]/||'); do
	mount --bind "$standins/$f" "/proc/sys/$f"
done
mount -t tmpfs -o mode=0755 e2e-var-lib /var/lib
mount -t tmpfs -o mode=0755 e2e-var-log /var/log
exec "$@"
`

// startKubelet starts kubelet in a private mount namespace (propagation
// unchanged: the root dir stays a peer of the host's) and waits for its
// healthz and its authenticated server.
func (n *node) startKubelet(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", kubeletWrapper, "kubelet-wrapper", n.standins, n.root,
		n.kubelet,
		"--config=" + n.cfgPath,
		"--root-dir=" + n.root,
		"--cert-dir=" + filepath.Join(n.base, "pki"),
		"--hostname-override=" + n.name,
		"--v=2",
	}
	if n.opts.kubeconfig != "" {
		args = append(args, "--kubeconfig="+n.opts.kubeconfig)
	}
	cmd := exec.Command("unshare", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (killed as a whole), and killed with the test
	// binary if that dies before its cleanup runs (a timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd = cmd
	exited := make(chan struct{})
	n.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	poll.Until(t, 2*time.Minute, "kubelet healthz and /pods", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("kubelet exited: %v\n%s", cmd.ProcessState, n.kubeletLog(6000))
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.healthz))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			return false, "healthz: " + string(b)
		}
		if _, err := n.get("/pods"); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func (n *node) kubeletLog(max int) string {
	b, _ := os.ReadFile(n.logPath)
	return harness.Tail(string(b), max)
}

// stopKubelet kills kubelet (SIGTERM, then SIGKILL) and waits for it.
func (n *node) stopKubelet(sig syscall.Signal) {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, sig)
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
	n.cmd = nil
}

// cleanup kills kubelet, removes every pod through CRI, stops crind, checks
// crind left nothing behind, and removes kubelet's mounts and cgroups.
func (n *node) cleanup() {
	t := n.t
	n.stopKubelet(syscall.SIGTERM)
	if n.crind != nil {
		n.crind.removeAllPods()
		n.crind.stop()
		n.crind.checkNoLeaks()
		n.crind.net.Remove(t)
		if !n.portmapChains && hasPortmapChains() {
			removePortmapChains(t)
		}
	}
	n.checkHostTunables()
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil && !n.hostPathsBefore[p] {
			t.Errorf("kubelet created %s on the host", p)
		}
	}
	// Mounts kubelet made under its root dir, the root dir's own bind
	// mount and crind's netns dir, deepest first.
	ms := harness.MountsUnder(n.base)
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	for _, m := range ms {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("unmount %s: %v", m, err)
		}
	}
	for _, ctl := range cgroupHierarchies() {
		removeCgroupTree(t, filepath.Join(ctl, n.cgroup))
	}
	if t.Failed() {
		t.Logf("kubelet log:\n%s", n.kubeletLog(12000))
		if n.crind != nil {
			t.Logf("crind log:\n%s", harness.Tail(n.crind.logBuf.String(), 8000))
		}
	}
	if os.Getenv("CRIN_E2E_KEEP") == "" {
		_ = os.RemoveAll(n.base)
	}
}

// removeCgroupTree removes dir and every cgroup below it, deepest first.
func removeCgroupTree(t *testing.T, dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove cgroup %s: %v", d, err)
		}
	}
}

// checkHostTunables fails the test when the host's kernel tunables are not
// what they were before kubelet ran (the stand-ins hold what kubelet
// wrote).
func (n *node) checkHostTunables() {
	t := n.t
	for _, f := range kernelTunables {
		host, _ := os.ReadFile(filepath.Join("/proc/sys", f))
		orig, err := os.ReadFile(filepath.Join(n.standins+".orig", f))
		if err != nil {
			continue
		}
		if string(host) != string(orig) {
			t.Errorf("kubelet changed the host's %s: %q, was %q", f, host, orig)
		}
	}
}

func (n *node) url(path string) string {
	return fmt.Sprintf("https://127.0.0.1:%d%s", n.port, path)
}

// get GETs path from kubelet's server and returns the body of a 200.
func (n *node) get(path string) ([]byte, error) {
	return n.do(http.MethodGet, path)
}

func (n *node) do(method, path string) ([]byte, error) {
	return harness.KubeletDo(n.client, method, n.url(path))
}

// runIn runs cmd (split on spaces by kubelet) in a container through
// kubelet's /run endpoint (ExecSync underneath).
func (n *node) runIn(podName, ctr, cmd string) (string, error) {
	b, err := n.do(http.MethodPost, fmt.Sprintf("/run/default/%s/%s?cmd=%s", podName, ctr, url.QueryEscape(cmd)))
	return string(b), err
}
