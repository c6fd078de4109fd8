//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/crin-dev/crin/test/poll"
	"github.com/crin-dev/crin/test/streamclient"
)

// The suite's names for the streaming client (test/streamclient), used
// across its files.
const (
	remoteCommandV4 = streamclient.RemoteCommandV4
	portForwardV1   = streamclient.PortForwardV1
)

// dialStream upgrades a POST to url on crind's (plain http) streaming
// server into a SPDY connection speaking protocol.
func dialStream(t *testing.T, url, protocol string) httpstream.Connection {
	t.Helper()
	return streamclient.Dial(t, url, protocol, nil)
}

// streamingPod runs a pod with one long-running busybox container.
func streamingPod(t *testing.T, d *daemon, ref string, cmd ...string) (pod, ctr string) {
	t.Helper()
	podCfg := podConfig("stream-" + randHex(2))
	pod = d.runPod(t, podCfg)
	if len(cmd) == 0 {
		cmd = []string{"sleep", "3600"}
	}
	ctr = d.runContainer(t, pod, podCfg, containerConfig("main", ref, cmd...))
	return pod, ctr
}

// The checks below run in TestExecStream and TestAttach on crin-shim and
// in TestShimV2Streaming on the shim v2 handler: kubectl must see the
// same from both.

// attachTalker is the command of a container for checkAttachOutput.
var attachTalker = []string{"sh", "-c", "sleep 3; for i in 1 2 3; do echo out$i; echo err$i >&2; done; sleep 0.5; exit 0"}

// checkExecStdin execs a command that reads stdin and writes to stdout and
// stderr: the input reaches it, the outputs come back apart, and its exit
// code reaches the client.
func checkExecStdin(t *testing.T, d *daemon, ctr string) {
	t.Helper()
	resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{
		ContainerId: ctr, Cmd: []string{"sh", "-c", "read x; echo got $x; echo oops >&2; exit 3"},
		Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if !strings.HasPrefix(resp.Url, "http://127.0.0.1:") {
		t.Errorf("Exec URL %q is not on the loopback streaming server", resp.Url)
	}
	s := streamclient.Run(t, resp.Url, streamclient.Options{Stdin: "hello\n", Stdout: true, Stderr: true})
	if s.Stdout != "got hello\n" || s.Stderr != "oops\n" {
		t.Errorf("stdout %q, stderr %q; want %q, %q", s.Stdout, s.Stderr, "got hello\n", "oops\n")
	}
	if got := s.ExitCode(); got != 3 {
		t.Errorf("exit code %d (status %+v), want 3", got, s.Status)
	}
}

// checkExecTTY execs a command on a terminal that the client resizes: it
// sees a tty, its size follows the client's, its input arrives and its
// exit code reaches the client. It returns the output, \r\r\n folded.
func checkExecTTY(t *testing.T, d *daemon, ctr string) string {
	t.Helper()
	script := `[ -t 0 ] && echo on-a-tty; read x; ` +
		`for i in $(seq 100); do s=$(stty size); [ "$s" = "40 100" ] && break; sleep 0.1; done; ` +
		`echo "size $s"; echo "got $x"; exit 5`
	resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{
		ContainerId: ctr, Cmd: []string{"sh", "-c", script}, Tty: true, Stdin: true, Stdout: true,
	})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	s := streamclient.Run(t, resp.Url, streamclient.Options{Stdin: "hello\n", KeepStdin: true, Stdout: true, TTY: true, Resize: &[2]uint16{100, 40}})
	// runc maps the first output's \n to \r\r\n when the process wrote
	// it before runc set the terminal up; it displays the same.
	out := strings.ReplaceAll(s.Stdout, "\r\r\n", "\r\n")
	for _, want := range []string{"on-a-tty\r\n", "size 40 100\r\n", "got hello\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("tty output %q lacks %q", s.Stdout, want)
		}
	}
	if got := s.ExitCode(); got != 5 {
		t.Errorf("exit code %d (status %+v), want 5", got, s.Status)
	}
	return out
}

// checkAttachOutput attaches to ctr, running attachTalker: the lines it
// writes after attaching arrive on stdout and stderr apart, and the
// session ends with Success when the container exits 0.
func checkAttachOutput(t *testing.T, d *daemon, ctr string) {
	t.Helper()
	resp, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	s := streamclient.Run(t, resp.Url, streamclient.Options{Stdout: true, Stderr: true})
	if s.Stdout != "out1\nout2\nout3\n" || s.Stderr != "err1\nerr2\nerr3\n" {
		t.Errorf("attached stdout %q, stderr %q", s.Stdout, s.Stderr)
	}
	if s.Status.Status != "Success" {
		t.Errorf("attach status %+v, want Success once the container exited", s.Status)
	}
	if st := d.waitExited(t, ctr); st.ExitCode != 0 {
		t.Errorf("container exit code %d", st.ExitCode)
	}
}

