//go:build integration

// Package integration drives the real crind over its CRI socket, the way
// kubelet does, with real runc, CNI plugins and a registry on 127.0.0.1.
// It needs root. Run it with `make integration`.
package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/testnet"
)

// The suite's names for the shared harness (test/harness), used across
// its files.
type lockedBuffer = harness.LogBuffer

var (
	randHex  = harness.RandHex
	repoRoot = harness.RepoRoot
	tail     = harness.Tail
)

func buildBinaries(t *testing.T) string { return harness.Build(t) }

// TestMain removes the binaries built for the run and the run's shared
// temp dirs.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilt()
	runDirs.removeAll()
	os.Exit(code)
}

// runDirs are temp dirs that outlive one test (a built binary, the pods'
// log dirs) and are removed when the run ends.
var runDirs tempDirs

type tempDirs struct {
	mu    sync.Mutex
	paths []string
}

// make makes a temp dir named prefix plus random digits, removed with the
// rest by removeAll.
func (d *tempDirs) make(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.paths = append(d.paths, dir)
	return dir, nil
}

func (d *tempDirs) removeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.paths {
		_ = os.RemoveAll(p)
	}
	d.paths = nil
}

// podLogRoot holds the log dirs of the run's pods.
var podLogRoot = sync.OnceValues(func() (string, error) { return runDirs.make("crinlog") })

