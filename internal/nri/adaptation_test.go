package nri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
)

// lifecycle drives one pod with one container through every event.
func lifecycle(t *testing.T, a *Adaptation, podID, ctrID string) *api.ContainerAdjustment {
	t.Helper()
	ctx := context.Background()
	pod, ctr := testPod(podID), testCtr(podID, ctrID)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.RunPodSandbox(ctx, pod))
	must(a.UpdatePodSandbox(ctx, pod, nil, &api.LinuxResources{}))
	must(a.PostUpdatePodSandbox(ctx, pod))
	adj, _, err := createIn(ctx, a, pod, ctr)
	must(err)
	must(a.PostCreateContainer(ctx, pod, ctr))
	must(a.StartContainer(ctx, pod, ctr))
	must(a.PostStartContainer(ctx, pod, ctr))
	_, err = a.UpdateContainer(ctx, pod, ctr, &api.LinuxResources{})
	must(err)
	must(a.PostUpdateContainer(ctx, pod, ctr))
	_, err = a.StopContainer(ctx, pod, ctr)
	must(err)
	must(a.RemoveContainer(ctx, pod, ctr))
	must(a.StopPodSandbox(ctx, pod))
	must(a.RemovePodSandbox(ctx, pod))
	return adj
}

func lifecycleEvents(pod, ctr string) []string {
	return []string{
		"RunPodSandbox " + pod, "UpdatePodSandbox " + pod, "PostUpdatePodSandbox " + pod,
		"CreateContainer " + ctr, "PostCreateContainer " + ctr, "StartContainer " + ctr,
		"PostStartContainer " + ctr, "UpdateContainer " + ctr, "PostUpdateContainer " + ctr,
		"StopContainer " + ctr, "RemoveContainer " + ctr, "StopPodSandbox " + pod, "RemovePodSandbox " + pod,
	}
}

