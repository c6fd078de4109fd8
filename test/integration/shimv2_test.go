//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// shimv2Handler is the extra handler the shimv2 tests configure
// (shimv2Config).
const shimv2Handler = "runc-v2"

func shimv2Daemon(t *testing.T) *daemon {
	t.Helper()
	extra := shimv2Config(t)
	// Registered before the daemon's cleanup, so it runs after it: the
	// shim sockets (outside crind's dirs, in /run/containerd/s) are gone.
	var sockets []string
	t.Cleanup(func() {
		if len(sockets) == 0 {
			t.Errorf("no shim socket recorded: the leak check saw nothing")
		}
		slices.Sort(sockets)
		for _, s := range slices.Compact(sockets) {
			if _, err := os.Lstat(s); err == nil {
				t.Errorf("leaked shim socket %s", s)
			}
		}
	})
	d := startDaemon(t, daemonOptions{extraConfig: extra})
	// Collected after the test body, before the daemon's cleanup.
	t.Cleanup(func() { sockets = append(sockets, d.shimv2Sockets()...) })
	return d
}

// shimv2Sockets are the shim socket paths of d's shimv2 containers.
func (d *daemon) shimv2Sockets() []string {
	if d == nil {
		return nil
	}
	var out []string
	metas, _ := filepath.Glob(filepath.Join(d.state, "shimv2", "*", "*", "meta.json"))
	for _, m := range metas {
		var v struct{ Address string }
		b, _ := os.ReadFile(m)
		if json.Unmarshal(b, &v) == nil && strings.HasPrefix(v.Address, "unix://") {
			out = append(out, strings.TrimPrefix(v.Address, "unix://"))
		}
	}
	return out
}

