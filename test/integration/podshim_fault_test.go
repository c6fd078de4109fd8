//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestPodShimCrindKilledDuringRun kills crind with SIGKILL while a pod
// without an infra process is half made: its shim, started ahead by
// RunPodSandbox, runs, and the pod waits in its NRI RunPodSandbox hook.
// The restarted crind undoes the pod and its shim goes too: no process,
// dir, pod or leak is left (cleanupAll checks the rest).
func TestPodShimCrindKilledDuringRun(t *testing.T) {
	runsOn(t, oci)
	n := newNRISetup(t)
	gate := newHookGate(t)
	defer gate.open(t)
	n.install(t, "10", "slow", pluginConfig{Rules: []pluginRule{{Event: "RunPodSandbox", Pod: "halfmade", WaitFor: gate.path}}})
	d := nriDaemon(t, n, contractSlowPlugin("10-slow"))
	waitConfigured(t, d, n, "10-slow")

	podCfg := noInfraPodConfig("halfmade")
	t.Cleanup(func() { _ = os.RemoveAll(podCfg.LogDirectory) })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
		done <- err
	}()
	evs := waitEvents(t, n.eventLog("10", "slow"), time.Minute, func(evs []pluginEvent) bool {
		return contractFindPod(evs, "RunPodSandbox", "halfmade") != nil
	})
	pod := contractFindPod(evs, "RunPodSandbox", "halfmade").PodID
	if got := shimsNaming(pod); len(got) != 1 {
		t.Fatalf("shims of the half-made pod %s: %v, want the one started ahead", pod, got)
	}

	d.kill()
	if err := <-done; err == nil {
		t.Fatal("RunPodSandbox succeeded though crind was killed during it")
	}
	gate.open(t)
	d.start()

	poll.Until(t, time.Minute, "the half-made pod's shim to go", func() (bool, string) {
		got := shimsNaming(pod)
		return len(got) == 0, strings.Join(got, " ")
	})
	if _, err := os.Stat(filepath.Join(d.state, "c", ".pod-"+pod)); !os.IsNotExist(err) {
		t.Errorf("the half-made pod's shim dir is left: %v", err)
	}
	if _, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod}); code(err) != "NotFound" {
		t.Errorf("PodSandboxStatus of the half-made pod after the restart: %v, want NotFound", err)
	}
	// cleanupAll removes what is left and checks for leaks.
}
