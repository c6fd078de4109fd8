package cri

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
)

// ckptPodConfig is a pod whose containers CheckpointPod takes: its own
// network, IPC and a PID namespace per container.
func ckptPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	return cfg
}

// ckptCtr is ctrConfig in a PID namespace of its own, as kubelet asks
// for a pod that does not share one.
func ckptCtr(name string) *runtimeapi.ContainerConfig {
	cfg := ctrConfig(name)
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
	}}
	return cfg
}

// ckptPod runs a checkpointable pod with two running containers.
func ckptPod(t *testing.T, h *hub) (string, []string) {
	t.Helper()
	resp, err := h.RunPodSandbox(t.Context(), &runtimeapi.RunPodSandboxRequest{Config: ckptPodConfig("p")})
	if err != nil {
		t.Fatal(err)
	}
	pod := resp.PodSandboxId
	var ids []string
	for _, name := range []string{"a", "b"} {
		c, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ckptCtr(name)})
		if err != nil {
			t.Fatal(err)
		}
		h.startCtr(t, c.ContainerId)
		ids = append(ids, c.ContainerId)
	}
	return pod, ids
}

// TestCheckpointPodFreezesAll: every container is frozen before the first
// is dumped and thawed only after the last; the output dir gets one
// checkpoint per container and, last, the manifest naming them.
func TestCheckpointPodFreezesAll(t *testing.T) {
	h, rt := restoreHub(t)
	rt.dumps = true
	pod, ids := ckptPod(t, h)
	out := t.TempDir()
	if _, err := h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids}); err != nil {
		t.Fatal(err)
	}
	a, b := ids[0], ids[1]
	want := []string{"freeze " + a, "freeze " + b, "checkpoint " + a + " frozen", "checkpoint " + b + " frozen", "thaw " + a, "thaw " + b}
	if !slices.Equal(rt.calls, want) {
		t.Errorf("runtime calls %q, want %q", rt.calls, want)
	}
	m, err := checkpoint.ReadPodManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.PodSandboxID != pod || m.Engine != "fakerunc" || len(m.Containers) != 2 || m.Containers[0].Name != "a" || m.Containers[1].ID != b {
		t.Errorf("manifest %+v", m)
	}
	for _, c := range m.Containers {
		ck, err := checkpoint.ReadConfig(filepath.Join(out, c.Dir))
		if err != nil || ck.ID != c.ID || ck.RootfsImageRef != testImage.ID {
			t.Errorf("container %s's config.dump: %+v, %v", c.Name, ck, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(h.opts.RootDir, "checkpoints")); len(ents) != 0 {
		t.Errorf("%d staging dirs left", len(ents))
	}
}

// TestCheckpointPodFailureLeavesNothing: a dump that fails leaves every
// container thawed, nothing in the output dir and no staging dir.
func TestCheckpointPodFailureLeavesNothing(t *testing.T) {
	h, rt := restoreHub(t)
	rt.dumps = true
	pod, ids := ckptPod(t, h)
	rt.dumpErr = map[string]error{ids[1]: errors.New("criu: dump failed")}
	out := t.TempDir()
	_, err := h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids})
	if err == nil || !strings.Contains(err.Error(), "dump failed") {
		t.Fatalf("CheckpointPod with a failing dump: %v", err)
	}
	if !slices.Equal(rt.thawed, ids) {
		t.Errorf("thawed %v, want %v", rt.thawed, ids)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a failed checkpoint left %d entries in output_path", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(h.opts.RootDir, "checkpoints")); len(ents) != 0 {
		t.Errorf("%d staging dirs left", len(ents))
	}
}

// TestCheckpointPodRefusals: pods and containers crind cannot checkpoint
// are FailedPrecondition, naming why; nothing is frozen.
func TestCheckpointPodRefusals(t *testing.T) {
	h, rt := restoreHub(t)
	pod, ids := ckptPod(t, h)
	hostNet := h.runPod(t, "hostnet") // podConfig: the node's network
	c := h.create(t, hostNet, "c")
	h.startCtr(t, c)
	cr, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ckptCtr("created")})
	if err != nil {
		t.Fatal(err)
	}
	created := cr.ContainerId
	other := h.runPod(t, "other")
	for _, tc := range []struct {
		pod  string
		ids  []string
		is   func(error) bool
		want string
	}{
		{hostNet, []string{c}, errdefs.IsFailedPrecondition, "namespace_options.network = NODE"},
		{pod, []string{ids[0], created}, errdefs.IsFailedPrecondition, "not running"},
		{other, ids, errdefs.IsInvalidArgument, "belongs to pod"},
	} {
		_, err := h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: tc.pod, OutputPath: t.TempDir(), ContainerIds: tc.ids})
		if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointPod(%v): %v; want %q", tc.ids, err, tc.want)
		}
	}
	// A container another checkpoint is dumping.
	release, err := h.dumping.claim(ids[1])
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: t.TempDir(), ContainerIds: ids})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("CheckpointPod of a container being checkpointed: %v", err)
	}
	release()
	if len(rt.calls) != 0 {
		t.Errorf("refused checkpoints called the runtime: %q", rt.calls)
	}
	rt.dumps = true
	if _, err := h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: t.TempDir(), ContainerIds: ids}); err != nil {
		t.Errorf("CheckpointPod once the other checkpoint ended: %v", err)
	}
}

