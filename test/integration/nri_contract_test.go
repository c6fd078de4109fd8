//go:build integration

package integration

// The NRI contract of crind, as DESIGN.md's "Lifecycle and NRI hook points"
// table and docs/state-machines.md state it, checked through the test
// plugin's event logs: the order of the hooks and what they carry, failing
// hooks, visibility while a hook runs (this file); StopContainer exactly
// once and the StopPodSandbox hook (nri_contract_stop_test.go); plugins
// connecting while events are in progress (nri_contract_sync_test.go);
// conflicting adjustments and restarts (nri_contract2_test.go).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/testnet"
)

// contractLifecycleEvents are the events of a pod and its containers, as
// opposed to the plugin's own (Configure, Synchronize, Shutdown, results).
var contractLifecycleEvents = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range api.EventPrettyNames {
		m[name] = true
	}
	delete(m, "ValidateContainerAdjustment")
	return m
}()

// contractPodEvents returns the lifecycle events about pod id, in log
// order.
func contractPodEvents(evs []pluginEvent, podID string) []pluginEvent {
	var out []pluginEvent
	for _, e := range evs {
		if contractLifecycleEvents[e.Event] && e.PodID == podID {
			out = append(out, e)
		}
	}
	return out
}

// contractFindPod returns the first event named event about the pod named
// pod, or nil.
func contractFindPod(evs []pluginEvent, event, pod string) *pluginEvent {
	for i := range evs {
		if evs[i].Event == event && evs[i].Pod == pod {
			return &evs[i]
		}
	}
	return nil
}

// contractCount counts the events named event about container id.
func contractCount(evs []pluginEvent, event, id string) int {
	n := 0
	for _, e := range evs {
		if e.Event == event && e.ContainerID == id {
			n++
		}
	}
	return n
}

// contractByID returns the first event named event about container id, or
// nil.
func contractByID(evs []pluginEvent, event, id string) *pluginEvent {
	for i := range evs {
		if evs[i].Event == event && evs[i].ContainerID == id {
			return &evs[i]
		}
	}
	return nil
}

// contractLeaks is what crind leaves on the host: mounts under its dirs,
// runtime state and netns entries, container rootfs dirs, processes naming
// its state dir, and cgroups under its parent.
type contractLeaks map[string][]string

func contractLeakState(d *daemon) contractLeaks {
	out := contractLeaks{}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], d.root+"/") || strings.HasPrefix(f[4], d.state+"/")) {
			if f[4] == filepath.Join(d.state, "netns") {
				continue // the netns directory itself, made private once
			}
			out["mount"] = append(out["mount"], f[4])
		}
	}
	for kind, dir := range map[string]string{
		"runtime state": filepath.Join(d.state, "c"),
		"netns":         filepath.Join(d.state, "netns"),
		"rootfs":        filepath.Join(d.root, "image", "containers"),
	} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			out[kind] = append(out[kind], e.Name())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), d.state) {
			out["process"] = append(out["process"], filepath.Base(filepath.Dir(p))+" "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	for _, ctl := range []string{"memory", "pids", "cpu", "freezer"} {
		base := filepath.Join("/sys/fs/cgroup", ctl, d.cgroup)
		_ = filepath.WalkDir(base, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() && path != base {
				out["cgroup"] = append(out["cgroup"], ctl+":"+strings.TrimPrefix(path, base))
			}
			return nil
		})
	}
	return out
}

// contractNoNewLeaks fails the test for anything in after that was not in
// before.
func contractNoNewLeaks(t *testing.T, what string, before, after contractLeaks) {
	t.Helper()
	for kind, items := range after {
		for _, it := range items {
			if !slices.Contains(before[kind], it) {
				t.Errorf("%s leaked %s %s", what, kind, it)
			}
		}
	}
}

// contractSlowPlugin is extra [nri] configuration that lets plugin (NN-name)
// take 30s per event, so that its sleep rules are waited for (or a slow
// machine's plugin is not taken for a hung one).
func contractSlowPlugin(plugin string) string {
	return fmt.Sprintf("[nri.plugins.%q]\nrequest_timeout = \"30s\"\n", plugin)
}

