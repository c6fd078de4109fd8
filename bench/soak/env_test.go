//go:build soak

// Package soak runs crind for a long time under churn and injected faults
// (TestSoak) and measures a restart at node scale against containerd
// (TestRestartScale). Both need root, runc and the CNI plugins, and run
// the binaries `make build` made in bin/; see bench/README.md ("Soak and
// churn", "Restart at node scale") and `make soak`.
package soak

import (
	"context"
	"errors"
	"flag"
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

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/testnet"
)

var binFlag = flag.String("bin", "", "dir of crind, crin-shim, crin-pause, crin-logger as `make build` makes them (default: the repository's bin/)")

// env is what one crind under soak needs around it: its dirs, a registry,
// a bridge network, a cgroup parent, and the daemon itself, which faults
// kill and restart.
type env struct {
	t      *testing.T
	bin    string
	base   string // everything of the run lives below it
	root   string
	state  string
	socket string
	cfg    string
	cgroup string // cgroupfs parent, "/crinsoak-XXXX"
	net    testnet.Net
	disk   string // tmpfs holding root, "" when none
	port   int    // metrics port

	reg    string // registry host:port
	faults *imagetest.Faults
	image  string // busybox, always present
	spare  string // a second image pulled and removed by the registry fault

	logFile *os.File

	conn *grpc.ClientConn // one for the run: grpc reconnects after a restart
	rs   runtimeapi.RuntimeServiceClient
	is   runtimeapi.ImageServiceClient

	mu   sync.Mutex    // guards cmd and done
	cmd  *exec.Cmd     // the running crind; nil while it is down
	done chan struct{} // closed when cmd has exited and been reaped
}

type envOptions struct {
	diskBytes int64  // > 0: root on a tmpfs this big
	nriPlugin string // path of an NRI plugin installed pre-installed as 10-soak; "" none
	name      string // prefix of the base dir
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the soak runs crind: needs root")
	}
	bin := *binFlag
	if bin == "" {
		bin = filepath.Join(harness.RepoRoot(), "bin")
	}
	for _, b := range []string{"crind", "crin-shim", "crin-pause", "crin-logger"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s: run `make build` first (or pass -bin): %v", b, err)
		}
	}
	base, err := os.MkdirTemp("", o.name)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, bin: bin, base: base, state: filepath.Join(base, "s"),
		cgroup: "/crinsoak-" + harness.RandHex(4), faults: &imagetest.Faults{}}
	e.socket = filepath.Join(e.state, "crin.sock")
	e.root = filepath.Join(base, "root")
	if o.diskBytes > 0 {
		e.disk = filepath.Join(base, "disk")
		if err := os.MkdirAll(e.disk, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", e.disk, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", o.diskBytes)); err != nil {
			t.Fatalf("mount tmpfs for root: %v", err)
		}
		e.root = filepath.Join(e.disk, "root")
	}
	t.Cleanup(e.removeBase)
	e.net = testnet.Pick(t, "crins", base)
	e.startRegistry()
	e.writeConfig(o)
	if e.logFile, err = os.Create(filepath.Join(base, "crind.log")); err != nil {
		t.Fatal(err)
	}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	e.conn, err = grpc.NewClient("unix://"+e.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.rs = runtimeapi.NewRuntimeServiceClient(e.conn)
	e.is = runtimeapi.NewImageServiceClient(e.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: e.image}}); err != nil {
		t.Fatalf("pull %s: %v", e.image, err)
	}
	return e
}

