//go:build e2e

// Package e2e runs a real kubelet (standalone: static pods, no API server)
// against the real crind, and drives pods only the way a cluster would:
// manifests in the static pod directory and kubelet's own HTTP endpoints.
// It needs root and a kubelet built by test/e2e/kubelet/build.sh. Run it
// with `make e2e`.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
	"github.com/crin-dev/crin/test/testnet"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// buildCrind builds crind, crin-shim and crin-pause once for the run.
func buildCrind(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e tests need root")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "crine2ebin")
		if binErr != nil {
			return
		}
		for _, b := range []struct{ name, pkg string }{
			{"crind", "./cmd/crind"}, {"crin-shim", "./cmd/crin-shim"}, {"crin-pause", "./cmd/crin-pause"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.name), b.pkg)
			cmd.Dir = repoRoot()
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("build %s: %v\n%s", b.name, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// TestMain removes the binaries built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// crind is one crind under test, with its own dirs, bridge, subnet and NRI
// socket. Its cgroup parent is the node's test cgroup, which is also
// kubelet's cgroupRoot.
type crind struct {
	t       *testing.T
	bin     string
	cfgPath string
	root    string
	state   string
	socket  string
	net     testnet.Net
	logBuf  *lockedBuffer
	cmd     *exec.Cmd
	conn    *grpc.ClientConn
	rs      runtimeapi.RuntimeServiceClient
}

func newCrind(t *testing.T, base, cgroup, registry string) *crind {
	t.Helper()
	bin := buildCrind(t)
	d := &crind{
		t:      t,
		bin:    bin,
		root:   filepath.Join(base, "crin-root"),
		state:  filepath.Join(base, "crin-state"),
		socket: filepath.Join(base, "crin-state", "crin.sock"),
		logBuf: &lockedBuffer{},
	}
	d.net = testnet.Pick(t, "crine", base)
	confDir := filepath.Join(base, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-test.conflist"), []byte(d.net.Conflist(`{"type": "portmap", "capabilities": {"portMappings": true}}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`root = %q
state = %q
log_level = "debug"
[cri]
socket = %q
metrics_address = ""
stream_address = "127.0.0.1:0"
cgroup_parent = %q
shim_binary = %q
pause_binary = %q
[cni]
conf_dir = %q
bin_dirs = ["/usr/lib/cni"]
[registry]
plain_http = [%q]
[nri]
socket_path = %q
`, d.root, d.state, d.socket, cgroup,
		filepath.Join(bin, "crin-shim"), filepath.Join(bin, "crin-pause"), confDir, registry,
		filepath.Join(base, "nri.sock"))
	d.cfgPath = filepath.Join(base, "crin.toml")
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start(t)
	return d
}

// start launches crind and connects to it.
func (d *crind) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join(d.bin, "crind"), "--config", d.cfgPath)
	cmd.Stdout, cmd.Stderr = d.logBuf, d.logBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	poll.Until(t, time.Minute, "crind listens on "+d.socket, func() (bool, string) {
		c, err := net.Dial("unix", d.socket)
		if err != nil {
			return false, fmt.Sprintf("%v; crind log:\n%s", err, d.logBuf.String())
		}
		c.Close()
		return true, ""
	})
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	d.conn = conn
	d.rs = runtimeapi.NewRuntimeServiceClient(conn)
}

// alive reports whether the crind process is still running.
func (d *crind) alive() bool {
	return d.cmd != nil && d.cmd.ProcessState == nil && d.cmd.Process.Signal(syscall.Signal(0)) == nil
}

// logLen is the length of crind's log so far, for requestsSince.
func (d *crind) logLen() int { return len(d.logBuf.String()) }

// requestsSince counts the rpc requests crind logged after offset.
func (d *crind) requestsSince(offset int, rpc string) int {
	// crind logs every request at debug level as `msg=request ...` with
	// the rpc attribute among the others (request_id, rpc, payload).
	n := 0
	for _, line := range strings.Split(d.logBuf.String()[offset:], "\n") {
		if strings.Contains(line, " msg=request ") && (strings.Contains(line, " rpc="+rpc+" ") || strings.HasSuffix(line, " rpc="+rpc)) {
			n++
		}
	}
	return n
}

// kill SIGKILLs crind alone (shims run in their own sessions).
func (d *crind) kill() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	if d.cmd != nil {
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
		_ = d.cmd.Wait()
		d.cmd = nil
	}
}

// stop asks crind to shut down with SIGTERM.
func (d *crind) stop() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
		d.t.Errorf("crind did not stop on SIGTERM within 20s")
	}
	d.cmd = nil
}

// removeAllPods stops and removes every pod through CRI.
func (d *crind) removeAllPods() {
	t := d.t
	if d.cmd == nil {
		d.start(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods, err := d.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Errorf("cleanup: list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		if _, err := d.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("cleanup: stop pod %s: %v", p.Id, err)
		}
		if _, err := d.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("cleanup: remove pod %s: %v", p.Id, err)
		}
	}
}

// checkNoLeaks fails the test when crind left mounts, processes or runtime
// state behind after every pod was removed and crind stopped.
func (d *crind) checkNoLeaks() {
	t := d.t
	t.Helper()
	for _, m := range mountsUnder(d.root, d.state) {
		if strings.HasSuffix(m, "/netns") || m == d.state {
			continue
		}
		t.Errorf("leaked mount: %s", m)
	}
	for _, dir := range []string{"c", "netns"} {
		ents, _ := os.ReadDir(filepath.Join(d.state, dir))
		for _, e := range ents {
			t.Errorf("leaked %s entry: %s", dir, e.Name())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(d.state)) {
			t.Errorf("leaked process %s: %q", filepath.Dir(p), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	d.net.CheckNoLeaks(t)
}

// mountsUnder lists the mount points in this mount namespace at or below
// any of dirs.
func mountsUnder(dirs ...string) []string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		for _, d := range dirs {
			if f[4] == d || strings.HasPrefix(f[4], d+"/") {
				out = append(out, f[4])
				break
			}
		}
	}
	return out
}