// hookGate is a file a test plugin's hook waits for (pluginRule.WaitFor):
// the hook is in progress until the test opens the gate. A test defers
// open too, so that a failed test does not leave crind waiting for the
// hook while the daemon is cleaned up.
type hookGate struct{ path string }

func newHookGate(t *testing.T) hookGate {
	return hookGate{path: filepath.Join(t.TempDir(), "open")}
}

// open ends the hooks waiting for g; opening it again does nothing.
func (g hookGate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(g.path, nil, 0o644); err != nil {
		t.Errorf("open hook gate: %v", err)
	}
}

// contractHasKV tells whether m holds every key of want with its value.
func contractHasKV(m, want map[string]string) bool {
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// TestNRIContractHookOrder drives one pod and two containers through every
// CRI call that has a hook and checks that a plugin subscribed to
// everything sees exactly the hooks of DESIGN.md, in order, each carrying
// the pod's and the container's metadata and state at that point: a
// container stopped by CRI, the pod's resources updated in between, and a
// container that exits by itself at once (its StopContainer after its
// PostStartContainer and before its RemoveContainer, with its exit code).
func TestNRIContractHookOrder(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	n.install(t, "10", "obs", pluginConfig{})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-obs")
	obs := n.eventLog("10", "obs")
	ref, _ := busybox(t)
	d.pull(t, ref)

	podCfg := podConfig("order")
	podCfg.Annotations["contract.test/pod"] = "pod-annotation"
	pod := d.runPod(t, podCfg)
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	podIPs := []string{ps.Status.GetNetwork().GetIp()}
	for _, ip := range ps.Status.GetNetwork().GetAdditionalIps() {
		podIPs = append(podIPs, ip.GetIp())
	}

	hostDir := t.TempDir()
	cfg := containerConfig("worker", ref)
	cfg.Command, cfg.Args = []string{"sh"}, []string{"-c", "exec sleep 1000"}
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "CONTRACT_ENV", Value: []byte("contract-value")}}
	cfg.Annotations = map[string]string{"contract.test/ctr": "ctr-annotation"}
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/contract", HostPath: hostDir, Readonly: true}}
	id := d.createContainer(t, pod, podCfg, cfg)
	d.startContainer(t, id)
	if _, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	podOverhead := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, CpuShares: 64}
	podResources := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 << 20, CpuShares: 768, CpuQuota: 150000, CpuPeriod: 100000}
	if _, err := d.rs.UpdatePodSandboxResources(ctxT(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod, Overhead: podOverhead, Resources: podResources,
	}); err != nil {
		t.Fatal(err)
	}
	running := d.status(t, id)
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	exited := d.status(t, id)
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}

	// The quitter exits at once; it is removed as soon as CRI shows it
	// exited, without waiting for its StopContainer.
	quitter := d.runContainer(t, pod, podCfg, containerConfig("quitter", ref, "sh", "-c", "exit 3"))
	quitStatus := d.waitExited(t, quitter)
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: quitter}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}

	evs := waitEvents(t, obs, 30*time.Second, func(evs []pluginEvent) bool {
		return contractFindPod(evs, "RemovePodSandbox", "order") != nil
	})
	got := contractPodEvents(evs, pod)
	var names []string
	for _, e := range got {
		s := e.Event
		if e.Container != "" {
			s += "/" + e.Container
		}
		names = append(names, s)
	}
	want := []string{"RunPodSandbox",
		"CreateContainer/worker", "PostCreateContainer/worker", "StartContainer/worker", "PostStartContainer/worker",
		"UpdateContainer/worker", "PostUpdateContainer/worker", "UpdatePodSandbox", "PostUpdatePodSandbox",
		"StopContainer/worker", "RemoveContainer/worker",
		"CreateContainer/quitter", "PostCreateContainer/quitter", "StartContainer/quitter", "PostStartContainer/quitter",
		"StopContainer/quitter", "RemoveContainer/quitter",
		"StopPodSandbox", "RemovePodSandbox"}
	if !slices.Equal(names, want) {
		t.Fatalf("hooks for pod %s:\n got  %v\n want %v", pod, names, want)
	}

	updated := false // the pod's resources were updated (PostUpdatePodSandbox seen)
	for _, e := range got {
		p := e.pod(t)
		if p.GetId() != pod || p.GetName() != "order" || p.GetUid() != podCfg.Metadata.Uid || p.GetNamespace() != "default" ||
			!contractHasKV(p.GetLabels(), podCfg.Labels) || !contractHasKV(p.GetAnnotations(), podCfg.Annotations) ||
			p.GetRuntimeHandler() != ps.Status.GetRuntimeHandler() {
			t.Errorf("%s: pod id %q name %q uid %q ns %q labels %v annotations %v handler %q; want %s order %s default %v %v ⊆, handler %q",
				e, p.GetId(), p.GetName(), p.GetUid(), p.GetNamespace(), p.GetLabels(), p.GetAnnotations(), p.GetRuntimeHandler(),
				pod, podCfg.Metadata.Uid, podCfg.Labels, podCfg.Annotations, ps.Status.GetRuntimeHandler())
		}
		// The pod runs (pid, IPs) from RunPodSandbox until it is stopped.
		if e.Event != "StopPodSandbox" && e.Event != "RemovePodSandbox" {
			if p.GetPid() == 0 || !slices.Equal(p.GetIps(), podIPs) {
				t.Errorf("%s: pod pid %d ips %v, want a pid and ips %v", e, p.GetPid(), p.GetIps(), podIPs)
			}
		}
		switch e.Event {
		case "UpdatePodSandbox":
			var res api.LinuxResources
			if err := protojson.Unmarshal(e.Resources, &res); err != nil || !contractSameResources(&res, podResources) {
				t.Errorf("%s: resources %s (%v), want the requested %v", e, e.Resources, err, podResources)
			}
		case "PostUpdatePodSandbox":
			updated = true
		}
		// From PostUpdatePodSandbox on, the pod carries its new resources.
		if updated {
			l := p.GetLinux()
			if !contractSameResources(l.GetPodResources(), podResources) || !contractSameResources(l.GetPodOverhead(), podOverhead) {
				t.Errorf("%s: pod resources %v overhead %v, want the updated %v and %v", e, l.GetPodResources(), l.GetPodOverhead(), podResources, podOverhead)
			}
		}
		switch e.ContainerID {
		case "":
			if strings.Contains(e.Event, "Container") {
				t.Errorf("%s: no container", e)
			}
		case id:
			contractCheckWorker(t, e, id, pod, hostDir, cfg, running, exited)
		case quitter:
			c := e.container(t)
			if c.GetPodSandboxId() != pod || c.GetName() != "quitter" {
				t.Errorf("%s: container pod %q name %q, want %s quitter", e, c.GetPodSandboxId(), c.GetName(), pod)
			}
			if e.Event == "StopContainer" || e.Event == "RemoveContainer" {
				if c.GetState() != api.ContainerState_CONTAINER_STOPPED || c.GetExitCode() != 3 || c.GetStatusReason() != quitStatus.Reason ||
					c.GetFinishedAt() != quitStatus.FinishedAt {
					t.Errorf("%s: state %v exit %d reason %q finished %d, want STOPPED 3 %q %d", e,
						c.GetState(), c.GetExitCode(), c.GetStatusReason(), c.GetFinishedAt(), quitStatus.Reason, quitStatus.FinishedAt)
				}
			}
		default:
			t.Errorf("%s: unknown container %s", e, e.ContainerID)
		}
	}
	if exited.ExitCode != 143 || exited.Reason == "" {
		t.Errorf("stopped container: exit %d reason %q, want 143 and a reason", exited.ExitCode, exited.Reason)
	}
	if quitStatus.ExitCode != 3 || quitStatus.Reason != "Error" {
		t.Errorf("self-exited container: exit %d reason %q, want 3 Error", quitStatus.ExitCode, quitStatus.Reason)
	}
}