func (e *env) startRegistry() {
	t := e.t
	srv, host, err := imagetest.Serve("127.0.0.1:0", imagetest.RegistryOptions{Faults: e.faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e.reg = host
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bb := imagetest.Busybox(t)
	if _, err := imagetest.PushImage(ctx, host, "library/busybox:soak", bb); err != nil {
		t.Fatal(err)
	}
	// The spare image has a layer of its own, large enough (over
	// StallMinBlob) for a stalled registry to hold its pull.
	noise := imagetest.Layer(t, imagetest.NoiseFile("noise", 1<<20))
	spare := imagetest.Image(t, imagetest.BusyboxConfig(), mustLayers(t, bb)[0], noise)
	if _, err := imagetest.PushImage(ctx, host, "library/busybox:spare", spare); err != nil {
		t.Fatal(err)
	}
	// A pause image for containerd (TestRestartScale): crin-pause as /pause.
	pause, err := os.ReadFile(filepath.Join(e.bin, "crin-pause"))
	if err != nil {
		t.Fatal(err)
	}
	pimg := imagetest.Image(t, v1.Config{Entrypoint: []string{"/pause"}},
		imagetest.Layer(t, imagetest.File("pause", string(pause), 0o755)))
	if _, err := imagetest.PushImage(ctx, host, "library/pause:soak", pimg); err != nil {
		t.Fatal(err)
	}
	e.image = host + "/library/busybox:soak"
	e.spare = host + "/library/busybox:spare"
}

func mustLayers(t *testing.T, img v1.Image) []v1.Layer {
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func (e *env) writeConfig(o envOptions) {
	t := e.t
	confDir := filepath.Join(e.base, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-soak.conflist"), []byte(e.net.Conflist()), 0o644); err != nil {
		t.Fatal(err)
	}
	e.port = freePort(t)
	nri := "enable = false"
	if o.nriPlugin != "" {
		plugins := filepath.Join(e.base, "plugins")
		if err := os.MkdirAll(plugins, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(e.base, "plugins.d"), 0o700); err != nil {
			t.Fatal(err)
		}
		// A copy, not a symlink: crind launches regular files only. Its
		// comm is then 10-soak, which the NRI fault looks for.
		b, err := os.ReadFile(o.nriPlugin)
		if err == nil {
			err = os.WriteFile(filepath.Join(plugins, "10-soak"), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		nri = fmt.Sprintf("enable = true\ndisable_connections = true\nplugin_path = %q\nplugin_config_path = %q\nsocket_path = %q",
			plugins, filepath.Join(e.base, "plugins.d"), filepath.Join(e.state, "nri.sock"))
	}
	cfg := fmt.Sprintf(`root = %q
state = %q
log_level = "warn"
[cri]
socket = %q
metrics_address = "127.0.0.1:%d"
cgroup_parent = %q
shim_binary = %q
pause_binary = %q
[cni]
conf_dir = %q
bin_dirs = ["/usr/lib/cni"]
[image]
pull_progress_timeout = "5s"
[nri]
%s
`, e.root, e.state, e.socket, e.port, e.cgroup, filepath.Join(e.bin, "crin-shim"), filepath.Join(e.bin, "crin-pause"), confDir, nri)
	e.cfg = filepath.Join(e.base, "crin.toml")
	if err := os.WriteFile(e.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start launches crind and waits until its socket accepts; it does not
// fail the test, so that fault goroutines may call it.
func (e *env) start() error {
	cmd := exec.Command(filepath.Join(e.bin, "crind"), "--config", e.cfg)
	cmd.Stdout, cmd.Stderr = e.logFile, e.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start crind: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if c, err := net.Dial("unix", e.socket); err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("crind exited before it listened; see %s", e.logFile.Name())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("crind did not listen within 2m; see %s", e.logFile.Name())
		}
	}
	e.mu.Lock()
	e.cmd, e.done = cmd, exited
	e.mu.Unlock()
	return nil
}

// kill SIGKILLs crind and returns once it is gone.
func (e *env) kill() {
	e.mu.Lock()
	cmd, done := e.cmd, e.done
	e.cmd = nil
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop asks crind to shut down (SIGTERM) and waits up to 30 s.
func (e *env) stop() {
	e.mu.Lock()
	cmd, done := e.cmd, e.done
	e.cmd = nil
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		e.t.Errorf("crind did not stop on SIGTERM within 30s")
		_ = cmd.Process.Kill()
		<-done
	}
}

func (e *env) pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return 0
	}
	return e.cmd.Process.Pid
}

// removeBase undoes what newEnv made outside crind: the tmpfs, the
// netns dir mount, the bridge, the cgroup parent, the dirs.
func (e *env) removeBase() {
	e.kill()
	if e.conn != nil {
		e.conn.Close()
	}
	for _, m := range reverse(harness.MountsUnder(e.base)) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	e.net.Remove(e.t)
	for _, c := range e.cgroupBases() {
		_ = os.Remove(c)
	}
	if e.logFile != nil {
		e.logFile.Close()
		if e.t.Failed() || os.Getenv("SOAK_KEEP_LOG") != "" {
			dst := filepath.Join(os.TempDir(), filepath.Base(e.base)+"-crind.log")
			if b, err := os.ReadFile(e.logFile.Name()); err == nil && os.WriteFile(dst, b, 0o600) == nil {
				e.t.Logf("crind log kept: %s", dst)
			}
		}
	}
	_ = os.RemoveAll(e.base)
}

func reverse(s []string) []string {
	out := make([]string, 0, len(s))
	for i := len(s) - 1; i >= 0; i-- {
		out = append(out, s[i])
	}
	return out
}

// cgroupBases are the cgroup parent's dirs in every hierarchy.
func (e *env) cgroupBases() []string {
	bases, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", e.cgroup))
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", e.cgroup, "cgroup.procs")); err == nil {
		bases = append(bases, filepath.Join("/sys/fs/cgroup", e.cgroup))
	}
	return bases
}

// ctx is a context for one CRI call.
func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// waitServing waits until crind answers Status with both conditions true.
func (e *env) waitServing(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := ctxFor(5 * time.Second)
		st, err := e.rs.Status(ctx, &runtimeapi.StatusRequest{})
		cancel()
		if err == nil && ready(st) {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("conditions not all true")
			}
			return fmt.Errorf("crind not serving after %s: %w", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ready(st *runtimeapi.StatusResponse) bool {
	if st.GetStatus() == nil {
		return false
	}
	// RuntimeReady and NetworkReady are what kubelet needs; a handler
	// this host cannot run (crun on a hybrid cgroup host) adds a false
	// RuntimeHandlerReady/NAME that says nothing of the node.
	n := 0
	for _, c := range st.Status.Conditions {
		if c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady {
			if !c.Status {
				return false
			}
			n++
		}
	}
	return n == 2
}

// procsNaming lists the pids whose command line contains s.
func procsNaming(s string) []int {
	var out []int
	ents, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range ents {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), s) {
			var pid int
			fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid)
			out = append(out, pid)
		}
	}
	return out
}

// procsComm lists the pids whose comm is name and whose command line
// contains s.
func procsComm(name, s string) []int {
	var out []int
	for _, pid := range procsNaming(s) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(b)) == name {
			out = append(out, pid)
		}
	}
	return out
}
