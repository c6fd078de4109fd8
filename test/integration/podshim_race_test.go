//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// podShims lists the live crin-shim processes serving pod's shim dir,
// not a child one forked and has not yet exec'd (see shimsNaming).
func (d *daemon) podShims(pod string) []string {
	dir := filepath.Join(d.state, "c", ".pod-"+pod)
	found := map[string]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "crin-shim" && strings.Contains(string(b), "\x00"+dir+"\x00") {
			found[filepath.Base(filepath.Dir(p))] = true
		}
	}
	var out []string
	for pid := range found {
		if !found[parentPid(pid)] {
			out = append(out, pid)
		}
	}
	return out
}

// TestPodShimStartStopRemoveRace drives, as a kubelet tearing a pod down
// while it starts would, StartContainer, StopContainer and
// RemoveContainer of each container of one pod all at once, then removes
// the pod: every call answers, and the pod's crin-shim exits with the
// pod. A stop that met a start while the start waited for the shim used
// to record a kill of a container that then ran anyway; the shim, still
// counting it, outlived the pod (docs/recovery.md). Pods with and
// without an infra process, a few rounds each: the race needs an unlucky
// interleaving, which load makes likely.
func TestPodShimStartStopRemoveRace(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	const rounds, containers = 3, 6
	for _, infra := range []bool{true, false} {
		for round := range rounds {
			name := fmt.Sprintf("race-%v-%d", infra, round)
			podCfg, ctrCfg := podConfig(name), containerConfig
			if !infra {
				podCfg, ctrCfg = noInfraPodConfig(name), noInfraContainerConfig
			}
			pod := d.runPod(t, podCfg)
			var ids []string
			for i := range containers {
				ids = append(ids, d.createContainer(t, pod, podCfg, ctrCfg(fmt.Sprintf("c%d", i), ref, "sleep", "1000")))
			}
			var wg sync.WaitGroup
			for _, id := range ids {
				// Every error a lost race may give is fine (a start of
				// a container being stopped or removed); what counts is
				// what is left after the pod's removal.
				wg.Go(func() {
					_, _ = d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: id})
				})
				wg.Go(func() {
					_, _ = d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id})
				})
				wg.Go(func() {
					_, _ = d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id})
				})
			}
			wg.Wait()
			if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
				t.Fatalf("StopPodSandbox: %v", err)
			}
			if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
				t.Fatalf("RemovePodSandbox: %v", err)
			}
			poll.Until(t, 2*time.Minute, name+": the pod's shim gone with the pod", func() (bool, string) {
				shims := d.podShims(pod)
				_, err := os.Stat(filepath.Join(d.state, "c", ".pod-"+pod))
				return len(shims) == 0 && os.IsNotExist(err), fmt.Sprintf("shims %v, dir: %v", shims, err)
			})
		}
	}
	// cleanupAll checks that nothing else is left.
}
