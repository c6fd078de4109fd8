//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

// TestNRIContractStopPodHook checks that while a pod's StopPodSandbox hook
// runs its containers are already stopped (and their StopContainer
// delivered before it), and the pod can still be queried.
func TestNRIContractStopPodHook(t *testing.T) {
	const hookSleep = 5 * time.Second
	n := newNRISetup(t)
	n.install(t, "10", "slowstop", pluginConfig{Rules: []pluginRule{{Event: "StopPodSandbox", Pod: "stopping", Sleep: hookSleep.String()}}})
	d := nriDaemon(t, n, contractSlowPlugin("10-slowstop"))
	waitConfigured(t, d, n, "10-slowstop")
	log := n.eventLog("10", "slowstop")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("stopping")
	pod := d.runPod(t, podCfg)
	a := d.runContainer(t, pod, podCfg, containerConfig("a", ref, "sleep", "1000"))
	b := d.runContainer(t, pod, podCfg, containerConfig("b", ref, "sh", "-c", "trap 'exit 7' TERM; while true; do sleep 1; done"))

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := d.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		done <- err
	}()
	evs := waitEvents(t, log, 60*time.Second, func(evs []pluginEvent) bool {
		return contractFindPod(evs, "StopPodSandbox", "stopping") != nil
	})
	hook := contractFindPod(evs, "StopPodSandbox", "stopping")
	for _, id := range []string{a, b} {
		if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s while the pod's StopPodSandbox hook runs: %v, want EXITED", st.GetMetadata().GetName(), st.State)
		}
	}
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		t.Errorf("PodSandboxStatus while the StopPodSandbox hook runs: %v", err)
	} else {
		t.Logf("pod state while its StopPodSandbox hook runs: %v", ps.Status.State)
	}
	var stopErr error
	select {
	case stopErr = <-done:
		if time.Now().Before(hook.Time.Add(hookSleep)) {
			t.Errorf("StopPodSandbox returned before its %v hook could have ended", hookSleep)
		}
	default:
		stopErr = <-done
	}
	if stopErr != nil {
		t.Fatalf("StopPodSandbox: %v", stopErr)
	}
	evs = readEvents(t, log)
	for _, c := range []struct{ name, id string }{{"a", a}, {"b", b}} {
		e := contractByID(evs, "StopContainer", c.id)
		if e == nil || e.Seq > hook.Seq {
			t.Errorf("StopContainer of %s: %v, want it before StopPodSandbox #%d", c.name, e, hook.Seq)
		}
	}
	ps, err = d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod after StopPodSandbox: %v %v, want NOTREADY", ps, err)
	}
}

