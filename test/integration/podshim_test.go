//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestOneShimPerPod: on the oci backend a pod's containers share one
// crin-shim. RunPodSandbox starts it, ahead of the pod's first container;
// it supervises each (output, exit codes), outlives the exit and removal
// of some of them, and exits once the last is removed; the pod's next
// container starts a new one.
func TestOneShimPerPod(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := noInfraPodConfig("oneshim")
	pod := d.runPod(t, podCfg)
	ahead := shimsNaming(pod)
	if len(ahead) != 1 {
		t.Fatalf("shims of a pod without containers: %v, want the one RunPodSandbox started", ahead)
	}

	cfgs := []*runtimeapi.ContainerConfig{
		noInfraContainerConfig("a", ref, "sh", "-c", "echo from-a; sleep 1000"),
		noInfraContainerConfig("b", ref, "sh", "-c", "echo from-b; sleep 1000"),
		noInfraContainerConfig("quick", ref, "sh", "-c", "echo from-quick; exit 7"),
	}
	var ids []string
	for _, c := range cfgs {
		ids = append(ids, d.runContainer(t, pod, podCfg, c))
	}
	shims := shimsNaming(pod)
	if len(shims) != 1 || shims[0] != ahead[0] {
		t.Fatalf("shims of a pod with %d containers: %v, want the one started with the pod, %s", len(ids), shims, ahead[0])
	}
	for _, id := range ids {
		if got := d.shimPid(t, id); shims[0] != strconv.Itoa(got) {
			t.Errorf("container %s is supervised by shim %d, want the pod's %s", id[:12], got, shims[0])
		}
	}
	for _, c := range cfgs {
		waitLog(t, logPath(podCfg, c), "from-"+c.Metadata.Name)
	}
	if cs := d.waitExited(t, ids[2]); cs.ExitCode != 7 {
		t.Errorf("exit code of quick: %d, want 7", cs.ExitCode)
	}
	for _, id := range ids[:2] {
		if st := d.status(t, id).State; st != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s after its neighbour exited: %v, want RUNNING", id[:12], st)
		}
	}

	remove := func(id string) {
		t.Helper()
		if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("StopContainer: %v", err)
		}
		if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("RemoveContainer: %v", err)
		}
	}
	remove(ids[2])
	remove(ids[0])
	if got := shimsNaming(pod); len(got) != 1 || got[0] != shims[0] {
		t.Errorf("shims with one container left: %v, want still %s", got, shims[0])
	}
	if st := d.status(t, ids[1]).State; st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("last container after the others were removed: %v, want RUNNING", st)
	}
	remove(ids[1])
	poll.Until(t, time.Minute, "the pod's shim to exit after its last container", func() (bool, string) {
		got := shimsNaming(pod)
		return len(got) == 0, strings.Join(got, " ")
	})
	shimDir := filepath.Join(d.state, "c", ".pod-"+pod)
	if _, err := os.Stat(shimDir); !os.IsNotExist(err) {
		t.Errorf("the pod shim's dir is left: %v", err)
	}

	// The pod's next container starts a new shim.
	nextCfg := noInfraContainerConfig("next", ref, "sh", "-c", "echo from-next; sleep 1000")
	next := d.runContainer(t, pod, podCfg, nextCfg)
	waitLog(t, logPath(podCfg, nextCfg), "from-next")
	if got := shimsNaming(pod); len(got) != 1 || got[0] == shims[0] || got[0] != strconv.Itoa(d.shimPid(t, next)) {
		t.Errorf("shims after a new container: %v (old %s)", got, shims[0])
	}
	// cleanupAll removes the pod and checks for leaks.
}

// TestPodShimReleased: the shim RunPodSandbox starts for a pod without an
// infra process goes with StopPodSandbox when the pod never got a
// container (internal/cri's TestPodShimAhead covers RunPodSandbox's
// rollback).
func TestPodShimReleased(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	podCfg := noInfraPodConfig("released")
	pod := d.runPod(t, podCfg)
	if got := shimsNaming(pod); len(got) != 1 {
		t.Fatalf("shims of a new pod: %v, want 1", got)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if got := shimsNaming(pod); len(got) != 0 {
		t.Errorf("shims after StopPodSandbox of a pod that had no container: %v, want none", got)
	}
	if _, err := os.Stat(filepath.Join(d.state, "c", ".pod-"+pod)); !os.IsNotExist(err) {
		t.Errorf("the pod shim's dir is left after StopPodSandbox: %v", err)
	}
	// cleanupAll removes the pod and checks for leaks.
}