func envValue(adj *api.ContainerAdjustment, key string) (string, bool) {
	for _, kv := range adj.GetEnv() {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return "", false
}

func TestExternalPluginLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	e.eng.pods = []*api.PodSandbox{testPod("old-pod")}
	e.eng.ctrs = []*api.Container{testCtr("old-pod", "old-ctr")}
	e.start()

	r := &recorder{onCreate: func(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
		adj := &api.ContainerAdjustment{}
		adj.AddEnv("FROM_EXTERNAL", "yes")
		return adj, nil, nil
	}}
	if err := e.connect(r, "10", "ext"); err != nil {
		t.Fatal(err)
	}
	info := waitPlugin(t, e.a, "10-ext", StateReady)
	if info.Kind != KindExternal {
		t.Errorf("kind = %s, want %s", info.Kind, KindExternal)
	}
	r.waitSeen(t, "Configure crin", "Synchronize pod old-pod", "Synchronize container old-ctr", "Synchronized")

	adj := lifecycle(t, e.a, "pod1", "ctr1")
	if v, ok := envValue(adj, "FROM_EXTERNAL"); !ok || v != "yes" {
		t.Errorf("adjustment env = %v, want FROM_EXTERNAL=yes", adj.GetEnv())
	}
	r.waitSeen(t, lifecycleEvents("pod1", "ctr1")...)

	fi, err := os.Stat(filepath.Dir(e.cfg.SocketPath))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode = %v, want 0700", fi.Mode().Perm())
	}
	fi, err = os.Stat(e.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestPreinstalledPluginLifecycleAndShutdown(t *testing.T) {
	e := newEnv(t, nil)
	e.eng.pods = []*api.PodSandbox{testPod("old-pod")}
	out := e.outFile("pre")
	e.install(pluginBin, "20-pre", "out="+out+"\nenv=FROM_PRE=1")
	e.install(pluginBin, "badname", "")                                                            // no index: skipped
	e.install(pluginBin, "7-short", "")                                                            // one digit: skipped
	if err := os.WriteFile(filepath.Join(e.cfg.PluginPath, "30-noexec"), nil, 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	e.start()

	info := waitPlugin(t, e.a, "20-pre", StateReady)
	if info.Kind != KindPreinstalled {
		t.Errorf("kind = %s, want %s", info.Kind, KindPreinstalled)
	}
	var names []string
	for _, pi := range e.a.Plugins() {
		names = append(names, pi.Index+"-"+pi.Name)
	}
	if diff := cmp.Diff([]string{"20-pre"}, names); diff != "" {
		t.Errorf("plugins (-want +got):\n%s", diff)
	}
	adj := lifecycle(t, e.a, "pod1", "ctr1")
	if v, _ := envValue(adj, "FROM_PRE"); v != "1" {
		t.Errorf("adjustment env = %v, want FROM_PRE=1", adj.GetEnv())
	}
	want := append([]string{"Configure crin unknown", "Synchronize pod old-pod", "Synchronized"}, lifecycleEvents("pod1", "ctr1")...)
	waitLines(t, out, want...)

	e.stop()
	lines := waitLines(t, out, "Shutdown")
	if lines[len(lines)-1] != "Shutdown" {
		t.Errorf("last event = %q, want Shutdown", lines[len(lines)-1])
	}
}

func TestOldStubPlugin(t *testing.T) {
	tests := []struct {
		name string
		kind PluginKind
	}{
		{name: "launched", kind: KindPreinstalled},
		{name: "external", kind: KindExternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.eng.pods = []*api.PodSandbox{testPod("old-pod")}
			e.eng.ctrs = []*api.Container{testCtr("old-pod", "old-ctr")}
			out := e.outFile("old")
			if tc.kind == KindPreinstalled {
				e.install(oldstubBin, "05-old", "out="+out)
			}
			e.start()
			if tc.kind == KindExternal {
				cmd := exec.Command(oldstubBin, "-socket", e.cfg.SocketPath, "-idx", "05", "-name", "old", "-out", out)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				})
			}
			if info := waitPlugin(t, e.a, "05-old", StateReady); info.Kind != tc.kind {
				t.Errorf("kind = %s, want %s", info.Kind, tc.kind)
			}

			ctx := context.Background()
			pod, ctr := testPod("pod1"), testCtr("pod1", "ctr1")
			if err := e.a.RunPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			adj, _, err := createIn(ctx, e.a, pod, ctr)
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := envValue(adj, "OLDSTUB"); v != "1" {
				t.Errorf("adjustment env = %v, want OLDSTUB=1", adj.GetEnv())
			}
			for _, f := range []func() error{
				func() error { return e.a.StartContainer(ctx, pod, ctr) },
				func() error { return e.a.PostStartContainer(ctx, pod, ctr) },
				func() error { return e.a.RemoveContainer(ctx, pod, ctr) },
				func() error { return e.a.StopPodSandbox(ctx, pod) },
				func() error { return e.a.RemovePodSandbox(ctx, pod) },
			} {
				if err := f(); err != nil {
					t.Fatal(err)
				}
			}
			waitLines(t, out, "Configure crin unknown", "Synchronize pod old-pod", "Synchronize container old-ctr", "Synchronized",
				"RunPodSandbox pod1", "CreateContainer ctr1", "StartContainer ctr1", "PostStartContainer ctr1",
				"RemoveContainer ctr1", "StopPodSandbox pod1", "RemovePodSandbox pod1")
			e.stop()
			waitLines(t, out, "Shutdown")
		})
	}
}

func TestPluginFailures(t *testing.T) {
	tests := []struct {
		name     string
		config   string
		required bool
		wantErr  error // from CreateContainer; nil: request goes on
	}{
		{name: "crash mid-request", config: "crash=CreateContainer"},
		{name: "hang past timeout", config: "hang=CreateContainer"},
		{name: "oversized frame", config: "oversize=CreateContainer"},
		{name: "required plugin times out", config: "hang=CreateContainer", required: true, wantErr: ErrPluginTimeout},
		{name: "required plugin crashes", config: "crash=CreateContainer", required: true, wantErr: ErrPluginGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.RequestTimeout = 300 * time.Millisecond
				if tc.required {
					c.PluginOverrides = map[string]PluginConfig{"bad": {Required: true}}
				}
			})
			out := e.outFile("bad")
			e.install(pluginBin, "10-bad", "out="+out+"\n"+tc.config)
			good := e.outFile("good")
			e.install(pluginBin, "20-good", "out="+good+"\nenv=GOOD=1")
			e.start(WithRestartBackoff(time.Hour, time.Hour)) // keep it down once dropped
			waitPlugin(t, e.a, "10-bad", StateReady)
			waitPlugin(t, e.a, "20-good", StateReady)

			ctx := context.Background()
			pod := testPod("pod1")
			if err := e.a.RunPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			adj, _, err := createIn(ctx, e.a, pod, testCtr("pod1", "ctr1"))
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("CreateContainer took %s", took)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), "10-bad") {
					t.Fatalf("CreateContainer error = %v, want %v naming 10-bad", err, tc.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("CreateContainer: %v", err)
				}
				if v, _ := envValue(adj, "GOOD"); v != "1" {
					t.Errorf("later plugin's adjustment lost: %v", adj.GetEnv())
				}
			}
			// The failed plugin is dropped at once and the rest still works.
			waitGone(t, e.a, "10-bad")
			err = e.a.RunPodSandbox(ctx, testPod("pod2"))
			if tc.required {
				if !errors.Is(err, ErrRequiredPluginMissing) {
					t.Errorf("RunPodSandbox without required plugin: error = %v, want %v", err, ErrRequiredPluginMissing)
				}
			} else if err != nil {
				t.Errorf("RunPodSandbox: %v", err)
			}
			// Teardown goes on without the dropped plugin.
			if err := e.a.StopPodSandbox(ctx, pod); err != nil {
				t.Errorf("StopPodSandbox: %v", err)
			}
			waitLines(t, good, "StopPodSandbox pod1")
		})
	}
}

