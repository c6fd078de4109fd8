// Package harness is what the integration and e2e suites both need to run
// the real crind: the binaries built once, crind started and dialled,
// killed or stopped, every pod removed through CRI, and a check that
// nothing was left behind. Each suite keeps its own daemon type for what
// differs (its config, cgroups, kubelet). It is imported by test code
// only, and needs root.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// The binaries built once for the test binary's whole run.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// BinDirEnv names a dir of prebuilt crind, crin-shim, crin-pause and
// crin-logger that Build returns instead of building them: for a test
// binary run where there is no Go toolchain (the node lane's VM,
// docs/node-lane.md). The integration suite takes its helpers (the NRI
// test plugin, crinctl) from there too when they are in it. RemoveBuilt
// leaves that dir alone.
const BinDirEnv = "CRIN_TEST_BIN_DIR"

// builtBinaries are the binaries Build needs, made by the Makefile's build
// target or found in BinDirEnv.
var builtBinaries = []string{"crind", "crin-shim", "crin-pause", "crin-logger"}

// Build builds crind, crinctl, crin-shim, crin-pause and crin-logger once
// for the run, as "make build" does, and returns the dir holding them, or
// returns $CRIN_TEST_BIN_DIR when set, after checking it holds the four
// the daemon needs. It skips the test when not root:
// every test that runs crind needs root.
func Build(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("tests that run crind need root")
	}
	if dir := os.Getenv(BinDirEnv); dir != "" {
		for _, b := range builtBinaries {
			if _, err := exec.LookPath(filepath.Join(dir, b)); err != nil {
				t.Fatalf("%s=%s: %v", BinDirEnv, dir, err)
			}
		}
		return dir
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "crinbin")
		if binErr != nil {
			return
		}
		// The Makefile's own build, flags and all: the suites test the
		// binaries "make build" ships.
		cmd := exec.Command("make", "-s", "build", "BINDIR="+binDir)
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("make build BINDIR=%s: %w\n%s", binDir, err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// RemoveBuilt removes what Build made; a suite's TestMain calls it after
// the run.
func RemoveBuilt() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// RepoRoot is the repository's root. The suites live two levels below it
// (test/<suite>), and go test runs a test binary in its package's dir.
func RepoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// RandHex is n random bytes in hex, for names no other run uses.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Tail is the last n bytes of s (all of it when shorter), for logs in
// failure messages.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// LogBuffer collects a process's output while tests read it.
type LogBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Crind says how to start one crind.
type Crind struct {
	Bin    string     // the dir Build returned
	Config string     // the config file's path
	Socket string     // the CRI socket the config names
	Log    *LogBuffer // gets crind's stdout and stderr
	// KillWithTest has the kernel SIGKILL crind when the test binary dies,
	// for a suite whose crind would otherwise outlive an aborted run.
	KillWithTest bool
}

// Start launches crind, waits until it listens on its socket (failing t
// with its log if it does not within a minute) and dials it.
func (c Crind) Start(t testing.TB) (*exec.Cmd, *grpc.ClientConn) {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Bin, "crind"), "--config", c.Config)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.KillWithTest {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A dial that connects proves nothing about this crind, which listens
	// only once it recovered its state: until then the socket file is the
	// last crind's, and when that one was SIGKILLed while it forked (a
	// burst of runtime commands), its listening socket lives on in the
	// children that had not exec'd yet, so a dial connects and is reset
	// when they exec (the "connection reset by peer" of issue 23, with
	// the new crind's log still in start-up). So the wait is for an
	// answer, on a connection of its own each time (a grpc.ClientConn
	// backs off after a failed connection).
	poll.Until(t, 2*time.Minute, "crind serves CRI on "+c.Socket, func() (bool, string) {
		if exited(cmd.Process.Pid) {
			t.Fatalf("crind exited before it served; crind log:\n%s", Tail(c.Log.String(), 8000))
		}
		if err := answers(c.Socket); err != nil {
			return false, fmt.Sprintf("%v; crind log:\n%s", err, Tail(c.Log.String(), 4000))
		}
		return true, ""
	})
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, conn
}

// answers reports whether a CRI server answers a Version call on socket.
func answers(socket string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// exited reports whether process pid is gone or a zombie (its parent, the
// test, has not reaped it yet).
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parens.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// Kill closes the client connection and SIGKILLs crind and reaps it
// (either may be nil: already gone). Only crind dies: shims run in
// sessions of their own.
func Kill(cmd *exec.Cmd, conn *grpc.ClientConn) {
	if conn != nil {
		conn.Close()
	}
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// Stop closes the client connection and asks crind to shut down with
// SIGTERM and waits for it (either may be nil: already gone); one that
// is still running after 20 s is killed and fails t.
func Stop(t testing.TB, cmd *exec.Cmd, conn *grpc.ClientConn) {
	if conn != nil {
		conn.Close()
	}
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("crind did not stop on SIGTERM within 20s")
	}
}

// RemoveAllPods stops and removes every pod through CRI, as kubelet would
// when the node is drained; what fails is reported on t.
func RemoveAllPods(t testing.TB, rs runtimeapi.RuntimeServiceClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Errorf("cleanup: list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("cleanup: stop pod %s: %v", p.Id, err)
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("cleanup: remove pod %s: %v", p.Id, err)
		}
	}
}

// CheckNoLeaks fails t for what a crind with dirs root and state left
// behind once every pod was removed and it stopped: a mount below them
// (but the netns dir, which crind keeps mounted for the next crind), a
// container's state dir, a netns, a process whose command line names the
// state dir.
func CheckNoLeaks(t testing.TB, root, state string) {
	t.Helper()
	for _, m := range MountsUnder(root, state) {
		if strings.HasSuffix(m, "/netns") || m == state {
			continue
		}
		t.Errorf("leaked mount: %s", m)
	}
	for _, dir := range []string{"c", "netns"} {
		ents, _ := os.ReadDir(filepath.Join(state, dir))
		for _, e := range ents {
			t.Errorf("leaked %s entry: %s", dir, e.Name())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(state)) {
			t.Errorf("leaked process %s: %q", filepath.Dir(p), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// MountsUnder lists the mount points in this mount namespace at or below
// any of dirs.
func MountsUnder(dirs ...string) []string {
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
