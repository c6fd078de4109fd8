//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestCrashRecovery SIGKILLs crind with containers running and one about to
// exit, restarts it, and checks that the running container survives and is
// still controllable, the exited one shows its real exit code, and nothing
// leaks once everything is removed.
func TestCrashRecovery(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("survivor")
	pod := d.runPod(t, podCfg)
	long := d.runContainer(t, pod, podCfg, containerConfig("long", ref, "sh", "-c", "echo started; exec sleep 1000"))
	// short exits once the test creates gate/go, after crind is killed.
	gate, err := os.MkdirTemp("", "cringate")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(gate)
	shortCfg := containerConfig("short", ref, "sh", "-c", "while [ ! -e /gate/go ]; do sleep 0.1; done; echo bye; exit 5")
	shortCfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/gate", HostPath: gate}}
	short := d.runContainer(t, pod, podCfg, shortCfg)
	shortPid := d.containerPid(t, short)
	shortStart := startTime(shortPid)
	created := d.createContainer(t, pod, podCfg, containerConfig("created", ref, "sh", "-c", "echo late; sleep 1000"))
	pidBefore := procIdentity(d.execOut(t, long, "cat", "/proc/1/stat"))
	if b := currentBackend(); b == shimv2 || b == gvisor {
		// The pod's infra and three containers run under one shim v2
		// (gVisor's groups them as runc's does).
		if pids := d.shimv2Pids(); len(pids) != 1 {
			t.Errorf("shim v2 processes of this crind: %v, want one for the pod", pids)
		}
	}
	if st := d.status(t, short); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("short container before crind is killed: %v, want it running", st.State)
	}

	d.kill()
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitExitSeenByShim(t, short, shortPid, shortStart)
	d.start()

	if st := d.status(t, long); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("long-running container after restart: %v", st.State)
	}
	if got := procIdentity(d.execOut(t, long, "cat", "/proc/1/stat")); got != pidBefore {
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

// procIdentity is what names a process for good in its /proc/<pid>/stat
// line: its pid, its command and its start time (field 22), not the
// counters that grow while it runs (gVisor's sentry charges CPU time to
// an idle pause).
func procIdentity(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return stat
	}
	rest := strings.Fields(stat[i+1:]) // from field 3, the state
	if len(rest) < 20 {
		return stat
	}
	return stat[:i+1] + " started " + rest[19]
}

// waitExitSeenByShim waits, while crind is down, until the container id
// whose init had pid and start time st has exited and its shim has seen
// it: the process is gone and, on the default handler, crin-shim has
// written the exit file. (A shim v2 keeps the exit in memory.)
func (d *daemon) waitExitSeenByShim(t *testing.T, id string, pid int, st string) {
	t.Helper()
	if currentBackend() == gvisor {
		// The pid is a host process of the sandbox, which outlives
		// the container: runsc's own state tells.
		d.waitRunscStopped(t, id)
		return
	}
	exitFile := filepath.Join(d.state, "c", id, "exit")
	poll.Until(t, time.Minute, "container "+id+" exited while crind was down", func() (bool, string) {
		if startTime(pid) == st {
			return false, fmt.Sprintf("its process %d still runs", pid)
		}
		if os.Getenv(handlerEnv) != "" {
			return true, ""
		}
		if _, err := os.Stat(exitFile); err != nil {
			return false, fmt.Sprintf("its process is gone, but crin-shim wrote no exit file: %v", err)
		}
		return true, ""
	})
}

// waitRunscStopped waits until runsc, in the runsc handler's root (one
// dir per shim namespace), reports container id stopped.
func (d *daemon) waitRunscStopped(t *testing.T, id string) {
	t.Helper()
	var roots []string
	ents, _ := os.ReadDir(filepath.Join(d.state, "runtimes", runscHandler))
	for _, e := range ents {
		if e.IsDir() {
			roots = append(roots, filepath.Join(d.state, "runtimes", runscHandler, e.Name()))
		}
	}
	poll.Until(t, time.Minute, "runsc to report container "+id+" stopped while crind was down", func() (bool, string) {
		var seen []string
		for _, root := range roots {
			out, err := exec.Command("runsc", "--root", root, "state", id).CombinedOutput()
			if err != nil {
				seen = append(seen, fmt.Sprintf("%s: %v: %s", root, err, strings.TrimSpace(string(out))))
				continue
			}
			var s struct {
				Status string `json:"status"`
			}
			if err := json.Unmarshal(out, &s); err != nil {
				return false, fmt.Sprintf("runsc state: %v: %s", err, out)
			}
			if s.Status == "stopped" {
				return true, ""
			}
			seen = append(seen, root+": "+s.Status)
		}
		return false, fmt.Sprintf("runsc state in %v: %v", roots, seen)
	})
}

// pausedRuntime wraps runc: the first create or start while the file
// %[1]q/pause names that operation takes the switch (renames it), writes
// "<operation> <container id>" to %[1]q/at, and waits until %[1]q/go
// exists; then it runs runc and writes its exit status to %[1]q/done.
// Everything else goes straight to runc. The wrapper never writes to its
// stdout or stderr: during create they are the container's.
const pausedRuntime = `#!/bin/sh
dir=%[1]q
op=""
for a in "$@"; do
	case "$a" in create|start|run) op="$a"; break;; esac
done
for id in "$@"; do :; done
if [ -n "$op" ] && grep -qx "$op" "$dir/pause" 2>/dev/null && mv "$dir/pause" "$dir/taken" 2>/dev/null; then
	echo "$op $id" >"$dir/at.tmp" && mv "$dir/at.tmp" "$dir/at"
	while [ ! -e "$dir/go" ]; do sleep 0.05; done
	runc "$@"
	rc=$?
	echo $rc >"$dir/done"
	exit $rc
fi
exec runc "$@"
`

