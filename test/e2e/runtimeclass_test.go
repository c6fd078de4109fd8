//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// runtimeClasses are the handlers TestKubeletRuntimeClass runs a pod on,
// each through a RuntimeClass of the same name, with the process that
// must be among the container's ancestors (its comm, cut to 15 bytes):
// runc-v2 is Debian's containerd-shim-runc-v2, lxc is LXC through
// crin-lxc. gVisor (runsc) cannot start on this host; the node lane runs
// it (docs/runtimes.md).
var runtimeClasses = []struct{ handler, ancestor string }{
	{"runc-v2", "containerd-shim"},
	{"lxc", "crin-lxc"},
}

// TestKubeletRuntimeClass: a kubelet with an API server (a standalone one
// has no RuntimeClass manager and ignores runtimeClassName) runs a pod
// naming a RuntimeClass on that class's handler, for each handler crind
// has besides the default: the container runs under the handler's shim,
// logs and execs, and is stopped when the pod is deleted. A class whose
// handler crind does not have fails the pod's sandbox with crind's error
// naming the handler, which kubelet reports as an event.
func TestKubeletRuntimeClass(t *testing.T) {
	if _, err := exec.LookPath("containerd-shim-runc-v2"); err != nil {
		t.Fatalf("containerd-shim-runc-v2 not installed (scripts/deps.sh installs Debian's containerd): %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "crinapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	cp := harness.StartControlPlane(t, base)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver log:\n%s", cp.Log("kube-apiserver", 4000))
		}
	})
	n := startNodeWith(t, nodeOptions{
		kubeconfig: cp.Kubeconfig,
		crindConfig: fmt.Sprintf(`
[runtimes.runc-v2]
type = "shimv2"
runtime_type = "io.containerd.runc.v2"
[runtimes.runc-v2.options]
binary_name = %q
[runtimes.lxc]
type = "lxc"
`, runc),
	})
	cp.Ready(t)
	poll.Until(t, 2*time.Minute, "node "+n.name+" registered and Ready", func() (bool, string) {
		var node struct {
			Status struct {
				Conditions []struct{ Type, Status, Message string } `json:"conditions"`
			} `json:"status"`
		}
		if err := cp.Get("/api/v1/nodes/"+n.name, &node); err != nil {
			return false, err.Error()
		}
		for _, c := range node.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True", c.Message
			}
		}
		return false, "no Ready condition"
	})

	for _, rc := range append(runtimeClasses, struct{ handler, ancestor string }{"nope", ""}) {
		obj := map[string]any{
			"apiVersion": "node.k8s.io/v1",
			"kind":       "RuntimeClass",
			"metadata":   map[string]any{"name": rc.handler},
			"handler":    rc.handler,
		}
		if _, err := cp.Do(http.MethodPost, "/apis/node.k8s.io/v1/runtimeclasses", obj); err != nil {
			t.Fatal(err)
		}
	}

	for _, rc := range runtimeClasses {
		t.Run(rc.handler, func(t *testing.T) {
			name := "rc-" + rc.handler
			createPod(t, cp, n, name, rc.handler, "echo hello-from-"+rc.handler+"; exec sleep 3600")
			p := waitAPIPod(t, cp, name, 3*time.Minute, "Running and Ready", func(p *pod) bool {
				return p.Status.Phase == "Running" && p.condition("Ready") == "True"
			})

			// The sandbox is the handler's (what crictl inspectp shows),
			// and the container's process runs under the handler's shim.
			sb := sandboxOf(t, n, name)
			if sb.RuntimeHandler != rc.handler {
				t.Errorf("pod %s: sandbox %s runs on handler %q, want %q", name, sb.Id, sb.RuntimeHandler, rc.handler)
			}
			c := p.container("main")
			if c == nil || !strings.Contains(c.ContainerID, "://") {
				t.Fatalf("container status: %+v", c)
			}
			id := c.ContainerID[strings.Index(c.ContainerID, "://")+3:]
			pid := containerPid(t, n, id)
			chain := ancestors(pid)
			if !strings.Contains(strings.Join(chain, " "), rc.ancestor) {
				t.Errorf("container %s (pid %d) runs under %v: no %s among them", id, pid, chain, rc.ancestor)
			}
			t.Logf("container %s (pid %d) runs under %v", id, pid, chain)

			poll.Until(t, time.Minute, "the container's log through kubelet", func() (bool, string) {
				b, err := n.get("/containerLogs/default/" + name + "/main")
				if err != nil {
					return false, err.Error()
				}
				return strings.Contains(string(b), "hello-from-"+rc.handler), string(b)
			})
			out, err := n.runIn(name, "main", "cat /proc/self/status")
			if err != nil || !strings.Contains(out, "Name:\tcat") {
				t.Errorf("exec through kubelet: %v: %q", err, out)
			}

			// Deleted through the API: kubelet stops the container, and
			// the pod object goes once it has.
			if _, err := cp.Do(http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, nil); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 2*time.Minute, "pod "+name+" gone from the API", func() (bool, string) {
				_, err := cp.Do(http.MethodGet, "/api/v1/namespaces/default/pods/"+name, nil)
				return errors.Is(err, harness.ErrAPINotFound), fmt.Sprint(err)
			})
			st, err := n.crind.rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err == nil && st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				t.Errorf("container %s of the deleted pod is %v", id, st.Status.State)
			}
		})
	}

	t.Run("UnknownHandler", func(t *testing.T) {
		name := "rc-nope"
		createPod(t, cp, n, name, "nope", "exec sleep 3600")
		poll.Until(t, 2*time.Minute, "a FailedCreatePodSandBox event naming handler nope", func() (bool, string) {
			var evs struct {
				Items []struct {
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"items"`
			}
			if err := cp.Get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D"+name, &evs); err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, e := range evs.Items {
				if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, `"nope"`) {
					return true, ""
				}
				seen = append(seen, e.Reason+": "+e.Message)
			}
			return false, fmt.Sprintf("events: %q", seen)
		})
		ctx := context.Background()
		l, err := n.crind.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.name": name},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 0 {
			t.Errorf("a sandbox of pod %s is left after the failed RunPodSandbox: %v", name, l.Items)
		}
		if _, err := cp.Do(http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// createPod posts a pod bound to node n (there is no scheduler) running
// script in busybox under RuntimeClass class, with no service account
// token (there is no controller manager to make one).
func createPod(t *testing.T, cp *harness.ControlPlane, n *node, name, class, script string) {
	t.Helper()
	obj := n.manifest(name, map[string]any{
		"nodeName":                      n.name,
		"runtimeClassName":              class,
		"automountServiceAccountToken":  false,
		"enableServiceLinks":            false,
		"terminationGracePeriodSeconds": 2,
		"containers":                    []any{n.ctr("main", script)},
	})
	if _, err := cp.Do(http.MethodPost, "/api/v1/namespaces/default/pods", obj); err != nil {
		t.Fatal(err)
	}
}

// waitAPIPod polls the API server's pod until cond holds and returns it.
func waitAPIPod(t *testing.T, cp *harness.ControlPlane, name string, d time.Duration, what string, cond func(*pod) bool) *pod {
	t.Helper()
	var got pod
	poll.Until(t, d, name+": "+what, func() (bool, string) {
		var p pod
		if err := cp.Get("/api/v1/namespaces/default/pods/"+name, &p); err != nil {
			return false, err.Error()
		}
		got = p
		return cond(&p), p.summary()
	})
	return &got
}

// sandboxOf is the ready sandbox crind runs for the kubelet pod name.
func sandboxOf(t *testing.T, n *node, name string) *runtimeapi.PodSandbox {
	t.Helper()
	l, err := n.crind.rs.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": name},
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("pod %s: %d ready sandboxes, want 1", name, len(l.Items))
	}
	return l.Items[0]
}

// containerPid is the host pid of a container's process, from crind's
// verbose ContainerStatus.
func containerPid(t *testing.T, n *node, id string) int {
	t.Helper()
	st, err := n.crind.rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("container %s: no pid in the verbose status (%v): %v", id, err, st.Info)
	}
	return info.Pid
}

// ancestors are the comms of pid's parents, nearest first, up to pid 1.
func ancestors(pid int) []string {
	var out []string
	for pid > 1 && len(out) < 32 {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			break
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			break
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 {
			break
		}
		ppid, _ := strconv.Atoi(f[1])
		if ppid <= 1 {
			break
		}
		cb, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(ppid), "comm"))
		if err != nil {
			break
		}
		out = append(out, strings.TrimSpace(string(cb)))
		pid = ppid
	}
	return out
}
