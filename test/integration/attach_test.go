//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/crin-dev/crin/test/poll"
	"github.com/crin-dev/crin/test/streamclient"
)

// attachSession is an interactive attach, held open the way kubectl attach
// -i holds one: input is typed while the output is watched.
type attachSession struct {
	t      *testing.T
	conn   httpstream.Connection
	stdin  httpstream.Stream
	resize httpstream.Stream
	stdout lockedBuffer
	status chan []byte // the error stream's content once it ends
}

// attachStreams are the streams an attach asks for.
type attachStreams struct {
	stdin, stdout, tty bool
}

// attach asks crind for an attach URL and opens its streams.
func (d *daemon) attach(t *testing.T, ctr string, s attachStreams) *attachSession {
	t.Helper()
	resp, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdin: s.stdin, Stdout: s.stdout, Tty: s.tty})
	if err != nil {
		t.Fatalf("Attach %+v: %v", s, err)
	}
	a := &attachSession{t: t, conn: dialStream(t, resp.Url, remoteCommandV4), status: make(chan []byte, 1)}
	t.Cleanup(func() { a.conn.Close() })
	create := func(typ string) httpstream.Stream { return streamclient.CreateStream(t, a.conn, typ) }
	errStream := create("error")
	if s.stdin {
		a.stdin = create("stdin")
	}
	var stdout httpstream.Stream
	if s.stdout {
		stdout = create("stdout")
	}
	if s.tty {
		a.resize = create("resize")
	}
	if stdout != nil {
		go func() { _, _ = io.Copy(&a.stdout, stdout) }()
	}
	go func() {
		b, _ := io.ReadAll(errStream)
		a.status <- b
	}()
	return a
}

// send types input.
func (a *attachSession) send(s string) {
	a.t.Helper()
	if _, err := io.WriteString(a.stdin, s); err != nil {
		a.t.Fatalf("write stdin: %v", err)
	}
}

// setSize sends a terminal size, as kubectl does when its window changes.
func (a *attachSession) setSize(width, height uint16) {
	a.t.Helper()
	b, _ := json.Marshal(map[string]uint16{"Width": width, "Height": height})
	if _, err := a.resize.Write(b); err != nil {
		a.t.Fatalf("write resize: %v", err)
	}
}

// waitOutput waits until the session's stdout holds want.
func (a *attachSession) waitOutput(want string) {
	a.t.Helper()
	poll.Until(a.t, time.Minute, fmt.Sprintf("attached output holds %q", want), func() (bool, string) {
		out := a.stdout.String()
		return strings.Contains(out, want), fmt.Sprintf("it has %q", out)
	})
}

// waitStatus waits for the server to end the session and returns the
// status it sent.
func (a *attachSession) waitStatus() string {
	a.t.Helper()
	select {
	case b := <-a.status:
		return string(b)
	case <-time.After(60 * time.Second):
		a.t.Fatalf("attach session did not end; output %q", a.stdout.String())
		return ""
	}
}

// stdinPod runs a pod with one container whose config asks for stdin.
func stdinPod(t *testing.T, d *daemon, ref string, edit func(*runtimeapi.ContainerConfig), cmd ...string) (podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig, ctr string) {
	t.Helper()
	podCfg = podConfig("attach-" + randHex(2))
	pod := d.runPod(t, podCfg)
	cfg = containerConfig("main", ref, cmd...)
	cfg.Stdin = true
	if edit != nil {
		edit(cfg)
	}
	return podCfg, cfg, d.runContainer(t, pod, podCfg, cfg)
}

// TestAttachStdin types into a cat container through attach: the input
// comes back on every attached client and in the log, and the end of one
// client's input does not end the container's (no stdin_once).
func TestAttachStdin(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg, cfg, ctr := stdinPod(t, d, ref, nil, "cat")

	typist := d.attach(t, ctr, attachStreams{stdin: true, stdout: true})
	watcher := d.attach(t, ctr, attachStreams{stdout: true})
	// The watcher joined once it sees a line typed after it.
	poll.Until(t, time.Minute, "the watcher sees the typed input", func() (bool, string) {
		if strings.Contains(watcher.stdout.String(), "ping") {
			return true, ""
		}
		typist.send("ping\n")
		return false, fmt.Sprintf("the typist has %q", typist.stdout.String())
	})
	typist.send("hello from stdin\n")
	typist.waitOutput("hello from stdin\n")
	watcher.waitOutput("hello from stdin\n")
	waitLog(t, logPath(podCfg, cfg), " stdout F hello from stdin\n")

	// Without stdin_once, the end of this client's input is not the end
	// of the container's: a later attach still reaches cat.
	typist.stdin.Close()
	again := d.attach(t, ctr, attachStreams{stdin: true, stdout: true})
	again.send("second session\n")
	again.waitOutput("second session\n")
	watcher.waitOutput("second session\n")
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after an attach's stdin ended, want running", st.State)
	}
}

