//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// alive fails the test when crind no longer answers Version or its log
// shows a Go panic.
func (d *daemon) alive(t *testing.T, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("after %s crind does not answer Version: %v\ncrind log:\n%s", after, err, tail(d.logBuf.String(), 8000))
	}
	if log := d.logBuf.String(); strings.Contains(log, "panic: ") || strings.Contains(log, "goroutine 1 [") {
		t.Fatalf("after %s crind's log shows a crash:\n%s", after, tail(log, 8000))
	}
}

// TestFaultUnresolvableRegistry pulls from a registry host that does not
// resolve, several times in a row as kubelet does: each pull fails with a
// gRPC code (the error chain holds a *net.DNSError whose Unwrap is nil,
// which used to panic crind), and crind keeps serving: a pod runs after.
func TestFaultUnresolvableRegistry(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	for i := range 3 {
		_, err := d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "nosuchhost.invalid/foo:1"}})
		if err == nil {
			t.Fatalf("pull %d of nosuchhost.invalid/foo:1 succeeded", i)
		}
		if c := code(err); c == "OK" || c == "Unknown" || c == "Internal" {
			t.Errorf("pull %d: %v (%s), want a classified code", i, err, c)
		}
		if !strings.Contains(err.Error(), "nosuchhost.invalid") {
			t.Errorf("pull %d: error %q does not name the host", i, err)
		}
		t.Logf("pull %d: %s: %v", i, code(err), err)
		d.alive(t, "pulling nosuchhost.invalid/foo:1")
	}
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("after-dns")
	pod := d.runPod(t, podCfg)
	ctr := d.runContainer(t, pod, podCfg, containerConfig("main", ref, "sleep", "3600"))
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after the failed pulls is %s, want running", st.State)
	}
}

// TestFaultBadRequests sends requests a broken or hostile client could:
// each fails with InvalidArgument naming the field, crind keeps serving,
// and the daemon's log line for a request with a 1 MB name stays small
// and carries the request id.
func TestFaultBadRequests(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("bad-requests")
	pod := d.runPod(t, podCfg)

	_, err := d.rs.PortForward(ctxT(t), &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{70000}})
	if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), "70000") || !strings.Contains(err.Error(), "port") {
		t.Errorf("PortForward port 70000: %v (%s), want InvalidArgument naming port and 70000", err, code(err))
	}
	_, err = d.rs.PortForward(ctxT(t), &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{0}})
	if code(err) != "InvalidArgument" {
		t.Errorf("PortForward port 0: %v (%s), want InvalidArgument", err, code(err))
	}
	d.alive(t, "PortForward of a bad port")

	before := len(d.logBuf.String())
	huge := strings.Repeat("n", 1<<20)
	cfg := containerConfig(huge, ref, "sleep", "1")
	_, err = d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), "config.metadata.name") {
		t.Errorf("CreateContainer with a 1 MB name: %.300v (%s), want InvalidArgument naming config.metadata.name", err, code(err))
	}
	if err != nil && len(err.Error()) > 64<<10 {
		t.Errorf("CreateContainer with a 1 MB name: the error is %d bytes, want it capped", len(err.Error()))
	}
	d.alive(t, "CreateContainer with a 1 MB name")

	// The failure line is written before the response: it is in the log.
	logged := d.logBuf.String()[before:]
	var failed string
	for _, line := range strings.Split(logged, "\n") {
		if len(line) > 8<<10 {
			t.Errorf("crind logged a %d byte line for the request: %.200s...", len(line), line)
		}
		if strings.Contains(line, "request failed") && strings.Contains(line, "CreateContainer") {
			failed = line
		}
	}
	if failed == "" {
		t.Fatalf("no \"request failed\" line for CreateContainer in crind's log:\n%s", tail(logged, 4000))
	}
	t.Logf("failure line (%d bytes): %.600s", len(failed), failed)
	for _, want := range []string{"request_id=", "code=InvalidArgument", "duration="} {
		if !strings.Contains(failed, want) {
			t.Errorf("failure line %q lacks %s", failed, want)
		}
	}
}

// TestFaultHugeStopTimeout stops a container that ignores SIGTERM with a
// grace period of 10^10 s (a pod's terminationGracePeriodSeconds may be
// that large): crind must wait, not kill at once because the grace period
// in nanoseconds overflowed to a negative duration.
func TestFaultHugeStopTimeout(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("huge-grace")
	pod := d.runPod(t, podCfg)
	ctr := d.runContainer(t, pod, podCfg, containerConfig("main", ref, "sh", "-c", `trap "" TERM; echo ready; while true; do sleep 1; done`))
	waitLog(t, logPath(podCfg, containerConfig("main", ref)), "ready")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := d.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 10_000_000_000})
	if err == nil {
		t.Errorf("StopContainer with a 10^10 s grace period returned at once")
	}
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container ignoring SIGTERM is %s (exit %d) during its grace period, want running", st.State, st.ExitCode)
	}
	d.alive(t, "StopContainer with a huge timeout")
}
