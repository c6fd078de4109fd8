package nri

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crin-dev/crin/test/poll"
)

// Binaries built once by TestMain.
var (
	pluginBin  string // testdata/plugin, containerd/nri v0.12.5 stub
	oldstubBin string // testdata/oldstub, containerd/nri v0.6.1 stub
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(daemonEnv); dir != "" {
		os.Exit(runTestDaemon(dir))
	}
	if spec := os.Getenv(benchHostEnv); spec != "" {
		os.Exit(runBenchHost(spec))
	}
	dir, err := os.MkdirTemp("", "crin-nri-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBin = filepath.Join(dir, "plugin")
	oldstubBin = filepath.Join(dir, "oldstub")
	builds := []*exec.Cmd{
		exec.Command("go", "build", "-o", pluginBin, "./testdata/plugin"),
		exec.Command("go", "build", "-o", oldstubBin, "."),
	}
	builds[1].Dir = "testdata/oldstub"
	builds[1].Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	for _, c := range builds {
		if out, err := c.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build test plugin %v: %v\n%s", c.Args, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fakeEngine is an in-memory Engine.
type fakeEngine struct {
	mu       sync.Mutex
	pods     []*api.PodSandbox
	ctrs     []*api.Container
	updates  []*api.ContainerUpdate
	evicted  []string         // "id: reason" per eviction
	evictErr map[string]error // if set, EvictContainer of that id fails
	snapGate chan struct{}    // if set, Snapshot waits for it
	snapped  chan struct{}    // if set, closed when Snapshot is entered
}

func (e *fakeEngine) Snapshot(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	e.mu.Lock()
	gate, snapped := e.snapGate, e.snapped
	e.mu.Unlock()
	if snapped != nil {
		close(snapped)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.pods), slices.Clone(e.ctrs), nil
}

func (e *fakeEngine) UpdateContainers(_ context.Context, u []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.updates = append(e.updates, u...)
	return nil, nil
}

func (e *fakeEngine) EvictContainer(_ context.Context, id, reason string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.evictErr[id]; err != nil {
		return err
	}
	e.evicted = append(e.evicted, id+": "+reason)
	return nil
}

// waitEvicted waits until the engine evicted exactly want ("id: reason").
func (e *fakeEngine) waitEvicted(t *testing.T, want ...string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "engine evictions", func() (bool, string) {
		e.mu.Lock()
		got := slices.Clone(e.evicted)
		e.mu.Unlock()
		return cmp.Equal(want, got, cmpopts.EquateEmpty()), "(-want +got):\n" + cmp.Diff(want, got, cmpopts.EquateEmpty())
	})
}

func (e *fakeEngine) updated() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for _, u := range e.updates {
		ids = append(ids, u.GetContainerId())
	}
	return ids
}

func testPod(id string) *api.PodSandbox {
	return &api.PodSandbox{Id: id, Name: id, Uid: "uid-" + id, Namespace: "default"}
}

func testCtr(pod, id string) *api.Container {
	return &api.Container{Id: id, PodSandboxId: pod, Name: id, State: api.ContainerState_CONTAINER_CREATED}
}

// env is one adaptation under test with its directories.
type env struct {
	t       *testing.T
	a       *Adaptation
	eng     *fakeEngine
	cfg     Config
	dir     string // short temp dir: socket, plugins, configs, logs
	logs    *bytes.Buffer
	logsMu  sync.Mutex // guards logs
	stopped bool
}

// newEnv prepares (but does not start) an adaptation with plugin and
// config dirs and a socket in a short temp dir.
func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, d := range []string{"plugins", "conf"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.PluginPath = filepath.Join(dir, "plugins")
	cfg.PluginConfigPath = filepath.Join(dir, "conf")
	cfg.SocketPath = filepath.Join(dir, "nri", "nri.sock")
	cfg.RequestTimeout = 2 * time.Second
	cfg.DefaultValidator.Enable = false
	if mutate != nil {
		mutate(&cfg)
	}
	return &env{t: t, eng: &fakeEngine{}, cfg: cfg, dir: dir, logs: &bytes.Buffer{}}
}

// waitLog waits until the adaptation logged a line holding every one of
// parts and returns it.
func (e *env) waitLog(parts ...string) string {
	e.t.Helper()
	var line string
	poll.Until(e.t, 30*time.Second, fmt.Sprintf("a log line with %q", parts), func() (bool, string) {
		e.logsMu.Lock()
		text := e.logs.String()
		e.logsMu.Unlock()
	lines:
		for _, l := range strings.Split(text, "\n") {
			for _, p := range parts {
				if !strings.Contains(l, p) {
					continue lines
				}
			}
			line = l
			return true, ""
		}
		return false, "the log:\n" + text
	})
	return line
}

// loggedBackoffs returns the backoffs the adaptation logged for plugin id
// ("nri plugin restarting after backoff"), in order.
func (e *env) loggedBackoffs(id string) []time.Duration {
	e.logsMu.Lock()
	text := e.logs.String()
	e.logsMu.Unlock()
	var out []time.Duration
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, `msg="nri plugin restarting after backoff"`) || !strings.Contains(l, " plugin="+id+" ") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "backoff="); ok {
				if d, err := time.ParseDuration(v); err == nil {
					out = append(out, d)
				}
			}
		}
	}
	return out
}

