//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/test/poll"
	"github.com/crin-dev/crin/test/testnet"
)

// killedRuntime wraps runc: every create, start, run or delete that the switch
// file (%[1]q) names starts the real runc, SIGKILLs it part way through
// (after 10 to 90 ms, varying with the pid, unless it finished) and then
// SIGKILLs itself, as an OOM kill or an operator's kill of runc would.
// timeout(1) kills its own child: a "kill -9 $pid" of a runc that had
// already exited could hit a process that reused the pid (pid_max is
// 32768 here), such as a crind the test just started.
const killedRuntime = `#!/bin/sh
op=""
for a in "$@"; do
	case "$a" in create|start|run|delete) op="$a"; break;; esac
done
if [ -n "$op" ] && grep -qw "$op" %[1]q 2>/dev/null; then
	timeout -s KILL 0.0$(( $$ %% 9 + 1 )) runc "$@"
	kill -9 $$
fi
exec runc "$@"
`

// TestRuntimeKilledDuringCreateAndDelete runs a burst of pods and
// containers on a runtime whose run (create and start: the oci backend
// runs "runc run" at StartContainer) and delete are SIGKILLed, then
// removes everything with a working runtime: crind keeps serving, and no
// pod cgroup, shim, runc init, mount, netns pin or IPAM reservation is
// left, neither while crind runs (failed cleanup steps are retried) nor
// after a restart (the start-up sweep).
func TestRuntimeKilledDuringCreateAndDelete(t *testing.T) {
	runsOn(t, oci)
	dir, err := os.MkdirTemp("", "crinkill")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sw := filepath.Join(dir, "faults-on")
	if err := os.WriteFile(filepath.Join(dir, "killed-runc"), []byte(fmt.Sprintf(killedRuntime, sw)), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf(`
[runtimes.killed]
type = "oci"
path = %q
`, filepath.Join(dir, "killed-runc"))})
	ref, _ := busybox(t)
	d.pull(t, ref)

	on := func(ops string) {
		t.Helper()
		if err := os.WriteFile(sw, []byte(ops), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	off := func() {
		t.Helper()
		if err := os.Remove(sw); err != nil {
			t.Fatal(err)
		}
	}
	const burst = 4
	var mu sync.Mutex
	failures := 0
	fail := func(err error) bool {
		if err != nil {
			mu.Lock()
			failures++
			mu.Unlock()
		}
		return err != nil
	}
	// Pods made while runc works, so their containers' creates and their
	// own removals meet the killed runc.
	type podRef struct {
		id  string
		cfg *runtimeapi.PodSandboxConfig
	}
	var pods []podRef
	for i := range burst {
		cfg := podConfig(fmt.Sprintf("ok-%d", i))
		resp, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "killed"})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, podRef{resp.PodSandboxId, cfg})
		// One running container each, whose delete will be killed.
		d.runContainer(t, resp.PodSandboxId, cfg, containerConfig("run", ref, "sleep", "1000"))
	}

	on("run delete")
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(2)
		go func() { // new pods: the infra create is killed
			defer wg.Done()
			cfg := podConfig(fmt.Sprintf("killed-%d", i))
			defer os.RemoveAll(cfg.LogDirectory)
			_, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "killed"})
			fail(err)
		}()
		go func() { // containers created, then the pod removed
			defer wg.Done()
			for j := range 2 {
				cfg := containerConfig(fmt.Sprintf("c%d", j), ref, "sleep", "1000")
				_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
				fail(err)
			}
			_, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id})
			fail(err)
			_, err = d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id})
			fail(err)
		}()
	}
	wg.Wait()
	if failures == 0 {
		t.Fatalf("no call failed: the runtime was never killed")
	}
	t.Logf("%d calls failed while runc was being killed", failures)

	// The runtime works again; kubelet retries its removals.
	off()
	d.removeAllPods(t)
	d.waitNoRuntimeLeaks(t, "while crind runs")

	// Pods whose infra start is killed, and then the delete that would
	// undo it: the delete is retried in the background once runc works.
	on("run delete")
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := podConfig(fmt.Sprintf("start-%d", i))
			defer os.RemoveAll(cfg.LogDirectory)
			_, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "killed"})
			if err == nil {
				t.Errorf("RunPodSandbox worked while runc start was being killed")
			}
		}()
	}
	wg.Wait()
	off()
	d.waitNoRuntimeLeaks(t, "once the background retries ran")

	// crind itself is killed in the middle of a burst of failing creates:
	// what it was undoing is undone, and what it left swept, when it
	// starts again.
	on("run delete")
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := podConfig(fmt.Sprintf("crash-%d", i))
			defer os.RemoveAll(cfg.LogDirectory)
			_, _ = d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "killed"})
		}()
	}
	// Kill crind once a create is under way (its shim state dir exists).
	poll.Until(t, time.Minute, "a create under way (a shim state dir)", func() (bool, string) {
		ents, _ := os.ReadDir(filepath.Join(d.state, "c"))
		return len(ents) > 0, "none yet"
	})
	d.kill()
	wg.Wait()
	off()
	d.start()
	d.removeAllPods(t)
	d.waitNoRuntimeLeaks(t, "after a restart")
	// What no record owns and no rollback could undo (a crind killed
	// between a runtime's kill and its own record, a runc init whose shim
	// lost its state dir) is planted while crind is down; the start-up
	// sweep removes it.
	d.stop()
	d.plantOrphans(t)
	d.start()
	d.waitNoRuntimeLeaks(t, "after the start-up sweep")

	podCfg := podConfig("after")
	pod := d.runPod(t, podCfg)
	d.runContainer(t, pod, podCfg, containerConfig("c", ref, "sleep", "1000"))

	// What cleaned up, for the record (the test passes on the outcome).
	counts := map[string]int{}
	for _, line := range strings.Split(d.logBuf.String(), "\n") {
		for _, msg := range []string{"retrying in the background", "pending cleanup done", "no record owns", "orphaned"} {
			if strings.Contains(line, msg) {
				counts[msg]++
			}
		}
	}
	t.Logf("cleanup log lines: %v", counts)
}