func TestPreinstalledPluginRestartsAndResyncs(t *testing.T) {
	e := newEnv(t, nil)
	out := e.outFile("crashy")
	e.install(pluginBin, "10-crashy", "out="+out+"\ncrash=StartContainer")
	e.start()
	waitPlugin(t, e.a, "10-crashy", StateReady)

	ctx := context.Background()
	pod, ctr := testPod("pod1"), testCtr("pod1", "ctr1")
	if err := e.a.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, _, err := createIn(ctx, e.a, pod, ctr); err != nil {
		t.Fatal(err)
	}
	e.eng.mu.Lock()
	e.eng.pods = append(e.eng.pods, pod)
	e.eng.ctrs = append(e.eng.ctrs, ctr)
	e.eng.mu.Unlock()
	// The plugin dies handling StartContainer; the failure is reported.
	if err := e.a.StartContainer(ctx, pod, ctr); !errors.Is(err, ErrPluginGone) {
		t.Errorf("StartContainer error = %v, want %v", err, ErrPluginGone)
	}
	// It comes back and is synchronized with the current state.
	waitLines(t, out, "Synchronized", "RunPodSandbox pod1", "CreateContainer ctr1",
		"Configure crin unknown", "Synchronize pod pod1", "Synchronize container ctr1", "Synchronized")
	waitPlugin(t, e.a, "10-crashy", StateReady)
	if err := e.a.PostStartContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	waitLines(t, out, "Synchronize container ctr1", "Synchronized", "PostStartContainer ctr1")
}

func TestExternalPluginKilled(t *testing.T) {
	e := newEnv(t, nil)
	e.start()
	cmd := execPlugin(t, e, "15-killme")
	waitPlugin(t, e.a, "15-killme", StateReady)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, e.a, "15-killme")
	if err := e.a.RunPodSandbox(context.Background(), testPod("pod1")); err != nil {
		t.Errorf("RunPodSandbox after plugin died: %v", err)
	}
}