// contractSameResources tells whether NRI resources hold the memory limit
// and CPU shares, quota and period of CRI resources (unset fields on both
// sides compare equal).
func contractSameResources(got *api.LinuxResources, want *runtimeapi.LinuxContainerResources) bool {
	return got.GetMemory().GetLimit().GetValue() == want.GetMemoryLimitInBytes() &&
		int64(got.GetCpu().GetShares().GetValue()) == want.GetCpuShares() &&
		got.GetCpu().GetQuota().GetValue() == want.GetCpuQuota() &&
		int64(got.GetCpu().GetPeriod().GetValue()) == want.GetCpuPeriod()
}

// contractCheckWorker checks what an event of TestNRIContractHookOrder's
// worker container carries.
func contractCheckWorker(t *testing.T, e pluginEvent, id, pod, hostDir string, cfg *runtimeapi.ContainerConfig, running, exited *runtimeapi.ContainerStatus) {
	t.Helper()
	c := e.container(t)
	if c.GetId() != id || c.GetPodSandboxId() != pod || c.GetName() != "worker" {
		t.Errorf("%s: container id %q pod %q name %q, want %s %s worker", e, c.GetId(), c.GetPodSandboxId(), c.GetName(), id, pod)
	}
	if !contractHasKV(c.GetLabels(), cfg.Labels) || !contractHasKV(c.GetAnnotations(), cfg.Annotations) {
		t.Errorf("%s: labels %v annotations %v, want %v and %v among them", e, c.GetLabels(), c.GetAnnotations(), cfg.Labels, cfg.Annotations)
	}
	if !slices.Equal(c.GetArgs(), []string{"sh", "-c", "exec sleep 1000"}) || !slices.Contains(c.GetEnv(), "CONTRACT_ENV=contract-value") {
		t.Errorf("%s: args %q env %q", e, c.GetArgs(), c.GetEnv())
	}
	if !slices.ContainsFunc(c.GetMounts(), func(m *api.Mount) bool {
		return m.GetDestination() == "/contract" && m.GetSource() == hostDir
	}) {
		t.Errorf("%s: no mount of %s at /contract in %v", e, hostDir, c.GetMounts())
	}
	if c.GetImage().GetName() != running.GetImage().GetImage() || c.GetCreatedAt() != running.CreatedAt {
		t.Errorf("%s: image %q created %d, want %q %d", e, c.GetImage().GetName(), c.GetCreatedAt(), running.GetImage().GetImage(), running.CreatedAt)
	}
	switch e.Event {
	case "CreateContainer", "PostCreateContainer":
		if c.GetState() != api.ContainerState_CONTAINER_CREATED || c.GetPid() != 0 || c.GetStartedAt() != 0 {
			t.Errorf("%s: state %v pid %d started %d, want CREATED, no pid, not started", e, c.GetState(), c.GetPid(), c.GetStartedAt())
		}
	case "PostStartContainer", "UpdateContainer", "PostUpdateContainer":
		if c.GetState() != api.ContainerState_CONTAINER_RUNNING || c.GetPid() == 0 || c.GetStartedAt() != running.StartedAt || c.GetFinishedAt() != 0 {
			t.Errorf("%s: state %v pid %d started %d finished %d, want RUNNING with a pid, started %d", e,
				c.GetState(), c.GetPid(), c.GetStartedAt(), c.GetFinishedAt(), running.StartedAt)
		}
	case "StopContainer", "RemoveContainer":
		if c.GetState() != api.ContainerState_CONTAINER_STOPPED || c.GetExitCode() != exited.ExitCode ||
			c.GetStatusReason() != exited.Reason || c.GetFinishedAt() != exited.FinishedAt || c.GetStartedAt() != running.StartedAt {
			t.Errorf("%s: state %v exit %d reason %q started %d finished %d; want STOPPED %d %q %d %d", e,
				c.GetState(), c.GetExitCode(), c.GetStatusReason(), c.GetStartedAt(), c.GetFinishedAt(),
				exited.ExitCode, exited.Reason, running.StartedAt, exited.FinishedAt)
		}
	}
	if e.Event == "UpdateContainer" {
		var res api.LinuxResources
		if err := protojson.Unmarshal(e.Resources, &res); err != nil || res.GetMemory().GetLimit().GetValue() != 64<<20 {
			t.Errorf("%s: resources %s (%v), want the requested 64Mi memory limit", e, e.Resources, err)
		}
	}
}

