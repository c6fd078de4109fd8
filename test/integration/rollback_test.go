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
// for pods (mode "pod") or for workload containers only (mode "ctr").
const flakyRuntime = `#!/bin/sh
if [ "$FLAKY_MODE" != "" ]; then :; fi
for a in "$@"; do
	if [ "$a" = "create" ]; then
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

// TestRollback makes the runtime fail at the end of RunPodSandbox and of
// CreateContainer: the call fails with the runtime's message, nothing is
// left (no pod, container, netns, IP, mount, shim), and a retry with the
// same name on a working runtime succeeds.
func TestRollback(t *testing.T) {
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
	_, err = d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: podCfg})
	if err == nil || !strings.Contains(err.Error(), "flaky runtime refuses containers") {
		t.Fatalf("CreateContainer on a failing runtime: %v", err)
	}
	ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	if len(ctrs.Containers) != 0 {
		t.Errorf("failed create left %d containers visible", len(ctrs.Containers))
	}
	if ents, _ := os.ReadDir(filepath.Join(d.root, "image", "containers")); len(ents) != 0 {
		t.Errorf("failed create left a rootfs: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state, "c")); len(ents) != 1 {
		t.Errorf("failed create left runtime state: %d dirs, want only the pod's", len(ents))
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
