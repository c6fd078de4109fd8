//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCheckpointRefusals checks what crind says to checkpoint and restore
// requests: bad requests name the field, and where CRIU does not work on
// this host (Debian 12's criu 3.17 on a kernel from 6.13 on) the request is
// FailedPrecondition with CRIU's reason, the container keeps running and
// nothing is written.
func TestCheckpointRefusals(t *testing.T) {
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("ckpt")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("counter", ref, "sh", "-c", "i=0; while true; do i=$((i+1)); echo $i; sleep 1; done"))
	out := filepath.Join(t.TempDir(), "ckpt.tar")

	for _, tc := range []struct {
		req  *runtimeapi.CheckpointContainerRequest
		code string
		want string
	}{
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id}, "InvalidArgument", "location"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: "rel.tar"}, "InvalidArgument", "location"},
		{&runtimeapi.CheckpointContainerRequest{Location: out}, "InvalidArgument", "container_id"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: strings.Repeat("0e", 32), Location: out}, "NotFound", "0e0e"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: "nope", Location: out}, "InvalidArgument", "nope"},
	} {
		_, err := d.rs.CheckpointContainer(ctx, tc.req)
		if code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointContainer(%v): %v; want %s naming %s", tc.req, err, tc.code, tc.want)
		}
	}

	criuWorks := exec.Command("criu", "check").Run() == nil
	_, err := d.rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: out})
	switch {
	case criuWorks:
		if code(err) != "Unimplemented" {
			t.Errorf("CheckpointContainer with a working CRIU: %v; crind has no checkpoint path yet", err)
		}
	case code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "criu"):
		t.Errorf("CheckpointContainer where CRIU does not work: %v; want FailedPrecondition saying why", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("a refused checkpoint left %s: %v", out, serr)
	}
	if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after a refused checkpoint: %v", st.State)
	}
	_, err = d.rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod})
	if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), "output_path") {
		t.Errorf("CheckpointPod without output_path: %v", err)
	}
	_, err = d.rs.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: out})
	if want := map[bool]string{true: "Unimplemented", false: "FailedPrecondition"}[criuWorks]; code(err) != want {
		t.Errorf("RestorePod: %v; want %s", err, want)
	}
}