// TestNRIContractSyncUnderLoad connects an external plugin while four
// clients create and start pods and containers: the plugin must learn of
// every pod and container exactly once, either in its Synchronize or as a
// later RunPodSandbox / CreateContainer.
func TestNRIContractSyncUnderLoad(t *testing.T) {
	const workers, maxRounds = 4, 6
	n := newNRISetup(t)
	var (
		created atomic.Int32
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		logDirs []string
	)
	t.Cleanup(func() { // after the daemon's cleanup
		for _, dir := range logDirs {
			_ = os.RemoveAll(dir)
		}
	})
	d := nriDaemon(t, n, "")
	ref, _ := busybox(t)
	d.pull(t, ref)

	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for i := 0; i < maxRounds && !stop.Load(); i++ {
				podCfg := podConfig(fmt.Sprintf("load-%d-%d", g, i))
				mu.Lock()
				logDirs = append(logDirs, podCfg.LogDirectory)
				mu.Unlock()
				r, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
				if err != nil {
					t.Errorf("RunPodSandbox %s: %v", podCfg.Metadata.Name, err)
					return
				}
				for _, name := range []string{"a", "b"} {
					c, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
						PodSandboxId: r.PodSandboxId, Config: containerConfig(name, ref, "sleep", "1000"), SandboxConfig: podCfg,
					})
					if err != nil {
						t.Errorf("CreateContainer %s/%s: %v", podCfg.Metadata.Name, name, err)
						return
					}
					if _, err := d.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
						t.Errorf("StartContainer %s/%s: %v", podCfg.Metadata.Name, name, err)
						return
					}
					created.Add(1)
				}
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	waitCreated := func(atLeast int32) {
		deadline := time.Now().Add(3 * time.Minute)
		for created.Load() < atLeast && time.Now().Before(deadline) {
			select {
			case <-allDone:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	waitCreated(4)
	ext := n.startExternal(t, "50", "late", pluginConfig{})
	waitCreated(created.Load() + 8)
	stop.Store(true)
	<-allDone
	if t.Failed() {
		t.FailNow()
	}

	ctrs, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	log := n.eventLog("50", "late")
	podSeen := func(evs []pluginEvent, id string) (nSync, nRun int) {
		for _, e := range evs {
			if e.PodID == id && e.Event == "Synchronize" && e.ContainerID == "" {
				nSync++
			}
			if e.PodID == id && e.Event == "RunPodSandbox" {
				nRun++
			}
		}
		return nSync, nRun
	}
	unseen := func(evs []pluginEvent) []string {
		var out []string
		for _, c := range ctrs.Containers {
			if contractCount(evs, "Synchronize", c.Id)+contractCount(evs, "CreateContainer", c.Id) == 0 {
				out = append(out, "container "+c.Id)
			}
		}
		for _, p := range pods.Items {
			if s, r := podSeen(evs, p.Id); s+r == 0 {
				out = append(out, "pod "+p.Id)
			}
		}
		return out
	}
	var evs []pluginEvent
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs = readEvents(t, log)
		if len(unseen(evs)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if missing := unseen(evs); len(missing) > 0 {
		t.Errorf("the late plugin never heard of %d of %d containers+pods: %v", len(missing), len(ctrs.Containers)+len(pods.Items), missing)
	}

	known := map[string]bool{}
	var bySync, byEvent int
	for _, c := range ctrs.Containers {
		known[c.Id] = true
		s, cr := contractCount(evs, "Synchronize", c.Id), contractCount(evs, "CreateContainer", c.Id)
		switch {
		case s+cr > 1:
			t.Errorf("container %s (%s) seen %d times in Synchronize and %d times as CreateContainer, want once", c.Id, c.GetMetadata().GetName(), s, cr)
		case s == 1:
			bySync++
		case cr == 1:
			byEvent++
		}
	}
	for _, p := range pods.Items {
		if s, r := podSeen(evs, p.Id); s+r > 1 {
			t.Errorf("pod %s (%s) seen %d times in Synchronize and %d times as RunPodSandbox, want once", p.Id, p.GetMetadata().GetName(), s, r)
		}
	}
	for _, e := range evs {
		if (e.Event == "Synchronize" || e.Event == "CreateContainer") && e.ContainerID != "" && !known[e.ContainerID] {
			t.Errorf("the late plugin was told of container %s, which is not listed: %s", e.ContainerID, e)
		}
	}
	t.Logf("%d pods, %d containers: %d learnt in Synchronize, %d from CreateContainer", len(pods.Items), len(ctrs.Containers), bySync, byEvent)
	if ext.Exited() {
		t.Errorf("the late plugin exited (was it dropped?)")
	}
}

// TestNRIContractConflicts checks that two plugins adjusting the same env
// variable or the same memory limit fail the CreateContainer with an error
// naming both, that a validator's rejection fails it with the validator's
// reason, and that neither leaves anything behind.
func TestNRIContractConflicts(t *testing.T) {
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
// too, and the container ran throughout and still gets its events.
func TestNRIContractRestart(t *testing.T) {
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
	evs := waitEvents(t, pre, 30*time.Second, hasEvent("PostStartContainer", "long"))
	pid := findEvent(evs, "PostStartContainer", "long").Pid
	before := d.status(t, id)
	if got := d.containerPid(t, id); got != pid {
		t.Fatalf("PostStartContainer pid %d, runtime pid %d", pid, got)
	}

	d.kill()
	deadline := time.Now().Add(15 * time.Second)
	for !ext.Exited() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !ext.Exited() {
		t.Logf("external plugin still running 15s after crind was killed; stopping it")
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
	evs = waitEvents(t, pre, 60*time.Second, resynced(2))
	if ss := contractSessions(evs); len(ss) != 2 {
		t.Errorf("10-pre configured %d times, want 2 (launch and relaunch after the restart)", len(ss))
	}
	checkSync("10-pre", evs)

	n.startExternal(t, "20", "ext", pluginConfig{})
	evs = waitEvents(t, extLog, 30*time.Second, resynced(2))
	checkSync("20-ext", evs)
	t.Logf("after the restart: 10-pre in run %d, 20-ext in run %d, both resynchronized with %s",
		len(contractSessions(readEvents(t, pre))), len(contractSessions(evs)), id)
	waitPluginsReady(t, d, "10-pre", "20-ext")

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
	}
}
