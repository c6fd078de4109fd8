//go:build node

package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// BenchEnv turns on TestNodeLifecycleBench (make node-bench); its value,
// when a number, is the lifecycles timed per target (default 20).
const BenchEnv = "CRIN_NODE_BENCH"

// fsConfig is a second crind beside the unit's, on the cgroupfs driver,
// with dirs, sockets and ports of its own.
const fsConfig = `root = "/var/lib/crin-fs"
state = "/run/crin-fs"
[cri]
cgroup_driver = "cgroupfs"
socket = "/run/crin-fs/crin.sock"
metrics_address = "127.0.0.1:9782"
[nri]
socket_path = "/run/crin-fs/nri.sock"
`

// benchRunscConfig is gVisor's handler (docs/runtimes.md, "gVisor"),
// added to both crinds' configs.
const benchRunscConfig = `
[runtimes.runsc]
type = "shimv2"
runtime_type = "io.containerd.runsc.v1"
[runtimes.runsc.options]
platform = "systrap"
`

// benchHandlers are the handlers timed on each crind: runc and crun
// under crin-shim, gVisor through its shim v2 runtime.
// CRIN_NODE_BENCH_HANDLERS picks some of them.
var benchHandlers = []string{"runc", "crun", "runsc"}

// BenchRunscDebugEnv, when set, has runsc write its debug logs under
// /var/log/runsc in the VM, and the test print them when crilat fails
// (they slow gVisor down: not for figures).
const BenchRunscDebugEnv = "CRIN_NODE_BENCH_RUNSC_DEBUG"

// runscDebugOptions are runsc flags (options of the runsc handler) for
// BenchRunscDebugEnv.
const runscDebugOptions = `debug = "true"
debug-log = "/var/log/runsc/%ID%/"
strace = "false"
`

// TestNodeLifecycleBench times pod lifecycles in the VM with
// bench/cmd/crilat, interleaved over six targets: runc, crun and runsc
// (gVisor), each on crind with the systemd cgroup driver (the unit's,
// picked from the host) and on a second crind with the cgroupfs driver. It prints the figures
// (bench/README.md keeps them) and checks none: emulation makes the
// absolute times meaningless beside the host's, only the ratios between
// the targets of one run mean something.
func TestNodeLifecycleBench(t *testing.T) {
	n := os.Getenv(BenchEnv)
	if n == "" {
		t.Skipf("%s unset (make node-bench sets it)", BenchEnv)
	}
	if n == "1" {
		n = "20"
	}
	dir, err := os.MkdirTemp("", "crinbench")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	crilat := filepath.Join(dir, "crilat")
	build := exec.Command("go", "build", "-o", crilat, "./bench/cmd/crilat")
	build.Dir = harness.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build crilat: %v\n%s", err, out)
	}

	handlers := benchHandlers
	if h := strings.Fields(os.Getenv("CRIN_NODE_BENCH_HANDLERS")); len(h) > 0 {
		handlers = h
	}
	runscConfig := benchRunscConfig
	if os.Getenv(BenchRunscDebugEnv) != "" {
		runscConfig += runscDebugOptions
	}
	vm := Boot(t)
	// gVisor's binaries before crind starts: a handler whose shim is
	// missing is disabled at start-up.
	installGvisor(t, vm)
	c := Install(t, vm, InstallOptions{Config: runscConfig})
	vm.CopyIn(crilat, "/usr/local/bin/crilat", 0o755)
	vm.WriteFile("/etc/crin/fs.toml", []byte(fsConfig+runscConfig), 0o644)
	vm.MustRun("systemd-run --unit crind-fs -p Delegate=yes -p KillMode=process /usr/local/bin/crind --config /etc/crin/fs.toml")
	vm.MustRun("systemd-run --unit crilat-registry /usr/local/bin/crilat registry -pause /usr/local/bin/crin-pause -addr-file /run/crilat-registry")
	var reg string
	poll.Until(t, 5*time.Minute, "the second crind and the registry up", func() (bool, string) {
		out, err := vm.Run("test -S /run/crin-fs/crin.sock && cat /run/crilat-registry")
		reg = strings.TrimSpace(out)
		return err == nil && reg != "", fmt.Sprintf("%q %v", out, err)
	})
	pidFS := strings.TrimSpace(vm.MustRun("systemctl show -p MainPID --value crind-fs"))
	pid := c.MainPID(t)

	var targets []string
	for _, d := range []struct{ name, sock, pid string }{{"systemd", "/run/crin/crin.sock", pid}, {"cgroupfs", "/run/crin-fs/crin.sock", pidFS}} {
		for _, h := range handlers {
			// containerd-shim-runsc-v1's comm is cut to 15 bytes.
			shim := "crin-shim"
			if h == "runsc" {
				shim = "containerd-shim"
			}
			targets = append(targets, fmt.Sprintf("-target name=%s-%s,socket=%s,pid=%s,shim=%s,handler=%s", h, d.name, d.sock, d.pid, shim, h))
		}
	}
	script := fmt.Sprintf("mkdir -p /tmp/crilat && crilat run %s -image %s/library/busybox:bench -log-dir /tmp/crilat -n %s -k 0 -par 0",
		strings.Join(targets, " "), reg, n)
	start := time.Now()
	out, stderr, err := vm.Exec(40*time.Minute, script)
	t.Logf("crilat in the VM (%v):\n%s\n%s", time.Since(start).Round(time.Second), out, harness.Tail(stderr, 4000))
	if err != nil {
		runsc, _ := vm.Run("for f in $(find /var/log/runsc -type f 2>/dev/null | head -20); do echo \"== $f\"; tail -n 40 \"$f\"; done")
		t.Fatalf("crilat run: %v\ncrind:\n%s\nrunsc debug logs (%s):\n%s", err, c.Journal(), BenchRunscDebugEnv, harness.Tail(runsc, 30000))
	}
	if f := os.Getenv("CRIN_NODE_BENCH_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}
