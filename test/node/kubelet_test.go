//go:build node

package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// KubeletEnv names the kubelet binary to install in the VM; the default
// is the one test/e2e/kubelet/build.sh caches.
const KubeletEnv = "CRIN_KUBELET"

// kubeletVersion is the kubelet the lane runs (test/e2e/kubelet/build.sh).
const kubeletVersion = "v1.37.2"

// kubeletUnit runs kubelet as an operator's node does: after crind, from
// a config file and a kubeconfig for the API server, restarted by systemd.
const kubeletUnit = `[Unit]
Description=kubelet
After=crind.service
Wants=crind.service

[Service]
ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.json --kubeconfig=/etc/kubernetes/kubelet.kubeconfig
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`

// kubeletConfig is kubelet's defaults but for what a test node under
// emulation needs: cgroupDriver systemd, and
// failCgroupV1 left to its default (true: this node is cgroup v2),
// static pods from a dir, anonymous access on 127.0.0.1, eviction and
// image GC thresholds that the VM's small disk cannot trip, and stats
// taken from the CRI (PodAndContainerStatsFromCRI), so /stats/summary
// shows crind's figures rather than kubelet's own cAdvisor's.
func kubeletConfig() []byte {
	cfg := map[string]any{
		"kind":                     "KubeletConfiguration",
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"cgroupDriver":             "systemd",
		"containerRuntimeEndpoint": "unix:///run/crin/crin.sock",
		"staticPodPath":            "/etc/kubernetes/manifests",
		"fileCheckFrequency":       "2s",
		"address":                  "127.0.0.1",
		"healthzBindAddress":       "127.0.0.1",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		"featureGates": map[string]bool{"PodAndContainerStatsFromCRI": true},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// kubeletNode is kubelet running in the VM on crind, and an HTTPS client
// to its server (port 10250) through a socket forwarded over ssh.
type kubeletNode struct {
	t      *testing.T
	vm     *VM
	crind  *Crind
	client *http.Client
}

// installKubelet copies the cached kubelet in, writes its config, its
// kubeconfig for the API server cp on the host (which the guest reaches
// at 10.0.2.2) and its unit, starts it, and waits until its server
// answers /pods.
func installKubelet(t *testing.T, vm *VM, c *Crind, cp *harness.ControlPlane) *kubeletNode {
	t.Helper()
	bin := os.Getenv(KubeletEnv)
	if bin == "" {
		bin = harness.CacheBinary("kubelet-" + kubeletVersion)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubelet %s: %v (test/e2e/kubelet/build.sh builds it; make node runs that first)", bin, err)
	}
	vm.CopyIn(bin, "/usr/local/bin/kubelet", 0o755)
	vm.WriteFile("/etc/kubernetes/kubelet.json", kubeletConfig(), 0o644)
	vm.WriteFile("/etc/kubernetes/kubelet.kubeconfig", cp.KubeconfigFor(fmt.Sprintf("https://10.0.2.2:%d", cp.Port)), 0o600)
	vm.WriteFile("/etc/systemd/system/kubelet.service", []byte(kubeletUnit), 0o644)
	vm.MustRun("mkdir -p /etc/kubernetes/manifests && systemctl daemon-reload && systemctl enable --now kubelet")

	sock := vm.ForwardUnix("127.0.0.1:10250")
	n := &kubeletNode{t: t, vm: vm, crind: c, client: &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			// kubelet's serving certificate is self-signed.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a test's own kubelet
		},
		Timeout: 90 * time.Second,
	}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet journal:\n%s", n.journal())
		}
	})
	poll.Until(t, 5*time.Minute, "kubelet serving /pods", func() (bool, string) {
		_, err := n.get("/pods")
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return n
}

func (n *kubeletNode) journal() string {
	out, _, _ := n.vm.Exec(time.Minute, "journalctl -u kubelet --no-pager | tail -60")
	return out
}

func (n *kubeletNode) do(method, path string) ([]byte, error) {
	return harness.KubeletDo(n.client, method, "https://kubelet"+path)
}

func (n *kubeletNode) get(path string) ([]byte, error) { return n.do(http.MethodGet, path) }

// addPod writes a static pod manifest.
func (n *kubeletNode) addPod(name string, spec map[string]any) {
	m := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	}
	b, _ := json.Marshal(m)
	n.vm.WriteFile("/etc/kubernetes/manifests/"+name+".json", b, 0o644)
}

