//go:build integration

package integration

import (
	"os"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCrunReadiness checks that crind tells at start-up whether crun can
// run containers on this host: on a hybrid cgroup layout with controllers
// on the cgroup2 mount (this project's CI machine: hugetlb alone there)
// crun refuses every container, so crind reports the handler not ready,
// advertises no features for it and refuses its pods with
// FailedPrecondition saying why; elsewhere a crun pod runs.
func TestCrunReadiness(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	st, err := d.rs.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var cond *runtimeapi.RuntimeCondition
	for _, c := range st.Status.Conditions {
		if c.Type == "RuntimeHandlerReady/crun" {
			cond = c
		}
	}
	b, _ := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	refuses := cgroups.Mode() == cgroups.Hybrid && strings.TrimSpace(string(b)) != ""

	podCfg := podConfig("crun")
	resp, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "crun"})
	if !refuses {
		if cond != nil {
			t.Errorf("crun reported not ready on a host it runs on: %v", cond)
		}
		if err != nil {
			t.Fatalf("RunPodSandbox with crun: %v", err)
		}
		ref, _ := busybox(t)
		d.pull(t, ref)
		id := d.runContainer(t, resp.PodSandboxId, podCfg, containerConfig("c", ref, "sh", "-c", "echo crun-ok"))
		if st := d.waitExited(t, id); st.ExitCode != 0 {
			t.Errorf("crun container exited %d", st.ExitCode)
		}
		return
	}
	if cond == nil || cond.Status || !strings.Contains(cond.Message, "hybrid") || !strings.Contains(cond.Message, strings.TrimSpace(string(b))) {
		t.Errorf("condition for crun %v; want not ready, saying the hybrid layout and naming %q", cond, b)
	}
	for _, h := range st.RuntimeHandlers {
		if h.Name == "crun" && (h.Features.GetRecursiveReadOnlyMounts() || h.Features.GetUserNamespaces()) {
			t.Errorf("a handler that cannot run advertises features: %v", h.Features)
		}
	}
	if code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "hybrid") {
		t.Errorf("RunPodSandbox with crun: %v; want FailedPrecondition saying why", err)
	}
	l, err := d.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("pods after a refused RunPodSandbox: %v, %v", l.GetItems(), err)
	}
	// runc, on the same host, still runs pods.
	d.runPod(t, podConfig("runc"))
}
