package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCheckpointPodFreezesAll: every container is frozen before the first
// is dumped and thawed only after the last; the output dir gets one
// checkpoint per container and, last, the manifest naming them.
func TestCheckpointPodFreezesAll(t *testing.T) {
	e := newEnv(t)
	e.rt.dumps = true
	pod, ids := e.ckptPod()
	out := t.TempDir()
	if err := e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids}); err != nil {
		t.Fatal(err)
	}
	a, b := ids[0], ids[1]
	want := []string{"freeze " + a, "freeze " + b, "checkpoint " + a + " frozen", "checkpoint " + b + " frozen", "thaw " + a, "thaw " + b}
	if !slices.Equal(e.rt.calls, want) {
		t.Errorf("runtime calls %q, want %q", e.rt.calls, want)
	}
	m, err := ReadPodManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.PodSandboxID != pod || m.Engine != "fakerunc" || len(m.Containers) != 2 || m.Containers[0].Name != "a" || m.Containers[1].ID != b {
		t.Errorf("manifest %+v", m)
	}
	for _, c := range m.Containers {
		ck, err := ReadConfig(filepath.Join(out, c.Dir))
		if err != nil || ck.ID != c.ID || ck.RootfsImageRef != testImage.ID {
			t.Errorf("container %s's config.dump: %+v, %v", c.Name, ck, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.root, "checkpoints")); len(ents) != 0 {
		t.Errorf("%d staging dirs left", len(ents))
	}
}

// TestCheckpointPodFailureLeavesNothing: a dump that fails leaves every
// container thawed, nothing in the output dir and no staging dir.
func TestCheckpointPodFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.rt.dumps = true
	pod, ids := e.ckptPod()
	e.rt.dumpErr = map[string]error{ids[1]: errors.New("criu: dump failed")}
	out := t.TempDir()
	err := e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids})
	if err == nil || !strings.Contains(err.Error(), "dump failed") {
		t.Fatalf("CheckpointPod with a failing dump: %v", err)
	}
	if !slices.Equal(e.rt.thawed, ids) {
		t.Errorf("thawed %v, want %v", e.rt.thawed, ids)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a failed checkpoint left %d entries in output_path", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(e.root, "checkpoints")); len(ents) != 0 {
		t.Errorf("%d staging dirs left", len(ents))
	}
}

// TestCheckpointPodRefusals: requests, pods and containers crind cannot
// checkpoint are refused with the right code, naming why; nothing is
// frozen.
func TestCheckpointPodRefusals(t *testing.T) {
	e := newEnv(t)
	pod, ids := e.ckptPod()
	hostNetCfg := ckptPodConfig("hostnet")
	hostNetCfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	hostNet := e.addPod(hostNetCfg, "")
	c := e.addCtr(hostNet, ckptCtr("c"), true)
	sharedCfg := ckptPodConfig("shared")
	sharedCfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	shared := e.addPod(sharedCfg, "")
	inShared := e.addCtr(shared, ckptCtr("s"), true)
	created := e.addCtr(pod, ckptCtr("created"), false)
	tty := ckptCtr("tty")
	tty.Tty = true
	onTTY := e.addCtr(pod, tty, true)
	dev := ckptCtr("dev")
	dev.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse"}}
	withDev := e.addCtr(pod, dev, true)
	kata := e.addPod(ckptPodConfig("k"), "kata")
	onKata := e.addCtr(kata, ckptCtr("k"), true)
	other := e.addPod(ckptPodConfig("other"), "")
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pod  string
		ids  []string
		out  string
		opts map[string]string
		is   func(error) bool
		want string
	}{
		{"relative output", pod, ids, "out", nil, errdefs.IsInvalidArgument, "output_path"},
		{"output not empty", pod, ids, full, nil, errdefs.IsInvalidArgument, "not empty"},
		{"output missing", pod, ids, filepath.Join(full, "none"), nil, errdefs.IsInvalidArgument, "does not exist"},
		{"options", pod, ids, "", map[string]string{"k": "v"}, errdefs.IsInvalidArgument, `options: crind has no checkpoint or restore options, got ["k"]`},
		{"unknown pod", "gone", ids, "", nil, errdefs.IsNotFound, "gone"},
		{"no containers", pod, nil, "", nil, errdefs.IsInvalidArgument, "container_ids: must not be empty"},
		{"twice", pod, []string{ids[0], ids[0]}, "", nil, errdefs.IsInvalidArgument, "listed twice"},
		{"unknown container", pod, []string{ids[0], "gone"}, "", nil, errdefs.IsNotFound, "container_ids[1]"},
		{"host network", hostNet, []string{c}, "", nil, errdefs.IsFailedPrecondition, "namespace_options.network = NODE"},
		{"shared pid", shared, []string{inShared}, "", nil, errdefs.IsFailedPrecondition, "namespace_options.pid = POD"},
		{"not running", pod, []string{ids[0], created}, "", nil, errdefs.IsFailedPrecondition, "not running"},
		{"terminal", pod, []string{onTTY}, "", nil, errdefs.IsFailedPrecondition, "terminal"},
		{"devices", pod, []string{withDev}, "", nil, errdefs.IsFailedPrecondition, "1 devices"},
		{"handler", kata, []string{onKata}, "", nil, errdefs.IsFailedPrecondition, "cannot checkpoint"},
		{"other pod", other, ids, "", nil, errdefs.IsInvalidArgument, "belongs to pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out
			if out == "" {
				out = t.TempDir()
			}
			err := e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: tc.pod, OutputPath: out, ContainerIds: tc.ids, Options: tc.opts})
			if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckpointPod: %v; want %q", err, tc.want)
			}
		})
	}
	// CRIU that does not work.
	e.criuErr = errdefs.ErrFailedPrecondition
	err := e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: t.TempDir(), ContainerIds: ids})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "checkpoint pod "+pod) {
		t.Errorf("CheckpointPod without CRIU: %v", err)
	}
	e.criuErr = nil
	// A container another checkpoint is dumping.
	release, err := e.m.dumping.claim(ids[1])
	if err != nil {
		t.Fatal(err)
	}
	err = e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: t.TempDir(), ContainerIds: ids})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("CheckpointPod of a container being checkpointed: %v", err)
	}
	release()
	if len(e.rt.calls) != 0 {
		t.Errorf("refused checkpoints called the runtime: %q", e.rt.calls)
	}
	e.rt.dumps = true
	if err := e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: t.TempDir(), ContainerIds: ids}); err != nil {
		t.Errorf("CheckpointPod once the other checkpoint ended: %v", err)
	}
}
