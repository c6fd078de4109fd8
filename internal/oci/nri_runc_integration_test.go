//go:build integration

package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRuncRunsAdjustedSpec runs, with the real runc, a spec an NRI
// adjustment changed (args, env, rlimit, memory reservation and, on cgroup
// v1, swappiness) and checks the process sees each change.
func TestRuncRunsAdjustedSpec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc not on PATH")
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("no /bin/busybox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	var f features.Features
	out, err := exec.CommandContext(ctx, runc, "features").Output()
	if err != nil {
		t.Fatalf("runc features: %v", err)
	}
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}

	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	id := "crin-nri-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/crin-nri-test")
		for _, d := range dirs {
			os.Remove(d)
		}
		os.Remove("/sys/fs/cgroup/crin-nri-test")
	})
	host := DetectHost()
	// The infra container's spec is a complete small spec; the adjustment
	// turns its process into a shell that reports what it got.
	s, err := SandboxSpec(SandboxOptions{
		ID:     id,
		Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"}},
		Rootfs: rootfs, PauseBinary: "/bin/busybox",
		CgroupsPath: "/crin-nri-test/" + id, OOMScoreAdjMin: ownOOMScoreAdj(t), Host: host,
	})
	if err != nil {
		t.Fatal(err)
	}
	memFile := "/sys/fs/cgroup/memory.low"
	script := "echo env=$NRI_TEST; echo nofile=$(ulimit -n); echo reservation=$(cat " + memFile + ")"
	adj := &api.ContainerAdjustment{
		Args:    []string{"/bin/busybox", "sh", "-c", ""},
		Env:     []*api.KeyValue{{Key: "NRI_TEST", Value: "yes"}},
		Rlimits: []*api.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 888, Soft: 777}},
		Mounts:  []*api.Mount{{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "ro"}}},
		Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{
			Memory: &api.LinuxMemory{Reservation: api.Int64(int64(32 << 20))},
		}},
	}
	wants := []string{"env=yes", "nofile=777", "reservation=33554432"}
	if !host.CgroupV2 {
		memFile = "/sys/fs/cgroup/memory/memory.soft_limit_in_bytes"
		script = "echo env=$NRI_TEST; echo nofile=$(ulimit -n); echo reservation=$(cat " + memFile + "); echo swappiness=$(cat /sys/fs/cgroup/memory/memory.swappiness)"
		adj.Linux.Resources.Memory.Swappiness = api.UInt64(uint64(7))
		wants = append(wants, "swappiness=7")
	}
	adj.Args[3] = script
	if err := ApplyAdjustment(s, adj, AdjustOptions{
		ContainerID: id, Features: &f, RuntimeName: "runc", Host: host, OOMScoreAdjMin: ownOOMScoreAdj(t),
	}); err != nil {
		t.Fatal(err)
	}
	if err := Fit(s, &f); err != nil {
		t.Fatal(err)
	}
	bundle := writeBundle(t, dir, "bundle", s)
	state := filepath.Join(dir, "state")
	cmd := exec.CommandContext(ctx, runc, "--root", state, "run", "--bundle", bundle, id)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	exec.CommandContext(ctx, runc, "--root", state, "delete", "--force", id).Run()
	t.Logf("output:\n%s", got)
	if err != nil {
		t.Fatalf("runc run: %v: %s", err, stderr.String())
	}
	for _, w := range wants {
		if !bytes.Contains(got, []byte(w+"\n")) {
			t.Errorf("output lacks %q", w)
		}
	}
}
