//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// The fault tests of docs/recovery.md: a shim or an infra process killed
// under crind, or while crind is down.

// shimPid is the pid of a container's crin-shim, from its state dir.
func (d *daemon) shimPid(t *testing.T, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.state, "c", id, "shim.pid"))
	if err != nil {
		t.Fatalf("shim pid of %s: %v", id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// verbosePid is the "pid" of a container's or pod's verbose status info.
func verbosePid(t *testing.T, info map[string]string) int {
	t.Helper()
	var v struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil || v.Pid <= 0 {
		t.Fatalf("no pid in verbose info %q: %v", info["info"], err)
	}
	return v.Pid
}

func (d *daemon) podStatus(t *testing.T, id string) *runtimeapi.PodSandboxStatusResponse {
	t.Helper()
	resp, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp
}

// startTime is a process's start time (field 22 of /proc/<pid>/stat), so a
// reused pid is not taken for the process; "" when there is none.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// waitProcessGone waits until the process that had pid and start time st
// is gone.
func waitProcessGone(t *testing.T, what string, pid int, st string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("%s (pid %d) gone", what, pid), func() (bool, string) {
		return startTime(pid) != st, "it still runs"
	})
}

// waitPodNotReady waits until pod is NOTREADY, after what happened to it.
func (d *daemon) waitPodNotReady(t *testing.T, pod, after string) {
	t.Helper()
	poll.Until(t, time.Minute, "pod "+pod+" NOTREADY after "+after, func() (bool, string) {
		st := d.podStatus(t, pod).Status.State
		return st == runtimeapi.PodSandboxState_SANDBOX_NOTREADY, "it is " + st.String()
	})
}

func killPid(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

// TestShimKilled kills the shim of a pod (one for all its containers)
// holding a sleeping container and one that writes to its output without
// pause: both are recorded as failed (never 0, never Completed), the
// sleeping one with exit 255 and reason ShimDied; nothing of them keeps
// running; crind serves on; the pod (no infra process: kubelet's
// namespaces) stays READY and its next container gets a new shim;
// removing the pod leaves nothing (cleanupAll).
func TestShimKilled(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := noInfraPodConfig("shimkill")
	pod := d.runPod(t, podCfg)
	sleeper := d.runContainer(t, pod, podCfg, noInfraContainerConfig("sleeper", ref, "sleep", "1000"))
	writer := d.runContainer(t, pod, podCfg, noInfraContainerConfig("writer", ref, "sh", "-c", "while :; do echo tick; done"))
	waitLog(t, logPath(podCfg, containerConfig("writer", ref)), "tick")
	shim := d.shimPid(t, sleeper)
	if w := d.shimPid(t, writer); w != shim {
		t.Fatalf("the pod's containers have shims %d and %d, want one", shim, w)
	}

	pids, starts := map[string]int{}, map[string]string{}
	for _, id := range []string{sleeper, writer} {
		pids[id] = d.containerPid(t, id)
		starts[id] = startTime(pids[id])
	}
	killPid(t, shim)
	killed := time.Now()
	for _, id := range []string{sleeper, writer} {
		cs := d.waitExited(t, id)
		t.Logf("container %s: EXITED %v after its shim was killed: exit %d, %s: %s",
			id[:12], time.Since(killed).Round(time.Millisecond), cs.ExitCode, cs.Reason, cs.Message)
		if cs.ExitCode == 0 || cs.Reason != "ShimDied" || !strings.Contains(cs.Message, "crin-shim") {
			t.Errorf("container %s after its shim was killed: exit %d reason %q message %q, want non-zero, ShimDied",
				id, cs.ExitCode, cs.Reason, cs.Message)
		}
		if id == sleeper && cs.ExitCode != 255 {
			t.Errorf("sleeping container after its shim was killed: exit %d, want 255", cs.ExitCode)
		}
		waitProcessGone(t, "container process of "+id, pids[id], starts[id])
	}
	if _, err := d.rs.Version(ctxT(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("crind after shim deaths: %v", err)
	}
	if st := d.podStatus(t, pod).Status.State; st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod without infra after its shim died: %v, want READY", st)
	}
	// The pod is unaffected: a new container runs in it, under a new shim.
	againCfg := noInfraContainerConfig("again", ref, "sh", "-c", "echo alive; sleep 1000")
	again := d.runContainer(t, pod, podCfg, againCfg)
	waitLog(t, logPath(podCfg, againCfg), "alive")
	if s := d.shimPid(t, again); s == shim {
		t.Errorf("the new container is recorded under the dead shim %d", s)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: sleeper}); err != nil {
		t.Fatalf("remove container whose shim died: %v", err)
	}
}

// TestShimKilledWhileDown kills a container's shim while crind is down:
// the restarted crind records exit 255, reason ShimDied, and kills the
// container.
func TestShimKilledWhileDown(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("shimdown")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sleep", "1000"))
	pid := d.containerPid(t, id)
	st := startTime(pid)
	shim := d.shimPid(t, id)
	shimStart := startTime(shim)

	d.kill()
	killPid(t, shim)
	waitProcessGone(t, "shim", shim, shimStart)
	d.start()

	cs := d.waitExited(t, id)
	if cs.ExitCode != 255 || cs.Reason != "ShimDied" {
		t.Errorf("after restart: exit %d reason %q message %q, want 255 ShimDied", cs.ExitCode, cs.Reason, cs.Message)
	}
	waitProcessGone(t, "container process", pid, st)
}

// TestInfraKilled kills a pod's infra process: the pod turns NOTREADY,
// CreateContainer in it is FailedPrecondition, the pod's next attempt
// runs, and stopping and removing the dead pod leaves nothing.
func TestInfraKilled(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("infrakill")
	pod := d.runPod(t, podCfg)
	ctr := d.runContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sleep", "1000"))
	killPid(t, verbosePid(t, d.podStatus(t, pod).Info))
	killed := time.Now()

	d.waitPodNotReady(t, pod, "its infra process was killed")
	t.Logf("pod NOTREADY %v after its infra process was killed", time.Since(killed).Round(time.Millisecond))
	_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, Config: containerConfig("late", ref, "sleep", "1"), SandboxConfig: podCfg})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CreateContainer in a pod whose infra died: %v, want FailedPrecondition", err)
	}
	// The container shared the pod's pid namespace, which died with its
	// init; it is recorded as killed.
	if cs := d.waitExited(t, ctr); cs.ExitCode == 0 {
		t.Errorf("container of the dead pod: exit %d reason %q", cs.ExitCode, cs.Reason)
	}

	next := podConfig("infrakill")
	next.Metadata.Uid, next.Metadata.Attempt = podCfg.Metadata.Uid, podCfg.Metadata.Attempt+1
	pod2 := d.runPod(t, next)
	c2cfg := containerConfig("sleeper", ref, "sh", "-c", "echo up; sleep 1000")
	c2cfg.Metadata.Attempt = 1 // the dead pod's container still holds attempt 0
	d.runContainer(t, pod2, next, c2cfg)
	waitLog(t, logPath(next, c2cfg), "up")

	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("StopPodSandbox of the dead pod: %v", err)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox of the dead pod: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state, "ns", pod)); len(ents) > 0 {
		t.Errorf("namespace pins of the removed pod are left: %v", ents)
	}
	// cleanupAll removes pod2 and checks for leaks.
}

