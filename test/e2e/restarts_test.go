//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestKubeletRestarts restarts crind (SIGTERM, then SIGKILL) and kubelet
// under a running pod: no container and no sandbox may be restarted.
func TestKubeletRestarts(t *testing.T) {
	n := startNode(t)
	n.addPod(t, "steady", map[string]any{"containers": []any{n.ctr("main", "exec sleep 3600")}})
	p := n.waitRunning(t, "steady")
	want := p.container("main").ContainerID
	sandbox := n.sandboxOf(t, "steady")

	canaries := 0
	// unchanged starts a new pod and waits for it to run, so kubelet has
	// relisted the runtime and synced since the restart, then checks the
	// steady pod is still the same sandbox and the same container, never
	// restarted.
	unchanged := func(t *testing.T, since int) {
		t.Helper()
		// Kubelet's PLEG relists every second: three relists after the
		// restart, and it would have seen a container die or vanish.
		poll.Until(t, time.Minute, "kubelet relists crind three times", func() (bool, string) {
			got := n.crind.requestsSince(since, "ListPodSandbox")
			return got >= 3, fmt.Sprintf("%d relists", got)
		})
		canaries++
		canary := fmt.Sprintf("canary%d", canaries)
		n.addPod(t, canary, map[string]any{"containers": []any{n.ctr("main", "exec sleep 3600")}})
		n.waitRunning(t, canary)
		p := n.waitRunning(t, "steady")
		c := p.container("main")
		if c.ContainerID != want || c.RestartCount != 0 {
			t.Errorf("steady pod's container: id %s restarts %d; want %s never restarted (%s)", c.ContainerID, c.RestartCount, want, p.summary())
		}
		if got := n.readySandboxes(t, "steady"); len(got) != 1 || got[0] != sandbox {
			t.Errorf("steady pod's ready sandboxes %v, want only %s", got, sandbox)
		}
		cs, err := n.crind.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandbox}})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs.Containers) != 1 || cs.Containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("crind's containers in the steady pod: %v; want the one running", cs.Containers)
		}
	}

	t.Run("CrindSIGTERM", func(t *testing.T) {
		n.crind.stop()
		since := n.crind.logLen()
		n.crind.start(t)
		unchanged(t, since)
	})
	t.Run("CrindSIGKILL", func(t *testing.T) {
		n.crind.kill()
		since := n.crind.logLen()
		n.crind.start(t)
		unchanged(t, since)
	})
	t.Run("KubeletRestart", func(t *testing.T) {
		n.stopKubelet(syscall.SIGTERM)
		since := n.crind.logLen()
		n.startKubelet(t)
		unchanged(t, since)
	})
}

// readySandboxes lists the ids of crind's ready sandboxes for the static
// pod of manifest name.
func (n *node) readySandboxes(t *testing.T, name string) []string {
	t.Helper()
	sbs, err := n.crind.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.name": n.podName(name)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range sbs.Items {
		ids = append(ids, s.Id)
	}
	return ids
}

// testPauseKilled kills a pod's infra process: kubelet must see the sandbox
// die and recreate the pod in a new sandbox. Only a pod that shares its
// PID namespace has one (docs/state-machines.md).
func testPauseKilled(t *testing.T, n *node) {
	n.addPod(t, "paused", map[string]any{
		"shareProcessNamespace": true,
		"containers":            []any{n.ctr("main", "exec sleep 3600")},
	})
	n.waitRunning(t, "paused")
	old := n.sandboxOf(t, "paused")
	st, err := n.crind.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: old, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 1 {
		t.Fatalf("sandbox info %q: %v", st.Info["info"], err)
	}
	if err := syscall.Kill(info.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill pause %d: %v", info.Pid, err)
	}
	// Kubelet learns of the death only from the sandbox's state.
	poll.Until(t, 2*time.Minute, fmt.Sprintf("sandbox %s not READY once its infra process (pid %d) was killed (else kubelet never recreates the pod)", old, info.Pid), func() (bool, string) {
		st, err := n.crind.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: old})
		return err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY, "crind still reports it READY"
	})
	var now []string
	poll.Until(t, 2*time.Minute, "a new ready sandbox", func() (bool, string) {
		now = n.readySandboxes(t, "paused")
		return len(now) == 1 && now[0] != old, fmt.Sprintf("ready sandboxes %v (old %s)", now, old)
	})
	// kubelet's status catches up with the new sandbox's container a sync
	// or two later: wait for it to report the container running again,
	// restarted.
	n.waitPod(t, "paused", 2*time.Minute, "main running again, restarted", func(p *pod) bool {
		c := p.container("main")
		return c != nil && c.RestartCount >= 1 && c.State.Running != nil
	})
}