// TestKillMidLifecycle SIGKILLs crind while the runtime is at a given step
// of RunPodSandbox or StartContainer (the runtime pauses
// there until the test has killed crind, then finishes), restarts crind
// and checks what recovery made of the step: a pod whose record was still
// being made is gone with everything it had (its runtime state, shim,
// netns, IP), and its name is free again; a container the
// runtime started after its record said created is recorded running.
// Removing everything then leaks nothing.
func TestKillMidLifecycle(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	dir, err := os.MkdirTemp("", "crinpause")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	wrapper := filepath.Join(dir, "paused-runc")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf(pausedRuntime, dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf("\n[runtimes.paused]\ntype = \"oci\"\npath = %q\n", wrapper)})
	ref, _ := busybox(t)
	d.pull(t, ref)

	for _, tc := range []struct {
		name string
		op   string // the runtime operation crind is killed in
		// container: the step is in the pod's container's
		// StartContainer, not in RunPodSandbox's infra container.
		container bool
		// started: StartContainer (the container is created first).
		started bool
	}{
		// The oci backend runs the runtime only at start ("run"
		// creates and starts): CreateContainer touches no runtime.
		{name: "infra run", op: "run"},
		{name: "container run", op: "run", container: true, started: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer := d.t
			d.t = t // d.start reports to the subtest
			defer func() { d.t = outer }()
			podCfg := podConfig("mid")
			t.Cleanup(func() { _ = os.RemoveAll(podCfg.LogDirectory) })
			ctrCfg := containerConfig("c", ref, "sleep", "1000")
			var pod, ctr string
			if tc.container {
				pod = d.runPodOn(t, podCfg, "paused")
				if tc.started {
					ctr = d.createContainer(t, pod, podCfg, ctrCfg)
				}
			}

			op, id, callErr := d.killDuring(t, dir, tc.op, func(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
				var err error
				switch {
				case tc.started:
					_, err = rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr})
				case tc.container:
					_, err = rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrCfg, SandboxConfig: podCfg})
				default:
					_, err = rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: "paused"})
				}
				return err
			})
			if callErr == nil {
				t.Fatalf("the call returned although crind was killed in runtime %s", op)
			}
			// Which step was interrupted: the runtime names the container.
			if (tc.container && id == pod) || (tc.started && id != ctr) {
				t.Fatalf("runtime %s paused for %s; want the container's (pod %s, container %s)", op, id, pod, ctr)
			}

			pods, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !tc.container: // the pod's record said creating: undone
				if len(pods.Items) != 0 {
					t.Errorf("a pod killed in its infra %s survived the restart: %v", op, pods.Items)
				}
				if _, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}); code(err) != "NotFound" {
					t.Errorf("PodSandboxStatus of the pod whose infra %s was interrupted: %v (%s), want NotFound", op, err, code(err))
				}
				d.waitNoRuntimeLeaks(t, "by the pod recovery undid")
				// The name is free again.
				d.runPodOn(t, podCfg, "paused")
			default: // created in the store, running in the runtime
				if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("container the runtime started while crind was down: %v, want RUNNING", st.State)
				}
				if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 5}); err != nil {
					t.Errorf("stop it: %v", err)
				}
			}
			d.removeAllPods(t)
			d.waitNoRuntimeLeaks(t, "once everything was removed")
		})
	}
}

// runPodOn runs a pod on runtime handler h.
func (d *daemon) runPodOn(t *testing.T, cfg *runtimeapi.PodSandboxConfig, h string) string {
	t.Helper()
	resp, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: h})
	if err != nil {
		t.Fatalf("RunPodSandbox on %s: %v", h, err)
	}
	return resp.PodSandboxId
}

// killDuring makes pausedRuntime (its dir) pause in op, makes call, and
// SIGKILLs crind once the runtime is paused; then lets the runtime finish,
// waits until it did, and starts crind again. It returns the operation
// and container id the runtime paused in, and call's error.
func (d *daemon) killDuring(t *testing.T, dir, op string, call func(context.Context, runtimeapi.RuntimeServiceClient) error) (gotOp, id string, callErr error) {
	t.Helper()
	for _, f := range []string{"taken", "at", "go", "done"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	if err := os.WriteFile(filepath.Join(dir, "pause"), []byte(op+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := d.rs
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		errc <- call(ctx, rs)
	}()
	var at []byte
	poll.Until(t, 2*time.Minute, "the runtime paused in "+op, func() (bool, string) {
		var err error
		at, err = os.ReadFile(filepath.Join(dir, "at"))
		return err == nil, fmt.Sprint(err)
	})
	d.kill()
	callErr = <-errc
	gotOp, id, _ = strings.Cut(strings.TrimSpace(string(at)), " ")
	if gotOp != op {
		t.Fatalf("the runtime paused in %q, want %q", gotOp, op)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "the runtime finished its "+op+" of "+id, func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, "done"))
		return err == nil, fmt.Sprint(err)
	})
	d.start()
	return gotOp, id, callErr
}
