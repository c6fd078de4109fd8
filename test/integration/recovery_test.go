//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCrashRecovery SIGKILLs crind with containers running and one about to
// exit, restarts it, and checks that the running container survives and is
// still controllable, the exited one shows its real exit code, and nothing
// leaks once everything is removed.
func TestCrashRecovery(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("survivor")
	pod := d.runPod(t, podCfg)
	long := d.runContainer(t, pod, podCfg, containerConfig("long", ref, "sh", "-c", "echo started; exec sleep 1000"))
	short := d.runContainer(t, pod, podCfg, containerConfig("short", ref, "sh", "-c", "sleep 2; echo bye; exit 5"))
	created := d.createContainer(t, pod, podCfg, containerConfig("created", ref, "sh", "-c", "echo late; sleep 1000"))
	pidBefore := d.execOut(t, long, "cat", "/proc/1/stat")

	d.kill()
	time.Sleep(3 * time.Second) // short exits while crind is down
	d.start()

	if st := d.status(t, long); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("long-running container after restart: %v", st.State)
	}
	if got := d.execOut(t, long, "cat", "/proc/1/stat"); got != pidBefore {
		t.Errorf("container process changed across restart: %q vs %q", got, pidBefore)
	}
	st := d.waitExited(t, short)
	if st.ExitCode != 5 || st.Reason != "Error" {
		t.Errorf("container that exited while crind was down: exit %d reason %q, want 5 Error", st.ExitCode, st.Reason)
	}
	waitLog(t, logPath(podCfg, containerConfig("short", ref)), "bye")
	if st := d.status(t, created); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("created container after restart: %v", st.State)
	}
	d.startContainer(t, created)
	waitLog(t, logPath(podCfg, containerConfig("created", ref)), "late")
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod after restart: %v %v", ps, err)
	}
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: long, Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	if st := d.status(t, long); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 {
		t.Errorf("stop after restart: %v exit %d", st.State, st.ExitCode)
	}
	// A graceful restart keeps everything too.
	d.stop()
	d.start()
	if st := d.status(t, created); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after graceful restart: %v", st.State)
	}
	// cleanupAll (on test end) removes the pod and checks for leaks.
}

// TestKillMidLifecycle SIGKILLs crind at different points of RunPodSandbox
// and CreateContainer; after a restart either the object exists whole or
// not at all, and removing everything leaks nothing.
func TestKillMidLifecycle(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	for _, delay := range []time.Duration{5 * time.Millisecond, 30 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond} {
		podCfg := podConfig("mid")
		podCfg.Metadata.Attempt = uint32(delay / time.Millisecond)
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
			if err == nil {
				cfg := containerConfig("c", ref, "sleep", "1000")
				_, _ = d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: podCfg})
			}
		}()
		time.Sleep(delay)
		d.kill()
		<-done
		d.start()
		pods, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("delay %v: pod %s survived the crash half-made (%v)", delay, p.Id, p.State)
			}
		}
		ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
		for _, c := range ctrs.Containers {
			if c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
				t.Errorf("delay %v: container %s in state %v", delay, c.Id, c.State)
			}
		}
		// The same name can be used again after removal.
		for _, p := range pods.Items {
			if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				t.Errorf("remove: %v", err)
			}
		}
		d.runPod(t, podCfg)
	}
}
