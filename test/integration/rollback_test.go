//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/testnet"
)

// flakyRuntime is an OCI runtime wrapper around runc that fails `create`
// and `run` for pods (mode "pod") or for workload containers only (mode
// "ctr").
const flakyRuntime = `#!/bin/sh
if [ "$FLAKY_MODE" != "" ]; then :; fi
for a in "$@"; do
	if [ "$a" = "create" ] || [ "$a" = "run" ]; then
		bundle=""
		prev=""
		for b in "$@"; do
			[ "$prev" = "--bundle" ] && bundle="$b"
			prev="$b"
		done
		if grep -q '"/pause"' "$bundle/config.json"; then
			[ "%[1]s" = "pod" ] && { echo "flaky runtime refuses pods" >&2; exit 1; }
		else
			[ "%[1]s" = "ctr" ] && { echo "flaky runtime refuses containers" >&2; exit 1; }
		fi
	fi
done
exec runc "$@"
`

// TestRollback makes the runtime fail at the end of RunPodSandbox: the
// call fails with the runtime's message, nothing is left (no pod, netns,
// IP, mount, shim), and a retry with the same name on a working runtime
// succeeds. A container the runtime refuses (the oci backend meets the
// runtime at StartContainer) fails its start with the runtime's message
// and is recorded exited (StartError); nothing of it runs, and removing it
// leaves only the pod's state.
func TestRollback(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	dir, err := os.MkdirTemp("", "crinflaky")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, mode := range []string{"pod", "ctr"} {
		if err := os.WriteFile(filepath.Join(dir, "flaky-"+mode), []byte(fmt.Sprintf(flakyRuntime, mode)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf(`
[runtimes.flakypod]
type = "oci"
path = %q
[runtimes.flakyctr]
type = "oci"
path = %q
`, filepath.Join(dir, "flaky-pod"), filepath.Join(dir, "flaky-ctr"))})
	ref, _ := busybox(t)
	d.pull(t, ref)
	ipamDir := filepath.Join(d.net.IPAMDir, testnet.Name)

	podCfg := podConfig("rollback")
	_, err = d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "flakypod"})
	if err == nil || !strings.Contains(err.Error(), "flaky runtime refuses pods") {
		t.Fatalf("RunPodSandbox on a failing runtime: %v, want the runtime's message", err)
	}
	d.assertEmpty(t, ipamDir)

	// The same name works on a runtime that works.
	pod := d.runPod(t, podCfg)
	if ents, _ := os.ReadDir(ipamDir); len(ents) < 2 {
		t.Fatalf("IPAM dir %s does not record the running pod's IP: %v", ipamDir, ents)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}

	resp, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "flakyctr"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := containerConfig("c", ref, "sleep", "1000")
	ctr := d.createContainer(t, resp.PodSandboxId, podCfg, cfg)
	_, err = d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: ctr})
	if err == nil || !strings.Contains(err.Error(), "flaky runtime refuses containers") {
		t.Fatalf("StartContainer on a failing runtime: %v", err)
	}
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Reason != "StartError" ||
		!strings.Contains(st.Message, "flaky runtime refuses containers") {
		t.Errorf("container whose start failed: %v %q %q, want EXITED StartError with the runtime's message", st.State, st.Reason, st.Message)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: ctr}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.root, "image", "containers")); len(ents) != 0 {
		t.Errorf("removed container left a rootfs: %v", ents)
	}
	// The pod's: its infra container and its shim's dir.
	if ents, _ := os.ReadDir(filepath.Join(d.state, "c")); len(ents) != 2 {
		t.Errorf("failed container left runtime state: %v, want only the pod's", ents)
	}
	if procs := shimsNaming(ctr); len(procs) != 0 {
		t.Errorf("shims naming the failed container: %v", procs)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	d.assertEmpty(t, ipamDir)
}

// assertEmpty checks that no pod, netns, shim state or IP allocation is
// left.
func (d *daemon) assertEmpty(t *testing.T, ipamDir string) {
	t.Helper()
	pods, _ := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
	if len(pods.GetItems()) != 0 {
		t.Errorf("%d pods visible", len(pods.Items))
	}
	for _, sub := range []string{"netns", "c"} {
		if ents, _ := os.ReadDir(filepath.Join(d.state, sub)); len(ents) != 0 {
			t.Errorf("leftover in %s: %d entries", sub, len(ents))
		}
	}
	ents, _ := os.ReadDir(ipamDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "10.") {
			t.Errorf("IP %s still allocated", e.Name())
		}
	}
}
