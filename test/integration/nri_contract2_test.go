//go:build integration

package integration

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// contractSessions splits a plugin's log at its Configure lines: one slice
// per run of the plugin (launch, relaunch or reconnect), each starting
// with its Configure. Lines before the first Configure are dropped.
func contractSessions(evs []pluginEvent) [][]pluginEvent {
	var out [][]pluginEvent
	for _, e := range evs {
		if e.Event == "Configure" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], e)
		}
	}
	return out
}

// TestNRIContractConflicts checks that two plugins adjusting the same env
// variable or the same memory limit fail the CreateContainer with an error
// naming both, that a validator's rejection fails it with the validator's
// reason, and that neither leaves anything behind.
func TestNRIContractConflicts(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	env := func(v string) json.RawMessage {
		return protoJSON(t, &api.ContainerAdjustment{Env: []*api.KeyValue{{Key: "FOO", Value: v}}})
	}
	mem := func(limit int64) json.RawMessage {
		return protoJSON(t, &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
			Resources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(limit)}},
		}})
	}
	n.install(t, "10", "enva", pluginConfig{Rules: []pluginRule{
		{Event: "CreateContainer", Container: "envclash", Adjust: env("a")},
		{Event: "CreateContainer", Container: "memclash", Adjust: mem(100 << 20)},
	}})
	n.install(t, "20", "envb", pluginConfig{Rules: []pluginRule{
		{Event: "CreateContainer", Container: "envclash", Adjust: env("b")},
		{Event: "CreateContainer", Container: "memclash", Adjust: mem(200 << 20)},
	}})
	n.install(t, "90", "val", pluginConfig{Events: "ValidateContainerAdjustment", Rules: []pluginRule{
		{Event: "ValidateContainerAdjustment", Container: "rejected", Reject: "contract validator says no"},
	}})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-enva", "20-envb", "90-val")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("conflicts")
	pod := d.runPod(t, podCfg)

	for _, tc := range []struct {
		name string
		want []string
	}{
		{"envclash", []string{"10-enva", "20-envb"}},
		{"memclash", []string{"10-enva", "20-envb"}},
		{"rejected", []string{"contract validator says no"}},
	} {
		before := contractLeakState(d)
		_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, Config: containerConfig(tc.name, ref, "sleep", "1000"), SandboxConfig: podCfg,
		})
		if err == nil {
			t.Errorf("CreateContainer %s succeeded, want an error naming %v", tc.name, tc.want)
		} else {
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CreateContainer %s: %v, want it to name %q", tc.name, err, w)
				}
			}
		}
		if ctrs, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{}); err != nil || len(ctrs.Containers) != 0 {
			t.Errorf("after the failed CreateContainer %s: %v, %d containers listed, want none", tc.name, err, len(ctrs.GetContainers()))
		}
		contractNoNewLeaks(t, "failed CreateContainer "+tc.name, before, contractLeakState(d))
	}
	if findEvent(readEvents(t, n.eventLog("90", "val")), "ValidateContainerAdjustment", "rejected") == nil {
		t.Errorf("90-val logged no ValidateContainerAdjustment for rejected")
	}
	// A container no rule touches is created, validated and runs.
	id := d.runContainer(t, pod, podCfg, containerConfig("fine", ref, "sleep", "1000"))
	if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container fine: %v, want RUNNING", st.State)
	}
}