// The parts of kubelet's /pods the test reads.
type kubePod struct {
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase             string `json:"phase"`
		ContainerStatuses []struct {
			Name         string `json:"name"`
			RestartCount int    `json:"restartCount"`
			ContainerID  string `json:"containerID"`
			State        struct {
				Running    *struct{} `json:"running"`
				Terminated *struct {
					Reason   string `json:"reason"`
					ExitCode int    `json:"exitCode"`
				} `json:"terminated"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// pod is the static pod whose name starts with name (kubelet appends
// the node's name), nil when not listed.
func (n *kubeletNode) pod(name string) (*kubePod, error) {
	b, err := n.get("/pods")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []kubePod `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode /pods: %w", err)
	}
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Metadata.Name, name+"-") {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// waitPod polls /pods until cond holds for static pod name.
func (n *kubeletNode) waitPod(name, what string, cond func(*kubePod) bool) *kubePod {
	n.t.Helper()
	var got *kubePod
	poll.Until(n.t, 8*time.Minute, name+": "+what, func() (bool, string) {
		p, err := n.pod(name)
		if err != nil {
			return false, err.Error()
		}
		if p == nil {
			return false, "not in /pods"
		}
		got = p
		b, _ := json.Marshal(p.Status)
		return cond(p), string(b)
	})
	return got
}

func running(p *kubePod) bool {
	if p.Status.Phase != "Running" || len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// TestKubeletOnNode runs kubelet v1.37.2 with the systemd cgroup driver
// and its default failCgroupV1 on crind installed from the shipped unit,
// registered with an API server on the host, and checks what an operator
// would: a pod Running with its limits in the v2 files of its container's
// scope, its log and exec through kubelet, an OOMKilled container reported
// as such, /stats/summary with PSI, no container restarted by `systemctl
// restart crind` or `systemctl kill -s KILL crind`, and a pod whose
// RuntimeClass names gVisor running in gVisor.
func TestKubeletOnNode(t *testing.T) {
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	_, port, _ := strings.Cut(host, ":")
	guestHost := "10.0.2.2:" + port
	ref := guestHost + "/library/busybox:latest"
	// On the host, beside the registry: a standalone kubelet would
	// ignore runtimeClassName. It starts while the VM boots.
	cp := harness.StartControlPlane(t, t.TempDir())

	vm := Shared(t)
	// gVisor before crind starts: a handler whose shim is missing is
	// disabled at start-up.
	installGvisor(t, vm)
	c := Install(t, vm, InstallOptions{Config: fmt.Sprintf("[registry]\nplain_http = [%q]\n", guestHost) + benchRunscConfig})
	rc, err := c.RS.RuntimeConfig(ctxT(t), &runtimeapi.RuntimeConfigRequest{})
	if err != nil || rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatalf("RuntimeConfig on a systemd cgroup v2 node: %v, %v; want SYSTEMD", rc, err)
	}
	n := installKubelet(t, vm, c, cp)
	// Each step's end, counted from kubelet serving: where this test's
	// minutes go (kubelet's own periods, the VM's speed).
	t0 := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(t0).Round(100*time.Millisecond), what) }
	step("kubelet serving")

	n.addPod("limits", map[string]any{
		// sleep as PID 1 ignores SIGTERM: without this, the pod's removal
		// at the end waits the default 30 s.
		"terminationGracePeriodSeconds": 2,
		"containers": []any{map[string]any{
			"name": "main", "image": ref,
			"command": []string{"sh", "-c", "echo hello from the node; exec sleep 100000"},
			"resources": map[string]any{
				"limits": map[string]string{"memory": "64Mi", "cpu": "500m"},
			},
		}},
	})
	n.addPod("oom", map[string]any{
		"restartPolicy": "Never",
		"containers": []any{map[string]any{
			"name": "hog", "image": ref,
			// dd holds a 64 MiB buffer: over the limit at once.
			"command":   []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=4"},
			"resources": map[string]any{"limits": map[string]string{"memory": "16Mi"}},
		}},
	})

	p := n.waitPod("limits", "Running", running)
	step("pod limits Running")
	podName, uid := p.Metadata.Name, p.Metadata.UID
	ctrID := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "crin://")
	if ctrID == p.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("container id %q: want the crin:// scheme", ctrID)
	}

	// The container's scope, in the pod's slice under kubepods (a pod with
	// limits only is Guaranteed: kubepods-pod<uid>.slice).
	slice := "kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	scope := "/sys/fs/cgroup/kubepods.slice/" + slice + "/crin-" + ctrID + ".scope"
	for file, want := range map[string]string{"memory.max": "67108864", "cpu.max": "50000 100000"} {
		got, err := vm.Run("cat " + scope + "/" + file)
		if err != nil || strings.TrimSpace(got) != want {
			t.Errorf("%s/%s = %q (%v), want %q", scope, file, got, err, want)
		}
	}
	if unit, err := vm.Run("systemctl show -p Slice --value crin-" + ctrID + ".scope"); err != nil || strings.TrimSpace(unit) != slice {
		t.Errorf("systemd: scope crin-%s.scope in slice %q (%v), want %s", ctrID, unit, err, slice)
	}

	// Logs and exec through kubelet.
	poll.Until(t, 2*time.Minute, "the container's log through kubelet", func() (bool, string) {
		b, err := n.get("/containerLogs/default/" + podName + "/main")
		return err == nil && strings.Contains(string(b), "hello from the node"), fmt.Sprintf("%q %v", b, err)
	})
	out, err := n.do(http.MethodPost, "/run/default/"+podName+"/main?cmd="+url.QueryEscape("cat /sys/fs/cgroup/memory.max"))
	if err != nil || strings.TrimSpace(string(out)) != "67108864" {
		t.Errorf("exec through kubelet: %q, %v; want the container's memory.max 67108864", out, err)
	}

	step("its log and an exec through kubelet")

	// The OOM kill, as kubelet reports it.
	n.waitPod("oom", "the hog OOMKilled", func(p *kubePod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				return cs.State.Terminated.Reason == "OOMKilled" && cs.State.Terminated.ExitCode == 137
			}
		}
		return false
	})

	step("pod oom OOMKilled")

	// /stats/summary from crind's CRI stats, PSI included.
	poll.Until(t, 3*time.Minute, "/stats/summary with the pod's PSI", func() (bool, string) {
		b, err := n.get("/stats/summary")
		if err != nil {
			return false, err.Error()
		}
		var s struct {
			Pods []struct {
				PodRef struct {
					Name string `json:"name"`
				} `json:"podRef"`
				Containers []struct {
					Name string `json:"name"`
					CPU  struct {
						PSI *struct {
							Some *struct{} `json:"some"`
						} `json:"psi"`
					} `json:"cpu"`
					Memory struct {
						WorkingSetBytes *uint64 `json:"workingSetBytes"`
						PSI             *struct {
							Full *struct{} `json:"full"`
						} `json:"psi"`
					} `json:"memory"`
				} `json:"containers"`
			} `json:"pods"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return false, err.Error()
		}
		for _, p := range s.Pods {
			if p.PodRef.Name != podName {
				continue
			}
			for _, c := range p.Containers {
				if c.Name == "main" && c.CPU.PSI != nil && c.CPU.PSI.Some != nil && c.Memory.PSI != nil &&
					c.Memory.WorkingSetBytes != nil && *c.Memory.WorkingSetBytes > 0 {
					return true, ""
				}
			}
		}
		return false, harness.Tail(string(b), 3000)
	})

	step("/stats/summary with PSI")
	checkpointThroughKubelet(t, vm, n, podName, ctrID)
	step("checkpoint through kubelet")
	runtimeClassGvisor(t, cp, n, ref)
	step("the RuntimeClass pod on gVisor run, checked and deleted")

	// crind restarted by systemd, then killed: kubelet restarts nothing.
	sleepPID := strings.TrimSpace(vm.MustRun("pgrep -x -f 'sleep 100000'"))
	for _, how := range []string{"systemctl restart crind", "systemctl kill -s KILL crind"} {
		before := c.MainPID(t)
		vm.MustRun(how)
		poll.Until(t, 3*time.Minute, "crind running again after "+how, func() (bool, string) {
			pid := c.MainPID(t)
			return pid != before && pid != "0", "MainPID " + pid
		})
		c.WaitServing(t)
		// kubelet's next relist sees crind again; give it a few.
		p := n.waitPod("limits", "Running after "+how, running)
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 || !strings.HasSuffix(cs.ContainerID, ctrID) {
			t.Errorf("after %s: restart count %d, container %s; want 0 and %s", how, cs.RestartCount, cs.ContainerID, ctrID)
		}
		if got := strings.TrimSpace(vm.MustRun("pgrep -x -f 'sleep 100000'")); got != sleepPID {
			t.Errorf("after %s the container's process is %q, was %q", how, got, sleepPID)
		}
		step("crind back and pod limits Running after " + how)
	}

	// The pods go with their manifests, and their slices with them.
	vm.MustRun("rm -f /etc/kubernetes/manifests/*")
	poll.Until(t, 5*time.Minute, "every pod gone from crind", func() (bool, string) {
		r, err := c.RS.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return false, err.Error()
		}
		return len(r.Items) == 0, fmt.Sprintf("%d pods", len(r.Items))
	})
	step("every pod gone from crind")
	poll.Until(t, 3*time.Minute, "the pod's slice removed", func() (bool, string) {
		_, err := vm.Run("test -e /sys/fs/cgroup/kubepods.slice/" + slice)
		return err != nil, "still there"
	})
	step("the pod's slice removed")

	// What crind refused kubelet over the test (remote_runtime.go logs
	// each failed CRI call): the restarts above explain some, the rest is
	// for reading.
	failed, stderr, err := vm.Exec(time.Minute, "journalctl -u kubelet --no-pager | grep -F remote_runtime.go | tail -40")
	t.Logf("CRI calls kubelet saw fail (%s lines of kubelet's journal; %v %s):\n%s", journalLines(vm), err, stderr, failed)
	// The first two pods took from 20 s to 2 min to be Running and
	// OOMKilled in CI runs (2026-11-28): kubelet's warnings and errors
	// say where that went.
	warned, stderr, err := vm.Exec(time.Minute, "journalctl -u kubelet -o short-precise --no-pager | grep -E ' [EW][0-9]{4} ' | head -60")
	t.Logf("kubelet's first warnings and errors (%v %s):\n%s", err, stderr, warned)
}

// journalLines counts the lines of kubelet's journal ("?" when unknown).
func journalLines(vm *VM) string {
	out, _, err := vm.Exec(time.Minute, "journalctl -u kubelet --no-pager | wc -l")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(out)
}

// checkpointThroughKubelet has kubelet checkpoint the container "main" of
// pod (its ContainerCheckpoint gate is on by default) and checkpointctl
// read the archive kubelet names; the container runs on.
func checkpointThroughKubelet(t *testing.T, vm *VM, n *kubeletNode, pod, ctrID string) {
	t.Helper()
	cc := exec.Command(filepath.Join(harness.RepoRoot(), "test", "node", "checkpointctl.sh"))
	out, err := cc.Output()
	if err != nil {
		t.Fatalf("test/node/checkpointctl.sh: %v", err)
	}
	vm.CopyIn(strings.TrimSpace(string(out)), "/usr/local/bin/checkpointctl", 0o755)
	b, err := n.do(http.MethodPost, "/checkpoint/default/"+pod+"/main?timeout=600")
	if err != nil {
		t.Fatalf("kubelet checkpoint: %v\n%s", err, n.journal())
	}
	var resp struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || len(resp.Items) != 1 {
		t.Fatalf("kubelet checkpoint answered %s (%v), want one archive", b, err)
	}
	archive := resp.Items[0]
	show := vm.MustRun("checkpointctl inspect --stats " + shellQuote(archive))
	if !strings.Contains(show, ctrID) || !strings.Contains(show, "main") {
		t.Errorf("checkpointctl inspect of kubelet's archive %s does not name the container main (%s):\n%s", archive, ctrID, show)
	}
	t.Logf("kubelet's checkpoint %s:\n%s", archive, show)
	vm.MustRun("rm -f " + shellQuote(archive))
}

// runtimeClassGvisor runs a pod through the API server with
// runtimeClassName runsc (a RuntimeClass whose handler is crind's gVisor
// handler): its sandbox is runsc's, its container runs in gVisor's kernel
// (the kernel log it shows is gVisor's), logs and execs through kubelet,
// and goes when the pod is deleted.
func runtimeClassGvisor(t *testing.T, cp *harness.ControlPlane, n *kubeletNode, ref string) {
	t.Helper()
	cp.Ready(t)
	node := strings.TrimSpace(n.vm.MustRun("hostname"))
	poll.Until(t, 5*time.Minute, "node "+node+" registered", func() (bool, string) {
		_, err := cp.Do(http.MethodGet, "/api/v1/nodes/"+node, nil)
		return err == nil, fmt.Sprint(err)
	})
	if _, err := cp.Do(http.MethodPost, "/apis/node.k8s.io/v1/runtimeclasses", map[string]any{
		"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
		"metadata": map[string]any{"name": "gvisor"}, "handler": "runsc",
	}); err != nil {
		t.Fatal(err)
	}
	const name = "in-gvisor"
	if _, err := cp.Do(http.MethodPost, "/api/v1/namespaces/default/pods", map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"nodeName": node, "runtimeClassName": "gvisor",
			// No controller manager makes service account tokens.
			"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 2,
			"containers": []any{map[string]any{
				"name": "main", "image": ref,
				"command": []string{"sh", "-c", "echo hello from gvisor; exec sleep 100000"},
			}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 8*time.Minute, name+" Running", func() (bool, string) {
		var p kubePod
		b, err := cp.Do(http.MethodGet, "/api/v1/namespaces/default/pods/"+name, nil)
		if err != nil {
			return false, err.Error()
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return false, err.Error()
		}
		return running(&p), harness.Tail(string(b), 1500)
	})
	r, err := n.crind.RS.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": name},
	}})
	if err != nil || len(r.Items) != 1 || r.Items[0].RuntimeHandler != "runsc" {
		t.Errorf("pod %s's sandboxes: %v (%v); want one on handler runsc", name, r.GetItems(), err)
	}
	poll.Until(t, 2*time.Minute, "the gVisor container's log through kubelet", func() (bool, string) {
		b, err := n.get("/containerLogs/default/" + name + "/main")
		return err == nil && strings.Contains(string(b), "hello from gvisor"), fmt.Sprintf("%q %v", b, err)
	})
	// gVisor's kernel greets with its own name in the kernel log.
	out, err := n.do(http.MethodPost, "/run/default/"+name+"/main?cmd=dmesg")
	if err != nil || !strings.Contains(string(out), "gVisor") {
		t.Errorf("dmesg in the pod through kubelet: %v: %q; want gVisor's kernel log", err, harness.Tail(string(out), 2000))
	}
	if _, err := cp.Do(http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Minute, name+" gone from the API", func() (bool, string) {
		_, err := cp.Do(http.MethodGet, "/api/v1/namespaces/default/pods/"+name, nil)
		return errors.Is(err, harness.ErrAPINotFound), fmt.Sprint(err)
	})
}
