//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNRIContractStopPodHook checks that while a pod's StopPodSandbox hook
// runs its containers are already stopped (and their StopContainer
// delivered before it), and the pod can still be queried.
func TestNRIContractStopPodHook(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	gate := newHookGate(t)
	defer gate.open(t)
	n.install(t, "10", "slowstop", pluginConfig{Rules: []pluginRule{{Event: "StopPodSandbox", Pod: "stopping", WaitFor: gate.path}}})
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
	select {
	case err := <-done:
		t.Fatalf("StopPodSandbox returned while its hook runs: %v", err)
	default:
	}
	gate.open(t)
	if stopErr := <-done; stopErr != nil {
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

// TestNRIContractStopOnce checks that every container gets exactly one
// StopContainer: one that exits by itself (also when CRI stops and removes
// it later), one stopped by CRI twice, one that exited before its pod was
// stopped and one stopped with its pod.
func TestNRIContractStopOnce(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	n.install(t, "10", "obs", pluginConfig{})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-obs")
	obs := n.eventLog("10", "obs")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("stoponce")
	pod := d.runPod(t, podCfg)
	stop := func(id string) {
		t.Helper()
		if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
			t.Fatalf("StopContainer %s: %v", id, err)
		}
	}
	remove := func(id string) {
		t.Helper()
		if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("RemoveContainer %s: %v", id, err)
		}
	}
	final := map[string]*runtimeapi.ContainerStatus{}

	self := d.runContainer(t, pod, podCfg, containerConfig("self", ref, "sh", "-c", "exit 3"))
	final[self] = d.waitExited(t, self)
	waitEvents(t, obs, 30*time.Second, hasEvent("StopContainer", "self"))
	stop(self)
	remove(self)

	byCRI := d.runContainer(t, pod, podCfg, containerConfig("bycri", ref, "sleep", "1000"))
	stop(byCRI)
	stop(byCRI)
	final[byCRI] = d.status(t, byCRI)
	remove(byCRI)

	left := d.runContainer(t, pod, podCfg, containerConfig("left", ref, "sh", "-c", "exit 4"))
	final[left] = d.waitExited(t, left)
	waitEvents(t, obs, 30*time.Second, hasEvent("StopContainer", "left"))
	withPod := d.runContainer(t, pod, podCfg, containerConfig("withpod", ref, "sleep", "1000"))
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	final[withPod] = d.status(t, withPod)
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, obs, 30*time.Second, func(evs []pluginEvent) bool {
		return contractFindPod(evs, "RemovePodSandbox", "stoponce") != nil
	})

	for _, tc := range []struct {
		name, id string
		exit     int32
	}{{"self", self, 3}, {"bycri", byCRI, 143}, {"left", left, 4}, {"withpod", withPod, final[withPod].ExitCode}} {
		st := final[tc.id]
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != tc.exit {
			t.Errorf("%s: status %v exit %d, want EXITED %d", tc.name, st.State, st.ExitCode, tc.exit)
		}
		if got := contractCount(evs, "StopContainer", tc.id); got != 1 {
			t.Errorf("%s: %d StopContainer events, want exactly 1", tc.name, got)
			continue
		}
		e := contractByID(evs, "StopContainer", tc.id)
		c := e.container(t)
		if c.GetState() != api.ContainerState_CONTAINER_STOPPED || c.GetExitCode() != st.ExitCode || c.GetStatusReason() != st.Reason {
			t.Errorf("%s: StopContainer shows %v exit %d reason %q, want STOPPED %d %q", tc.name, c.GetState(), c.GetExitCode(), c.GetStatusReason(), st.ExitCode, st.Reason)
		}
		if r := contractByID(evs, "RemoveContainer", tc.id); r == nil || r.Seq < e.Seq {
			t.Errorf("%s: RemoveContainer %v, want one after StopContainer #%d", tc.name, r, e.Seq)
		}
	}
	if s := contractFindPod(evs, "StopPodSandbox", "stoponce"); s != nil {
		if e := contractByID(evs, "StopContainer", withPod); e != nil && e.Seq > s.Seq {
			t.Errorf("StopContainer of withpod (#%d) came after StopPodSandbox (#%d)", e.Seq, s.Seq)
		}
	} else {
		t.Errorf("no StopPodSandbox event")
	}
}