// daemon is one crind under test.
//
// It looks like the e2e suite's crind (test/e2e), and must behave like
// it: what both do (build, start, kill, stop, drain, leak check) is
// test/harness's; each suite keeps a type of its own for the config it
// writes and the fields its tests reach into.
type daemon struct {
	t       *testing.T
	bin     string
	cfgPath string
	root    string
	state   string
	socket  string
	cgroup  string
	disk    string // the tmpfs holding root and state, "" when none
	made    time.Time
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
	// restoreArchives sets cri.restore_from_archives.
	restoreArchives bool
	// noCNI leaves the CNI conf dir empty.
	noCNI bool
	// metrics is the metrics address; empty disables the endpoint.
	metrics string
	// diskBytes > 0 puts crind's root and state dirs on a tmpfs of this
	// size of their own (daemon.disk), which a test may fill.
	diskBytes int64
	// diskInodes, with diskBytes, caps the tmpfs's inodes (0: tmpfs's
	// default), so that a test can use them all up.
	diskInodes int
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
		made:   time.Now(),
		bin:    bin,
		root:   filepath.Join(base, "root"),
		state:  filepath.Join(base, "s"),
		socket: filepath.Join(base, "s", "crin.sock"),
		cgroup: testCgroupParent(),
		logBuf: &lockedBuffer{},
	}
	if o.diskBytes > 0 {
		d.mountDisk(base, o.diskBytes, o.diskInodes)
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
restore_from_archives = %t
[cni]
conf_dir = %q
bin_dirs = ["/usr/lib/cni"]
%s`, d.root, d.state, d.socket, o.metrics, d.cgroup,
		filepath.Join(bin, "crin-shim"), filepath.Join(bin, "crin-pause"), o.restoreArchives, confDir, o.extraConfig)
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
			log := d.logBuf.String()
			t.Logf("crind's warnings and errors:\n%s", tail(logLevels(log, "level=WARN", "level=ERROR"), 8000))
			t.Logf("crind log:\n%s", tail(log, 8000))
		}
		// crind makes its netns dir a mount point of its own (so pins
		// propagate) and leaves it for the next crind on the same state
		// dir; the test's state dir goes, so its mount goes too.
		_ = syscall.Unmount(d.state+"/netns", syscall.MNT_DETACH)
		if d.disk != "" {
			_ = syscall.Unmount(d.disk, syscall.MNT_DETACH)
		}
		_ = os.RemoveAll(base)
	})
	return d
}

// mountDisk mounts a tmpfs of size bytes (and inodes inodes, unless 0)
// at base/disk and moves the daemon's root and state dirs (and so its
// socket) onto it.
func (d *daemon) mountDisk(base string, size int64, inodes int) {
	t := d.t
	t.Helper()
	d.disk = filepath.Join(base, "disk")
	if err := os.MkdirAll(d.disk, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=%d,mode=0700", size)
	if inodes > 0 {
		opts += fmt.Sprintf(",nr_inodes=%d", inodes)
	}
	if err := syscall.Mount("tmpfs", d.disk, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount a tmpfs for crind's root and state: %v", err)
	}
	d.root = filepath.Join(d.disk, "root")
	d.state = filepath.Join(d.disk, "s")
	d.socket = filepath.Join(d.state, "crin.sock")
}

// start launches crind and connects to it.
func (d *daemon) start() {
	t := d.t
	t.Helper()
	cmd, conn := harness.Crind{Bin: d.bin, Config: d.cfgPath, Socket: d.socket, Log: d.logBuf}.Start(t)
	d.cmd = cmd
	d.conn = conn
	d.rs = runtimeapi.NewRuntimeServiceClient(conn)
	d.is = runtimeapi.NewImageServiceClient(conn)
}

// kill SIGKILLs crind (only crind: shims are in their own sessions).
func (d *daemon) kill() {
	harness.Kill(d.cmd, d.conn)
	d.cmd, d.conn = nil, nil
}

// stop asks crind to shut down with SIGTERM.
func (d *daemon) stop() {
	harness.Stop(d.t, d.cmd, d.conn)
	d.cmd, d.conn = nil, nil
}

// cleanupAll removes every pod through CRI, stops crind, and checks that
// nothing was leaked: no process, no mount, no runtime state.
func (d *daemon) cleanupAll() {
	t := d.t
	if d.cmd == nil {
		d.start()
	}
	harness.RemoveAllPods(t, d.rs)
	d.stop()
	d.checkNoLeaks()
	d.net.CheckNoLeaks(t)
	d.net.Remove(t)
	if cgroup.IsSlice(d.cgroup) {
		// systemd made the parent slice when the first pod slice in
		// it started; it is the suite's, not crind's, to stop.
		_ = exec.Command("systemctl", "stop", d.cgroup).Run()
		return
	}
	for _, c := range d.cgroupBases() {
		_ = os.Remove(c)
	}
}

// testCgroupParent is a daemon's own cgroup parent in the form of the
// driver crind picks on this host (cgroup.Detect): a path, or a slice.
func testCgroupParent() string {
	if cgroup.Detect() == cgroup.Systemd {
		return "crintest" + randHex(4) + ".slice"
	}
	return "/crintest-" + randHex(4)
}

// cgroupBases are the daemon's cgroup parent's directories: one per
// cgroup v1 controller hierarchy (and the cgroup2 mount beside them), or
// the one on a unified host.
func (d *daemon) cgroupBases() []string {
	rel := cgroup.Dir(d.cgroup)
	bases, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", rel))
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", rel)); err == nil {
			bases = append(bases, filepath.Join("/sys/fs/cgroup", rel))
		}
	}
	return bases
}

// checkNoLeaks fails the test when crind left mounts, processes or runtime
// state behind after every pod was removed: what harness.CheckNoLeaks
// looks for, and the shim v2 bundles, namespace pins and cgroups this
// suite's daemons make.
func (d *daemon) checkNoLeaks() {
	t := d.t
	t.Helper()
	harness.CheckNoLeaks(t, d.root, d.state)
	// The shimv2 backend keeps one bundle per container in
	// <state>/shimv2/<handler>.
	if dirs, _ := filepath.Glob(filepath.Join(d.state, "shimv2", "*", "*")); len(dirs) > 0 {
		for _, dir := range dirs {
			t.Errorf("leaked shimv2 container state dir: %s", dir)
		}
	}
	// crin-lxc's state, and its monitors' cgroups (outside the daemon's
	// parent; liblxc removes each as its monitor ends).
	if dirs, _ := filepath.Glob(filepath.Join(d.state, "runtimes", lxcHandler, "*")); len(dirs) > 0 {
		for _, dir := range dirs {
			t.Errorf("leaked crin-lxc container state dir: %s", dir)
		}
	}
	monitors, _ := filepath.Glob("/sys/fs/cgroup/*/crin-lxc-monitor/*")
	for _, m := range monitors {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() && fi.ModTime().After(d.made) {
			t.Errorf("leaked crin-lxc monitor cgroup: %s", m)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.state, "ns")); len(ents) > 0 {
		for _, e := range ents {
			t.Errorf("leaked namespace pins: %s", e.Name())
		}
	}
	// Every cgroup crind made lives under the daemon's parent, in every
	// controller hierarchy (and on the cgroup2 mount of a hybrid host).
	for _, base := range d.cgroupBases() {
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

// logLevels is the lines of log that hold one of levels.
func logLevels(log string, levels ...string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		for _, l := range levels {
			if strings.Contains(line, l) {
				b.WriteString(line)
				break
			}
		}
	}
	return b.String()
}
