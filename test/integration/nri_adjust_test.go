//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// lineWith returns the first line of out holding every word, or "".
func lineWith(out string, words ...string) string {
	for _, l := range strings.Split(out, "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return l
		}
	}
	return ""
}

// containerPid is the host pid of a running container's process, from
// verbose ContainerStatus.
func (d *daemon) containerPid(t *testing.T, id string) int {
	t.Helper()
	st, err := d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("no pid in verbose status of %s: %v %q", id, err, st.Info["info"])
	}
	return info.Pid
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkFiles compares files read inside container id with want.
func (d *daemon) checkFiles(t *testing.T, id string, want map[string]string) {
	t.Helper()
	for file, v := range want {
		if got := d.execOut(t, id, "cat", file); got != v {
			t.Errorf("%s in container = %q, want %q", file, got, v)
		}
	}
}

// waitFiles polls files inside container id until they hold want.
func (d *daemon) waitFiles(t *testing.T, id string, want map[string]string) {
	t.Helper()
	poll.Until(t, time.Minute, "files of container "+id, func() (bool, string) {
		bad := ""
		for file, v := range want {
			if got := d.execOut(t, id, "cat", file); got != v {
				bad += file + "=" + got + " (want " + v + ") "
			}
		}
		return bad == "", bad
	})
}

// TestNRIAdjustInContainer checks that what a pre-installed and an external
// plugin ask for when a container is created is what runs: env, a bind
// mount, an rlimit, a device node, an annotation, memory and CPU limits;
// and that crinctl shows both plugins and who owns what.
func TestNRIAdjustInContainer(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	n := newNRISetup(t)
	data := filepath.Join(n.Dir, "data.txt")
	if err := os.WriteFile(data, []byte("mounted by nri\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.install(t, "10", "adjust", pluginConfig{Rules: []pluginRule{{
		Event: "CreateContainer", Container: "adj",
		Adjust: protoJSON(t, &api.ContainerAdjustment{
			Env:         []*api.KeyValue{{Key: "NRI_INJECTED", Value: "from-10-adjust"}},
			Mounts:      []*api.Mount{{Source: data, Destination: "/nri/data.txt", Type: "bind", Options: []string{"rbind", "ro"}}},
			Rlimits:     []*api.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1111, Hard: 2222}},
			Annotations: map[string]string{"nri.test/adjusted": "by-10-adjust"},
			Linux: &api.LinuxContainerAdjustment{Devices: []*api.LinuxDevice{{
				Path: "/dev/nri-null", Type: "c", Major: 1, Minor: 3, FileMode: api.FileMode(uint32(0o666)),
			}}},
		}),
	}}})
	d := nriDaemon(t, n, "")
	n.startExternal(t, "20", "resources", pluginConfig{Rules: []pluginRule{{
		Event: "CreateContainer", Container: "adj",
		Adjust: protoJSON(t, &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{
			Memory: &api.LinuxMemory{
				Limit:       api.Int64(int64(200 << 20)),
				Reservation: api.Int64(int64(100 << 20)),
				Swappiness:  api.UInt64(uint64(17)),
			},
			Cpu: &api.LinuxCPU{Cpus: "0", Quota: api.Int64(int64(30000)), Period: api.UInt64(uint64(100000))},
		}}}),
	}}})
	waitConfigured(t, d, n, "10-adjust", "20-resources")

	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("nriadj")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("adj", ref, "sleep", "1000"))
	for _, log := range []string{n.eventLog("10", "adjust"), n.eventLog("20", "resources")} {
		evs := waitEvents(t, log, time.Minute, hasEvent("CreateContainer", "adj"))
		if e := findEvent(evs, "CreateContainer", "adj"); e.ContainerID != id || e.container(t).GetPodSandboxId() != pod {
			t.Errorf("%s: CreateContainer for %s/%s, want %s/%s", log, e.ContainerID, e.container(t).GetPodSandboxId(), id, pod)
		}
	}

	// The container's own process (pid 1 in the container is the pod's
	// infra process: the pid namespace is the pod's).
	pid := d.containerPid(t, id)
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), "NRI_INJECTED=from-10-adjust") {
		t.Errorf("container env lacks NRI_INJECTED=from-10-adjust: %q", environ)
	}
	if got := d.execOut(t, id, "cat", "/nri/data.txt"); got != "mounted by nri" {
		t.Errorf("injected mount /nri/data.txt holds %q", got)
	}
	if r := d.exec(t, id, "sh", "-c", "echo x > /nri/data.txt"); r.ExitCode == 0 {
		t.Errorf("injected read-only mount is writable")
	}
	limits := readFile(t, fmt.Sprintf("/proc/%d/limits", pid))
	if f := strings.Fields(lineWith(limits, "Max open files")); len(f) < 5 || f[3] != "1111" || f[4] != "2222" {
		t.Errorf("RLIMIT_NOFILE of the container process, want 1111 2222:\n%s", limits)
	}
	if got := d.execOut(t, id, "stat", "-c", "%F %t:%T %a", "/dev/nri-null"); got != "character special file 1:3 666" {
		t.Errorf("/dev/nri-null: %q, want a 1:3 char device, mode 666", got)
	}
	if got := d.execOut(t, id, "sh", "-c", "echo hello > /dev/nri-null && echo written"); got != "written" {
		t.Errorf("write to /dev/nri-null: %q", got)
	}
	d.checkFiles(t, id, map[string]string{
		"/sys/fs/cgroup/memory/memory.limit_in_bytes":      "209715200",
		"/sys/fs/cgroup/memory/memory.soft_limit_in_bytes": "104857600",
		"/sys/fs/cgroup/memory/memory.swappiness":          "17",
		"/sys/fs/cgroup/cpuset/cpuset.cpus":                "0",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":              "30000",
		"/sys/fs/cgroup/cpu/cpu.cfs_period_us":             "100000",
	})

	st, err := d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Status.Annotations["nri.test/adjusted"]; got != "by-10-adjust" {
		t.Errorf("annotation nri.test/adjusted not in ContainerStatus: annotations %v, info %.2000s", st.Status.Annotations, st.Info["info"])
	}

	t.Run("crinctl", func(t *testing.T) {
		out := crinctl(t, d, "plugins")
		listed := map[string]string{}
		for _, r := range tableRows(out) {
			if len(r) >= 4 {
				listed[r[0]+"-"+r[1]] = r[2] + " " + r[3]
			}
		}
		for p, want := range map[string]string{"10-adjust": "preinstalled ready", "20-resources": "external ready"} {
			if listed[p] != want {
				t.Errorf("crinctl plugins: %s is %q, want %q:\n%s", p, listed[p], want, out)
			}
		}
		out = crinctl(t, d, "owners", id)
		owners := map[string]string{}
		for _, r := range tableRows(out) {
			if len(r) == 2 {
				owners[r[0]] = r[1]
			}
		}
		for field, want := range map[string]string{`env "NRI_INJECTED"`: "10-adjust", "memory limit": "20-resources"} {
			if owners[field] != want {
				t.Errorf("crinctl owners %s: %s owned by %q, want %s:\n%s", id, field, owners[field], want, out)
			}
		}
	})
}

