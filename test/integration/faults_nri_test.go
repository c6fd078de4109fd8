//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestNRIFaultSyncHang: a pre-installed plugin that never answers
// Synchronize. crind serves CRI after the bounded start-up wait, no
// RunPodSandbox waits for the plugin (each is far quicker than the sync
// timeout: the hang, not a speed, is what is measured), and the plugin is
// launched again with a growing backoff that `crinctl plugins` shows.
func TestNRIFaultSyncHang(t *testing.T) {
	runsOn(t, oci)
	const syncTimeout = 12 * time.Second
	n := newNRISetup(t)
	n.install(t, "10", "stuck", pluginConfig{
		Events: "RunPodSandbox,StopPodSandbox,RemovePodSandbox,CreateContainer",
		Rules:  []pluginRule{{Event: "Synchronize", Sleep: "1h"}},
	})
	nriPluginBinary(t)
	buildBinaries(t) // so that the start-up measured is crind's alone
	start := time.Now()
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf(`
[nri]
enable = true
plugin_path = %q
plugin_config_path = %q
socket_path = %q
plugin_sync_timeout = %q
plugin_startup_wait = "1s"
`, n.PluginDir, n.ConfDir, n.Socket, syncTimeout.String())})
	if up := time.Since(start); up >= syncTimeout {
		t.Errorf("crind took %v to serve CRI, as long as the sync timeout %v: start-up waits for the stuck plugin", up, syncTimeout)
	}

	// Pods started while the plugin synchronizes do not wait for it.
	for i := range 3 {
		waitPluginState(t, d, "10-stuck", "synchronizing", 3*syncTimeout)
		cfg := podConfig(fmt.Sprintf("nostall-%d", i))
		t0 := time.Now()
		id := d.runPod(t, cfg)
		took := time.Since(t0)
		t.Logf("RunPodSandbox %d: %v", i, took)
		if took >= syncTimeout/2 {
			t.Errorf("RunPodSandbox %d took %v, sync timeout %v: it waited for the plugin's Synchronize", i, took, syncTimeout)
		}
		if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	}

	// The plugin backs off, longer after every failed Synchronize.
	var seen []time.Duration
	var last wirePlugin
	poll.Until(t, 3*syncTimeout+time.Minute, "10-stuck backs off twice", func() (bool, string) {
		if p, ok := pluginByID(t, d, "10-stuck"); ok && p.State == "backoff" {
			b, err := time.ParseDuration(p.Backoff)
			if err != nil {
				t.Fatalf("10-stuck backoff %q: %v", p.Backoff, err)
			}
			if len(seen) == 0 || seen[len(seen)-1] != b {
				seen = append(seen, b)
				last = p
			}
		}
		return len(seen) >= 2, fmt.Sprintf("backoffs seen: %v", seen)
	})
	if seen[1] <= seen[0] {
		t.Fatalf("10-stuck backoffs seen: %v, want two, growing", seen)
	}
	if last.Restarts == 0 || last.NextAttempt == "" || !strings.Contains(last.LastError, "ynchronize") {
		t.Errorf("10-stuck while backing off: %+v, want restarts, next attempt and a Synchronize error", last)
	}
	t.Logf("backoffs %v; last: %+v", seen, last)
	table := crinctl(t, d, "plugins")
	for _, row := range tableRows(table) {
		if len(row) > 1 && row[1] == "stuck" && !strings.HasPrefix(row[3], "backoff") && row[3] != "connecting" && row[3] != "synchronizing" {
			t.Errorf("crinctl plugins row for stuck: %q", row)
		}
	}
}