// podCheckpoint checkpoints a pod of containers a and b and returns the
// checkpoint dir.
func podCheckpoint(t *testing.T, h *hub, rt *ckptRuntime) string {
	t.Helper()
	rt.dumps = true
	pod, ids := ckptPod(t, h)
	out := t.TempDir()
	if _, err := h.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestorePod: RestorePod runs a new pod and creates each container to
// be restored from its checkpoint (linked into crind's own restore dir),
// CREATED; the checkpoint dir is left as it was.
func TestRestorePod(t *testing.T) {
	h, rt := restoreHub(t)
	dir := podCheckpoint(t, h, rt)
	before := listTree(t, dir)
	resp, err := h.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{
		CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("b"), ckptCtr("a")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RestoredContainers) != 2 || resp.RestoredContainers[0].Name != "b" || resp.RestoredContainers[1].Name != "a" {
		t.Fatalf("restored %v, want b and a", resp.RestoredContainers)
	}
	for _, rc := range resp.RestoredContainers {
		st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: rc.ContainerId})
		if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("restored %s: %v, %v; want CREATED", rc.Name, st, err)
		}
		rt.mu.Lock()
		from := rt.restores[rc.ContainerId]
		rt.mu.Unlock()
		if want := filepath.Join(h.opts.RootDir, "restore", rc.ContainerId, checkpoint.ImagesDir); from != want {
			t.Errorf("%s restores from %q, want %q", rc.Name, from, want)
		}
		inv, err := os.ReadFile(filepath.Join(from, checkpoint.InventoryFile))
		if err != nil || len(inv) == 0 {
			t.Errorf("%s's CRIU images were not brought over: %v", rc.Name, err)
		}
	}
	l, err := h.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: resp.PodSandboxId}})
	if err != nil || len(l.Containers) != 2 {
		t.Errorf("the restored pod lists %v (%v), want its two containers", l.GetContainers(), err)
	}
	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Errorf("RestorePod changed the checkpoint: %v, was %v", after, before)
	}
}

// TestRestorePodRefusals: a request the checkpoint does not match is
// refused, naming the field, before any pod is made.
func TestRestorePodRefusals(t *testing.T) {
	h, rt := restoreHub(t)
	dir := podCheckpoint(t, h, rt)
	pods := len(h.leftovers(t))
	args := ckptCtr("b")
	args.Args = []string{"other"}
	env := ckptCtr("b")
	env.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}}
	tty := ckptCtr("b")
	tty.Tty = true
	h.images.missing = "gone"
	gone := ckptCtr("b")
	gone.Image = &runtimeapi.ImageSpec{Image: "gone"}
	hostNet := podConfig("q")
	for _, tc := range []struct {
		name string
		pod  *runtimeapi.PodSandboxConfig
		cfgs []*runtimeapi.ContainerConfig
		is   func(error) bool
		want string
	}{
		{"one missing", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a")}, errdefs.IsFailedPrecondition, "the checkpoint holds 2"},
		{"another name", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("z")}, errdefs.IsFailedPrecondition, `container_configs[1].metadata.name "z"`},
		{"args", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), args}, errdefs.IsFailedPrecondition, "container_configs[1].args"},
		{"env", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), env}, errdefs.IsFailedPrecondition, "container_configs[1].envs"},
		{"tty", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), tty}, errdefs.IsFailedPrecondition, "container_configs[1].tty"},
		{"image", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), gone}, errdefs.IsFailedPrecondition, "container_configs[1].image.image"},
		{"host network", hostNet, []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("b")}, errdefs.IsFailedPrecondition, "namespace_options.network"},
		{"twice", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("a")}, errdefs.IsInvalidArgument, "named twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: tc.pod, ContainerConfigs: tc.cfgs})
			if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RestorePod: %v; want %q", err, tc.want)
			}
			if n := len(h.leftovers(t)); n != pods {
				t.Errorf("a refused RestorePod left things: %v", h.leftovers(t))
			}
		})
	}

	// A checkpoint another engine wrote.
	m, err := checkpoint.ReadPodManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Engine = "crun"
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, checkpoint.PodManifestFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = h.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("b")}})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "written by crun") {
		t.Errorf("RestorePod of crun's checkpoint on fakerunc: %v", err)
	}
}

// TestRestorePodUndone: a container that cannot be made undoes the whole
// restore: no pod, no container, no restore dir is left.
func TestRestorePodUndone(t *testing.T) {
	h, rt := restoreHub(t)
	dir := podCheckpoint(t, h, rt)
	keep := h.leftovers(t)
	m, err := checkpoint.ReadPodManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	// b's checkpoint holds a symlink, which crind does not copy.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, m.Containers[1].Dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, err = h.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("b")}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `container "b"`) {
		t.Fatalf("RestorePod of a checkpoint with a symlink: %v", err)
	}
	if got := h.leftovers(t); len(got) != len(keep) {
		t.Errorf("a failed RestorePod left %v (had %v)", got, keep)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.opts.RootDir, "restore")); len(ents) != 0 {
		t.Errorf("a failed RestorePod left %d restore dirs", len(ents))
	}
}

// listTree lists the files under dir with their sizes and mtimes.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, st os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out = append(out, strings.TrimPrefix(p, dir)+" "+st.Mode().String()+" "+st.ModTime().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