// TestExecStream runs interactive commands through the Exec URL: stdin
// reaches the command, stdout and stderr come back apart, and the exit code
// reaches the client; with a tty, the terminal's size follows the client.
func TestExecStream(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref)

	t.Run("stdin and exit code", func(t *testing.T) { checkExecStdin(t, d, ctr) })

	t.Run("success", func(t *testing.T) {
		resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"cat", "/etc/hostname"}, Stdout: true})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		s := streamclient.Run(t, resp.Url, streamclient.Options{Stdout: true})
		if s.Status.Status != "Success" || !strings.HasPrefix(s.Stdout, "stream-") {
			t.Errorf("stdout %q, status %+v; want the pod's hostname and Success", s.Stdout, s.Status)
		}
	})

	t.Run("tty", func(t *testing.T) {
		out := checkExecTTY(t, d, ctr)
		// The process's terminal echoes the input once; nothing on the
		// way may echo it again.
		if n := strings.Count(out, "hello\r\n"); n != 2 {
			t.Errorf("tty output %q: want the input echoed once, then got hello", out)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		podCfg := podConfig("exited")
		pod := d.runPod(t, podCfg)
		done := d.runContainer(t, pod, podCfg, containerConfig("done", ref, "true"))
		d.waitExited(t, done)
		for _, tc := range []struct {
			name string
			req  *runtimeapi.ExecRequest
			want string
		}{
			{"unknown container", &runtimeapi.ExecRequest{ContainerId: strings.Repeat("0e", 32), Cmd: []string{"true"}, Stdout: true}, "NotFound"},
			{"id prefix", &runtimeapi.ExecRequest{ContainerId: ctr[:4], Cmd: []string{"true"}, Stdout: true}, "InvalidArgument"},
			{"not running", &runtimeapi.ExecRequest{ContainerId: done, Cmd: []string{"true"}, Stdout: true}, "FailedPrecondition"},
			{"no streams", &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"true"}}, "InvalidArgument"},
			{"tty and stderr", &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"true"}, Tty: true, Stdout: true, Stderr: true}, "InvalidArgument"},
			{"no cmd", &runtimeapi.ExecRequest{ContainerId: ctr, Stdout: true}, "InvalidArgument"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := d.rs.Exec(ctxT(t), tc.req)
				if code(err) != tc.want {
					t.Errorf("Exec: %v (%s), want %s", err, code(err), tc.want)
				}
			})
		}
	})
}

// TestPortForward fetches a page from an httpd listening only on the pod's
// loopback, through the PortForward URL.
func TestPortForward(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	pod, ctr := streamingPod(t, d, ref, "sh", "-c",
		"mkdir -p /tmp/www && echo forwarded-page > /tmp/www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www")
	// Wait for httpd inside the pod.
	poll.Until(t, time.Minute, "httpd listens in the pod", func() (bool, string) {
		return d.exec(t, ctr, "sh", "-c", "netstat -ltn | grep -q 127.0.0.1:8080").ExitCode == 0, ""
	})

	resp, err := d.rs.PortForward(ctxT(t), &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{8080}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	conn := dialStream(t, resp.Url, portForwardV1)
	defer conn.Close()
	// Two requests over one connection, as kubectl port-forward does.
	for _, id := range []string{"0", "1"} {
		body := streamclient.PortForwardGet(t, conn, 8080, id, "/index.html")
		if !strings.Contains(body, "200 OK") || !strings.Contains(body, "forwarded-page") {
			t.Errorf("request %s: forwarded GET returned %q", id, body)
		}
	}

	for _, tc := range []struct {
		name string
		req  *runtimeapi.PortForwardRequest
		want string
	}{
		{"unknown pod", &runtimeapi.PortForwardRequest{PodSandboxId: strings.Repeat("0e", 32), Port: []int32{80}}, "NotFound"},
		{"bad port", &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{70000}}, "InvalidArgument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.rs.PortForward(ctxT(t), tc.req)
			if code(err) != tc.want {
				t.Errorf("PortForward: %v (%s), want %s", err, code(err), tc.want)
			}
		})
	}
}

// TestAttach attaches to a container's output: the lines it writes after
// attaching arrive on stdout and stderr apart, and the session ends when
// the container exits.
func TestAttach(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref, attachTalker...)

	checkAttachOutput(t, d, ctr)
	_, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdout: true})
	if code(err) != "FailedPrecondition" {
		t.Errorf("Attach to an exited container: %v (%s), want FailedPrecondition", err, code(err))
	}
	_, err = d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdin: true, Stdout: true})
	if code(err) != "FailedPrecondition" {
		t.Errorf("Attach with stdin to an exited container: %v (%s), want FailedPrecondition", err, code(err))
	}
}

// TestAttachDetach attaches to a container that keeps writing, leaves, and
// attaches again: leaving must not disturb the container or its shim.
func TestAttachDetach(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref, "sh", "-c", "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.1; done")
	for round := range 2 {
		resp, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdout: true})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		s := streamclient.Run(t, resp.Url, streamclient.Options{Stdout: true, UntilStdout: "\ntick"})
		if !strings.Contains(s.Stdout, "tick") {
			t.Errorf("round %d: attached output %q has no ticks", round, s.Stdout)
		}
	}
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after detaching, want running", st.State)
	}
}

// TestExecStreamShutdown stops crind while an exec session runs: crind
// must stop promptly and take the exec'd process with it.
func TestExecStreamShutdown(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref)
	resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"sleep", "1234"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	// Once the exec'd process runs, stop crind (off the test goroutine,
	// which is busy in the session).
	stopped := make(chan time.Duration, 1)
	go func() {
		defer close(stopped)
		if ok, _ := poll.Within(time.Minute, func() (bool, string) {
			r, err := d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"ps"}, Timeout: 10})
			return err == nil && strings.Contains(string(r.Stdout), "sleep 1234"), ""
		}); ok {
			start := time.Now()
			d.stop()
			stopped <- time.Since(start)
		}
	}()
	streamclient.Run(t, resp.Url, streamclient.Options{KeepStdin: true, Stdout: true})
	took, ok := <-stopped
	if !ok {
		t.Fatal("exec'd process never showed up")
	}
	if took > 15*time.Second {
		t.Errorf("crind took %s to stop with an exec session open", took)
	}
	d.start()
	if ps := d.execOut(t, ctr, "ps"); strings.Contains(ps, "sleep 1234") {
		t.Errorf("exec'd process outlived crind's shutdown:\n%s", ps)
	}
}