// TestNRIFaultNetdevRoundTrip: a plugin moves a host network device into
// a pod's network namespace on RunPodSandbox and back on StopPodSandbox
// (the network-device-injector pattern). The device must be back on the
// host after StopPodSandbox: crind delivers the event before it tears the
// network down and releases the namespace, which would destroy the device.
func TestNRIFaultNetdevRoundTrip(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	// A veth pair on the host; the plugin moves its peer end.
	host, peer := "crnd"+randHex(4)+"h", "crnd"+randHex(4)+"p"
	if out, err := exec.Command("ip", "link", "add", host, "type", "veth", "peer", "name", peer).CombinedOutput(); err != nil {
		t.Fatalf("create veth pair: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", host).Run() // takes the peer with it
	})
	bin := netdevPluginBinary(t)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.PluginDir, "10-netdev"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(n.Dir, "10-netdev.log")
	if err := os.WriteFile(filepath.Join(n.ConfDir, "10-netdev.conf"), []byte("dev="+peer+"\nlog="+log+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := nriDaemon(t, n, "")
	waitPluginsReady(t, d, "10-netdev")

	onHost := func() bool { return exec.Command("ip", "link", "show", "dev", peer).Run() == nil }
	cfg := podConfig("netdev")
	pod := d.runPod(t, cfg)
	if l := waitFileLine(t, log, "in netdev", "error"); !strings.HasPrefix(l, "in ") {
		t.Fatalf("plugin did not move %s into the pod: %s", peer, l)
	}
	if onHost() {
		t.Fatalf("%s still on the host after RunPodSandbox", peer)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	l := waitFileLine(t, log, "out netdev", "error out")
	if !onHost() {
		t.Errorf("%s is not back on the host after StopPodSandbox (plugin: %q): it was destroyed with the pod's network namespace", peer, l)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
}

// wirePlugin is the part of the admin API's plugin (internal/admin.Plugin)
// these tests read.
type wirePlugin struct {
	Index, Name, State string
	Restarts           uint64
	Backoff            string
	NextAttempt        string `json:"next_attempt"`
	LastError          string `json:"last_error"`
}

// pluginByID reads plugin id ("NN-name") from `crinctl --json plugins`.
func pluginByID(t *testing.T, d *daemon, id string) (wirePlugin, bool) {
	t.Helper()
	out, err := crinctlRun(t, d, "--json", "plugins")
	var ps []wirePlugin
	if err == nil {
		err = json.Unmarshal([]byte(out), &ps)
	}
	if err != nil {
		t.Fatalf("crinctl --json plugins: %v\n%s", err, out)
	}
	for _, p := range ps {
		if p.Index+"-"+p.Name == id {
			return p, true
		}
	}
	return wirePlugin{}, false
}

// waitPluginState polls the admin API until plugin id is in state.
func waitPluginState(t *testing.T, d *daemon, id, state string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "plugin "+id+" "+state, func() (bool, string) {
		p, ok := pluginByID(t, d, id)
		return ok && p.State == state, fmt.Sprintf("%+v", p)
	})
}

var (
	netdevPluginOnce sync.Once
	netdevPluginPath string
	netdevPluginErr  error
)

func netdevPluginBinary(t *testing.T) string {
	t.Helper()
	netdevPluginOnce.Do(func() {
		netdevPluginPath, netdevPluginErr = goBuild("./test/integration/testdata/netdevplugin", "netdevplugin")
	})
	if netdevPluginErr != nil {
		t.Fatal(netdevPluginErr)
	}
	return netdevPluginPath
}

// waitFileLine waits until a line of path starts with one of prefixes and
// returns it.
func waitFileLine(t *testing.T, path string, prefixes ...string) string {
	t.Helper()
	var line string
	poll.Until(t, time.Minute, fmt.Sprintf("a line starting with %q in %s", prefixes, path), func() (bool, string) {
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			for _, p := range prefixes {
				if strings.HasPrefix(l, p) {
					line = l
					return true, ""
				}
			}
		}
		return false, "it has:\n" + string(b)
	})
	return line
}

// TestNRIFaultEvictionBatch: a plugin's UpdateContainers that evicts an
// unknown container and a real one evicts the real one, succeeds, and
// reports the unknown one alone as failed.
func TestNRIFaultEvictionBatch(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	d := nriDaemon(t, n, "")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("evictbatch")
	pod := d.runPod(t, podCfg)
	doomed := d.runContainer(t, pod, podCfg, containerConfig("doomed", ref, "sleep", "1000"))

	ev := dialEvictor(t, n.Socket, "50", "evictor")
	waitPluginsReady(t, d, "50-evictor")
	ghost := "0123456789abcdef" + randHex(24)
	rsp, err := ev.runtime.UpdateContainers(ctxT(t), &api.UpdateContainersRequest{Evict: []*api.ContainerEviction{
		{ContainerId: ghost, Reason: "not there"},
		{ContainerId: doomed, Reason: "make room"},
	}})
	if err != nil {
		t.Fatalf("UpdateContainers evicting %s (unknown) and %s: %v", ghost, doomed, err)
	}
	var failed []string
	for _, u := range rsp.GetFailed() {
		failed = append(failed, u.GetContainerId())
	}
	if len(failed) != 1 || failed[0] != ghost {
		t.Errorf("failed = %v, want [%s]", failed, ghost)
	}
	if st := d.waitExited(t, doomed); st.Reason != "Evicted" || st.Message != "make room" {
		t.Errorf("evicted container: reason %q message %q, want \"Evicted\", \"make room\"", st.Reason, st.Message)
	}
}

// TestNRIFaultMissingMountSource: a plugin's bind mount whose source does
// not exist fails CreateContainer with NotFound naming the plugin and the
// field, not with the runtime's message about some mount.
func TestNRIFaultMissingMountSource(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	missing := filepath.Join(n.Dir, "no-such-dir")
	n.install(t, "10", "mounter", pluginConfig{Rules: []pluginRule{{
		Event: "CreateContainer", Container: "withmount",
		Adjust: protoJSON(t, &api.ContainerAdjustment{
			Mounts: []*api.Mount{{Source: missing, Destination: "/injected", Type: "bind", Options: []string{"rbind"}}},
		}),
	}}})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-mounter")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("mountsrc")
	pod := d.runPod(t, podCfg)
	_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, Config: containerConfig("withmount", ref, "sleep", "1000"), SandboxConfig: podCfg,
	})
	want := `nri plugin "10-mounter" adjusts mounts["/injected"]: source "` + missing + `" does not exist`
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), want) {
		t.Fatalf("CreateContainer error = %v, want NotFound with %q", err, want)
	}
	if strings.Count(err.Error(), missing) != 1 {
		t.Errorf("CreateContainer error names the source %d times: %v", strings.Count(err.Error(), missing), err)
	}
}

// TestUTSSysctlAccepted: kernel.domainname, a sysctl of the UTS namespace,
// is accepted for a pod with its own UTS namespace and set in it.
func TestUTSSysctlAccepted(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("utssysctl")
	podCfg.Linux.Sysctls = map[string]string{"kernel.domainname": "crin.test"}
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("uts", ref, "sleep", "1000"))
	if got := strings.TrimSpace(d.execOut(t, id, "cat", "/proc/sys/kernel/domainname")); got != "crin.test" {
		t.Errorf("kernel.domainname in the pod = %q, want crin.test", got)
	}
}