// nsInode is the inode of a namespace file (a pin or /proc/<pid>/ns/x).
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// TestPinnedNamespaces checks that a container is in the namespaces
// pinned under the state dir (not merely in its infra process's), that
// the pins outlive the infra process, and that they are gone with the pod.
func TestPinnedNamespaces(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("pins")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sleep", "1000"))
	for _, kind := range []string{"ipc", "uts", "pid"} {
		pin := filepath.Join(d.state, "ns", pod, kind)
		want := fmt.Sprintf("%s:[%d]", kind, nsInode(t, pin))
		if got := d.execOut(t, id, "readlink", "/proc/self/ns/"+kind); got != want {
			t.Errorf("container's %s namespace %s, pinned %s", kind, got, want)
		}
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.state, "ns", pod)); !os.IsNotExist(err) {
		t.Errorf("pins of a stopped pod: %v", err)
	}
}

// TestInfraShimKilled kills the shim of a pod's infra container: the
// infra process is killed with it and the pod turns NOTREADY.
func TestInfraShimKilled(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	podCfg := podConfig("infrashim")
	pod := d.runPod(t, podCfg)
	infra := verbosePid(t, d.podStatus(t, pod).Info)
	st := startTime(infra)
	killPid(t, d.shimPid(t, pod))
	d.waitPodNotReady(t, pod, "its infra's shim was killed")
	waitProcessGone(t, "infra process", infra, st)
	// cleanupAll stops and removes the pod and checks for leaks.
}