// plantOrphans leaves what a killed runtime can leave for ids no record
// knows: a shim (a process named crin-shim naming a state dir, with a
// child) whose state dir is gone, a pod cgroup with a process inside in
// every hierarchy, a tmpfs mounted where a pod's /dev/shm goes, and an IP
// reservation.
func (d *daemon) plantOrphans(t *testing.T) {
	t.Helper()
	shimID, podID := randHex(32), randHex(32)
	start := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd
	}
	// A pod's shim no record owns, and a crin-shim serving from a dir no
	// crind makes: both orphans.
	podShim := filepath.Join(d.state, "c", ".pod-"+shimID)
	if err := os.MkdirAll(podShim, 0o700); err != nil {
		t.Fatal(err)
	}
	start(&exec.Cmd{Path: "/bin/sh", Args: []string{"crin-shim", "-c", "sleep 1000; :", "-dir", podShim}})
	start(&exec.Cmd{Path: "/bin/sh", Args: []string{"crin-shim", "-c", "sleep 1000; :", "-dir", filepath.Join(d.state, "c", shimID)}})

	sleeper := start(exec.Command("sleep", "1000"))
	for _, base := range d.cgroupBases() {
		dir := filepath.Join(base, podID, podID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(base, "/cpuset/") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				for _, p := range []string{filepath.Join(base, podID), dir} {
					v, _ := os.ReadFile(filepath.Join(filepath.Dir(p), f))
					_ = os.WriteFile(filepath.Join(p, f), v, 0o644)
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
			t.Logf("move the planted process into %s: %v", dir, err)
		}
	}

	shm := filepath.Join(d.root, "pods", podID, "shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", shm).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}

	ipam := filepath.Join(d.net.IPAMDir, testnet.Name)
	if err := os.MkdirAll(ipam, 0o755); err != nil {
		t.Fatal(err)
	}
	ip := d.net.Subnet.IP.To4()
	reserved := fmt.Sprintf("%d.%d.%d.250", ip[0], ip[1], ip[2])
	if err := os.WriteFile(filepath.Join(ipam, reserved), []byte(podID+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if leaks := d.runtimeLeaks(); len(leaks) < 4 {
		t.Fatalf("planted orphans not all seen: %v", leaks)
	}
}

// removeAllPods stops and removes every pod, retrying for a while as
// kubelet does.
func (d *daemon) removeAllPods(t *testing.T) {
	t.Helper()
	poll.Until(t, 2*time.Minute, "every pod removed", func() (bool, string) {
		pods, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Fatalf("ListPodSandbox: %v", err)
		}
		var errs []error
		for _, p := range pods.Items {
			if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				errs = append(errs, err)
			}
			if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				errs = append(errs, err)
			}
		}
		return len(pods.Items) == 0, fmt.Sprintf("they cannot be removed: %v", errs)
	})
}

