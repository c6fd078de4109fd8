//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/crin-dev/crin/test/poll"
)

// The client side of the streaming protocols, spoken here as kubelet's
// clients (kubectl exec/attach/port-forward) speak them over SPDY.
const (
	remoteCommandV4 = "v4.channel.k8s.io"
	portForwardV1   = "portforward.k8s.io"
)

// dialStream upgrades a POST to url into a SPDY connection speaking
// protocol.
func dialStream(t *testing.T, url, protocol string) httpstream.Connection {
	t.Helper()
	rt, err := spdy.NewRoundTripper(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpstream.HeaderProtocolVersion, protocol)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		t.Fatalf("upgrade %s: %v", url, err)
	}
	if got := resp.Header.Get(httpstream.HeaderProtocolVersion); got != protocol {
		conn.Close()
		t.Fatalf("server chose protocol %q, want %q", got, protocol)
	}
	return conn
}

// session is what a remote command produced.
type session struct {
	stdout, stderr string
	// status is the v4 status the server sent on the error stream.
	status struct {
		Status  string `json:"status"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
		Details struct {
			Causes []struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"causes"`
		} `json:"details"`
	}
}

// exitCode is the exit code a session reported: 0 on success, -1 when the
// status says neither.
func (s *session) exitCode() int {
	if s.status.Status == "Success" {
		return 0
	}
	for _, c := range s.status.Details.Causes {
		if c.Reason == "ExitCode" {
			var n int
			if _, err := fmt.Sscan(c.Message, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

type sessionOptions struct {
	stdin          string // sent, then the stdin stream is half-closed (unless keepStdin)
	keepStdin      bool
	stdout, stderr bool
	tty            bool
	resize         *[2]uint16 // width, height, sent first
	// untilStdout closes the connection once stdout contains it.
	untilStdout string
}

// runSession speaks remote command v4 on url: it creates the streams the
// request asked for, feeds stdin, collects the output and the status.
func runSession(t *testing.T, url string, o sessionOptions) *session {
	t.Helper()
	conn := dialStream(t, url, remoteCommandV4)
	defer conn.Close()
	create := func(typ string) httpstream.Stream {
		h := http.Header{}
		h.Set("streamType", typ)
		s, err := conn.CreateStream(h)
		if err != nil {
			t.Fatalf("create %s stream: %v", typ, err)
		}
		return s
	}
	errStream := create("error")
	var stdin, stdout, stderr, resize httpstream.Stream
	if o.stdin != "" || o.keepStdin {
		stdin = create("stdin")
	}
	if o.stdout {
		stdout = create("stdout")
	}
	if o.stderr {
		stderr = create("stderr")
	}
	if o.tty {
		resize = create("resize")
		if o.resize != nil {
			b, _ := json.Marshal(map[string]uint16{"Width": o.resize[0], "Height": o.resize[1]})
			if _, err := resize.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if stdin != nil {
		if _, err := io.WriteString(stdin, o.stdin); err != nil {
			t.Fatalf("write stdin: %v", err)
		}
		if !o.keepStdin {
			stdin.Close()
		}
	}
	var (
		wg       sync.WaitGroup
		res      session
		outBuf   lockedBuffer
		errBuf   lockedBuffer
		statusB  []byte
		sawUntil = make(chan struct{})
	)
	copyOut := func(dst *lockedBuffer, s httpstream.Stream, until string) {
		defer wg.Done()
		buf := make([]byte, 4096)
		closed := false
		for {
			n, err := s.Read(buf)
			dst.Write(buf[:n])
			if until != "" && !closed && strings.Contains(dst.String(), until) {
				closed = true
				close(sawUntil)
			}
			if err != nil {
				return
			}
		}
	}
	if stdout != nil {
		wg.Add(1)
		go copyOut(&outBuf, stdout, o.untilStdout)
	}
	if stderr != nil {
		wg.Add(1)
		go copyOut(&errBuf, stderr, "")
	}
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		statusB, _ = io.ReadAll(errStream)
	}()
	timeout := time.After(60 * time.Second)
	select {
	case <-statusDone:
	case <-sawUntil:
		conn.Close()
		<-statusDone
	case <-timeout:
		conn.Close()
		t.Fatalf("session on %s did not end; stdout so far %q", url, outBuf.String())
	}
	wg.Wait()
	res.stdout, res.stderr = outBuf.String(), errBuf.String()
	if len(statusB) > 0 {
		if err := json.Unmarshal(statusB, &res.status); err != nil {
			t.Fatalf("status %q: %v", statusB, err)
		}
	}
	return &res
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

// TestExecStream runs interactive commands through the Exec URL: stdin
// reaches the command, stdout and stderr come back apart, and the exit code
// reaches the client; with a tty, the terminal's size follows the client.
func TestExecStream(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref)

	t.Run("stdin and exit code", func(t *testing.T) {
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
		s := runSession(t, resp.Url, sessionOptions{stdin: "hello\n", stdout: true, stderr: true})
		if s.stdout != "got hello\n" || s.stderr != "oops\n" {
			t.Errorf("stdout %q, stderr %q; want %q, %q", s.stdout, s.stderr, "got hello\n", "oops\n")
		}
		if got := s.exitCode(); got != 3 {
			t.Errorf("exit code %d (status %+v), want 3", got, s.status)
		}
	})

	t.Run("success", func(t *testing.T) {
		resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: ctr, Cmd: []string{"cat", "/etc/hostname"}, Stdout: true})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		s := runSession(t, resp.Url, sessionOptions{stdout: true})
		if s.status.Status != "Success" || !strings.HasPrefix(s.stdout, "stream-") {
			t.Errorf("stdout %q, status %+v; want the pod's hostname and Success", s.stdout, s.status)
		}
	})

	t.Run("tty", func(t *testing.T) {
		script := `[ -t 0 ] && echo on-a-tty; read x; ` +
			`for i in $(seq 100); do s=$(stty size); [ "$s" = "40 100" ] && break; sleep 0.1; done; ` +
			`echo "size $s"; echo "got $x"; exit 5`
		resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{
			ContainerId: ctr, Cmd: []string{"sh", "-c", script}, Tty: true, Stdin: true, Stdout: true,
		})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		s := runSession(t, resp.Url, sessionOptions{stdin: "hello\n", keepStdin: true, stdout: true, tty: true, resize: &[2]uint16{100, 40}})
		// runc maps the first output's \n to \r\r\n when the process
		// wrote it before runc set the terminal up; it displays the same.
		out := strings.ReplaceAll(s.stdout, "\r\r\n", "\r\n")
		for _, want := range []string{"on-a-tty\r\n", "size 40 100\r\n", "got hello\r\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("tty output %q lacks %q", s.stdout, want)
			}
		}
		// The process's terminal echoes the input once; nothing on the
		// way may echo it again.
		if n := strings.Count(out, "hello\r\n"); n != 2 {
			t.Errorf("tty output %q: want the input echoed once, then got hello", s.stdout)
		}
		if got := s.exitCode(); got != 5 {
			t.Errorf("exit code %d (status %+v), want 5", got, s.status)
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
			{"unknown container", &runtimeapi.ExecRequest{ContainerId: "nosuch", Cmd: []string{"true"}, Stdout: true}, "NotFound"},
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
	get := func(requestID string) string {
		h := http.Header{}
		h.Set("streamType", "error")
		h.Set("port", "8080")
		h.Set("requestID", requestID)
		errStream, err := conn.CreateStream(h)
		if err != nil {
			t.Fatal(err)
		}
		h.Set("streamType", "data")
		data, err := conn.CreateStream(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(data, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(data)
		if err != nil {
			t.Fatalf("read forwarded data: %v", err)
		}
		data.Close()
		conn.RemoveStreams(errStream, data)
		return string(body)
	}
	// Two requests over one connection, as kubectl port-forward does.
	for _, id := range []string{"0", "1"} {
		body := get(id)
		if !strings.Contains(body, "200 OK") || !strings.Contains(body, "forwarded-page") {
			t.Errorf("request %s: forwarded GET returned %q", id, body)
		}
	}

	for _, tc := range []struct {
		name string
		req  *runtimeapi.PortForwardRequest
		want string
	}{
		{"unknown pod", &runtimeapi.PortForwardRequest{PodSandboxId: "nosuch", Port: []int32{80}}, "NotFound"},
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
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref, "sh", "-c",
		"sleep 3; for i in 1 2 3; do echo out$i; echo err$i >&2; done; sleep 0.5; exit 0")

	resp, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	s := runSession(t, resp.Url, sessionOptions{stdout: true, stderr: true})
	if s.stdout != "out1\nout2\nout3\n" || s.stderr != "err1\nerr2\nerr3\n" {
		t.Errorf("attached stdout %q, stderr %q", s.stdout, s.stderr)
	}
	if s.status.Status != "Success" {
		t.Errorf("attach status %+v, want Success once the container exited", s.status)
	}
	if st := d.waitExited(t, ctr); st.ExitCode != 0 {
		t.Errorf("container exit code %d", st.ExitCode)
	}

	_, err = d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdout: true})
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
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref, "sh", "-c", "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.1; done")
	for round := range 2 {
		resp, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdout: true})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		s := runSession(t, resp.Url, sessionOptions{stdout: true, untilStdout: "\ntick"})
		if !strings.Contains(s.stdout, "tick") {
			t.Errorf("round %d: attached output %q has no ticks", round, s.stdout)
		}
	}
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after detaching, want running", st.State)
	}
}

// TestExecStreamShutdown stops crind while an exec session runs: crind
// must stop promptly and take the exec'd process with it.
func TestExecStreamShutdown(t *testing.T) {
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
	runSession(t, resp.Url, sessionOptions{keepStdin: true, stdout: true})
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