// TestNRIContractRestart SIGKILLs crind under a running container, with a
// pre-installed and an external plugin, and restarts it: the pre-installed
// plugin is launched again and resynchronized with the surviving pod and
// running container, a new external plugin connects and is synchronized
// too, and the container ran throughout and still gets its events. A
// second container exits while crind is down: the pre-installed plugin
// gets exactly one StopContainer for it, with its exit code, once it is
// resynchronized (crind's AttachNRI, before CRI serves), the external
// plugin that connects afterwards sees it stopped in its Synchronize, and
// a second restart delivers no StopContainer again.
func TestNRIContractRestart(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	n.install(t, "10", "pre", pluginConfig{})
	d := nriDaemon(t, n, "")
	ext := n.startExternal(t, "20", "ext", pluginConfig{})
	waitConfigured(t, d, n, "10-pre", "20-ext")
	pre, extLog := n.eventLog("10", "pre"), n.eventLog("20", "ext")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("survive")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("long", ref, "sleep", "1000"))
	diesCfg := containerConfig("dies", ref, "sh", "-c", "trap 'exit 5' TERM; echo ready; while true; do sleep 1; done")
	dies := d.runContainer(t, pod, podCfg, diesCfg)
	// Its SIGTERM below must find the trap set (a loaded machine runs the
	// shell late).
	waitLog(t, logPath(podCfg, diesCfg), "ready")
	evs := waitEvents(t, pre, 30*time.Second, func(evs []pluginEvent) bool {
		return contractByID(evs, "PostStartContainer", id) != nil && contractByID(evs, "PostStartContainer", dies) != nil
	})
	pid := findEvent(evs, "PostStartContainer", "long").Pid
	before := d.status(t, id)
	if got := d.containerPid(t, id); got != pid {
		t.Fatalf("PostStartContainer pid %d, runtime pid %d", pid, got)
	}
	diesPid := d.containerPid(t, dies)
	diesStart := startTime(diesPid)

	d.kill()
	// dies exits with 5 while crind is down; its shim records the exit.
	if err := syscall.Kill(diesPid, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM container dies (pid %d): %v", diesPid, err)
	}
	d.waitExitSeenByShim(t, dies, diesPid, diesStart)
	if ok, _ := poll.Within(30*time.Second, func() (bool, string) { return ext.Exited(), "" }); !ok {
		t.Logf("external plugin still running 30s after crind was killed; stopping it")
		ext.Stop()
	}
	d.start()

	// resynced tells whether the last session of a plugin's log has the
	// Synchronize line of the running container.
	resynced := func(sessions int) func([]pluginEvent) bool {
		return func(evs []pluginEvent) bool {
			ss := contractSessions(evs)
			return len(ss) >= sessions && contractByID(ss[len(ss)-1], "Synchronize", id) != nil
		}
	}
	checkSync := func(name string, evs []pluginEvent) {
		t.Helper()
		ss := contractSessions(evs)
		last := ss[len(ss)-1]
		c := contractByID(last, "Synchronize", id)
		ctr := c.container(t)
		if c.State != "CONTAINER_RUNNING" || c.Pid != pid || c.PodID != pod || ctr.GetStartedAt() != before.StartedAt {
			t.Errorf("%s: Synchronize after restart shows %s pid %d pod %s started %d, want RUNNING pid %d pod %s started %d",
				name, c.State, c.Pid, c.PodID, ctr.GetStartedAt(), pid, pod, before.StartedAt)
		}
		podLine := false
		for _, e := range last {
			podLine = podLine || (e.Event == "Synchronize" && e.ContainerID == "" && e.PodID == pod && e.Pod == "survive")
		}
		if !podLine {
			t.Errorf("%s: no Synchronize line for pod %s after restart", name, pod)
		}
	}
	// stopped checks the session's view of a container that stopped: a
	// Synchronize line and stops StopContainer events, the last one STOPPED
	// with exit code exit.
	stopped := func(name string, session []pluginEvent, ctrID, ctrName string, stops, exit int) {
		t.Helper()
		if k := contractCount(session, "StopContainer", ctrID); k != stops {
			t.Errorf("%s: %d StopContainer for %s in this session, want %d", name, k, ctrName, stops)
		}
		s := contractByID(session, "Synchronize", ctrID)
		if s == nil {
			t.Errorf("%s: no Synchronize line for %s", name, ctrName)
			return
		}
		if stops == 0 && (s.State != "CONTAINER_STOPPED" || s.ExitCode != exit) {
			t.Errorf("%s: Synchronize shows %s: %s exit %d, want STOPPED %d", name, ctrName, s.State, s.ExitCode, exit)
		}
		if e := contractByID(session, "StopContainer", ctrID); e != nil {
			if e.State != "CONTAINER_STOPPED" || e.ExitCode != exit || e.Seq < s.Seq {
				t.Errorf("%s: StopContainer for %s: #%d %s exit %d, want STOPPED %d after Synchronize #%d", name, ctrName, e.Seq, e.State, e.ExitCode, exit, s.Seq)
			}
		}
	}
	evs = waitEvents(t, pre, 60*time.Second, resynced(2))
	if ss := contractSessions(evs); len(ss) != 2 {
		t.Errorf("10-pre configured %d times, want 2 (launch and relaunch after the restart)", len(ss))
	}
	checkSync("10-pre", evs)
	// CRI serves once AttachNRI delivered the exits recorded while crind
	// was down, so the StopContainer is in the log by now.
	if st := d.status(t, dies); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 5 {
		t.Errorf("container dies after the restart: %v exit %d, want EXITED 5", st.State, st.ExitCode)
	}
	if k := contractCount(contractSessions(readEvents(t, pre))[0], "StopContainer", dies); k != 0 {
		t.Errorf("10-pre got %d StopContainer for dies before the restart, want none", k)
	}
	ss := contractSessions(readEvents(t, pre))
	stopped("10-pre after the restart", ss[len(ss)-1], dies, "dies", 1, 5)

	n.startExternal(t, "20", "ext", pluginConfig{})
	evs = waitEvents(t, extLog, 30*time.Second, resynced(2))
	checkSync("20-ext", evs)
	t.Logf("after the restart: 10-pre in run %d, 20-ext in run %d, both resynchronized with %s",
		len(contractSessions(readEvents(t, pre))), len(contractSessions(evs)), id)
	waitPluginsReady(t, d, "10-pre", "20-ext")
	ss = contractSessions(readEvents(t, extLog))
	stopped("20-ext, connected after the restart", ss[len(ss)-1], dies, "dies", 0, 5)

	st := d.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt != before.StartedAt || d.containerPid(t, id) != pid {
		t.Errorf("container after restart: %v started %d, want RUNNING started %d, same pid %d", st.State, st.StartedAt, before.StartedAt, pid)
	}

	// The resynchronized plugins get the container's next events.
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{pre, extLog} {
		evs := waitEvents(t, l, 30*time.Second, func(evs []pluginEvent) bool {
			ss := contractSessions(evs)
			return contractByID(ss[len(ss)-1], "StopContainer", id) != nil
		})
		ss := contractSessions(evs)
		if k := contractCount(ss[len(ss)-1], "StopContainer", id); k != 1 {
			t.Errorf("%s: %d StopContainer after restart, want 1", l, k)
		}
		if e := contractByID(ss[len(ss)-1], "StopContainer", id); e.ExitCode != 143 {
			t.Errorf("%s: StopContainer exit code %d, want 143", l, e.ExitCode)
		}
		if k := contractCount(ss[len(ss)-1], "StopContainer", dies); k > 1 {
			t.Errorf("%s: %d StopContainer for dies after restart, want at most 1", l, k)
		}
	}

	// A second restart delivers no StopContainer again: both exits were
	// delivered and recorded as such.
	d.kill()
	d.start()
	waitEvents(t, pre, 60*time.Second, func(evs []pluginEvent) bool {
		ss := contractSessions(evs)
		return len(ss) >= 3 && contractByID(ss[len(ss)-1], "Synchronize", id) != nil
	})
	waitPluginsReady(t, d, "10-pre")
	ss = contractSessions(readEvents(t, pre))
	if len(ss) != 3 {
		t.Errorf("10-pre configured %d times, want 3", len(ss))
	}
	last := ss[len(ss)-1]
	stopped("10-pre after the second restart", last, dies, "dies", 0, 5)
	stopped("10-pre after the second restart", last, id, "long", 0, 143)
	for _, e := range last {
		if contractLifecycleEvents[e.Event] {
			t.Errorf("10-pre after the second restart got %s, want no lifecycle event", e)
		}
	}
}
