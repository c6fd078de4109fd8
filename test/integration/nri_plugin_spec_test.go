//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNRIPluginSpec checks that the test plugin does what its spec says,
// through crind: event lines with their objects, once, fail, sleep,
// reject, the event mask, unsolicited updates of unknown containers,
// Synchronize lines of a late plugin, and Shutdown.
func TestNRIPluginSpec(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	obs, val := n.eventLog("10", "obs"), n.eventLog("90", "val")
	n.install(t, "10", "obs", pluginConfig{Rules: []pluginRule{
		{Event: "CreateContainer", Container: "failing", Once: true, Fail: "boom from rule"},
		{Event: "StartContainer", Container: "slow", Sleep: "300ms"},
		{Event: "CreateContainer", Container: "unsol", Unsolicited: []pluginUpdate{{Container: "nosuch"}}},
	}})
	n.install(t, "90", "val", pluginConfig{Events: "ValidateContainerAdjustment", Rules: []pluginRule{
		{Event: "ValidateContainerAdjustment", Container: "rejected", Reject: "no thanks"},
	}})
	t.Cleanup(func() { // runs once the daemon is stopped
		if findEvent(readEvents(t, obs), "Shutdown", "") == nil {
			t.Errorf("pre-installed plugin 10-obs got no Shutdown when crind stopped")
		}
	})
	d := nriDaemon(t, n, "")
	waitConfigured(t, d, n, "10-obs", "90-val")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("spec")
	pod := d.runPod(t, podCfg)
	create := func(name string) (string, error) {
		r, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, Config: containerConfig(name, ref, "sleep", "1000"), SandboxConfig: podCfg,
		})
		return r.GetContainerId(), err
	}

	if _, err := create("failing"); err == nil || !strings.Contains(err.Error(), "boom from rule") || !strings.Contains(err.Error(), "10-obs") {
		t.Errorf("create with a failing rule: %v, want the rule's error from 10-obs", err)
	}
	if _, err := create("failing"); err != nil {
		t.Errorf("retry after a once rule failed: %v", err)
	}
	if _, err := create("rejected"); err == nil || !strings.Contains(err.Error(), "no thanks") {
		t.Errorf("create rejected by 90-val: %v, want its reason", err)
	}

	slow := d.runContainer(t, pod, podCfg, containerConfig("slow", ref, "sleep", "1000"))
	if _, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: slow, Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := create("unsol"); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, obs, time.Minute, hasEvent("UpdateContainersResult", ""))
	if r := findEvent(evs, "UpdateContainersResult", ""); !strings.Contains(r.Error, "unknown container nosuch") || len(r.Failed) != 0 {
		t.Errorf("unsolicited update of an unknown name: %s, want an unknown container error", r)
	}

	for i, e := range evs {
		if e.Seq != i+1 || e.Plugin != "10-obs" || e.Time.IsZero() {
			t.Errorf("line %d: seq %d plugin %q time %v", i, e.Seq, e.Plugin, e.Time)
		}
	}
	if e := findEvent(evs, "RunPodSandbox", ""); e == nil || e.Pod != "spec" || e.PodID != pod || e.pod(t).GetNamespace() != "default" {
		t.Errorf("RunPodSandbox line: %v", e)
	}
	if e := findEvent(evs, "CreateContainer", "slow"); e == nil || e.ContainerID != slow || e.State != "CONTAINER_CREATED" ||
		e.container(t).GetName() != "slow" || e.PodID != pod {
		t.Errorf("CreateContainer line of slow: %v", e)
	}
	start, post := findEvent(evs, "StartContainer", "slow"), findEvent(evs, "PostStartContainer", "slow")
	if start == nil || post == nil || post.Time.Sub(start.Time) < 300*time.Millisecond || post.Pid == 0 {
		t.Errorf("StartContainer of slow did not sleep 300ms before PostStartContainer: %v, %v", start, post)
	}
	if e := findEvent(evs, "UpdateContainer", "slow"); e == nil {
		t.Errorf("no UpdateContainer line for slow")
	} else {
		var res api.LinuxResources
		if err := protojson.Unmarshal(e.Resources, &res); err != nil || res.GetMemory().GetLimit().GetValue() != 64<<20 {
			t.Errorf("UpdateContainer resources %s (%v), want a 64Mi memory limit", e.Resources, err)
		}
	}
	for _, e := range readEvents(t, val) {
		if e.Event != "Configure" && e.Event != "ValidateContainerAdjustment" {
			t.Errorf("90-val subscribed to validation only got %s", e)
		}
	}
	if findEvent(readEvents(t, val), "ValidateContainerAdjustment", "rejected") == nil {
		t.Errorf("90-val logged no ValidateContainerAdjustment for rejected")
	}

	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: slow, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, obs, time.Minute, hasEvent("StopContainer", "slow"))

	// A plugin that connects late is told about the pod and its containers.
	late := n.eventLog("30", "late")
	ext := n.startExternal(t, "30", "late", pluginConfig{})
	evs = waitEvents(t, late, time.Minute, hasEvent("Synchronize", "slow"))
	if e := findEvent(evs, "Synchronize", "slow"); e.Pod != "spec" || e.ContainerID != slow || e.State != "CONTAINER_STOPPED" {
		t.Errorf("Synchronize line of slow: %s", e)
	}
	var podLine bool
	for _, e := range evs {
		podLine = podLine || (e.Event == "Synchronize" && e.PodID == pod && e.Container == "")
	}
	if !podLine {
		t.Errorf("no Synchronize line for pod %s", pod)
	}

	// When crind stops, the external plugin gets Shutdown and exits: its
	// connection is closed. (Cleanup starts crind again to remove the pod.)
	// Not before crind has it ready: the plugin logs its Synchronize
	// before crind has its answer, and a stop during the handshake closes
	// the plugin without a Shutdown (seen on a loaded machine).
	waitPluginsReady(t, d, "30-late")
	d.stop()
	waitEvents(t, late, time.Minute, hasEvent("Shutdown", ""))
	waitEvents(t, late, time.Minute, func([]pluginEvent) bool { return ext.Exited() })
}
