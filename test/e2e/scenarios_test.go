//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
	"github.com/crin-dev/crin/test/testnet"
)

// TestKubelet runs everyday pods on one kubelet+crind node.
func TestKubelet(t *testing.T) {
	kubeletScenarios(t, startNode(t))
}

// kubeletScenarios are the pod scenarios, each a subtest that owns its
// manifests and removes them when it ends.
func kubeletScenarios(t *testing.T, n *node) {

	t.Run("KernelTunablesOnStandins", func(t *testing.T) {
		// Kubelet set its values on the stand-ins; the host kept its own
		// (checked again when the node is cleaned up).
		// Kubelet tunes them when its container manager starts, which
		// on a loaded machine may come after the node answers.
		for f, want := range map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"} {
			poll.Until(t, 2*time.Minute, "kubelet sets stand-in "+f+" to "+want, func() (bool, string) {
				b, err := os.ReadFile(filepath.Join(n.standins, f))
				if err != nil {
					return false, err.Error()
				}
				return strings.TrimSpace(string(b)) == want, fmt.Sprintf("holds %q", b)
			})
		}
		n.checkHostTunables()
	})

	t.Run("PodRunning", func(t *testing.T) {
		n.addPod(t, "hello", map[string]any{"containers": []any{
			n.ctr("main", "echo hello-from-crin; echo to-stderr >&2; exec sleep 3600"),
		}})
		p := n.waitRunning(t, "hello")
		c := p.container("main")
		if c == nil || c.State.Running == nil || c.ContainerID == "" {
			t.Fatalf("container status: %+v", c)
		}
		if p.Status.PodIP == "" || !n.crind.net.Subnet.Contains(parseIP(p.Status.PodIP)) {
			t.Errorf("pod IP %q not in the node's pod network %v", p.Status.PodIP, n.crind.net.Subnet)
		}
		poll.Until(t, 30*time.Second, "/runningpods lists hello", func() (bool, string) {
			rp, err := n.runningPods()
			if err != nil {
				return false, err.Error()
			}
			var names []string
			for _, r := range rp {
				if r.Metadata.Name == n.podName("hello") && r.Metadata.UID == p.Metadata.UID {
					return true, ""
				}
				names = append(names, r.Metadata.Name)
			}
			return false, fmt.Sprintf("runningpods: %v", names)
		})
		poll.Until(t, 30*time.Second, "/containerLogs has both streams", func() (bool, string) {
			b, err := n.get("/containerLogs/default/" + n.podName("hello") + "/main")
			if err != nil {
				return false, err.Error()
			}
			s := string(b)
			return strings.Contains(s, "hello-from-crin") && strings.Contains(s, "to-stderr"), s
		})
		out, err := n.runIn(n.podName("hello"), "main", "echo ran-through-kubelet")
		if err != nil || strings.TrimSpace(out) != "ran-through-kubelet" {
			t.Errorf("/run: %q, %v", out, err)
		}
		r := n.exec(t, n.podName("hello"), "main", "from-stdin\n", "sh", "-c", "read x; echo got-$x; echo err-side >&2; exit 7")
		if r.Stdout != "got-from-stdin\n" || r.Stderr != "err-side\n" || r.ExitCode() != 7 {
			t.Errorf("/exec: stdout %q stderr %q exit %d (%+v)", r.Stdout, r.Stderr, r.ExitCode(), r.Status)
		}
	})

	t.Run("PortForward", func(t *testing.T) {
		n.addPod(t, "web", map[string]any{"containers": []any{
			n.ctr("httpd", "mkdir -p /tmp/www && echo forwarded-page > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"),
		}})
		n.waitRunning(t, "web")
		poll.Until(t, 30*time.Second, "httpd listens in the pod", func() (bool, string) {
			out, err := n.runIn(n.podName("web"), "httpd", "netstat -ltn")
			return err == nil && strings.Contains(out, "127.0.0.1:8080"), out
		})
		body := n.portForwardGet(t, n.podName("web"), 8080, "/index.html")
		if !strings.Contains(body, "200 OK") || !strings.Contains(body, "forwarded-page") {
			t.Errorf("GET through /portForward: %q", body)
		}
	})

	t.Run("HostPort", func(t *testing.T) {
		hostPort := harness.FreePort(t)
		c := n.ctr("httpd", "mkdir -p /tmp/www && echo host-port-page > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www")
		c["ports"] = []any{map[string]any{"containerPort": 8080, "hostPort": hostPort, "protocol": "TCP"}}
		n.addPod(t, "hostport", map[string]any{"containers": []any{c}})
		n.waitRunning(t, "hostport")
		// The host's own address on the pod network, at the host port.
		addr := net.JoinHostPort(n.crind.net.Gateway().String(), fmt.Sprint(hostPort))
		var body string
		poll.Until(t, 30*time.Second, "GET through the host port", func() (bool, string) {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/index.html")
			if err != nil {
				return false, err.Error()
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			return resp.StatusCode == http.StatusOK, resp.Status
		})
		if !strings.Contains(body, "host-port-page") {
			t.Errorf("GET %s: %q", addr, body)
		}
	})

	t.Run("Probes", func(t *testing.T) {
		probe := func(file string) map[string]any {
			return map[string]any{
				"exec":          map[string]any{"command": []string{"cat", file}},
				"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 5,
			}
		}
		c := n.ctr("main", "touch /tmp/alive; exec sleep 3600")
		c["readinessProbe"] = probe("/tmp/ready")
		c["livenessProbe"] = probe("/tmp/alive")
		n.addPod(t, "probed", map[string]any{"containers": []any{c}})
		p := n.waitPod(t, "probed", 2*time.Minute, "container running", func(p *pod) bool {
			c := p.container("main")
			return c != nil && c.State.Running != nil
		})
		if c := p.container("main"); c.Ready {
			t.Errorf("ready before the readiness probe could pass: %s", p.summary())
		}
		if _, err := n.runIn(n.podName("probed"), "main", "touch /tmp/ready"); err != nil {
			t.Fatal(err)
		}
		n.waitRunning(t, "probed")
		if _, err := n.runIn(n.podName("probed"), "main", "rm /tmp/alive"); err != nil {
			t.Fatal(err)
		}
		p = n.waitPod(t, "probed", 2*time.Minute, "restarted by the liveness probe", func(p *pod) bool {
			c := p.container("main")
			return c != nil && c.RestartCount >= 1
		})
		if c := p.container("main"); c.LastState.Terminated == nil {
			t.Errorf("restarted container has no last terminated state: %s", p.summary())
		}
	})

	t.Run("CrashLoop", func(t *testing.T) {
		n.addPod(t, "crasher", map[string]any{"containers": []any{n.ctr("main", "echo crashing; exit 3")}})
		p := n.waitPod(t, "crasher", 3*time.Minute, "restarted twice and backing off", func(p *pod) bool {
			c := p.container("main")
			return c != nil && c.RestartCount >= 2 && c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff"
		})
		c := p.container("main")
		if c.LastState.Terminated == nil || c.LastState.Terminated.ExitCode != 3 {
			t.Errorf("last state %s, want terminated with exit 3", c.LastState)
		}
		b, err := n.get("/containerLogs/default/" + n.podName("crasher") + "/main?previous=true")
		if err != nil || !strings.Contains(string(b), "crashing") {
			t.Errorf("previous logs: %q, %v", b, err)
		}
	})

	t.Run("InitContainersAndEmptyDir", func(t *testing.T) {
		vol := []any{map[string]any{"name": "shared", "mountPath": "/shared"}}
		init1 := n.ctr("init1", "echo one > /shared/order")
		init1["volumeMounts"] = vol
		init2 := n.ctr("init2", "test -f /shared/order && echo two >> /shared/order")
		init2["volumeMounts"] = vol
		writer := n.ctr("writer", "echo from-writer > /shared/w; exec sleep 3600")
		writer["volumeMounts"] = vol
		reader := n.ctr("reader", "exec sleep 3600")
		reader["volumeMounts"] = vol
		n.addPod(t, "inits", map[string]any{
			"initContainers": []any{init1, init2},
			"containers":     []any{writer, reader},
			"volumes":        []any{map[string]any{"name": "shared", "emptyDir": map[string]any{}}},
		})
		p := n.waitRunning(t, "inits")
		for _, name := range []string{"init1", "init2"} {
			c := p.container(name)
			if c == nil || c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
				t.Errorf("init container %s: %+v", name, c)
			}
		}
		out, err := n.runIn(n.podName("inits"), "reader", "cat /shared/order /shared/w")
		if err != nil || out != "one\ntwo\nfrom-writer\n" {
			t.Errorf("reader sees %q, %v; want the init containers' and the writer's lines", out, err)
		}
	})

	t.Run("ResourcesInCgroups", func(t *testing.T) {
		c := n.ctr("main", "exec sleep 3600")
		c["resources"] = map[string]any{
			"requests": map[string]string{"cpu": "250m", "memory": "32Mi"},
			"limits":   map[string]string{"cpu": "500m", "memory": "64Mi"},
		}
		n.addPod(t, "limited", map[string]any{"containers": []any{c}})
		n.waitRunning(t, "limited")
		for _, tc := range []struct{ file, want string }{
			{"/sys/fs/cgroup/memory/memory.limit_in_bytes", fmt.Sprint(64 << 20)},
			{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000"},
			{"/sys/fs/cgroup/cpu/cpu.shares", "256"},
		} {
			out, err := n.runIn(n.podName("limited"), "main", "cat "+tc.file)
			if err != nil || strings.TrimSpace(out) != tc.want {
				t.Errorf("%s in the container: %q, %v; want %s", tc.file, out, err, tc.want)
			}
		}
	})

	t.Run("SecurityContext", func(t *testing.T) {
		c := n.ctr("main", "exec sleep 3600")
		c["securityContext"] = map[string]any{"runAsUser": 1000, "runAsGroup": 3000, "readOnlyRootFilesystem": true}
		c["volumeMounts"] = []any{map[string]any{"name": "data", "mountPath": "/data"}}
		n.addPod(t, "secure", map[string]any{
			"containers":      []any{c},
			"securityContext": map[string]any{"fsGroup": 2000},
			"volumes":         []any{map[string]any{"name": "data", "emptyDir": map[string]any{}}},
		})
		n.waitRunning(t, "secure")
		pn := n.podName("secure")
		r := n.exec(t, pn, "main", "", "sh", "-c",
			"echo uid=$(id -u) gid=$(id -g) groups=$(id -G | tr ' ' ,) data=$(stat -c %g /data); "+
				"touch /data/ok && echo data=writable; touch /rootfs-file 2>/dev/null && echo rootfs=writable || echo rootfs=readonly")
		for _, want := range []string{"uid=1000 ", "gid=3000 ", "groups=3000,2000 ", "data=2000\n", "data=writable\n", "rootfs=readonly\n"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("in the container: %q (stderr %q); want %q", r.Stdout, r.Stderr, strings.TrimSpace(want))
			}
		}
	})

	t.Run("HostNetwork", func(t *testing.T) {
		n.addPod(t, "hostnet", map[string]any{
			"hostNetwork": true,
			"containers":  []any{n.ctr("main", "exec sleep 3600")},
		})
		n.waitRunning(t, "hostnet")
		// A standalone kubelet has no Node object, so no host IP to report
		// as the pod's: the sandbox's network mode is what crind was asked.
		sb := n.sandboxOf(t, "hostnet")
		st, err := n.crind.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Status.GetLinux().GetNamespaces().GetOptions().GetNetwork(); m != runtimeapi.NamespaceMode_NODE {
			t.Errorf("sandbox network mode %v, want NODE", m)
		}
		// The pod sees the host's interfaces, the default route's among them.
		dev := defaultRouteDev(t)
		out, err := n.runIn(n.podName("hostnet"), "main", "cat /proc/net/dev")
		if err != nil || !strings.Contains(out, " "+dev+":") {
			t.Errorf("host interfaces from the pod: %q, %v; want %s listed", out, err, dev)
		}
	})

	t.Run("ImagePullBackOff", func(t *testing.T) {
		c := n.ctr("main", "exec sleep 3600")
		c["image"] = n.registry + "/library/nosuch:latest"
		n.addPod(t, "nosuch", map[string]any{"containers": []any{c}})
		n.waitPod(t, "nosuch", 2*time.Minute, "ImagePullBackOff", func(p *pod) bool {
			c := p.container("main")
			return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "ImagePullBackOff"
		})
		if !n.crind.alive() {
			t.Fatal("crind died")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := n.crind.rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Errorf("crind does not answer after the failed pulls: %v", err)
		}
	})

	t.Run("StatsSummary", func(t *testing.T) {
		n.addPod(t, "stats", map[string]any{"containers": []any{
			n.ctr("main", "head -c 5242880 /dev/zero > /tmp/fill; exec sleep 3600"),
		}})
		n.waitRunning(t, "stats")
		var s statsSummary
		poll.Until(t, 90*time.Second, "/stats/summary lists the pod with CPU and memory", func() (bool, string) {
			b, err := n.get("/stats/summary")
			if err != nil {
				return false, err.Error()
			}
			s = statsSummary{}
			if err := json.Unmarshal(b, &s); err != nil {
				return false, err.Error()
			}
			ps := s.pod(n.podName("stats"))
			if ps == nil || len(ps.Containers) == 0 {
				return false, "pod not listed"
			}
			c := ps.Containers[0]
			return c.Memory.WorkingSetBytes != nil && *c.Memory.WorkingSetBytes > 0 && c.CPU.UsageCoreNanoSeconds != nil, string(b)
		})
		ps := s.pod(n.podName("stats"))
		b, _ := json.Marshal(ps)
		t.Logf("pod stats: %s", b)
	})

	t.Run("PauseKilled", func(t *testing.T) { testPauseKilled(t, n) })
	t.Run("SupplementalGroupsPolicyStrict", func(t *testing.T) { testSupplementalGroupsStrict(t, n) })
	t.Run("StatsRootfs", func(t *testing.T) { testStatsRootfs(t, n) })
	t.Run("StatsFields", func(t *testing.T) { testStatsFields(t, n) })
	t.Run("TerminationMessageFromLog", func(t *testing.T) { testTerminationMessageFromLog(t, n) })

	t.Run("RemovedManifestLeavesNothing", func(t *testing.T) {
		n.addPod(t, "gone", map[string]any{"containers": []any{n.ctr("main", "exec sleep 3600")}})
		p := n.waitRunning(t, "gone")
		uid, ip := p.Metadata.UID, p.Status.PodIP
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		sandbox := n.sandboxOf(t, "gone")
		n.removePod("gone")
		// Kubelet stops the pod at once and removes its sandbox in its next
		// container GC (once a minute).
		poll.Until(t, 3*time.Minute, "pod gone from kubelet and crind", func() (bool, string) {
			if p, err := n.pod("gone"); err != nil || p != nil {
				return false, "still in /pods"
			}
			rp, err := n.runningPods()
			if err != nil {
				return false, err.Error()
			}
			for _, r := range rp {
				if r.Metadata.UID == uid {
					return false, "still in /runningpods"
				}
			}
			sbs, err := n.crind.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				return false, err.Error()
			}
			for _, s := range sbs.Items {
				if s.Id == sandbox {
					return false, "sandbox " + sandbox + " still in crind: " + s.State.String()
				}
			}
			cs, err := n.crind.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandbox}})
			if err != nil {
				return false, err.Error()
			}
			if len(cs.Containers) > 0 {
				return false, fmt.Sprintf("%d containers still in crind", len(cs.Containers))
			}
			return true, ""
		})
		// Nothing of the pod is left on the host, and kubelet removes its pod
		// cgroup in its own time.
		for _, m := range harness.MountsUnder(n.crind.root, n.crind.state, n.root) {
			if strings.Contains(m, sandbox) || strings.Contains(m, uid) {
				t.Errorf("leaked mount: %s", m)
			}
		}
		if _, err := os.Stat(filepath.Join(n.crind.state, "netns", sandbox)); err == nil {
			t.Errorf("leaked netns %s", sandbox)
		}
		if _, err := os.Stat(filepath.Join(n.crind.net.IPAMDir, testnet.Name, ip)); err == nil {
			t.Errorf("leaked IPAM reservation %s", ip)
		}
		poll.Until(t, 2*time.Minute, "no veth of the pod and no pod cgroup", func() (bool, string) {
			if left := n.vethsLeft(); left > n.runningNetPods(ctx) {
				return false, fmt.Sprintf("%d veths on %s for %d running pods", left, n.crind.net.Bridge, n.runningNetPods(ctx))
			}
			var left []string
			for _, ctl := range cgroupHierarchies() {
				ms, _ := filepath.Glob(filepath.Join(ctl, n.cgroup, "kubepods", "*", "pod"+uid))
				ms2, _ := filepath.Glob(filepath.Join(ctl, n.cgroup, "kubepods", "pod"+uid))
				left = append(append(left, ms...), ms2...)
			}
			return len(left) == 0, fmt.Sprintf("pod cgroups left: %v", left)
		})
	})
}

func (n *node) vethsLeft() int {
	ents, _ := os.ReadDir(filepath.Join("/sys/class/net", n.crind.net.Bridge, "brif"))
	return len(ents)
}

// runningNetPods counts crind's ready sandboxes that have their own network.
func (n *node) runningNetPods(ctx context.Context) int {
	sbs, err := n.crind.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0
	}
	count := 0
	for _, s := range sbs.Items {
		if s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		st, err := n.crind.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.Id})
		if err == nil && st.Status.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_POD {
			count++
		}
	}
	return count
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// sandboxOf returns the id of the ready sandbox crind runs for the static
// pod of manifest name.
func (n *node) sandboxOf(t *testing.T, name string) string {
	t.Helper()
	sbs, err := n.crind.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.name": n.podName(name)},
	}})
	if err != nil || len(sbs.Items) != 1 {
		t.Fatalf("ready sandboxes of %s: %v, %v; want one", n.podName(name), sbs, err)
	}
	return sbs.Items[0].Id
}

// defaultRouteDev names the interface of the host's default route.
func defaultRouteDev(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	t.Skip("the host has no default route")
	return ""
}