// TestNRIContractFailingHooks makes a RunPodSandbox and a CreateContainer
// hook fail: each call fails with the plugin's message and name, leaves
// nothing behind (no pod or container listed, no netns, IP, mount, shim,
// rootfs or cgroup), and a retry with the same name succeeds. As
// docs/state-machines.md says, the rollback tells every plugin to forget
// the refused object: RemovePodSandbox / RemoveContainer (and nothing else)
// to the failing plugin, which saw the create, and to a later plugin, which
// never did.
func TestNRIContractFailingHooks(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	n.install(t, "10", "fail", pluginConfig{Rules: []pluginRule{
		{Event: "RunPodSandbox", Pod: "bad", Once: true, Fail: "contract refuses pod bad"},
		{Event: "CreateContainer", Container: "badctr", Once: true, Fail: "contract refuses container badctr"},
	}})
	n.install(t, "20", "obs", pluginConfig{})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-fail", "20-obs")
	log, obs := n.eventLog("10", "fail"), n.eventLog("20", "obs")
	// forgot checks the lifecycle events each plugin got about the refused
	// pod or container with the given id.
	forgot := func(what, id string, want map[string][]string) {
		t.Helper()
		for plugin, names := range want {
			path := n.eventLog(plugin[:2], plugin[3:])
			last := names[len(names)-1]
			evs := waitEvents(t, path, time.Minute, func(evs []pluginEvent) bool {
				return slices.ContainsFunc(evs, func(e pluginEvent) bool {
					return e.Event == last && (e.ContainerID == id || (e.ContainerID == "" && e.PodID == id))
				})
			})
			var got []string
			for _, e := range evs {
				if contractLifecycleEvents[e.Event] && (e.ContainerID == id || (e.ContainerID == "" && e.PodID == id)) {
					got = append(got, e.Event)
				}
			}
			if !slices.Equal(got, names) {
				t.Errorf("%s: %s got %v about %s, want %v", what, plugin, got, id, names)
			}
		}
	}
	ref, _ := busybox(t)
	d.pull(t, ref)
	ipamDir := filepath.Join(d.net.IPAMDir, testnet.Name)

	before := contractLeakState(d)
	podCfg := podConfig("bad")
	t.Cleanup(func() { _ = os.RemoveAll(podCfg.LogDirectory) })
	_, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err == nil || !strings.Contains(err.Error(), "contract refuses pod bad") || !strings.Contains(err.Error(), "10-fail") {
		t.Fatalf("RunPodSandbox with a failing hook: %v, want an error with the plugin's message and name 10-fail", err)
	}
	hook := contractFindPod(readEvents(t, log), "RunPodSandbox", "bad")
	if hook == nil || hook.PodID == "" {
		t.Fatalf("10-fail logged no RunPodSandbox for pod bad")
	}
	if _, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: hook.PodID}); code(err) != "NotFound" {
		t.Errorf("PodSandboxStatus of the refused pod %s: %v, want NotFound", hook.PodID, err)
	}
	d.assertEmpty(t, ipamDir)
	contractNoNewLeaks(t, "refused RunPodSandbox", before, contractLeakState(d))
	forgot("refused pod", hook.PodID, map[string][]string{
		"10-fail": {"RunPodSandbox", "RemovePodSandbox"},
		"20-obs":  {"RemovePodSandbox"},
	})
	if e := contractFindPod(readEvents(t, obs), "RemovePodSandbox", "bad"); e.PodID != hook.PodID || e.pod(t).GetUid() != podCfg.Metadata.Uid {
		t.Errorf("20-obs RemovePodSandbox of the refused pod: id %s uid %s, want %s %s", e.PodID, e.pod(t).GetUid(), hook.PodID, podCfg.Metadata.Uid)
	}

	pod := d.runPod(t, podCfg)
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("retried pod bad: %v %v, want READY", ps, err)
	}

	before = contractLeakState(d)
	cfg := containerConfig("badctr", ref, "sleep", "1000")
	_, err = d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err == nil || !strings.Contains(err.Error(), "contract refuses container badctr") || !strings.Contains(err.Error(), "10-fail") {
		t.Fatalf("CreateContainer with a failing hook: %v, want an error with the plugin's message and name 10-fail", err)
	}
	cHook := findEvent(readEvents(t, log), "CreateContainer", "badctr")
	if cHook == nil || cHook.ContainerID == "" {
		t.Fatalf("10-fail logged no CreateContainer for badctr")
	}
	if ctrs, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{}); err != nil || len(ctrs.Containers) != 0 {
		t.Errorf("after a refused CreateContainer: %v, %d containers listed, want none", err, len(ctrs.GetContainers()))
	}
	if _, err := d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: cHook.ContainerID}); code(err) != "NotFound" {
		t.Errorf("ContainerStatus of the refused container %s: %v, want NotFound", cHook.ContainerID, err)
	}
	contractNoNewLeaks(t, "refused CreateContainer", before, contractLeakState(d))
	// A container that never came into being gets no StopContainer.
	forgot("refused container", cHook.ContainerID, map[string][]string{
		"10-fail": {"CreateContainer", "RemoveContainer"},
		"20-obs":  {"RemoveContainer"},
	})
	if e := contractByID(readEvents(t, obs), "RemoveContainer", cHook.ContainerID); e.Container != "badctr" || e.PodID != pod {
		t.Errorf("20-obs RemoveContainer of the refused container: %s in pod %s, want badctr in %s", e, e.PodID, pod)
	}

	id := d.runContainer(t, pod, podCfg, cfg)
	if got := d.execOut(t, id, "echo", "alive"); got != "alive" {
		t.Errorf("retried container badctr: exec says %q", got)
	}
	// cleanupAll (at the end) removes the pod and checks for leaks.
}