// hookScript writes a hook that appends the container state it gets on
// stdin to marker.
func hookScript(t *testing.T, n *nriSetup, marker string) string {
	t.Helper()
	path := filepath.Join(n.Dir, "hook.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\ncat >> "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNRIHookAdjustment checks that an OCI hook a plugin injects runs when
// the default validator allows it, and that by default the validator
// refuses it with an error naming the plugin, leaving nothing behind.
func TestNRIHookAdjustment(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	ref, _ := busybox(t)
	setup := func(t *testing.T, extra string) (d *daemon, marker string) {
		n := newNRISetup(t)
		marker = filepath.Join(n.Dir, "hook-ran")
		hook := hookScript(t, n, marker)
		n.install(t, "10", "hook", pluginConfig{Rules: []pluginRule{{
			Event: "CreateContainer", Container: "hooked",
			Adjust: protoJSON(t, &api.ContainerAdjustment{Hooks: &api.Hooks{
				CreateRuntime: []*api.Hook{{Path: hook, Args: []string{hook}}},
			}}),
		}}})
		d = nriDaemon(t, n, extra)
		waitConfigured(t, d, n, "10-hook")
		d.pull(t, ref)
		return d, marker
	}

	t.Run("rejected by default", func(t *testing.T) {
		d, marker := setup(t, "")
		podCfg := podConfig("nrihook")
		pod := d.runPod(t, podCfg)
		_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, Config: containerConfig("hooked", ref, "sleep", "1000"), SandboxConfig: podCfg,
		})
		if err == nil || !strings.Contains(err.Error(), "10-hook") || !strings.Contains(strings.ToLower(err.Error()), "hook") {
			t.Fatalf("CreateContainer with an injected OCI hook under the default validator: %v, want an error naming plugin 10-hook", err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("the refused hook ran")
		}
		lc, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
		if err != nil || len(lc.Containers) != 0 {
			t.Errorf("after the refused create: %v, %d containers listed", err, len(lc.GetContainers()))
		}
		// Other containers are not affected.
		d.runContainer(t, pod, podCfg, containerConfig("plain", ref, "sleep", "1000"))
	})

	t.Run("allowed", func(t *testing.T) {
		d, marker := setup(t, "[nri.default_validator]\nenable = true\nreject_oci_hook_adjustment = false\n")
		podCfg := podConfig("nrihook")
		pod := d.runPod(t, podCfg)
		id := d.runContainer(t, pod, podCfg, containerConfig("hooked", ref, "sleep", "1000"))
		b, err := os.ReadFile(marker)
		if err != nil || !strings.Contains(string(b), id) {
			t.Errorf("createRuntime hook injected by 10-hook: marker %q (%v), want the state of %s", b, err, id)
		}
	})
}

// TestNRIUpdateOtherContainer checks that a plugin can change a running
// container's CPU and memory while another container is created, in its
// answer and with an unsolicited update.
func TestNRIUpdateOtherContainer(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	n := newNRISetup(t)
	res := func(mem, quota int64) json.RawMessage {
		return protoJSON(t, &api.LinuxResources{
			Memory: &api.LinuxMemory{Limit: api.Int64(mem)},
			Cpu:    &api.LinuxCPU{Quota: api.Int64(quota), Period: api.UInt64(uint64(100000))},
		})
	}
	n.install(t, "10", "updater", pluginConfig{Rules: []pluginRule{
		{Event: "CreateContainer", Container: "trigger-answer", Update: []pluginUpdate{{Container: "victim", Resources: res(150<<20, 40000)}}},
		{Event: "CreateContainer", Container: "trigger-unsolicited", Unsolicited: []pluginUpdate{{Container: "victim", Resources: res(180<<20, 60000)}}},
	}})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-updater")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("nriupd")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("victim", ref, "sleep", "1000")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20, CpuQuota: 80000, CpuPeriod: 100000}
	victim := d.runContainer(t, pod, podCfg, cfg)
	const memFile, quotaFile = "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
	d.checkFiles(t, victim, map[string]string{memFile: "268435456", quotaFile: "80000"})

	// The answer's update is applied before CreateContainer returns.
	d.runContainer(t, pod, podCfg, containerConfig("trigger-answer", ref, "sleep", "1000"))
	d.checkFiles(t, victim, map[string]string{memFile: "157286400", quotaFile: "40000"})
	if got := d.status(t, victim).GetResources().GetLinux(); got.GetMemoryLimitInBytes() != 150<<20 || got.GetCpuQuota() != 40000 {
		t.Errorf("ContainerStatus resources of the updated container: %v, want memory 150Mi, quota 40000", got)
	}

	d.runContainer(t, pod, podCfg, containerConfig("trigger-unsolicited", ref, "sleep", "1000"))
	evs := waitEvents(t, n.eventLog("10", "updater"), 15*time.Second, hasEvent("UpdateContainersResult", ""))
	if r := findEvent(evs, "UpdateContainersResult", ""); r.Error != "" || len(r.Failed) != 0 || r.ContainerID != victim {
		t.Errorf("unsolicited update of victim: %s, want success for %s", r, victim)
	}
	d.waitFiles(t, victim, map[string]string{memFile: "188743680", quotaFile: "60000"})
	if got := d.status(t, victim).GetResources().GetLinux(); got.GetMemoryLimitInBytes() != 180<<20 || got.GetCpuQuota() != 60000 {
		t.Errorf("ContainerStatus resources after the unsolicited update: %v, want memory 180Mi, quota 60000", got)
	}
}

// TestNRIEviction checks that a plugin's eviction stops the container with
// reason Evicted and the plugin's reason as message, that a logging plugin
// gets exactly one StopContainer for it (also when CRI stops and removes it
// afterwards), and that nothing else is touched.
func TestNRIEviction(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	n := newNRISetup(t)
	n.install(t, "10", "obs", pluginConfig{})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-obs")
	obs := n.eventLog("10", "obs")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("nrievict")
	pod := d.runPod(t, podCfg)
	doomed := d.runContainer(t, pod, podCfg, containerConfig("doomed", ref, "sleep", "1000"))
	bystander := d.runContainer(t, pod, podCfg, containerConfig("bystander", ref, "sleep", "1000"))

	ev := dialEvictor(t, n.Socket, "50", "evictor")
	waitPluginsReady(t, d, "10-obs", "50-evictor")
	const reason = "node under test pressure"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ev.Evict(ctx, doomed, reason); err != nil {
		t.Fatalf("evict %s: %v", doomed, err)
	}
	st := d.waitExited(t, doomed)
	// sleep dies of the image's default stop signal, SIGTERM.
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != "Evicted" || st.Message != reason || st.ExitCode != 143 {
		t.Errorf("evicted container status: %v reason %q message %q exit %d, want EXITED, reason \"Evicted\", message %q, exit 143",
			st.State, st.Reason, st.Message, st.ExitCode, reason)
	}
	if st := d.status(t, bystander); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the other container of the pod is %v after the eviction", st.State)
	}

	// CRI stopping and removing the evicted container must not deliver a
	// second StopContainer; RemoveContainer comes after the one there is.
	waitEvents(t, obs, 30*time.Second, func(evs []pluginEvent) bool { return contractByID(evs, "StopContainer", doomed) != nil })
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: doomed, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: doomed}); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, obs, 30*time.Second, func(evs []pluginEvent) bool { return contractByID(evs, "RemoveContainer", doomed) != nil })
	if k := contractCount(evs, "StopContainer", doomed); k != 1 {
		t.Fatalf("10-obs got %d StopContainer for the evicted container, want exactly 1", k)
	}
	e := contractByID(evs, "StopContainer", doomed)
	if c := e.container(t); c.GetState() != api.ContainerState_CONTAINER_STOPPED || c.GetStatusReason() != "Evicted" ||
		c.GetStatusMessage() != reason || c.GetExitCode() != st.ExitCode || c.GetFinishedAt() != st.FinishedAt {
		t.Errorf("StopContainer of the evicted container: %v reason %q message %q exit %d finished %d, want STOPPED %q %q %d %d",
			c.GetState(), c.GetStatusReason(), c.GetStatusMessage(), c.GetExitCode(), c.GetFinishedAt(), "Evicted", reason, st.ExitCode, st.FinishedAt)
	}
	if r := contractByID(evs, "RemoveContainer", doomed); r.Seq < e.Seq {
		t.Errorf("RemoveContainer #%d of the evicted container came before its StopContainer #%d", r.Seq, e.Seq)
	}
	if k := contractCount(evs, "StopContainer", bystander); k != 0 {
		t.Errorf("10-obs got %d StopContainer for the running bystander, want none", k)
	}
}

