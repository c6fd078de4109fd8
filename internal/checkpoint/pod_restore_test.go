package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podCheckpoint checkpoints a pod of containers a and b and returns the
// checkpoint dir.
func (e *env) podCheckpoint(t *testing.T) string {
	t.Helper()
	e.rt.dumps = true
	pod, ids := e.ckptPod()
	out := t.TempDir()
	if err := e.m.CheckpointPod(t.Context(), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids}); err != nil {
		t.Fatal(err)
	}
	return out
}

// counts is how many pods and containers the fake hub holds.
func (e *env) counts() [2]int {
	e.hub.mu.Lock()
	defer e.hub.mu.Unlock()
	return [2]int{len(e.hub.pods), len(e.hub.ctrs)}
}

// TestRestorePod: RestorePod runs a new pod and creates each container to
// be restored from its checkpoint (linked into crind's own restore dir),
// in the request's order; the checkpoint dir is left as it was.
func TestRestorePod(t *testing.T) {
	e := newEnv(t)
	dir := e.podCheckpoint(t)
	before := listTree(t, dir)
	resp, err := e.m.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{
		CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("b"), ckptCtr("a")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RestoredContainers) != 2 || resp.RestoredContainers[0].Name != "b" || resp.RestoredContainers[1].Name != "a" {
		t.Fatalf("restored %v, want b and a", resp.RestoredContainers)
	}
	if p, err := e.hub.Pod(resp.PodSandboxId); err != nil || p.Config.GetMetadata().GetName() != "q" {
		t.Errorf("the restored pod: %+v, %v; want one run from the request's config", p, err)
	}
	for _, rc := range resp.RestoredContainers {
		c, err := e.hub.Container(rc.ContainerId)
		if err != nil || c.PodID != resp.PodSandboxId || c.Name != rc.Name {
			t.Errorf("restored %s: %+v, %v", rc.Name, c, err)
		}
		from := e.hub.restores[rc.ContainerId]
		if want := filepath.Join(e.root, "restore", rc.ContainerId); from != want {
			t.Errorf("%s restores from %q, want %q", rc.Name, from, want)
		}
		inv, err := os.ReadFile(filepath.Join(RestoreImages(from), InventoryFile))
		if err != nil || len(inv) == 0 {
			t.Errorf("%s's CRIU images were not brought over: %v", rc.Name, err)
		}
		if !strings.HasPrefix(e.images.applied[rc.ContainerId], "diff of ") {
			t.Errorf("%s's writable layer got %q, want its checkpoint's diff", rc.Name, e.images.applied[rc.ContainerId])
		}
	}
	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Errorf("RestorePod changed the checkpoint: %v, was %v", after, before)
	}
}

// TestRestorePodRefusals: a request the checkpoint does not match is
// refused, naming the field, before any pod is made.
func TestRestorePodRefusals(t *testing.T) {
	e := newEnv(t)
	dir := e.podCheckpoint(t)
	keep := e.counts()
	args := ckptCtr("b")
	args.Args = []string{"other"}
	env := ckptCtr("b")
	env.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}}
	user := ckptCtr("b")
	user.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
	tty := ckptCtr("b")
	tty.Tty = true
	gone := ckptCtr("b")
	gone.Image = &runtimeapi.ImageSpec{Image: "gone"}
	hostNet := ckptPodConfig("q")
	hostNet.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	both := []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("b")}
	for _, tc := range []struct {
		name    string
		path    string
		handler string
		pod     *runtimeapi.PodSandboxConfig
		cfgs    []*runtimeapi.ContainerConfig
		is      func(error) bool
		want    string
	}{
		{"relative path", "ckpt", "", ckptPodConfig("q"), both, errdefs.IsInvalidArgument, "checkpoint_path"},
		{"no such dir", filepath.Join(dir, "none"), "", ckptPodConfig("q"), both, errdefs.IsNotFound, "does not exist"},
		{"not a checkpoint", t.TempDir(), "", ckptPodConfig("q"), both, errdefs.IsInvalidArgument, "checkpoint_path"},
		{"no config", dir, "", nil, both, errdefs.IsInvalidArgument, "config: must be set"},
		{"no containers", dir, "", ckptPodConfig("q"), nil, errdefs.IsInvalidArgument, "container_configs: must not be empty"},
		{"unknown handler", dir, "nope", ckptPodConfig("q"), both, errdefs.IsInvalidArgument, "runtime_handler"},
		{"handler", dir, "kata", ckptPodConfig("q"), both, errdefs.IsFailedPrecondition, "cannot restore"},
		{"one missing", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a")}, errdefs.IsFailedPrecondition, "the checkpoint holds 2"},
		{"another name", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("z")}, errdefs.IsFailedPrecondition, `container_configs[1].metadata.name "z"`},
		{"args", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), args}, errdefs.IsFailedPrecondition, "container_configs[1].args"},
		{"env", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), env}, errdefs.IsFailedPrecondition, "container_configs[1].envs"},
		{"user", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), user}, errdefs.IsFailedPrecondition, "run_as_user"},
		{"tty", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), tty}, errdefs.IsFailedPrecondition, "container_configs[1].tty"},
		{"image", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), gone}, errdefs.IsFailedPrecondition, "container_configs[1].image.image"},
		{"host network", dir, "", hostNet, both, errdefs.IsFailedPrecondition, "namespace_options.network"},
		{"twice", dir, "", ckptPodConfig("q"), []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("a")}, errdefs.IsInvalidArgument, "named twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.m.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: tc.path, RuntimeHandler: tc.handler, Config: tc.pod, ContainerConfigs: tc.cfgs})
			if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RestorePod: %v; want %q", err, tc.want)
			}
			if got := e.counts(); got != keep {
				t.Errorf("a refused RestorePod left pods and containers: %v, had %v", got, keep)
			}
		})
	}

	// A checkpoint another engine wrote.
	m, err := ReadPodManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Engine = "crun"
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, PodManifestFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: ckptPodConfig("q"), ContainerConfigs: both})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "written by crun") {
		t.Errorf("RestorePod of crun's checkpoint on fakerunc: %v", err)
	}
}

// TestRestorePodUndone: a container that cannot be made undoes the whole
// restore: no pod, no container, no restore dir is left.
func TestRestorePodUndone(t *testing.T) {
	e := newEnv(t)
	dir := e.podCheckpoint(t)
	keep := e.counts()
	m, err := ReadPodManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	// b's checkpoint holds a symlink, which crind does not copy.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, m.Containers[1].Dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.RestorePod(t.Context(), &runtimeapi.RestorePodRequest{CheckpointPath: dir, Config: ckptPodConfig("q"),
		ContainerConfigs: []*runtimeapi.ContainerConfig{ckptCtr("a"), ckptCtr("b")}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `container "b"`) {
		t.Fatalf("RestorePod of a checkpoint with a symlink: %v", err)
	}
	if got := e.counts(); got != keep {
		t.Errorf("a failed RestorePod left pods and containers: %v, had %v", got, keep)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.root, "restore")); len(ents) != 0 {
		t.Errorf("a failed RestorePod left %d restore dirs", len(ents))
	}
}

// listTree lists the files under dir with their modes and mtimes.
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