// start creates and starts the adaptation and registers a leak check.
func (e *env) start(opts ...Option) {
	e.t.Helper()
	before := runtime.NumGoroutine()
	log := slog.New(slog.NewTextHandler(lockedWriter{w: e.logs, mu: &e.logsMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts = append([]Option{WithLogger(log), WithRestartBackoff(50*time.Millisecond, 200*time.Millisecond), WithShutdownGrace(time.Second)}, opts...)
	a, err := New(e.cfg, e.eng, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.a = a
	if err := a.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		e.stop()
		checkGoroutines(e.t, before)
	})
}

func (e *env) stop() {
	if e.stopped || e.a == nil {
		return
	}
	e.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := e.a.Stop(ctx); err != nil {
		e.t.Errorf("Stop: %v", err)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// checkGoroutines fails if more goroutines run than before, after a grace
// period for exiting ones.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	if ok, _ := poll.Within(30*time.Second, func() (bool, string) { return runtime.NumGoroutine() <= before, "" }); !ok {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutine leak: %d before, %d after Stop\n%s", before, runtime.NumGoroutine(), buf)
	}
}

// install puts a copy of bin into the plugin dir as name, with config.
func (e *env) install(bin, name, config string) {
	e.t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.cfg.PluginPath, name), b, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(e.cfg.PluginConfigPath, name+".conf"), []byte(config), 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
}

// outFile returns a path for a plugin's event record.
func (e *env) outFile(name string) string { return filepath.Join(e.dir, name+".out") }

func readLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// waitLines waits until the record at path holds want as a subsequence.
func waitLines(t *testing.T, path string, want ...string) []string {
	t.Helper()
	var got []string
	poll.Until(t, 30*time.Second, "record "+filepath.Base(path)+" holds:\n"+strings.Join(want, "\n")+"\n", func() (bool, string) {
		got = readLines(path)
		return isSubsequence(got, want), "it has:\n" + strings.Join(got, "\n")
	})
	return got
}

func isSubsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func count(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if l == s {
			n++
		}
	}
	return n
}

// waitPlugin waits until the plugin id is in state.
func waitPlugin(t *testing.T, a *Adaptation, id string, state PluginState) PluginInfo {
	t.Helper()
	var found PluginInfo
	poll.Until(t, 30*time.Second, fmt.Sprintf("plugin %s %s", id, state), func() (bool, string) {
		ps := a.Plugins()
		for _, pi := range ps {
			if pi.Index+"-"+pi.Name == id && pi.State == state {
				found = pi
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ps)
	})
	return found
}

// waitGone waits until plugin id is not connected: not listed, or a
// pre-installed one waiting to be launched again.
func waitGone(t *testing.T, a *Adaptation, id string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "plugin "+id+" not connected", func() (bool, string) {
		ps := a.Plugins()
		for _, pi := range ps {
			if pi.Index+"-"+pi.Name == id && pi.State != StateBackoff {
				return false, fmt.Sprintf("still listed: %+v", ps)
			}
		}
		return true, ""
	})
}

