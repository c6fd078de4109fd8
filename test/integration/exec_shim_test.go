//go:build integration

package integration

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/crin-dev/crin/test/poll"
	"github.com/crin-dev/crin/test/streamclient"
)

// sleepArg is a sleep duration no other test's process uses, so the
// process is found on the host by its command line.
func sleepArg() string { return strconv.Itoa(100000 + rand.IntN(800000)) }

// procStatus reads the fields of /proc/<pid>/status that the tests below
// look at: Name, State, PPid.
func procStatus(pid int) (map[string]string, bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, false
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, true
}

// sleeper returns the pid of the live host process "sleep arg"; 0 when
// there is none.
func sleeper(arg string) int {
	want := "sleep\x00" + arg + "\x00"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); string(cmdline) == want {
			return pid
		}
	}
	return 0
}

// waitSleeper waits for "sleep arg" to run and returns its pid.
func waitSleeper(t *testing.T, arg string) int {
	t.Helper()
	var pid int
	poll.Until(t, time.Minute, "exec'd sleep "+arg+" runs", func() (bool, string) {
		pid = sleeper(arg)
		return pid > 0, ""
	})
	return pid
}

// waitGone waits until process pid ("sleep") is gone and reaped: no
// zombie of it is left (a pid reused by another process is gone too).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	poll.Until(t, time.Minute, what+" gone and reaped", func() (bool, string) {
		st, ok := procStatus(pid)
		if !ok || st["Name"] != "sleep" {
			return true, ""
		}
		return false, "state " + st["State"] + ", ppid " + st["PPid"]
	})
}

// checkChildOfShim fails unless pid's parent becomes the shim
// supervising ctr. Until "<runtime> exec --detach" has exited, the
// process is still the runtime's child; the shim, a child subreaper,
// inherits it then. So the parent is waited for, not sampled once.
func (d *daemon) checkChildOfShim(t *testing.T, pid int, ctr, what string) {
	t.Helper()
	want := strconv.Itoa(d.shimPid(t, ctr))
	gone := false
	ok, detail := poll.Within(time.Minute, func() (bool, string) {
		st, ok := procStatus(pid)
		if !ok || st["Name"] != "sleep" {
			gone = true
			return true, "it is gone"
		}
		return st["PPid"] == want, "its parent is " + st["PPid"]
	})
	if !ok || gone {
		t.Errorf("%s (pid %d): %s, want its parent to be the pod's crin-shim %s", what, pid, detail, want)
	}
}

// openExecSession starts an exec session on url without reading it: the
// streams the Exec request asked for are open, nothing is sent.
func openExecSession(t *testing.T, url string, tty bool) httpstream.Connection {
	t.Helper()
	conn := dialStream(t, url, remoteCommandV4)
	streamclient.CreateStream(t, conn, "error")
	streamclient.CreateStream(t, conn, "stdin")
	streamclient.CreateStream(t, conn, "stdout")
	if tty {
		streamclient.CreateStream(t, conn, "resize")
	}
	return conn
}

// TestExecUnderShim: exec'd processes, from ExecSync and from an
// interactive exec on a terminal, are children of the pod's crin-shim
// while they run, and die with their session (when the ExecSync's
// client gives up, when its timeout expires) or with their container.
// Nothing is left, not even a zombie.
func TestExecUnderShim(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref)

	// ExecSync without a timeout, given up by its client.
	syncArg := sleepArg()
	ctx, cancel := context.WithCancel(ctxT(t))
	synced := make(chan error, 1)
	go func() {
		_, err := d.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"sleep", syncArg}})
		synced <- err
	}()
	syncPid := waitSleeper(t, syncArg)
	d.checkChildOfShim(t, syncPid, ctr, "ExecSync's process")

	// An interactive exec on a terminal.
	ttyArg := sleepArg()
	resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sleep", ttyArg}, Tty: true, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	conn := openExecSession(t, resp.Url, true)
	defer conn.Close()
	ttyPid := waitSleeper(t, ttyArg)
	d.checkChildOfShim(t, ttyPid, ctr, "the interactive exec's process")

	cancel()
	if err := <-synced; err == nil {
		t.Errorf("ExecSync of a killed sleep succeeded")
	}
	waitGone(t, syncPid, "the process of an abandoned ExecSync")

	// ExecSync past its timeout: DeadlineExceeded, and the process dies.
	timedArg := sleepArg()
	timed := make(chan error, 1)
	go func() {
		_, err := d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"sleep", timedArg}, Timeout: 3})
		timed <- err
	}()
	timedPid := waitSleeper(t, timedArg)
	d.checkChildOfShim(t, timedPid, ctr, "a timed ExecSync's process")
	if err := <-timed; code(err) != "DeadlineExceeded" {
		t.Errorf("ExecSync past its timeout: %v (%s), want DeadlineExceeded", err, code(err))
	}
	waitGone(t, timedPid, "the process of a timed-out ExecSync")

	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after its execs died, want running", st.State)
	}
	if got := d.execOut(t, ctr, "echo", "still"); got != "still" {
		t.Errorf("exec after the others = %q", got)
	}

	// The interactive exec's client is still there (a client that hangs
	// up does not end a session: the streaming server does not tell),
	// but its container stops: the process, in the pod's shared PID
	// namespace, would outlive the container's init.
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 1}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	waitGone(t, ttyPid, "the process of an exec session whose container stopped")
}

// TestExecCrindKilled SIGKILLs crind while an ExecSync and an exec stream
// run: the pod's shim, which runs the exec'd processes, sees their
// sessions end and kills them while crind is down; the container keeps
// running and the restarted crind execs in it.
func TestExecCrindKilled(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref)

	syncArg := sleepArg()
	synced := make(chan error, 1)
	go func() {
		_, err := d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"sleep", syncArg}, Timeout: 600})
		synced <- err
	}()
	streamArg := sleepArg()
	resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sleep", streamArg}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	conn := openExecSession(t, resp.Url, false)
	defer conn.Close()
	syncPid, streamPid := waitSleeper(t, syncArg), waitSleeper(t, streamArg)

	d.kill()
	<-synced
	waitGone(t, syncPid, "the ExecSync's process after crind was killed")
	waitGone(t, streamPid, "the exec stream's process after crind was killed")

	d.start()
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after crind's restart, want running", st.State)
	}
	ps := d.execOut(t, ctr, "ps")
	for _, arg := range []string{syncArg, streamArg} {
		if strings.Contains(ps, "sleep "+arg) {
			t.Errorf("exec'd sleep %s outlived crind:\n%s", arg, ps)
		}
	}
	// cleanupAll checks that nothing leaked.
}
