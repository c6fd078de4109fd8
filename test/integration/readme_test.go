//go:build integration

package integration

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestReadmeRunCommand starts crind the way the README says (`make run`:
// built-in defaults, no config file) and drives a pod and a container made
// from busybox pulled from a registry on 127.0.0.1 through its whole life.
func TestReadmeRunCommand(t *testing.T) {
	runsOn(t, oci)
	buildBinaries(t)
	const socket = "/run/crin/crin.sock"
	if _, err := os.Stat("/etc/crin/crin.toml"); err == nil {
		t.Skip("/etc/crin/crin.toml exists: this test checks the built-in defaults")
	}
	if c, err := net.Dial("unix", socket); err == nil {
		c.Close()
		t.Skip("a crind already serves " + socket)
	}
	var out lockedBuffer
	cmd := exec.Command("make", "run")
	cmd.Dir = repoRoot()
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("make run did not stop on SIGTERM")
		}
	}
	defer func() {
		stop()
		if t.Failed() {
			t.Logf("make run output:\n%s", tail(out.String(), 6000))
		}
	}()
	poll.Until(t, 5*time.Minute, "crind listens on "+socket, func() (bool, string) {
		c, err := net.Dial("unix", socket)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("CRI socket mode: %v %v, want 0660", fi.Mode().Perm(), err)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d := &daemon{t: t, rs: runtimeapi.NewRuntimeServiceClient(conn), is: runtimeapi.NewImageServiceClient(conn)}

	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("readme")
	pod := d.runPod(t, podCfg)
	defer func() {
		_, _ = d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
		_, _ = d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
	}()
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || !strings.HasPrefix(ps.Status.GetNetwork().GetIp(), "10.87.") {
		t.Errorf("pod IP on the default network: %v %v", ps.GetStatus().GetNetwork(), err)
	}
	cfg := containerConfig("hello", ref, "sh", "-c", "echo hello from crin; exec sleep 1000")
	id := d.runContainer(t, pod, podCfg, cfg)
	if got := d.execOut(t, id, "echo", "exec works"); got != "exec works" {
		t.Errorf("exec: %q", got)
	}
	waitLog(t, filepath.Join(podCfg.LogDirectory, cfg.LogPath), "stdout F hello from crin")
	if st, err := d.rs.ContainerStats(ctxT(t), &runtimeapi.ContainerStatsRequest{ContainerId: id}); err != nil || st.Stats.GetMemory() == nil {
		t.Errorf("stats: %v %v", st, err)
	}
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	stop()
	if !bytes.Contains([]byte(out.String()), []byte("crind serving CRI")) {
		t.Errorf("crind did not log that it serves CRI")
	}
}
