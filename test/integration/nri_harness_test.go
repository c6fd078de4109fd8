//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// The NRI test plugin (testdata/nriplugin, specified in its doc comment)
// and crinctl are built once per test binary.
var (
	nriPluginOnce sync.Once
	nriPluginPath string
	nriPluginErr  error

	crinctlOnce sync.Once
	crinctlPath string
	crinctlErr  error
)

// goBuild builds pkg (relative to the repo root) into a fresh temp dir,
// removed when the run ends. Where there is no Go toolchain (the node
// lane's VM) the binary comes prebuilt: $CRIN_TEST_BIN_DIR/name is used
// when it is there.
func goBuild(pkg, name string) (string, error) {
	if dir := os.Getenv(harness.BinDirEnv); dir != "" {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p, nil
		}
	}
	dir, err := runDirs.make("crinbin")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// nriPluginBinary returns the path of the built test plugin.
func nriPluginBinary(t *testing.T) string {
	t.Helper()
	nriPluginOnce.Do(func() {
		nriPluginPath, nriPluginErr = goBuild("./test/integration/testdata/nriplugin", "nriplugin")
	})
	if nriPluginErr != nil {
		t.Fatal(nriPluginErr)
	}
	return nriPluginPath
}

// nriSetup is the NRI side of one daemon: its plugin and config dirs and
// its socket, all under Dir (removed at cleanup).
type nriSetup struct {
	PluginDir, ConfDir, Socket, Dir string
}

// newNRISetup makes short temp dirs so that the socket path fits in a
// sockaddr_un. Call it before startDaemon so that its cleanup runs after
// the daemon's.
func newNRISetup(t *testing.T) *nriSetup {
	t.Helper()
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &nriSetup{
		Dir:       dir,
		PluginDir: filepath.Join(dir, "p"),
		ConfDir:   filepath.Join(dir, "c"),
		Socket:    filepath.Join(dir, "s", "nri.sock"),
	}
	for _, d := range []string{n.PluginDir, n.ConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// config is the [nri] section for daemonOptions.extraConfig. It holds keys
// only, so a test may append more [nri] keys, then sub-tables.
func (n *nriSetup) config() string {
	return fmt.Sprintf(`
[nri]
enable = true
plugin_path = %q
plugin_config_path = %q
socket_path = %q
plugin_registration_timeout = "5s"
plugin_request_timeout = "2s"
plugin_sync_timeout = "10s"
`, n.PluginDir, n.ConfDir, n.Socket)
}

// eventLog is the default event log of plugin idx-name: install and
// startExternal use it when the config names none.
func (n *nriSetup) eventLog(idx, name string) string {
	return filepath.Join(n.Dir, idx+"-"+name+".jsonl")
}

// pluginConfig is the test plugin's JSON configuration.
type pluginConfig struct {
	Log    string       `json:"log"`
	Events string       `json:"events,omitempty"`
	Rules  []pluginRule `json:"rules,omitempty"`
}

// pluginRule is one rule of the test plugin (see its package doc).
type pluginRule struct {
	Event            string          `json:"event"`
	Pod              string          `json:"pod,omitempty"`
	Container        string          `json:"container,omitempty"`
	Once             bool            `json:"once,omitempty"`
	Sleep            string          `json:"sleep,omitempty"`
	WaitFor          string          `json:"wait_for,omitempty"`
	Fail             string          `json:"fail,omitempty"`
	Reject           string          `json:"reject,omitempty"`
	Adjust           json.RawMessage `json:"adjust,omitempty"`
	Update           []pluginUpdate  `json:"update,omitempty"`
	Unsolicited      []pluginUpdate  `json:"unsolicited,omitempty"`
	UnsolicitedDelay string          `json:"unsolicited_delay,omitempty"`
}

// pluginUpdate is an update of the container with this metadata name.
type pluginUpdate struct {
	Container     string          `json:"container"`
	Resources     json.RawMessage `json:"resources,omitempty"`
	IgnoreFailure bool            `json:"ignore_failure,omitempty"`
}

// protoJSON encodes an NRI message (api.ContainerAdjustment,
// api.LinuxResources) for pluginRule.Adjust and pluginUpdate.Resources.
func protoJSON(t *testing.T, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatalf("protojson %T: %v", m, err)
	}
	return b
}

func (n *nriSetup) withLog(idx, name string, cfg pluginConfig) []byte {
	if cfg.Log == "" {
		cfg.Log = n.eventLog(idx, name)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err) // only RawMessages can fail, and protoJSON made them
	}
	return b
}

