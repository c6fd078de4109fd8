//go:build integration && linux

package cni

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/test/poll"
)

const pluginDir = "/usr/lib/cni"

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// netnsDir returns a fresh dir for pinned namespaces and undoes the mount
// NewNetNS makes of it.
func netnsDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "netns")
	t.Cleanup(func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = RemoveNetNS(filepath.Join(dir, e.Name()))
		}
		for isMounted(t, dir) {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
				break
			}
		}
		os.RemoveAll(base)
	})
	return dir
}

func isMounted(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[4] == path {
			return true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return false
}

func inNetNS(t *testing.T, path string, fn func() error) error {
	t.Helper()
	return InNetNS(path, fn)
}

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestNetNS(t *testing.T) {
	requireRoot(t)
	dir := netnsDir(t)

	p, err := NewNetNS(dir, "pod-a")
	if err != nil {
		t.Fatalf("NewNetNS: %v", err)
	}
	if p != filepath.Join(dir, "pod-a") {
		t.Errorf("NewNetNS path = %s", p)
	}
	if !isNetNS(p) || !isMounted(t, p) {
		t.Fatalf("%s is not a pinned namespace", p)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("netns dir mode = %v, %v; want 0711", fi.Mode().Perm(), err)
	}
	if nsInode(t, p) == nsInode(t, "/proc/self/ns/net") {
		t.Fatal("pinned namespace is the host's")
	}
	err = inNetNS(t, p, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" {
			return fmt.Errorf("interfaces in new netns = %v, want only lo", ifs)
		}
		if ifs[0].Flags&net.FlagUp == 0 {
			return errors.New("lo is down")
		}
		// Loopback works: listen and connect on 127.0.0.1.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		t.Fatalf("inside new netns: %v", err)
	}

	// The same name again fails and leaves the first namespace alone.
	if _, err := NewNetNS(dir, "pod-a"); !errdefs.IsAlreadyExists(err) {
		t.Errorf("NewNetNS of an existing name = %v, want AlreadyExists", err)
	}
	if !isNetNS(p) {
		t.Error("failed NewNetNS broke the existing namespace")
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := NewNetNS(dir, bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("NewNetNS(%q) = %v, want InvalidArgument", bad, err)
		}
	}

	// A second namespace is a different one.
	p2, err := NewNetNS(dir, "pod-b")
	if err != nil {
		t.Fatalf("NewNetNS pod-b: %v", err)
	}
	if nsInode(t, p2) == nsInode(t, p) {
		t.Error("two NewNetNS calls share a namespace")
	}

	for _, path := range []string{p, p2} {
		if err := RemoveNetNS(path); err != nil {
			t.Fatalf("RemoveNetNS: %v", err)
		}
		if isMounted(t, path) {
			t.Errorf("%s still mounted after RemoveNetNS", path)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after RemoveNetNS: %v", path, err)
		}
		if err := RemoveNetNS(path); err != nil {
			t.Errorf("second RemoveNetNS = %v", err)
		}
	}
	// The dir is a mount point once, not once per namespace.
	if n := countMounts(t, dir); n != 1 {
		t.Errorf("%s mounted %d times, want 1", dir, n)
	}
}

func countMounts(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			n++
		}
	}
	return n
}

// bridgeEnv is a Manager on crin's default conflist, moved to a test bridge
// and subnet so nothing of the host's networking is touched.
type bridgeEnv struct {
	m       *Manager
	bridge  string
	subnet  *net.IPNet
	dataDir string // host-local's, per network
	cache   string
	nsDir   string
}

