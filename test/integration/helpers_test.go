//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/poll"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// busybox pushes the test busybox image to a fresh registry and returns its
// reference and digest.
func busybox(t *testing.T) (ref, digest string) {
	t.Helper()
	host := imagetest.StartRegistry(t)
	ref = host + "/library/busybox:latest"
	digest = imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	return ref, digest
}

// pull pulls ref through crind.
func (d *daemon) pull(t *testing.T, ref string) string {
	t.Helper()
	resp, err := d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("PullImage %s: %v", ref, err)
	}
	return resp.ImageRef
}

func podConfig(name string) *runtimeapi.PodSandboxConfig {
	// A dir of its own per pod (CRI logs are named by container), under
	// one the run removes (an error leaves the pod without one).
	var logDir string
	if root, err := podLogRoot(); err == nil {
		logDir, _ = os.MkdirTemp(root, "pod")
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name + "-" + randHex(3)},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{"app": name},
		Annotations:  map[string]string{"test": "yes"},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
}

func (d *daemon) runPod(t *testing.T, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	resp, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cfg.LogDirectory) })
	return resp.PodSandboxId
}

func containerConfig(name, image string, cmd ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd,
		LogPath:  name + ".log",
		Labels:   map[string]string{"ctr": name},
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{}},
	}
}

func (d *daemon) createContainer(t *testing.T, pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	resp, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.Metadata.Name, err)
	}
	return resp.ContainerId
}

func (d *daemon) startContainer(t *testing.T, id string) {
	t.Helper()
	if _, err := d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
}

// runContainer creates and starts a container running cmd.
func (d *daemon) runContainer(t *testing.T, pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id := d.createContainer(t, pod, podCfg, cfg)
	d.startContainer(t, id)
	return id
}

func (d *daemon) status(t *testing.T, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.Status
}

// waitExited waits for a container to exit and returns its status.
func (d *daemon) waitExited(t *testing.T, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	var st *runtimeapi.ContainerStatus
	poll.Until(t, 2*time.Minute, "container "+id+" exited", func() (bool, string) {
		st = d.status(t, id)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, "state " + st.State.String()
	})
	return st
}

func (d *daemon) exec(t *testing.T, id string, cmd ...string) *runtimeapi.ExecSyncResponse {
	t.Helper()
	// 90 s: a loaded node lane VM (software emulation) took over 20 s to
	// run a cat; the test's context (ctxT) allows two minutes.
	resp, err := d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 90})
	if err != nil {
		t.Fatalf("ExecSync %v: %v", cmd, err)
	}
	return resp
}

// execOut runs cmd and returns its trimmed stdout, failing on a non-zero
// exit.
func (d *daemon) execOut(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	r := d.exec(t, id, cmd...)
	if r.ExitCode != 0 {
		t.Fatalf("exec %v: exit %d, stderr %q", cmd, r.ExitCode, r.Stderr)
	}
	return strings.TrimSpace(string(r.Stdout))
}

// waitLog waits until the container's CRI log holds want and returns it.
func waitLog(t *testing.T, path, want string) string {
	t.Helper()
	var b []byte
	poll.Until(t, time.Minute, fmt.Sprintf("log %s holds %q", path, want), func() (bool, string) {
		b, _ = os.ReadFile(path)
		return strings.Contains(string(b), want), "it has:\n" + string(b)
	})
	return string(b)
}

func logPath(podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	return filepath.Join(podCfg.LogDirectory, cfg.LogPath)
}

var _ = context.Background

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