// runtimeLeaks lists what the daemon's pods left behind: cgroups under its
// parent in any hierarchy, shims and other processes naming its state dir,
// runc init processes in its cgroups, mounts under its dirs, netns pins,
// IPAM reservations.
func (d *daemon) runtimeLeaks() []string {
	var out []string
	for _, base := range d.cgroupBases() {
		_ = filepath.WalkDir(base, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() && path != base {
				out = append(out, "cgroup "+path)
			}
			return nil
		})
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		cg, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		switch {
		case bytes.Contains(b, []byte(d.state)):
			out = append(out, fmt.Sprintf("process %s: %q", filepath.Dir(p), bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		case bytes.Contains(cg, []byte(cgroup.Dir(d.cgroup)+"/")):
			out = append(out, fmt.Sprintf("process in a pod cgroup %s: %q", filepath.Dir(p), bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], d.root+"/") || strings.HasPrefix(f[4], d.state+"/")) &&
			!strings.HasSuffix(f[4], "/netns") {
			out = append(out, "mount "+f[4])
		}
	}
	for _, sub := range []string{"netns", "c"} {
		ents, _ := os.ReadDir(filepath.Join(d.state, sub))
		for _, e := range ents {
			out = append(out, sub+" "+e.Name())
		}
	}
	ents, _ := os.ReadDir(filepath.Join(d.net.IPAMDir, testnet.Name))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "10.") {
			out = append(out, "IPAM "+e.Name())
		}
	}
	return out
}

func (d *daemon) waitNoRuntimeLeaks(t *testing.T, when string) {
	t.Helper()
	poll.Until(t, 2*time.Minute, "nothing left behind "+when, func() (bool, string) {
		leaks := d.runtimeLeaks()
		return len(leaks) == 0, "left:\n" + strings.Join(leaks, "\n")
	})
}

// TestRequestsAnswerTruthfully: resource updates crind would refuse at
// creation are refused by UpdateContainerResources naming the field, a
// stop_signal is honoured (also after a restart), and an undefined CDI
// device fails CreateContainer.
func TestRequestsAnswerTruthfully(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("truth")
	pod := d.runPod(t, podCfg)

	t.Run("update resources", func(t *testing.T) {
		id := d.runContainer(t, pod, podCfg, containerConfig("upd", ref, "sleep", "1000"))
		for _, tc := range []struct {
			res   *runtimeapi.LinuxContainerResources
			field string
		}{
			{&runtimeapi.LinuxContainerResources{CpuShares: 1}, "cpu_shares 1"},
			{&runtimeapi.LinuxContainerResources{CpusetCpus: "abc"}, `cpuset_cpus "abc"`},
			{&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cgroup.procs": "1"}}, `unified["cgroup.procs"]`},
		} {
			_, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: tc.res})
			if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("UpdateContainerResources %v: %v (%s), want InvalidArgument naming %s", tc.res, err, code(err), tc.field)
			}
		}
		// A valid update still works.
		if _, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
			Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}); err != nil {
			t.Errorf("valid update: %v", err)
		}
	})

	t.Run("stop signal", func(t *testing.T) {
		cfg := containerConfig("sig", ref, "sh", "-c", `trap "exit 42" USR1; echo ready; while :; do sleep 0.1; done`)
		cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGUSR1
		id := d.runContainer(t, pod, podCfg, cfg)
		waitLog(t, logPath(podCfg, cfg), "ready")
		// The signal is recorded: a restarted crind still uses it.
		d.stop()
		d.start()
		if got := d.status(t, id).GetStopSignal(); got != runtimeapi.Signal_SIGNAL_SIGUSR1 {
			t.Errorf("ContainerStatus stop_signal = %v, want SIGUSR1", got)
		}
		if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 20}); err != nil {
			t.Fatal(err)
		}
		if got := d.status(t, id).GetExitCode(); got != 42 {
			t.Errorf("exit code %d, want 42 (the trap of the stop signal)", got)
		}
	})

	t.Run("undefined CDI device", func(t *testing.T) {
		cfg := containerConfig("cdi", ref, "sleep", "1000")
		cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/dev=none"}}
		_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		if code(err) != "NotFound" || !strings.Contains(err.Error(), "vendor.com/dev=none") {
			t.Fatalf("CreateContainer with an undefined CDI device: %v (%s), want NotFound naming it", err, code(err))
		}
		ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"ctr": "cdi"}}})
		if len(ctrs.GetContainers()) != 0 {
			t.Errorf("the failed create left a container")
		}
	})
}