func newBridgeEnv(t *testing.T, extraPlugins ...map[string]interface{}) *bridgeEnv {
	t.Helper()
	requireRoot(t)
	if _, err := os.Stat(filepath.Join(pluginDir, "bridge")); err != nil {
		t.Skipf("no bridge plugin: %v", err)
	}
	pid := os.Getpid()
	e := &bridgeEnv{
		bridge: fmt.Sprintf("crint%d", pid%1000000),
		cache:  t.TempDir(),
		nsDir:  netnsDir(t),
	}
	_, e.subnet, _ = net.ParseCIDR(fmt.Sprintf("10.123.%d.0/24", pid%250))
	ipamData := t.TempDir()

	var conf map[string]interface{}
	if err := json.Unmarshal(DefaultConflist(), &conf); err != nil {
		t.Fatal(err)
	}
	conf["name"] = "crintest"
	e.dataDir = filepath.Join(ipamData, "crintest")
	plugins := conf["plugins"].([]interface{})
	br := plugins[0].(map[string]interface{})
	br["bridge"] = e.bridge
	ipam := br["ipam"].(map[string]interface{})
	ipam["ranges"] = [][]map[string]string{{{"subnet": e.subnet.String()}}}
	ipam["dataDir"] = ipamData
	for _, p := range extraPlugins {
		plugins = append(plugins, p)
	}
	conf["plugins"] = plugins
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	confDir := t.TempDir()
	mustWrite(t, filepath.Join(confDir, "10-test.conflist"), string(b))

	t.Cleanup(func() {
		if _, err := net.InterfaceByName(e.bridge); err == nil {
			if out, err := exec.Command("ip", "link", "del", e.bridge).CombinedOutput(); err != nil {
				t.Errorf("delete bridge %s: %v: %s", e.bridge, err, out)
			}
		}
	})
	e.m, err = New(Config{
		ConfDir:  confDir,
		BinDirs:  []string{pluginDir},
		CacheDir: e.cache,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Status(); err != nil && len(extraPlugins) == 0 {
		t.Fatalf("Status: %v", err)
	}
	return e
}

// allocated returns the addresses host-local holds.
func (e *bridgeEnv) allocated(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(e.dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, en := range entries {
		if net.ParseIP(en.Name()) != nil {
			ips = append(ips, en.Name())
		}
	}
	return ips
}

// ports returns the interfaces enslaved to the test bridge.
func (e *bridgeEnv) ports(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("/sys/class/net", e.bridge, "brif"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

func (e *bridgeEnv) cached(t *testing.T) []string {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(e.cache, "results"))
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

func (e *bridgeEnv) pod(t *testing.T, id string) Pod {
	t.Helper()
	ns, err := NewNetNS(e.nsDir, id)
	if err != nil {
		t.Fatalf("NewNetNS: %v", err)
	}
	return Pod{ID: id, Name: "web-" + id, Namespace: "default", UID: "uid-" + id, NetNS: ns}
}

// assertClean fails unless the network holds nothing for any pod.
func (e *bridgeEnv) assertClean(t *testing.T) {
	t.Helper()
	if a := e.allocated(t); len(a) != 0 {
		t.Errorf("addresses still allocated: %v", a)
	}
	// A namespace dies asynchronously once its last user is gone, and its
	// veth end with it.
	if ok, _ := poll.Within(time.Minute, func() (bool, string) { return len(e.ports(t)) == 0, "" }); !ok {
		t.Errorf("veths still on bridge %s: %v", e.bridge, e.ports(t))
	}
	if c := e.cached(t); len(c) != 0 {
		t.Errorf("results still cached: %v", c)
	}
}

// serveInNetNS listens on ip:0 inside the namespace and answers each
// connection with "hello". It returns the listener's address and a func that
// stops it (the socket keeps the namespace alive).
func serveInNetNS(t *testing.T, ns, ip string) (string, func()) {
	t.Helper()
	var l net.Listener
	err := inNetNS(t, ns, func() error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(ip, "0"))
		return err
	})
	if err != nil {
		t.Fatalf("listen in pod netns: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	stop := func() { l.Close(); wg.Wait() }
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

func TestBridgeSetupTeardown(t *testing.T) {
	e := newBridgeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pod := e.pod(t, "pod1")
	res, err := e.m.Setup(ctx, pod)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if len(res.IPs) != 1 || !e.subnet.Contains(net.ParseIP(res.IPs[0])) {
		t.Fatalf("Setup IPs = %v, want one in %s", res.IPs, e.subnet)
	}
	if a := e.allocated(t); len(a) != 1 || a[0] != res.IPs[0] {
		t.Errorf("host-local holds %v, want [%s]", a, res.IPs[0])
	}
	if p := e.ports(t); len(p) != 1 {
		t.Errorf("bridge ports = %v, want one veth", p)
	}

	// The host reaches a listener in the pod.
	addr, stop := serveInNetNS(t, pod.NetNS, res.IPs[0])
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial pod at %s: %v", addr, err)
	}
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "hello" {
		t.Fatalf("read from pod = %q, %v", got, err)
	}
	stop()

	// The pod has no default route: its traffic cannot leave the node.
	err = inNetNS(t, pod.NetNS, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/route")
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) < 2 {
			return fmt.Errorf("no routes in pod: %q", b)
		}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 1 && f[1] == "00000000" {
				return fmt.Errorf("pod has a default route: %s", l)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput(); err == nil {
		if strings.Contains(string(out), e.subnet.String()) {
			t.Errorf("nat rules mention the pod subnet:\n%s", out)
		}
	}

	for i := 0; i < 2; i++ {
		if err := e.m.Teardown(ctx, pod); err != nil {
			t.Fatalf("Teardown #%d: %v", i+1, err)
		}
	}
	e.assertClean(t)

	// The address is free again, and the same netns can be set up anew.
	res2, err := e.m.Setup(ctx, pod)
	if err != nil {
		t.Fatalf("Setup after Teardown: %v", err)
	}
	if len(res2.IPs) != 1 {
		t.Fatalf("second Setup IPs = %v", res2.IPs)
	}
	// Netns gone before the teardown: DEL still releases the address.
	if err := RemoveNetNS(pod.NetNS); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Teardown(ctx, pod); err != nil {
		t.Fatalf("Teardown with the netns gone: %v", err)
	}
	e.assertClean(t)
	if err := e.m.Teardown(ctx, pod); err != nil {
		t.Fatalf("Teardown again with the netns gone: %v", err)
	}

	// A pod never set up tears down fine.
	if err := e.m.Teardown(ctx, Pod{ID: "never", NetNS: filepath.Join(e.nsDir, "never")}); err != nil {
		t.Errorf("Teardown of a pod never set up: %v", err)
	}
}

func TestBridgeConcurrentPods(t *testing.T) {
	e := newBridgeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const n = 4
	pods := make([]Pod, n)
	for i := range pods {
		pods[i] = e.pod(t, fmt.Sprintf("cpod%d", i))
	}
	ips := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.m.Setup(ctx, pods[i])
			if err == nil {
				ips[i] = res.IPs[0]
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Setup %s: %v", pods[i].ID, err)
		}
		if seen[ips[i]] {
			t.Errorf("address %s given twice", ips[i])
		}
		seen[ips[i]] = true
	}
	// Pods reach each other across the bridge.
	addr, stop := serveInNetNS(t, pods[0].NetNS, ips[0])
	err := inNetNS(t, pods[1].NetNS, func() error {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		t.Errorf("pod to pod: %v", err)
	}
	stop()
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.m.Teardown(ctx, pods[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Teardown %s: %v", pods[i].ID, err)
		}
	}
	e.assertClean(t)
}

func TestBridgeFailedAddLeavesNothing(t *testing.T) {
	// The bridge ADD succeeds, then the chain fails on a plugin that does
	// not exist: the bridge's veth and address must be undone.
	e := newBridgeEnv(t, map[string]interface{}{"type": "crin-no-such-plugin"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.m.Status(); err == nil {
		t.Error("Status = nil with a plugin missing")
	}
	pod := e.pod(t, "failpod")
	if _, err := e.m.Setup(ctx, pod); err == nil {
		t.Fatal("Setup succeeded with a missing plugin")
	}
	e.assertClean(t)
	err := inNetNS(t, pod.NetNS, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 {
			return fmt.Errorf("interfaces left in pod netns: %v", ifs)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if err := e.m.Teardown(ctx, pod); err != nil {
		t.Errorf("Teardown after failed Setup: %v", err)
	}
}
