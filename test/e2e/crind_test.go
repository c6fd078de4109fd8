//go:build e2e

// Package e2e runs a real kubelet (standalone: static pods, no API server)
// against the real crind, and drives pods only the way a cluster would:
// manifests in the static pod directory and kubelet's own HTTP endpoints.
// It needs root and a kubelet built by test/e2e/kubelet/build.sh. Run it
// with `make e2e`.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/testnet"
)

// TestMain removes the binaries built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilt()
	os.Exit(code)
}

// crind is one crind under test, with its own dirs, bridge, subnet and NRI
// socket. Its cgroup parent is the node's test cgroup, which is also
// kubelet's cgroupRoot.
//
// It looks like the integration suite's daemon (test/integration), and
// must behave like it: what both do (build, start, kill, stop, drain,
// leak check) is test/harness's; each suite keeps a type of its own for
// the config it writes and the fields its tests reach into.
type crind struct {
	t       *testing.T
	bin     string
	cfgPath string
	root    string
	state   string
	socket  string
	net     testnet.Net
	logBuf  *harness.LogBuffer
	cmd     *exec.Cmd
	conn    *grpc.ClientConn
	rs      runtimeapi.RuntimeServiceClient
}

// extra is appended to the config (runtime handlers' tables).
func newCrind(t *testing.T, base, cgroup, registry, extra string) *crind {
	t.Helper()
	bin := harness.Build(t)
	d := &crind{
		t:      t,
		bin:    bin,
		root:   filepath.Join(base, "crin-root"),
		state:  filepath.Join(base, "crin-state"),
		socket: filepath.Join(base, "crin-state", "crin.sock"),
		logBuf: &harness.LogBuffer{},
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
		filepath.Join(base, "nri.sock")) + extra
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
	cmd, conn := harness.Crind{Bin: d.bin, Config: d.cfgPath, Socket: d.socket, Log: d.logBuf, KillWithTest: true}.Start(t)
	d.cmd = cmd
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
	harness.Kill(d.cmd, d.conn)
	d.cmd, d.conn = nil, nil
}

// stop asks crind to shut down with SIGTERM.
func (d *crind) stop() {
	harness.Stop(d.t, d.cmd, d.conn)
	d.cmd, d.conn = nil, nil
}

// removeAllPods stops and removes every pod through CRI.
func (d *crind) removeAllPods() {
	t := d.t
	if d.cmd == nil {
		d.start(t)
	}
	harness.RemoveAllPods(t, d.rs)
}

// checkNoLeaks fails the test when crind left mounts, processes or runtime
// state behind after every pod was removed and crind stopped.
func (d *crind) checkNoLeaks() {
	t := d.t
	t.Helper()
	harness.CheckNoLeaks(t, d.root, d.state)
	d.net.CheckNoLeaks(t)
}
