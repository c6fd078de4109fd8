//go:build integration

package integration

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestShimV2Streaming drives interactive exec (stdin, separate stdout and
// stderr, exit code; a terminal whose size follows the client) and attach
// on the shim v2 handler, as kubectl exec and attach do.
func TestShimV2Streaming(t *testing.T) {
	d := shimv2Daemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("v2stream")
	pod := d.runPodWith(t, podCfg, shimv2Handler)
	ctr := d.runContainer(t, pod, podCfg, containerConfig("main", ref, "sleep", "3600"))

	t.Run("stdin and exit code", func(t *testing.T) {
		resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{
			ContainerId: ctr, Cmd: []string{"sh", "-c", "read x; echo got $x; echo oops >&2; exit 3"},
			Stdin: true, Stdout: true, Stderr: true,
		})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		s := runSession(t, resp.Url, sessionOptions{stdin: "hello\n", stdout: true, stderr: true})
		if s.stdout != "got hello\n" || s.stderr != "oops\n" {
			t.Errorf("stdout %q, stderr %q; want %q, %q", s.stdout, s.stderr, "got hello\n", "oops\n")
		}
		if got := s.exitCode(); got != 3 {
			t.Errorf("exit code %d (status %+v), want 3", got, s.status)
		}
	})

	t.Run("stdin to its end", func(t *testing.T) {
		resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{
			ContainerId: ctr, Cmd: []string{"wc", "-l"}, Stdin: true, Stdout: true,
		})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		s := runSession(t, resp.Url, sessionOptions{stdin: strings.Repeat("line\n", 1000), stdout: true})
		if strings.TrimSpace(s.stdout) != "1000" || s.status.Status != "Success" {
			t.Errorf("wc -l of 1000 lines: %q, status %+v", s.stdout, s.status)
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
		out := strings.ReplaceAll(s.stdout, "\r\r\n", "\r\n")
		for _, want := range []string{"on-a-tty\r\n", "size 40 100\r\n", "got hello\r\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("tty output %q lacks %q", s.stdout, want)
			}
		}
		if got := s.exitCode(); got != 5 {
			t.Errorf("exit code %d (status %+v), want 5", got, s.status)
		}
	})

	t.Run("attach", func(t *testing.T) {
		talker := d.runContainer(t, pod, podCfg, containerConfig("talker", ref, "sh", "-c",
			"sleep 3; for i in 1 2 3; do echo out$i; echo err$i >&2; done; sleep 0.5; exit 0"))
		resp, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: talker, Stdout: true, Stderr: true})
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
		if st := d.waitExited(t, talker); st.ExitCode != 0 {
			t.Errorf("container exit code %d", st.ExitCode)
		}
		if _, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: talker, Stdout: true}); code(err) != "FailedPrecondition" {
			t.Errorf("Attach to an exited container: %v (%s), want FailedPrecondition", err, code(err))
		}
	})
}
