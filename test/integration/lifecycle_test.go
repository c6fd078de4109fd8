//go:build integration

package integration

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodContainerLifecycle runs a pod and a container from an image pulled
// from a registry on 127.0.0.1, execs in it, reads its log and stats, stops
// and removes both, as kubelet would.
func TestPodContainerLifecycle(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	imageID := d.pull(t, ref)

	podCfg := podConfig("lifecycle")
	pod := d.runPod(t, podCfg)
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod state %v, want READY", ps.Status.State)
	}
	if ps.Info["info"] == "" {
		t.Errorf("verbose PodSandboxStatus has no info")
	}

	cfg := containerConfig("main", ref, "sh", "-c", "echo hello out; echo hello err >&2; printf partial; exec sleep 1000")
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi there")}}
	id := d.runContainer(t, pod, podCfg, cfg)

	st := d.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("state %v, want RUNNING", st.State)
	}
	if st.ImageId != imageID || st.ImageRef == "" || st.LogPath != logPath(podCfg, cfg) || st.StartedAt == 0 {
		t.Errorf("status image_id %q (want %q) image_ref %q log_path %q started_at %d", st.ImageId, imageID, st.ImageRef, st.LogPath, st.StartedAt)
	}

	// The process runs in the container and sees its env.
	if got := d.execOut(t, id, "sh", "-c", "echo $GREETING"); got != "hi there" {
		t.Errorf("env GREETING = %q", got)
	}
	if got := d.execOut(t, id, "hostname"); got != "lifecycle" {
		t.Errorf("hostname = %q, want lifecycle", got)
	}
	r := d.exec(t, id, "sh", "-c", "echo to-out; echo to-err >&2; exit 7")
	if string(r.Stdout) != "to-out\n" || string(r.Stderr) != "to-err\n" || r.ExitCode != 7 {
		t.Errorf("exec: stdout %q stderr %q exit %d; want separate streams and exit 7", r.Stdout, r.Stderr, r.ExitCode)
	}
	// ExecSync honours its timeout.
	start := time.Now()
	_, err = d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "30"}, Timeout: 1})
	if code(err) != "DeadlineExceeded" || time.Since(start) > 15*time.Second {
		t.Errorf("exec past its timeout: err %v after %v, want DeadlineExceeded", err, time.Since(start))
	}

	// CRI log format: <RFC3339Nano> <stream> <P|F> <line>
	log := waitLog(t, logPath(podCfg, cfg), "hello err")
	lineRE := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) (stdout|stderr) (F|P) (.*)$`)
	var sawOut, sawErr bool
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("log line not in CRI format: %q", l)
			continue
		}
		sawOut = sawOut || (m[3] == "stdout" && m[4] == "F" && m[5] == "hello out")
		sawErr = sawErr || (m[3] == "stderr" && m[4] == "F" && m[5] == "hello err")
	}
	if !sawOut || !sawErr {
		t.Errorf("log lacks full stdout/stderr lines:\n%s", log)
	}

	cs, err := d.rs.ContainerStats(ctxT(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Stats.GetMemory().GetWorkingSetBytes().GetValue() == 0 || cs.Stats.GetCpu().GetUsageCoreNanoSeconds() == nil {
		t.Errorf("container stats lack memory/cpu: %v", cs.Stats)
	}
	lcs, err := d.rs.ListContainerStats(ctxT(t), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: pod}})
	if err != nil || len(lcs.Stats) != 1 {
		t.Errorf("ListContainerStats: %v, %d stats", err, len(lcs.GetStats()))
	}
	pst, err := d.rs.PodSandboxStats(ctxT(t), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
	if err != nil || len(pst.Stats.GetLinux().GetContainers()) != 1 || pst.Stats.Linux.GetMemory() == nil {
		t.Errorf("PodSandboxStats: %v %v", err, pst)
	}

	// Filters.
	lc, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"ctr": "main"},
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil || len(lc.Containers) != 1 || lc.Containers[0].Id != id {
		t.Errorf("ListContainers by label and state: %v %v", err, lc)
	}
	lc, _ = d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"ctr": "other"}}})
	if len(lc.Containers) != 0 {
		t.Errorf("ListContainers with a non-matching label returned %d", len(lc.Containers))
	}
	lp, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: pod[:12]}})
	if err != nil || len(lp.Items) != 1 {
		t.Errorf("ListPodSandbox by id prefix: %v %v", err, lp)
	}

	// Stop: sleep ignores nothing, SIGTERM kills it (exit 143).
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	st = d.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 || st.FinishedAt == 0 {
		t.Errorf("after stop: state %v exit %d finished %d; want EXITED 143", st.State, st.ExitCode, st.FinishedAt)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: id}); code(err) != "NotFound" {
		t.Errorf("status of removed container: %v, want NotFound", err)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	ps, err = d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after stop: %v %v, want NOTREADY", err, ps)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod}); code(err) != "NotFound" {
		t.Errorf("status of removed pod: %v, want NotFound", err)
	}
}

// TestExitCodes checks the exit code and reason of containers that exit by
// themselves, including an OOM kill under a memory limit.
func TestExitCodes(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("exits")
	pod := d.runPod(t, podCfg)

	ok := d.runContainer(t, pod, podCfg, containerConfig("ok", ref, "true"))
	bad := d.runContainer(t, pod, podCfg, containerConfig("bad", ref, "sh", "-c", "exit 3"))
	type exit struct {
		id     string
		code   int32
		reason string
	}
	exits := []exit{{ok, 0, "Completed"}, {bad, 3, "Error"}}
	// Not on gvisor: a workload container's memory is the sandbox
	// process's, in the pod's cgroup, and runsc enforces no limit of the
	// container's own: the 256 MiB dd completes (exit 0, "Completed";
	// docs/runtimes.md, "gVisor").
	if currentBackend() != gvisor {
		oomCfg := containerConfig("oom", ref, "sh", "-c", "dd if=/dev/zero of=/dev/null bs=256M count=1")
		oomCfg.Linux.Resources.MemoryLimitInBytes = 32 << 20
		exits = append(exits, exit{d.runContainer(t, pod, podCfg, oomCfg), 137, "OOMKilled"})
	}

	for _, tc := range exits {
		st := d.waitExited(t, tc.id)
		if st.ExitCode != tc.code || st.Reason != tc.reason {
			t.Errorf("%s: exit %d reason %q, want %d %q", st.Metadata.Name, st.ExitCode, st.Reason, tc.code, tc.reason)
		}
		if st.FinishedAt < st.StartedAt || st.StartedAt == 0 {
			t.Errorf("%s: started %d finished %d", st.Metadata.Name, st.StartedAt, st.FinishedAt)
		}
	}
}

// TestCgroupLimits checks that resource limits are visible inside the
// container, and that UpdateContainerResources changes them.
func TestCgroupLimits(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("limits")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("limited", ref, "sleep", "1000")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: 64 << 20,
		CpuPeriod:          100000,
		CpuQuota:           50000,
		CpuShares:          512,
		CpusetCpus:         "0",
	}
	id := d.runContainer(t, pod, podCfg, cfg)
	// What the container sees of its own cgroup: v1 files per
	// controller, or (cgroup v2, a cgroup namespace of its own) the
	// unified files, with kubelet's shares as a weight (runc: 1 +
	// (shares-2)*9999/262142).
	files := map[string]string{
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": "67108864",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "50000",
		"/sys/fs/cgroup/cpu/cpu.cfs_period_us":        "100000",
		"/sys/fs/cgroup/cpu/cpu.shares":               "512",
		"/sys/fs/cgroup/cpuset/cpuset.cpus":           "0",
	}
	updated := map[string]string{
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": "100663296",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "20000",
	}
	if cgroupV2() {
		files = map[string]string{
			"/sys/fs/cgroup/memory.max":   "67108864",
			"/sys/fs/cgroup/cpu.max":      "50000 100000",
			"/sys/fs/cgroup/cpuset.cpus":  "0",
			"/sys/fs/cgroup/cpu.weight":   "20",
			"/sys/fs/cgroup/pids.current": "",
		}
		updated = map[string]string{
			"/sys/fs/cgroup/memory.max": "100663296",
			"/sys/fs/cgroup/cpu.max":    "20000 100000",
		}
	}
	for file, want := range files {
		got := d.execOut(t, id, "cat", file)
		switch {
		case want == "" && got == "":
			t.Errorf("%s in container is empty or missing", file)
		case file == "/sys/fs/cgroup/cpu.weight" && got != want:
			// runc's mapping gives 20; other runtimes map shares on a
			// curve of their own, but never to the default 100.
			if w, err := strconv.Atoi(got); err != nil || w < 1 || w > 10000 || w == 100 {
				t.Errorf("%s in container = %q, want a weight from shares 512 (runc: %s)", file, got, want)
			}
		case want != "" && got != want && file != "/sys/fs/cgroup/cpu.weight":
			t.Errorf("%s in container = %q, want %q", file, got, want)
		}
	}
	if _, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20, CpuQuota: 20000, CpuPeriod: 100000},
	}); err != nil {
		t.Fatal(err)
	}
	for file, want := range updated {
		if got := d.execOut(t, id, "cat", file); got != want {
			t.Errorf("%s after update = %s, want %s", file, got, want)
		}
	}
	st := d.status(t, id)
	if st.GetResources().GetLinux().GetMemoryLimitInBytes() != 96<<20 {
		t.Errorf("ContainerStatus resources = %v", st.GetResources())
	}
}

// cgroupV2 reports a unified (cgroup v2 only) host.
func cgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}