// TestAttachStdinOnce: with stdin_once, the end of the first attach's
// input closes the container's stdin, so cat ends with 0.
func TestAttachStdinOnce(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg, cfg, ctr := stdinPod(t, d, ref, func(c *runtimeapi.ContainerConfig) { c.StdinOnce = true },
		"sh", "-c", "cat; echo cat-done")

	a := d.attach(t, ctr, attachStreams{stdin: true, stdout: true})
	a.send("only once\n")
	a.waitOutput("only once\n")
	a.stdin.Close()
	a.waitOutput("cat-done\n")
	if status := a.waitStatus(); !strings.Contains(status, `"Success"`) {
		t.Errorf("attach status %s, want Success once the container exited", status)
	}
	if st := d.waitExited(t, ctr); st.ExitCode != 0 {
		t.Errorf("container exit code %d after its stdin closed, want 0", st.ExitCode)
	}
	waitLog(t, logPath(podCfg, cfg), " stdout F only once\n")
}

// TestAttachTTYResize attaches to a shell on a terminal: its size follows
// the client's resize messages, and the terminal's output reaches the
// client and the log.
func TestAttachTTYResize(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg, cfg, ctr := stdinPod(t, d, ref, func(c *runtimeapi.ContainerConfig) { c.Tty = true }, "sh")

	a := d.attach(t, ctr, attachStreams{stdin: true, stdout: true, tty: true})
	a.setSize(100, 30)
	a.send("[ -t 0 ] && echo on-a-tty-$((6*7))\n")
	a.waitOutput("on-a-tty-42")
	a.send("echo size-$(stty size | tr ' ' x)\n")
	a.waitOutput("size-30x100")
	a.setSize(132, 43)
	a.send("echo size-$(stty size | tr ' ' x)\n")
	a.waitOutput("size-43x132")
	// A terminal's output is all stdout in the log.
	waitLog(t, logPath(podCfg, cfg), " stdout F size-43x132\r")
	// Exec'd processes do not inherit the container's terminal.
	if out := d.execOut(t, ctr, "sh", "-c", "[ -t 0 ] || echo no-tty"); out != "no-tty" {
		t.Errorf("exec in a terminal container printed %q, want no-tty", out)
	}

	_, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Tty: true, Stdout: true, Stderr: true})
	if code(err) != "InvalidArgument" {
		t.Errorf("Attach with tty and stderr: %v (%s), want InvalidArgument", err, code(err))
	}
}

// TestAttachAfterRestart kills crind with SIGKILL while a client is
// attached: the shim holds the container's stdin, so the container keeps
// it, and an attach through the restarted crind reaches it.
func TestAttachAfterRestart(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg, cfg, ctr := stdinPod(t, d, ref, nil, "cat")

	a := d.attach(t, ctr, attachStreams{stdin: true, stdout: true})
	a.send("before restart\n")
	a.waitOutput("before restart\n")
	d.kill()
	d.start()

	b := d.attach(t, ctr, attachStreams{stdin: true, stdout: true})
	b.send("after restart\n")
	b.waitOutput("after restart\n")
	waitLog(t, logPath(podCfg, cfg), " stdout F after restart\n")
	if st := d.status(t, ctr); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container %v after crind's restart, want running", st.State)
	}
}

// TestAttachStdinRefused: a container created without stdin has none to
// attach to.
func TestAttachStdinRefused(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	_, ctr := streamingPod(t, d, ref)
	_, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: ctr, Stdin: true, Stdout: true})
	if code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "stdin") {
		t.Errorf("Attach with stdin to a container without: %v (%s), want FailedPrecondition naming stdin", err, code(err))
	}
}

// TestAttachWithoutLog attaches, as critest does, to a shell in a pod with
// no log directory: the input reaches the shell and its output, a line
// without its end, the client, though no log is kept for kubelet.
func TestAttachWithoutLog(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("attach-nolog-" + randHex(2))
	podCfg.LogDirectory = ""
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("main", ref, "sh")
	cfg.Stdin, cfg.StdinOnce, cfg.LogPath = true, true, ""
	ctr := d.runContainer(t, pod, podCfg, cfg)

	a := d.attach(t, ctr, attachStreams{stdin: true, stdout: true})
	// Output that ends no line, as critest's: the shimv2 backend's attach
	// follows a log, whose writer must not hold a piece of a line back.
	a.send("echo -n hello-$((6*7))\n")
	a.waitOutput("hello-42")
	a.stdin.Close()
	if status := a.waitStatus(); !strings.Contains(status, `"Success"`) {
		t.Errorf("attach status %s, want Success once the shell exited", status)
	}
	if st := d.waitExited(t, ctr); st.ExitCode != 0 {
		t.Errorf("shell exit code %d after its stdin closed, want 0", st.ExitCode)
	}
}