// shimv2Pids lists the long-lived containerd-shim-* processes of d
// (their -address is under d's state dir), not its short "start" and
// "delete" commands.
func (d *daemon) shimv2Pids() []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim-") || !bytes.Contains(b, []byte(d.state)) {
			continue
		}
		if last := args[len(args)-1]; last == "start" || last == "delete" {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (d *daemon) runPodWith(t *testing.T, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	t.Helper()
	resp, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox (handler %s): %v", handler, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cfg.LogDirectory) })
	return resp.PodSandboxId
}

// TestShimV2Lifecycle runs a pod on the shim v2 handler: its containers
// run under one containerd-shim-runc-v2, log, exec, report stats, survive
// a SIGKILL of crind (output keeps reaching the log), and are removed
// with nothing left (cleanupAll's leak check covers the shim processes:
// their command line names crind's state dir).
func TestShimV2Lifecycle(t *testing.T) {
	runsOn(t, oci)
	d := shimv2Daemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("v2pod")
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
	}
	pod := d.runPodWith(t, podCfg, shimv2Handler)

	st, err := d.rs.Status(ctxT(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The runc shim's handler has what runc has (its features come from
	// "runc features").
	features := map[string]*runtimeapi.RuntimeHandlerFeatures{}
	for _, h := range st.RuntimeHandlers {
		features[h.Name] = h.Features
	}
	if f, ok := features[shimv2Handler]; !ok || !f.GetRecursiveReadOnlyMounts() || f.GetRecursiveReadOnlyMounts() != features["runc"].GetRecursiveReadOnlyMounts() {
		t.Errorf("Status handler %s features %v, runc's %v: want it listed with runc's recursive read-only mounts", shimv2Handler, f, features["runc"])
	}

	_, err = d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: podConfig("v2nope"), RuntimeHandler: "nope"})
	if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), shimv2Handler) {
		t.Errorf("RunPodSandbox with an unknown handler: %v (%s), want InvalidArgument listing %s", err, code(err), shimv2Handler)
	}

	tickCfg := containerConfig("ticker", ref, "sh", "-c", "echo hello-v2; i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done")
	ticker := d.runContainer(t, pod, podCfg, tickCfg)
	sleeper := d.runContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sleep", "1000"))
	waitLog(t, logPath(podCfg, tickCfg), "hello-v2")
	waitLog(t, logPath(podCfg, tickCfg), "stdout F tick-3")

	// The whole pod (its infra and both containers) runs under one shim.
	if pids := d.shimv2Pids(); len(pids) != 1 {
		t.Fatalf("containerd-shim-runc-v2 processes of this crind: %v, want one for the pod", pids)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.HasSuffix(strings.Split(string(b), "\x00")[0], "crin-shim") && bytes.Contains(b, []byte(d.state)) {
			t.Errorf("a crin-shim runs for a pod of handler %s: %q", shimv2Handler, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	if st := d.status(t, ticker); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("ticker: %v", st.State)
	}
	if got := d.execOut(t, sleeper, "sh", "-c", "echo exec-out; echo exec-err >&2"); got != "exec-out" {
		t.Errorf("ExecSync stdout = %q", got)
	}
	r := d.exec(t, sleeper, "sh", "-c", "exit 7")
	if r.ExitCode != 7 {
		t.Errorf("ExecSync exit = %d, want 7", r.ExitCode)
	}
	if _, err := d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: sleeper, Cmd: []string{"sleep", "100"}, Timeout: 1}); err == nil {
		t.Errorf("ExecSync past its timeout succeeded")
	}

	if _, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: sleeper,
		Linux:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20, CpuQuota: 20000, CpuPeriod: 100000},
	}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	for file, want := range map[string]string{
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": "100663296",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "20000",
	} {
		if got := d.execOut(t, sleeper, "cat", file); got != want {
			t.Errorf("%s after update = %q, want %q", file, got, want)
		}
	}

	poll.Until(t, time.Minute, "ContainerStats reports CPU and memory", func() (bool, string) {
		s, err := d.rs.ContainerStats(ctxT(t), &runtimeapi.ContainerStatsRequest{ContainerId: ticker})
		if err != nil {
			t.Fatalf("ContainerStats: %v", err)
		}
		return s.Stats.GetCpu().GetUsageCoreNanoSeconds().GetValue() > 0 && s.Stats.GetMemory().GetWorkingSetBytes().GetValue() > 0,
			fmt.Sprint(s.Stats)
	})
	d.kill()
	before, _ := os.ReadFile(logPath(podCfg, tickCfg))
	d.start()
	for _, id := range []string{ticker, sleeper} {
		if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container %s after crind was killed and restarted: %v", id, st.State)
		}
	}
	// Output written while crind was down and after it came back reaches
	// the log: the logger is the shim's child, not crind's.
	last := bytes.LastIndex(before, []byte("tick-"))
	n, _ := strconv.Atoi(strings.Fields(string(before[last+len("tick-"):]))[0])
	waitLog(t, logPath(podCfg, tickCfg), fmt.Sprintf("stdout F tick-%d\n", n+10))
	// Log rotation as kubelet does it: rename, then ReopenContainerLog;
	// the logger carries on in a new file.
	if err := os.Rename(logPath(podCfg, tickCfg), logPath(podCfg, tickCfg)+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.ReopenContainerLog(ctxT(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: ticker}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	waitLog(t, logPath(podCfg, tickCfg), "stdout F tick-")
	if got := d.execOut(t, sleeper, "echo", "after-restart"); got != "after-restart" {
		t.Errorf("ExecSync after restart = %q", got)
	}
	ps, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	if err != nil || len(ps.Containers) != 2 {
		t.Errorf("ListContainers after restart: %v %v", ps, err)
	}

	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: sleeper, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	if st := d.status(t, sleeper); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 {
		t.Errorf("stopped sleeper: %v exit %d, want EXITED 143", st.State, st.ExitCode)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: sleeper}); err != nil {
		t.Fatal(err)
	}
	// The pod's shim stays for the ticker.
	if pids := d.shimv2Pids(); len(pids) != 1 {
		t.Errorf("shim processes after removing one container: %v, want the pod's one", pids)
	}
	// cleanupAll (on test end) removes the pod and checks for leaks.
}

// TestShimV2SharedShim removes one container of a pod while another runs
// under the same shim: the shim stays for the others and keeps serving
// them; removing the pod then stops it and leaves no socket behind.
func TestShimV2SharedShim(t *testing.T) {
	runsOn(t, oci)
	d := shimv2Daemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("v2shared")
	pod := d.runPodWith(t, podCfg, shimv2Handler)
	first := d.runContainer(t, pod, podCfg, containerConfig("first", ref, "sleep", "1000"))
	second := d.runContainer(t, pod, podCfg, containerConfig("second", ref, "sleep", "1000"))
	pids := d.shimv2Pids()
	if len(pids) != 1 {
		t.Fatalf("shim processes: %v, want one for the pod", pids)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: first}); err != nil {
		t.Fatal(err)
	}
	if got := d.shimv2Pids(); len(got) != 1 || got[0] != pids[0] {
		t.Fatalf("shim processes after removing the first container: %v, want %v", got, pids)
	}
	if got := d.execOut(t, second, "echo", "still-here"); got != "still-here" {
		t.Errorf("exec in the second container = %q", got)
	}
	// cleanupAll (on test end) removes the pod and checks for leaks.
}