// recorder is an in-process plugin for the pkg/stub v0.12.5 stub that
// records what it sees; hooks change its answers.
type recorder struct {
	mu     sync.Mutex
	events []string
	s      stub.Stub

	mask     api.EventMask
	policy   *api.FailurePolicy
	onCreate func(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error)
	onStop   func(pod *api.PodSandbox) error
	validate func(req *api.ValidateContainerAdjustmentRequest) error
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) waitSeen(t *testing.T, want ...string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "the plugin saw:\n"+strings.Join(want, "\n")+"\n", func() (bool, string) {
		seen := r.seen()
		return isSubsequence(seen, want), "it saw:\n" + strings.Join(seen, "\n")
	})
}

func (r *recorder) Configure(_ context.Context, _, runtime, _ string) (api.EventMask, error) {
	r.add("Configure %s", runtime)
	return r.mask, nil
}

func (r *recorder) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	for _, p := range pods {
		r.add("Synchronize pod %s", p.GetId())
	}
	for _, c := range ctrs {
		r.add("Synchronize container %s", c.GetId())
	}
	r.add("Synchronized")
	return nil, nil
}

func (r *recorder) Shutdown(context.Context) { r.add("Shutdown") }

func (r *recorder) RunPodSandbox(_ context.Context, p *api.PodSandbox) error {
	r.add("RunPodSandbox %s", p.GetId())
	return nil
}

func (r *recorder) UpdatePodSandbox(_ context.Context, p *api.PodSandbox, _, _ *api.LinuxResources) error {
	r.add("UpdatePodSandbox %s", p.GetId())
	return nil
}

func (r *recorder) PostUpdatePodSandbox(_ context.Context, p *api.PodSandbox) error {
	r.add("PostUpdatePodSandbox %s", p.GetId())
	return nil
}

func (r *recorder) StopPodSandbox(_ context.Context, p *api.PodSandbox) error {
	r.add("StopPodSandbox %s", p.GetId())
	if r.onStop != nil {
		return r.onStop(p)
	}
	return nil
}

func (r *recorder) RemovePodSandbox(_ context.Context, p *api.PodSandbox) error {
	r.add("RemovePodSandbox %s", p.GetId())
	return nil
}

func (r *recorder) CreateContainer(ctx context.Context, p *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	r.add("CreateContainer %s", c.GetId())
	if r.onCreate != nil {
		return r.onCreate(ctx, p, c)
	}
	return nil, nil, nil
}

func (r *recorder) PostCreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	r.add("PostCreateContainer %s", c.GetId())
	return nil
}

func (r *recorder) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	r.add("StartContainer %s", c.GetId())
	return nil
}

func (r *recorder) PostStartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	r.add("PostStartContainer %s", c.GetId())
	return nil
}

func (r *recorder) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	r.add("UpdateContainer %s", c.GetId())
	return nil, nil
}

func (r *recorder) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	r.add("PostUpdateContainer %s", c.GetId())
	return nil
}

func (r *recorder) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	r.add("StopContainer %s", c.GetId())
	return nil, nil
}

func (r *recorder) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	r.add("RemoveContainer %s", c.GetId())
	return nil
}

func (r *recorder) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	r.add("ValidateContainerAdjustment %s", req.GetContainer().GetId())
	if r.validate != nil {
		return r.validate(req)
	}
	return nil
}

// connect runs r as an external plugin idx-name over e's socket and
// returns once it is registered and configured (or failed to). The stub is
// stopped at cleanup.
func (e *env) connect(r *recorder, idx, name string) error {
	e.t.Helper()
	if r.mask == 0 {
		r.mask = api.ValidEvents
		r.mask.Clear(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	}
	opts := []stub.Option{stub.WithSocketPath(e.cfg.SocketPath), stub.WithPluginIdx(idx), stub.WithPluginName(name)}
	if r.policy != nil {
		opts = append(opts, stub.WithFailurePolicy(r.policy))
	}
	s, err := stub.New(r, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	r.s = s
	if err := s.Start(context.Background()); err != nil {
		return err
	}
	e.t.Cleanup(func() { s.Stop() })
	return nil
}
