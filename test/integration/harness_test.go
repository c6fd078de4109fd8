//go:build integration

// Package integration drives the real crind over its CRI socket, the way
// kubelet does, with real runc, CNI plugins and a registry on 127.0.0.1.
// It needs root. Run it with `make integration`.
package integration

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

// bins holds the binaries built once for the whole run.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func buildBinaries(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration tests need root")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "crinbin")
		if binErr != nil {
			return
		}
		root := repoRoot()
		for _, b := range []struct{ name, pkg string }{
			{"crind", "./cmd/crind"}, {"crin-shim", "./cmd/crin-shim"}, {"crin-pause", "./cmd/crin-pause"},
			{"crin-logger", "./cmd/crin-logger"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.name), b.pkg)
			cmd.Dir = root
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

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// daemon is one crind under test.
type daemon struct {
	t       *testing.T
	bin     string
	cfgPath string
	root    string
	state   string
	socket  string
	cgroup  string
	net     testnet.Net
	logBuf  *lockedBuffer
	cmd     *exec.Cmd
	conn    *grpc.ClientConn
	rs      runtimeapi.RuntimeServiceClient
	is      runtimeapi.ImageServiceClient
}

type daemonOptions struct {
	// extraConfig is appended to the generated TOML.
	extraConfig string
	// noCNI leaves the CNI conf dir empty.
	noCNI bool
	// metrics is the metrics address; empty disables the endpoint.
	metrics string
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

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startDaemon(t *testing.T, o daemonOptions) *daemon {
	t.Helper()
	bin := buildBinaries(t)
	base, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		t:      t,
		bin:    bin,
		root:   filepath.Join(base, "root"),
		state:  filepath.Join(base, "s"),
		socket: filepath.Join(base, "s", "crin.sock"),
		cgroup: "/crintest-" + randHex(4),
		logBuf: &lockedBuffer{},
	}
	d.net = testnet.Pick(t, "crint", base)
	confDir := filepath.Join(base, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !o.noCNI {
		if err := os.WriteFile(filepath.Join(confDir, "10-test.conflist"), []byte(d.net.Conflist()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`root = %q
state = %q
log_level = "debug"
[cri]
socket = %q
metrics_address = %q
cgroup_parent = %q
shim_binary = %q
pause_binary = %q
[cni]
conf_dir = %q
bin_dirs = ["/usr/lib/cni"]
%s`, d.root, d.state, d.socket, o.metrics, d.cgroup,
		filepath.Join(bin, "crin-shim"), filepath.Join(bin, "crin-pause"), confDir, o.extraConfig)
	cfg = defaultHandlerConfig(t, cfg, o.extraConfig)
	if !strings.Contains(o.extraConfig, "[nri") {
		// Daemons running side by side must not share NRI's default socket.
		cfg += fmt.Sprintf("\n[nri]\nsocket_path = %q\n", filepath.Join(base, "nri.sock"))
	}
	d.cfgPath = filepath.Join(base, "crin.toml")
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	t.Cleanup(func() {
		d.cleanupAll()
		if t.Failed() {
			t.Logf("crind log:\n%s", tail(d.logBuf.String(), 8000))
		}
		// crind makes its netns dir a mount point of its own (so pins
		// propagate) and leaves it for the next crind on the same state
		// dir; the test's state dir goes, so its mount goes too.
		_ = syscall.Unmount(d.state+"/netns", syscall.MNT_DETACH)
		_ = os.RemoveAll(base)
	})
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// start launches crind and connects to it.
func (d *daemon) start() {
	t := d.t
	t.Helper()
	cmd := exec.Command(filepath.Join(d.bin, "crind"), "--config", d.cfgPath)
	cmd.Stdout, cmd.Stderr = d.logBuf, d.logBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
	d.is = runtimeapi.NewImageServiceClient(conn)
}

// kill SIGKILLs crind (only crind: shims are in their own sessions).
func (d *daemon) kill() {
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
func (d *daemon) stop() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	if d.cmd != nil {
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
}

// cleanupAll removes every pod through CRI, stops crind, and checks that
// nothing was leaked: no process, no mount, no runtime state.
func (d *daemon) cleanupAll() {
	t := d.t
	if d.cmd == nil {
		d.start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if pods, err := d.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
		for _, p := range pods.Items {
			if _, err := d.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				t.Errorf("cleanup: stop pod %s: %v", p.Id, err)
			}
			if _, err := d.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				t.Errorf("cleanup: remove pod %s: %v", p.Id, err)
			}
		}
	}
	d.stop()
	d.checkNoLeaks()
	d.net.CheckNoLeaks(t)
	d.net.Remove(t)
	ctls, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", d.cgroup))
	for _, c := range ctls {
		_ = os.Remove(c)
	}
}

// checkNoLeaks fails the test when crind left mounts, processes or runtime
// state behind after every pod was removed.
func (d *daemon) checkNoLeaks() {
	t := d.t
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], d.root+"/") || strings.HasPrefix(f[4], d.state+"/")) {
			if strings.HasSuffix(f[4], "/netns") || strings.HasSuffix(f[4], d.state) {
				continue
			}
			t.Errorf("leaked mount: %s", f[4])
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state, "c")); len(ents) > 0 {
		for _, e := range ents {
			t.Errorf("leaked container state dir: %s", e.Name())
		}
	}
	// The shimv2 backend keeps one bundle per container in
	// <state>/shimv2/<handler>.
	if dirs, _ := filepath.Glob(filepath.Join(d.state, "shimv2", "*", "*")); len(dirs) > 0 {
		for _, dir := range dirs {
			t.Errorf("leaked shimv2 container state dir: %s", dir)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state, "ns")); len(ents) > 0 {
		for _, e := range ents {
			t.Errorf("leaked namespace pins: %s", e.Name())
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state, "netns")); len(ents) > 0 {
		for _, e := range ents {
			t.Errorf("leaked netns: %s", e.Name())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(d.state)) {
			t.Errorf("leaked process %s: %q", filepath.Dir(p), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	// Every cgroup crind made lives under the daemon's parent, in every
	// controller hierarchy (and on the cgroup2 mount of a hybrid host).
	bases, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", d.cgroup))
	for _, base := range bases {
		_ = filepath.WalkDir(base, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() && path != base {
				t.Errorf("leaked cgroup: %s", path)
			}
			return nil
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