// TestShimV2ExitCodes checks the exit code and reason of containers that
// exit by themselves on the shim v2 handler, an OOM kill included.
func TestShimV2ExitCodes(t *testing.T) {
	runsOn(t, oci)
	d := shimv2Daemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("v2exits")
	pod := d.runPodWith(t, podCfg, shimv2Handler)
	ok := d.runContainer(t, pod, podCfg, containerConfig("ok", ref, "true"))
	bad := d.runContainer(t, pod, podCfg, containerConfig("bad", ref, "sh", "-c", "exit 3"))
	oomCfg := containerConfig("oom", ref, "sh", "-c", "dd if=/dev/zero of=/dev/null bs=256M count=1")
	oomCfg.Linux.Resources.MemoryLimitInBytes = 32 << 20
	oom := d.runContainer(t, pod, podCfg, oomCfg)
	killed := d.runContainer(t, pod, podCfg, containerConfig("killed", ref, "sh", "-c", "kill -9 $$"))
	for _, tc := range []struct {
		id     string
		code   int32
		reason string
	}{{ok, 0, "Completed"}, {bad, 3, "Error"}, {oom, 137, "OOMKilled"}, {killed, 137, "Error"}} {
		st := d.waitExited(t, tc.id)
		if st.ExitCode != tc.code || st.Reason != tc.reason {
			t.Errorf("%s: exit %d reason %q, want %d %q", st.Metadata.Name, st.ExitCode, st.Reason, tc.code, tc.reason)
		}
		if st.FinishedAt < st.StartedAt || st.StartedAt == 0 {
			t.Errorf("%s: started %d finished %d", st.Metadata.Name, st.StartedAt, st.FinishedAt)
		}
	}
}

// TestShimV2ShimKilled SIGKILLs a pod's containerd-shim-runc-v2: its
// container is recorded as exited with 255 and reason ShimDied, its
// process does not survive, and the pod is removed with nothing left.
func TestShimV2ShimKilled(t *testing.T) {
	runsOn(t, oci)
	d := shimv2Daemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("v2victim")
	pod := d.runPodWith(t, podCfg, shimv2Handler)
	id := d.runContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sh", "-c", "echo $$ > /tmp/pid; exec sleep 1000"))
	pids := d.shimv2Pids()
	if len(pids) != 1 {
		t.Fatalf("shim processes: %v, want 1", pids)
	}
	st := d.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container: %v", st.State)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cs := d.waitExited(t, id)
	if cs.ExitCode != 255 || cs.Reason != "ShimDied" || !strings.Contains(cs.Message, "containerd-shim-runc-v2") {
		t.Errorf("after its shim was killed: exit %d reason %q message %q, want 255 ShimDied", cs.ExitCode, cs.Reason, cs.Message)
	}
	// A shim killed while crind is down: the restarted crind records the
	// same.
	pod2Cfg := podConfig("v2victim2")
	pod2 := d.runPodWith(t, pod2Cfg, shimv2Handler)
	id2 := d.runContainer(t, pod2, pod2Cfg, containerConfig("sleeper", ref, "sleep", "1000"))
	pids = d.shimv2Pids()
	if len(pids) != 1 {
		for _, p := range pids {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			t.Logf("shim %d: %q %s", p, b, st)
		}
		t.Fatalf("shim processes: %v, want 1", pids)
	}
	d.kill()
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.start()
	cs = d.waitExited(t, id2)
	if cs.ExitCode != 255 || cs.Reason != "ShimDied" {
		t.Errorf("after its shim was killed while crind was down: exit %d reason %q message %q, want 255 ShimDied", cs.ExitCode, cs.Reason, cs.Message)
	}
	// Nothing of the container keeps running: the leak check in
	// cleanupAll finds no process naming crind's dirs, and runc forgot it.
	out, _ := exec.Command("runc", "--root", filepath.Join(d.state, "runtimes", shimv2Handler, "crin"), "list", "-q").Output()
	for _, c := range []string{id, id2} {
		if strings.Contains(string(out), c) {
			t.Errorf("runc still lists the container %s of a dead shim: %s", c, out)
		}
	}
}