// TestNRIContractPodHiddenDuringRunHook checks that while a pod's
// RunPodSandbox hook runs the pod is neither listed nor found, and that no
// container can be created in it: workloads cannot start before the hook
// ends.
func TestNRIContractPodHiddenDuringRunHook(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	gate := newHookGate(t)
	defer gate.open(t)
	n.install(t, "10", "slow", pluginConfig{Rules: []pluginRule{{Event: "RunPodSandbox", Pod: "hidden", WaitFor: gate.path}}})
	d := nriDaemon(t, n, contractSlowPlugin("10-slow"))
	waitConfigured(t, d, n, "10-slow")
	log := n.eventLog("10", "slow")
	ref, _ := busybox(t)
	d.pull(t, ref)

	podCfg := podConfig("hidden")
	t.Cleanup(func() { _ = os.RemoveAll(podCfg.LogDirectory) })
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
		done <- result{r.GetPodSandboxId(), err}
	}()
	evs := waitEvents(t, log, 60*time.Second, func(evs []pluginEvent) bool {
		return contractFindPod(evs, "RunPodSandbox", "hidden") != nil
	})
	hook := contractFindPod(evs, "RunPodSandbox", "hidden")

	// The hook runs until the gate opens.
	created := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: hook.PodID, Config: containerConfig("early", ref, "sleep", "1000"), SandboxConfig: podCfg,
		})
		created <- err
	}()

	list, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox during the hook: %v", err)
	}
	for _, p := range list.Items {
		if p.Id == hook.PodID || p.GetMetadata().GetName() == "hidden" {
			t.Fatalf("pod %s listed (%v) while its RunPodSandbox hook runs", p.Id, p.State)
		}
	}
	if _, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: hook.PodID}); code(err) != "NotFound" {
		t.Fatalf("PodSandboxStatus of %s while its RunPodSandbox hook runs: %v, want NotFound", hook.PodID, err)
	}
	// CreateContainer answers at once, while the hook still runs.
	select {
	case err := <-created:
		if code(err) != "NotFound" {
			t.Errorf("CreateContainer in pod %s while its RunPodSandbox hook runs: %v (%s), want NotFound", hook.PodID, err, code(err))
		}
	case <-time.After(time.Minute):
		t.Fatalf("CreateContainer in pod %s waited for its RunPodSandbox hook", hook.PodID)
	}
	select {
	case r := <-done:
		t.Fatalf("RunPodSandbox returned while its hook runs: %q, %v", r.id, r.err)
	default:
	}
	gate.open(t)

	r := <-done
	if r.err != nil || r.id != hook.PodID {
		t.Fatalf("RunPodSandbox: id %q err %v, want %s", r.id, r.err, hook.PodID)
	}
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: r.id})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after its hook: %v %v, want READY", ps, err)
	}
	id := d.runContainer(t, r.id, podCfg, containerConfig("late", ref, "sleep", "1000"))
	if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container created after the hook: %v, want RUNNING", st.State)
	}
	ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	for _, c := range ctrs.GetContainers() {
		if c.GetMetadata().GetName() == "early" {
			t.Errorf("container early, created while the pod's hook ran, is listed (%v)", c.State)
		}
	}
}