// TestNRIUnsupportedAdjustment checks that adjustments Debian's runc 1.1.5
// cannot honour (scheduler, I/O priority) fail CreateContainer with an
// error naming the plugin and the field, and that the pod stays usable.
func TestNRIUnsupportedAdjustment(t *testing.T) {
	runsOn(t, oci)
	out, err := exec.Command("runc", "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "runc version 1.1.") {
		t.Skipf("needs runc 1.1.x (no scheduler, no ioPriority): %q %v", out, err)
	}
	n := newNRISetup(t)
	n.install(t, "10", "tuner", pluginConfig{Rules: []pluginRule{
		{Event: "CreateContainer", Container: "sched", Adjust: protoJSON(t, &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
			Scheduler: &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_BATCH, Nice: 5},
		}})},
		{Event: "CreateContainer", Container: "ioprio", Adjust: protoJSON(t, &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
			IoPriority: &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE, Priority: 4},
		}})},
	}})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-tuner")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("nritune")
	pod := d.runPod(t, podCfg)
	for _, tc := range []struct {
		ctr   string
		field *regexp.Regexp
	}{
		{"sched", regexp.MustCompile(`(?i)sched`)},
		{"ioprio", regexp.MustCompile(`(?i)io.?prio`)},
	} {
		_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, Config: containerConfig(tc.ctr, ref, "sleep", "1000"), SandboxConfig: podCfg,
		})
		if err == nil || !strings.Contains(err.Error(), "10-tuner") || !tc.field.MatchString(err.Error()) {
			t.Errorf("CreateContainer %s with an adjustment runc 1.1 cannot honour: %v, want an error naming 10-tuner and the field", tc.ctr, err)
		}
	}
	lc, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	if err != nil || len(lc.Containers) != 0 {
		t.Errorf("after the failed creates: %v, %d containers listed", err, len(lc.GetContainers()))
	}
	d.runContainer(t, pod, podCfg, containerConfig("plain", ref, "sleep", "1000"))
}