// install makes idx-name a pre-installed plugin: the binary in PluginDir
// and its configuration in ConfDir. An empty cfg.Log means
// n.eventLog(idx, name).
func (n *nriSetup) install(t *testing.T, idx, name string, cfg pluginConfig) {
	t.Helper()
	bin, err := os.ReadFile(nriPluginBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	full := idx + "-" + name
	if err := os.WriteFile(filepath.Join(n.PluginDir, full), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.ConfDir, full+".conf"), n.withLog(idx, name, cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// externalPlugin is a test plugin process connected to the NRI socket.
type externalPlugin struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	once sync.Once
}

// startExternal runs the test plugin as external plugin idx-name against
// n.Socket and returns once it has been configured (its Configure line is
// in its log). It is stopped at cleanup. An empty cfg.Log means
// n.eventLog(idx, name).
func (n *nriSetup) startExternal(t *testing.T, idx, name string, cfg pluginConfig) *externalPlugin {
	t.Helper()
	full := idx + "-" + name
	cfgPath := filepath.Join(n.Dir, full+".ext.json")
	if err := os.WriteFile(cfgPath, n.withLog(idx, name, cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := cfg.Log
	if logPath == "" {
		logPath = n.eventLog(idx, name)
	}
	before := len(readEvents(t, logPath))
	p := &externalPlugin{t: t, name: full, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(nriPluginBinary(t), "-name", name, "-idx", idx, "-socket", n.Socket, "-config", cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("external plugin %s output:\n%s", full, tail(p.out.String(), 4000))
		}
	})
	poll.Until(t, time.Minute, "external plugin "+full+" configured", func() (bool, string) {
		evs := readEvents(t, logPath)
		for _, e := range evs[min(before, len(evs)):] {
			if e.Event == "Configure" {
				return true, ""
			}
		}
		select {
		case <-p.done:
			t.Fatalf("external plugin %s exited before being configured:\n%s", full, p.out.String())
		default:
		}
		return false, "its output:\n" + p.out.String()
	})
	return p
}

// Stop terminates the plugin (SIGTERM, then SIGKILL after 5s) and waits
// for it. It may be called more than once.
func (p *externalPlugin) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// Kill SIGKILLs the plugin and waits for it, as for a crash.
func (p *externalPlugin) Kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

// Exited tells whether the plugin process is gone.
func (p *externalPlugin) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// pluginEvent is one line of a test plugin's event log.
type pluginEvent struct {
	Seq          int             `json:"seq"`
	Plugin       string          `json:"plugin"`
	Event        string          `json:"event"`
	Pod          string          `json:"pod"`
	PodID        string          `json:"pod_id"`
	Container    string          `json:"container"`
	ContainerID  string          `json:"container_id"`
	State        string          `json:"state"`
	Pid          int             `json:"pid"`
	ExitCode     int             `json:"exit_code"`
	Reason       string          `json:"reason"`
	Message      string          `json:"message"`
	PodObj       json.RawMessage `json:"pod_obj"`
	ContainerObj json.RawMessage `json:"container_obj"`
	Resources    json.RawMessage `json:"resources"`
	// Adjust is the pending adjustment, for ValidateContainerAdjustment.
	Adjust json.RawMessage `json:"adjust"`
	Failed []string        `json:"failed"`
	Error  string          `json:"error"`
	Time   time.Time       `json:"time"`
}

func (e pluginEvent) String() string {
	s := fmt.Sprintf("#%d %s %s", e.Seq, e.Plugin, e.Event)
	if e.Pod != "" {
		s += " pod=" + e.Pod
	}
	if e.Container != "" {
		s += " ctr=" + e.Container
	}
	if e.State != "" {
		s += " " + e.State
	}
	if e.Error != "" || len(e.Failed) > 0 {
		s += fmt.Sprintf(" failed=%v error=%q", e.Failed, e.Error)
	}
	return s
}

// readEvents reads a plugin's event log; a missing log is no events. A
// last line still being written is left out.
func readEvents(t *testing.T, path string) []pluginEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []pluginEvent
	r := bufio.NewReader(bytes.NewReader(b))
	for {
		l, err := r.ReadBytes('\n')
		if err == io.EOF {
			break // no newline: a partial line
		}
		var e pluginEvent
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("event log %s: bad line %q: %v", path, l, err)
		}
		out = append(out, e)
	}
	return out
}

// waitEvents polls a plugin's event log until pred holds and returns the
// events; it fails the test with the events seen after timeout.
func waitEvents(t *testing.T, path string, timeout time.Duration, pred func([]pluginEvent) bool) []pluginEvent {
	t.Helper()
	var evs []pluginEvent
	poll.Until(t, timeout, "event log "+path+": condition met", func() (bool, string) {
		evs = readEvents(t, path)
		if pred(evs) {
			return true, ""
		}
		var sb strings.Builder
		for _, e := range evs {
			sb.WriteString(e.String() + "\n")
		}
		return false, "events:\n" + sb.String()
	})
	return evs
}

// hasEvent is a waitEvents predicate: some event named event about the
// container named ctr ("" for any).
func hasEvent(event, ctr string) func([]pluginEvent) bool {
	return func(evs []pluginEvent) bool {
		return findEvent(evs, event, ctr) != nil
	}
}

// findEvent returns the first event named event about container ctr (""
// for any), or nil.
func findEvent(evs []pluginEvent, event, ctr string) *pluginEvent {
	for i := range evs {
		if evs[i].Event == event && (ctr == "" || evs[i].Container == ctr) {
			return &evs[i]
		}
	}
	return nil
}

var protoUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// container decodes the event's container.
func (e pluginEvent) container(t *testing.T) *api.Container {
	t.Helper()
	c := &api.Container{}
	if len(e.ContainerObj) == 0 {
		t.Fatalf("event %s has no container", e)
	}
	if err := protoUnmarshal.Unmarshal(e.ContainerObj, c); err != nil {
		t.Fatalf("event %s: decode container: %v", e, err)
	}
	return c
}

// pod decodes the event's pod.
func (e pluginEvent) pod(t *testing.T) *api.PodSandbox {
	t.Helper()
	p := &api.PodSandbox{}
	if len(e.PodObj) == 0 {
		t.Fatalf("event %s has no pod", e)
	}
	if err := protoUnmarshal.Unmarshal(e.PodObj, p); err != nil {
		t.Fatalf("event %s: decode pod: %v", e, err)
	}
	return p
}

// nriDaemon starts crind with n's [nri] section plus extra.
func nriDaemon(t *testing.T, n *nriSetup, extra string) *daemon {
	t.Helper()
	nriPluginBinary(t) // build before crind starts, so plugins are not late
	return startDaemon(t, daemonOptions{extraConfig: n.config() + extra})
}

// waitConfigured waits until every named plugin ("NN-name", logging to its
// default n.eventLog) was configured, then until crind reports each ready.
func waitConfigured(t *testing.T, d *daemon, n *nriSetup, plugins ...string) {
	t.Helper()
	for _, p := range plugins {
		waitEvents(t, filepath.Join(n.Dir, p+".jsonl"), 20*time.Second, hasEvent("Configure", ""))
	}
	waitPluginsReady(t, d, plugins...)
}

// waitPluginsReady polls `crinctl --json plugins` until every named
// plugin ("NN-name") is ready.
func waitPluginsReady(t *testing.T, d *daemon, plugins ...string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("plugins %v ready", plugins), func() (bool, string) {
		out, err := crinctlRun(t, d, "--json", "plugins")
		var ps []struct{ Index, Name, State string }
		if err == nil {
			err = json.Unmarshal([]byte(out), &ps)
		}
		ready := 0
		for _, want := range plugins {
			for _, p := range ps {
				if p.Index+"-"+p.Name == want && p.State == "ready" {
					ready++
				}
			}
		}
		return err == nil && ready == len(plugins), fmt.Sprintf("crinctl --json plugins: %v\n%s", err, out)
	})
}

// cellSep separates the cells of crinctl's tables.
var cellSep = regexp.MustCompile(`\s{2,}`)

// tableRows splits crinctl's table output into rows of cells, without the
// header.
func tableRows(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		rows = append(rows, cellSep.Split(strings.TrimSpace(l), -1))
	}
	return rows
}

// crinctl runs crinctl against d's admin socket and returns its output,
// failing the test when it exits non-zero.
func crinctl(t *testing.T, d *daemon, args ...string) string {
	t.Helper()
	out, err := crinctlRun(t, d, args...)
	if err != nil {
		t.Fatalf("crinctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// crinctlRun runs crinctl and returns its combined output and exit error.
func crinctlRun(t *testing.T, d *daemon, args ...string) (string, error) {
	t.Helper()
	crinctlOnce.Do(func() { crinctlPath, crinctlErr = goBuild("./cmd/crinctl", "crinctl") })
	if crinctlErr != nil {
		t.Fatal(crinctlErr)
	}
	cmd := exec.Command(crinctlPath, append([]string{"--socket", filepath.Join(d.state, "crind-admin.sock")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
