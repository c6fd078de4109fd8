//go:build integration

package integration

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/streamclient"
)

// TestShimV2Streaming drives interactive exec (stdin, separate stdout and
// stderr, exit code; a terminal whose size follows the client) and attach
// on the shim v2 handler, as kubectl exec and attach do.
func TestShimV2Streaming(t *testing.T) {
	runsOn(t, oci)
	d := shimv2Daemon(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("v2stream")
	pod := d.runPodWith(t, podCfg, shimv2Handler)
	ctr := d.runContainer(t, pod, podCfg, containerConfig("main", ref, "sleep", "3600"))

	t.Run("stdin and exit code", func(t *testing.T) { checkExecStdin(t, d, ctr) })

	t.Run("stdin to its end", func(t *testing.T) {
		resp, err := d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{
			ContainerId: ctr, Cmd: []string{"wc", "-l"}, Stdin: true, Stdout: true,
		})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		s := streamclient.Run(t, resp.Url, streamclient.Options{Stdin: strings.Repeat("line\n", 1000), Stdout: true})
		if strings.TrimSpace(s.Stdout) != "1000" || s.Status.Status != "Success" {
			t.Errorf("wc -l of 1000 lines: %q, status %+v", s.Stdout, s.Status)
		}
	})

	t.Run("tty", func(t *testing.T) { checkExecTTY(t, d, ctr) })

	t.Run("attach", func(t *testing.T) {
		talker := d.runContainer(t, pod, podCfg, containerConfig("talker", ref, attachTalker...))
		checkAttachOutput(t, d, talker)
		if _, err := d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: talker, Stdout: true}); code(err) != "FailedPrecondition" {
			t.Errorf("Attach to an exited container: %v (%s), want FailedPrecondition", err, code(err))
		}
	})
}