// execPlugin runs the test plugin binary as an external plugin.
func execPlugin(t *testing.T, e *env, id string) *exec.Cmd {
	t.Helper()
	idx, name, _ := strings.Cut(id, "-")
	cmd := exec.Command(pluginBin, "-socket", e.cfg.SocketPath, "-idx", idx, "-name", name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestDuplicatePluginRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.start()
	if err := e.connect(&recorder{}, "10", "twin"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-twin", StateReady)
	if err := e.connect(&recorder{}, "10", "twin"); err == nil {
		t.Fatal("second plugin 10-twin registered, want refusal")
	}
	if err := e.connect(&recorder{}, "11", "twin"); err != nil {
		t.Errorf("11-twin refused: %v", err)
	}
}

func TestConflictingAdjustments(t *testing.T) {
	e := newEnv(t, nil)
	e.start()
	setEnv := func(v string) *recorder {
		return &recorder{onCreate: func(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
			adj := &api.ContainerAdjustment{}
			adj.AddEnv("SHARED", v)
			return adj, nil, nil
		}}
	}
	if err := e.connect(setEnv("a"), "10", "first"); err != nil {
		t.Fatal(err)
	}
	if err := e.connect(setEnv("b"), "20", "second"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-first", StateReady)
	waitPlugin(t, e.a, "20-second", StateReady)
	_, _, err := createIn(context.Background(), e.a, testPod("pod1"), testCtr("pod1", "ctr1"))
	if err == nil || !strings.Contains(err.Error(), "10-first") || !strings.Contains(err.Error(), "20-second") {
		t.Fatalf("CreateContainer error = %v, want a conflict naming 10-first and 20-second", err)
	}
}

func TestValidators(t *testing.T) {
	tests := []struct {
		name    string
		verdict error
	}{
		{name: "accepting"},
		{name: "rejecting", verdict: errors.New("no env for you")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.start()
			mut := &recorder{onCreate: func(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
				adj := &api.ContainerAdjustment{}
				adj.AddEnv("K", "V")
				return adj, nil, nil
			}}
			var got *api.ValidateContainerAdjustmentRequest
			var mu sync.Mutex
			val := &recorder{
				validate: func(req *api.ValidateContainerAdjustmentRequest) error {
					mu.Lock()
					got = req
					mu.Unlock()
					return tc.verdict
				},
			}
			val.mask = 0
			val.mask.Set(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
			if err := e.connect(mut, "10", "mutator"); err != nil {
				t.Fatal(err)
			}
			// A lower index than the mutator: validators still run after it.
			if err := e.connect(val, "05", "validator"); err != nil {
				t.Fatal(err)
			}
			waitPlugin(t, e.a, "10-mutator", StateReady)
			waitPlugin(t, e.a, "05-validator", StateReady)
			ctr := testCtr("pod1", "ctr1")
			_, _, err := createIn(context.Background(), e.a, testPod("pod1"), ctr)
			if tc.verdict != nil {
				if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "no env for you") {
					t.Fatalf("CreateContainer error = %v, want rejection with reason", err)
				}
			} else if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if v, _ := envValue(got.GetAdjust(), "K"); v != "V" {
				t.Errorf("validator saw adjustment env %v, want K=V", got.GetAdjust().GetEnv())
			}
			if len(got.GetContainer().GetEnv()) != 0 {
				t.Errorf("validator saw adjusted container env %v, want pristine", got.GetContainer().GetEnv())
			}
			var plugins []string
			for _, p := range got.GetPlugins() {
				plugins = append(plugins, p.GetIndex()+"-"+p.GetName())
			}
			if diff := cmp.Diff([]string{"10-mutator"}, plugins); diff != "" {
				t.Errorf("validator's plugin list (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpdateContainersFromCreateHandler(t *testing.T) {
	e := newEnv(t, nil)
	e.start()
	r := &recorder{}
	r.onCreate = func(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
		u := &api.ContainerUpdate{}
		u.SetContainerId("other")
		u.SetLinuxCPUShares(512)
		self := &api.ContainerUpdate{}
		self.SetContainerId(c.GetId())
		self.SetLinuxCPUShares(256)
		failed, err := r.s.UpdateContainers([]*api.ContainerUpdate{u, self})
		if err != nil {
			return nil, nil, err
		}
		r.add("failed %d", len(failed))
		return nil, nil, nil
	}
	if err := e.connect(r, "10", "updater"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-updater", StateReady)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := createIn(ctx, e.a, testPod("pod1"), testCtr("pod1", "ctr1")); err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	// The update of the container being created is refused, the other applied.
	r.waitSeen(t, "CreateContainer ctr1", "failed 1")
	if diff := cmp.Diff([]string{"other"}, e.eng.updated()); diff != "" {
		t.Errorf("engine updates (-want +got):\n%s", diff)
	}
}

func TestTeardownReachesEveryPlugin(t *testing.T) {
	e := newEnv(t, nil)
	e.start()
	failing := &recorder{onStop: func(*api.PodSandbox) error { return errors.New("cannot let go") }}
	other := &recorder{}
	if err := e.connect(failing, "10", "failing"); err != nil {
		t.Fatal(err)
	}
	if err := e.connect(other, "20", "other"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-failing", StateReady)
	waitPlugin(t, e.a, "20-other", StateReady)
	err := e.a.StopPodSandbox(context.Background(), testPod("pod1"))
	if err == nil || !strings.Contains(err.Error(), "cannot let go") || !strings.Contains(err.Error(), "10-failing") {
		t.Errorf("StopPodSandbox error = %v, want the failure of 10-failing", err)
	}
	other.waitSeen(t, "StopPodSandbox pod1")
}

func TestEventsDuringSyncAreQueued(t *testing.T) {
	e := newEnv(t, nil)
	e.eng.pods = []*api.PodSandbox{testPod("pod1")}
	e.eng.ctrs = []*api.Container{testCtr("pod1", "ctr1")}
	e.start()
	gate, snapped := make(chan struct{}), make(chan struct{})
	e.eng.mu.Lock()
	e.eng.snapGate, e.eng.snapped = gate, snapped
	e.eng.mu.Unlock()

	r := &recorder{}
	if err := e.connect(r, "10", "late"); err != nil {
		t.Fatal(err)
	}
	<-snapped
	ctx := context.Background()
	pod, ctr := testPod("pod1"), testCtr("pod1", "ctr1")
	// Notifications do not wait for the plugin's sync...
	if err := e.a.StartContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	if err := e.a.PostStartContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	// ...and neither do requests: a pod created meanwhile reaches the
	// plugin after its sync, and so does a container created meanwhile
	// (too late to adjust it).
	if err := e.a.RunPodSandbox(ctx, testPod("pod2")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := createIn(ctx, e.a, pod, testCtr("pod1", "ctr2")); err != nil {
		t.Fatal(err)
	}
	if got := r.seen(); count(got, "Synchronized") != 0 || len(got) != 1 {
		t.Fatalf("plugin saw %v before its sync", got)
	}
	close(gate)
	r.waitSeen(t, "Configure crin", "Synchronize pod pod1", "Synchronize container ctr1", "Synchronized",
		"StartContainer ctr1", "PostStartContainer ctr1", "RunPodSandbox pod2", "CreateContainer ctr2")
	if n := count(r.seen(), "StartContainer ctr1"); n != 1 {
		t.Errorf("StartContainer ctr1 delivered %d times", n)
	}
}

func TestSynchronizeSplitsLargeState(t *testing.T) {
	e := newEnv(t, nil)
	big := strings.Repeat("x", 64<<10)
	for i := range 100 { // ~6.4 MiB: more than one message
		c := testCtr("pod1", fmt.Sprintf("ctr%03d", i))
		c.Annotations = map[string]string{"big": big}
		e.eng.ctrs = append(e.eng.ctrs, c)
	}
	e.start()
	r := &recorder{}
	if err := e.connect(r, "10", "sync"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-sync", StateReady)
	r.waitSeen(t, "Synchronize container ctr000", "Synchronize container ctr099", "Synchronized")
	if n := count(r.seen(), "Synchronized"); n != 1 {
		t.Errorf("plugin handled %d Synchronize calls, want 1 (split parts collected)", n)
	}
}

func TestFailurePolicyFromPlugin(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RequestTimeout = 200 * time.Millisecond })
	e.start()
	block := make(chan struct{})
	defer close(block)
	r := &recorder{
		policy: &api.FailurePolicy{FailRequest: true, KeepConnected: true},
		onCreate: func(ctx context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
			select {
			case <-block:
			case <-time.After(time.Second):
			}
			return nil, nil, nil
		},
	}
	if err := e.connect(r, "10", "strict"); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, e.a, "10-strict", StateReady)
	_, _, err := createIn(context.Background(), e.a, testPod("pod1"), testCtr("pod1", "ctr1"))
	if !errors.Is(err, ErrPluginTimeout) {
		t.Fatalf("CreateContainer error = %v, want %v", err, ErrPluginTimeout)
	}
	// keep_connected: still there.
	waitPlugin(t, e.a, "10-strict", StateReady)
}

func TestDisabled(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Enable = false })
	e.install(pluginBin, "10-never", "out="+e.outFile("never"))
	e.start()
	adj, upds, err := createIn(context.Background(), e.a, testPod("p"), testCtr("p", "c"))
	if err != nil || adj == nil || upds != nil {
		t.Errorf("CreateContainer = %v, %v, %v; want empty adjustment", adj, upds, err)
	}
	if len(e.a.Plugins()) != 0 {
		t.Errorf("plugins = %v, want none", e.a.Plugins())
	}
	if _, err := os.Stat(e.cfg.SocketPath); !os.IsNotExist(err) {
		t.Errorf("socket exists with NRI disabled: %v", err)
	}
}
