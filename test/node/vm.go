//go:build node

// Package node is the node lane: crind installed from its shipped systemd
// unit in a Debian 13 VM (systemd as PID 1, cgroup v2 unified) booted
// under qemu's software emulation, driven from the host over ssh. The
// image comes from image.sh (built once per recipe into ~/.cache/crin);
// every boot writes to a throwaway snapshot of it. docs/node-lane.md says
// how it is built, booted and run.
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// Env overrides of the defaults.
const (
	// ImageEnv names a built image dir (image.sh's output) to boot instead
	// of running image.sh.
	ImageEnv = "CRIN_NODE_IMAGE"
	// KeepEnv, when set, keeps every boot's console log, not only a failed
	// test's.
	KeepEnv = "CRIN_NODE_KEEP"
	// TraceBranchesEnv, when set, has every boot trace the kernel's
	// static-branch patching (a kprobe on jump_label_update) and log which
	// keys were patched at its end: how the branches pinBranches holds
	// were found. A diagnosis aid only: the kprobe is itself patched code.
	TraceBranchesEnv = "CRIN_NODE_TRACE_BRANCHES"
)

// Emulation makes everything slow, and the machines this runs on are
// shared: the deadlines are generous, and every wait polls for its event.
const (
	bootTimeout     = 8 * time.Minute
	shutdownTimeout = 3 * time.Minute
	// lifetime bounds a whole boot (or less: the test's own deadline less
	// deadlineMargin): a VM still up then is killed, so a hung guest cannot
	// hang the run, and the test still has time to say so.
	lifetime       = 40 * time.Minute
	deadlineMargin = 2 * time.Minute
)

// image is image.sh's output dir, found once per run.
var image = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv(ImageEnv); dir != "" {
		return dir, nil
	}
	cmd := exec.Command(filepath.Join(harness.RepoRoot(), "test", "node", "image.sh"))
	// Its progress shows as it goes: a cold build takes minutes.
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/node/image.sh: %w\n%s", err, harness.Tail(stderr.String(), 4000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
})

// VM is one booted guest. Its methods fail the test that booted it on
// error, naming the serial console log, which is kept when the test fails.
type VM struct {
	t       *testing.T
	image   string
	dir     string // ssh control socket, console log
	console string
	sshPort int
	qemu    *exec.Cmd
	exited  chan struct{} // closed when qemu has exited
	waitErr error         // qemu's exit, set before exited is closed
	killer  *time.Timer   // kills qemu at the end of its lifetime
	killed  atomic.Bool   // the killer fired
	master  *exec.Cmd     // the ssh connection commands share
}

// Boot starts a VM from the node image and returns once root can run
// commands in it over ssh and systemd has finished starting up. The VM is
// shut down when the test ends.
func Boot(t *testing.T) *VM {
	t.Helper()
	vm := newVM(t)
	t.Cleanup(vm.cleanup)
	vm.boot(lifetime)
	return vm
}

// newVM makes the VM's dir; boot starts it.
func newVM(t *testing.T) *VM {
	t.Helper()
	img, err := image()
	if err != nil {
		t.Fatal(err)
	}
	// The ssh control socket lives here: a short path (108 bytes at most).
	dir, err := os.MkdirTemp("", "crinvm")
	if err != nil {
		t.Fatal(err)
	}
	return &VM{t: t, image: img, dir: dir, console: filepath.Join(dir, "console.log"), exited: make(chan struct{})}
}

// boot starts qemu and waits until the guest is up (see Boot); the VM is
// killed life after its start at the latest (or sooner, near the test
// binary's deadline).
func (vm *VM) boot(life time.Duration) {
	t := vm.t
	t.Helper()
	var err error
	start := time.Now()
	// qemu binds the forwarded port itself; a port taken between here and
	// there fails the boot at once, with qemu's own message.
	vm.sshPort, err = freePort()
	if err != nil {
		t.Fatal(err)
	}
	vm.qemu = exec.Command("qemu-system-x86_64", vm.qemuArgs()...)
	var qout harness.LogBuffer
	vm.qemu.Stdout, vm.qemu.Stderr = &qout, &qout
	if err := vm.qemu.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	go func() {
		vm.waitErr = vm.qemu.Wait()
		close(vm.exited)
	}()
	if d, ok := t.Deadline(); ok && time.Until(d)-deadlineMargin < life {
		life = max(time.Until(d)-deadlineMargin, time.Minute)
	}
	vm.killer = time.AfterFunc(life, func() {
		vm.killed.Store(true)
		_ = vm.qemu.Process.Kill()
	})

	up, last := poll.Within(bootTimeout, func() (bool, string) {
		select {
		case <-vm.exited:
			return true, ""
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := vm.output(ctx, "true"); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	select {
	case <-vm.exited:
		vm.fatalf("qemu exited during boot (%v): %s", vm.waitErr, qout.String())
	default:
	}
	if !up {
		vm.fatalf("ssh to the VM: not answering within %v: %s", bootTimeout, last)
	}
	// "degraded" is fine for the tests (a unit they do not use may fail);
	// the failed units are logged so a slow or broken boot is explained.
	state, _ := vm.RunTimeout(bootTimeout, "systemctl is-system-running --wait")
	if s := strings.TrimSpace(state); s != "running" {
		failed, _ := vm.Run("systemctl --failed --no-legend")
		t.Logf("VM state %q; failed units:\n%s", s, failed)
	}
	vm.startMaster()
	vm.pinBranches()
	t.Logf("VM up in %v (ssh on 127.0.0.1:%d)", time.Since(start).Round(100*time.Millisecond), vm.sshPort)
}

// The guest kernel rewrites its own code to flip a static branch (a
// breakpoint is put on the instruction while it is rewritten), and under
// qemu's multi-threaded TCG that rewriting has oopsed the guest ("int3"
// in the page allocator and in the scheduler, docs/node-lane.md). Each
// of the branches below flips whenever a count of users leaves or
// reaches zero, which in the tests happens all the time; pinBranches
// keeps one user of each for the guest's whole life, so they are
// patched once, at boot, and never again:
//   - cpusets_enabled (page allocator): a cgroup with the cpuset
//     controller (AllowedCPUs);
//   - __cfs_bandwidth_used (CFS scheduler): a cgroup with a CPU quota
//     (CPUQuota);
//   - perf_sched_events (__schedule): a task-bound perf event, which
//     CRIU's hardware breakpoints create and drop at every dump and
//     restore (testdata/perfpin holds one open);
//   - nf_hooks_needed, per family and hook (every packet's path through
//     netfilter), and nft_counters_enabled: a base chain with a rule on
//     each IPv4 and IPv6 hook, which the CNI plugins' chains otherwise
//     register and unregister as pods come and go (a mangle rule with no
//     target on each of the five chains: it counts packets and decides
//     nothing).
const branchPin = "crin-branch-pin.service"

// perfpin is testdata/perfpin built for the guest, once per run.
var perfpin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "crinperfpin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "perfpin")
	build := exec.Command("go", "build", "-o", bin, "./test/node/testdata/perfpin")
	build.Dir = harness.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./test/node/testdata/perfpin: %w\n%s", err, out)
	}
	return bin, nil
})

// pinBranches starts branchPin (see above). A pin that cannot be made is
// logged, not fatal: the tests can still pass without it.
func (vm *VM) pinBranches() {
	before, _ := vm.Run("cat /sys/fs/cgroup/cgroup.subtree_control")
	vm.t.Logf("root cgroup.subtree_control before the branch pin: %s", strings.TrimSpace(before))
	bin, err := perfpin()
	if err != nil {
		vm.t.Logf("branch pin: %v", err)
		return
	}
	vm.CopyIn(bin, "/usr/local/bin/crin-perfpin", 0o755)
	cg := "/sys/fs/cgroup/system.slice/" + branchPin
	if _, err := vm.Run("systemd-run --quiet --unit=" + branchPin +
		" --property=AllowedCPUs=0 --property=CPUQuota=100% /usr/local/bin/crin-perfpin && " +
		"test -e " + cg + "/cpuset.cpus && ! grep -q '^max ' " + cg + "/cpu.max && " +
		"sleep 1 && systemctl is-active --quiet " + branchPin); err != nil {
		vm.t.Logf("branch pin (%s): %v", branchPin, err)
	}
	var nf strings.Builder
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, chain := range []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"} {
			fmt.Fprintf(&nf, "%s -w -t mangle -A %s -m comment --comment crin-branch-pin && ", cmd, chain)
		}
	}
	if _, err := vm.Run(nf.String() + "true"); err != nil {
		vm.t.Logf("branch pin (netfilter hooks): %v", err)
	}
	if os.Getenv(TraceBranchesEnv) != "" {
		vm.MustRun("cd /sys/kernel/tracing && echo 'p:crin_jlu jump_label_update key=%di:x64' > kprobe_events && " +
			"echo 1 > events/kprobes/crin_jlu/enable && echo 1 > tracing_on && echo > trace")
	}
}

// branchReport names the static keys the guest patched since boot (with
// TraceBranchesEnv set), with how many times each, for a log. A key is
// named as the kernel symbol it is in, plus its offset (keys sit inside
// arrays and structs: perf_swevent_enabled, a tracepoint).
func (vm *VM) branchReport() string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	keys, _, err := vm.exec(ctx, `grep -o 'key=0x[0-9a-f]*' /sys/kernel/tracing/trace | cut -c7- | sort | uniq -c`, nil)
	if err != nil {
		return "static key report: " + err.Error()
	}
	syms, _, err := vm.exec(ctx, "cat /proc/kallsyms", nil)
	if err != nil {
		return "static key report: " + err.Error()
	}
	return "static keys patched after the pins (count, key):\n" + nameKeys(keys, syms)
}

// nameKeys turns uniq -c's "count hexaddr" lines into "count symbol+off"
// lines, by the nearest symbol at or below each address in kallsyms.
func nameKeys(keys, kallsyms string) string {
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	for _, l := range strings.Split(kallsyms, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		syms = append(syms, sym{a, strings.Join(f[2:], " ")})
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(keys), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		a, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			continue
		}
		i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > a }) - 1
		name := "?"
		if i >= 0 {
			name = fmt.Sprintf("%s+0x%x", syms[i].name, a-syms[i].addr)
		}
		fmt.Fprintf(&b, "%s 0x%x %s\n", f[0], a, name)
	}
	return b.String()
}

func (vm *VM) qemuArgs() []string {
	return []string{
		// Always TCG: this host's KVM runs only PVM guest kernels.
		"-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "4096",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "file:" + vm.console,
		"-kernel", filepath.Join(vm.image, "vmlinuz"),
		"-initrd", filepath.Join(vm.image, "initrd.img"),
		// panic=-1 with -no-reboot: a guest kernel panic ends qemu at once.
		// No CPU vulnerability mitigations: under emulation they only cost
		// time, and the guest runs nothing but the tests.
		"-append", "console=ttyS0 root=/dev/vda rw net.ifnames=0 panic=-1 mitigations=off",
		// snapshot: the guest's writes go to a temp file qemu deletes, never
		// to the cached image.
		"-drive", "file=" + filepath.Join(vm.image, "disk.img") + ",format=raw,if=virtio,snapshot=on",
		// User networking: the guest reaches the host's 127.0.0.1 as
		// 10.0.2.2 and nothing routes off the machine through the host.
		"-netdev", fmt.Sprintf("user,id=n0,restrict=off,hostfwd=tcp:127.0.0.1:%d-:22", vm.sshPort),
		"-device", "virtio-net-pci,netdev=n0",
	}
}

// freePort is a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// sshArgs are ssh's options for this VM: its key, no host key checks (a
// fresh boot's keys are the image's, and nothing else answers on the
// port), one multiplexed connection for every command.
func (vm *VM) sshArgs() []string {
	return []string{
		"-i", filepath.Join(vm.image, "id_ed25519"),
		"-p", strconv.Itoa(vm.sshPort),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
		"-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=8",
		"-o", "ControlMaster=no", "-o", "ControlPath=" + filepath.Join(vm.dir, "ssh"),
	}
}

// startMaster starts the ssh connection every later command and forward
// goes through (ssh connects directly while it is not up): a new ssh
// session under emulation costs seconds, a channel on it much less. It is
// a child of the test, ended by cleanup.
func (vm *VM) startMaster() {
	vm.t.Helper()
	// ssh takes the first value given for an option: this one comes first.
	args := append([]string{"-o", "ControlMaster=yes", "-N"}, vm.sshArgs()...)
	args = append(args, "root@127.0.0.1")
	vm.master = exec.Command("ssh", args...)
	var out harness.LogBuffer
	vm.master.Stdout, vm.master.Stderr = &out, &out
	if err := vm.master.Start(); err != nil {
		vm.fatalf("start the ssh master: %v", err)
	}
	check := append(vm.sshArgs(), "-O", "check", "root@127.0.0.1")
	poll.Until(vm.t, time.Minute, "ssh master up", func() (bool, string) {
		o, err := exec.Command("ssh", check...).CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s; master: %s", err, o, out.String())
	})
}

// ExitError is a command that ran in the VM and exited non-zero.
type ExitError struct {
	Cmd            string
	Code           int
	Stdout, Stderr string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%q in the VM: exit %d\nstdout:\n%s\nstderr:\n%s", e.Cmd, e.Code,
		harness.Tail(e.Stdout, 4000), harness.Tail(e.Stderr, 4000))
}

// exec runs script (by root's login shell, sh syntax) in the VM;
// stdin, when not nil, is its stdin. A non-zero exit is an *ExitError;
// ssh's own failure (exit 255) is an error naming it.
func (vm *VM) exec(ctx context.Context, script string, stdin []byte) (stdout, stderr string, err error) {
	args := append(vm.sshArgs(), "root@127.0.0.1", "--", script)
	cmd := exec.CommandContext(ctx, "ssh", args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err = cmd.Run()
	var xe *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("%q in the VM: %w\nstderr:\n%s", script, ctx.Err(), harness.Tail(e.String(), 4000))
	case errors.As(err, &xe) && xe.ExitCode() != 255:
		err = &ExitError{Cmd: script, Code: xe.ExitCode(), Stdout: o.String(), Stderr: e.String()}
	default:
		err = fmt.Errorf("ssh %q: %w: %s", script, err, harness.Tail(e.String(), 4000))
	}
	return o.String(), e.String(), err
}

// output is exec's stdout.
func (vm *VM) output(ctx context.Context, script string) (string, error) {
	out, _, err := vm.exec(ctx, script, nil)
	return out, err
}

// Exec runs script (sh syntax) in the VM and returns its stdout, its
// stderr, and an *ExitError when it exits non-zero or another error when
// ssh fails or timeout passes. It does not fail the test.
func (vm *VM) Exec(timeout time.Duration, script string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return vm.exec(ctx, script, nil)
}

// RunTimeout is Exec's stdout, with ssh's failures fatal (an exit status
// is the caller's to judge: err is then an *ExitError).
func (vm *VM) RunTimeout(timeout time.Duration, script string) (string, error) {
	vm.t.Helper()
	out, _, err := vm.Exec(timeout, script)
	var xe *ExitError
	if err != nil && !errors.As(err, &xe) {
		vm.fatalf("%v", err)
	}
	return out, err
}

// Run is RunTimeout with a five-minute timeout.
func (vm *VM) Run(script string) (string, error) {
	vm.t.Helper()
	return vm.RunTimeout(5*time.Minute, script)
}

// MustRun runs script and fails the test unless it exits 0; it returns
// its stdout.
func (vm *VM) MustRun(script string) string {
	vm.t.Helper()
	out, err := vm.Run(script)
	if err != nil {
		vm.fatalf("%v", err)
	}
	return out
}

// CopyIn copies the host's file src to dst in the VM with mode perm,
// through a temp name renamed into place, so dst is never half-written.
func (vm *VM) CopyIn(src, dst string, perm os.FileMode) {
	vm.t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		vm.t.Fatal(err)
	}
	vm.WriteFile(dst, data, perm)
}

// WriteFile writes data to dst in the VM with mode perm, making its dir.
func (vm *VM) WriteFile(dst string, data []byte, perm os.FileMode) {
	vm.t.Helper()
	q := shellQuote(dst)
	tmp := shellQuote(dst + ".crin-tmp")
	script := fmt.Sprintf("mkdir -p \"$(dirname %s)\" && cat >%s && chmod %o %s && mv -f %s %s", q, tmp, perm, tmp, tmp, q)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, _, err := vm.exec(ctx, script, data); err != nil {
		vm.fatalf("copy %d bytes into the VM's %s: %v", len(data), dst, err)
	}
}

// ForwardUnix makes a unix socket on the host that reaches the VM's unix
// socket remote (through the ssh connection), and returns its path. The
// VM's socket need not exist yet: each connection is forwarded as made.
func (vm *VM) ForwardUnix(remote string) string {
	vm.t.Helper()
	local := filepath.Join(vm.dir, "fwd-"+harness.RandHex(4)+".sock")
	args := append(vm.sshArgs(), "-O", "forward", "-L", local+":"+remote, "root@127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ssh", args...).CombinedOutput(); err != nil {
		vm.fatalf("forward %s to the VM's %s: %v: %s", local, remote, err, out)
	}
	return local
}

// Console is the path of the VM's serial console log.
func (vm *VM) Console() string { return vm.console }

// fatalf fails the test with the console log's path and its tail.
func (vm *VM) fatalf(format string, args ...any) {
	vm.t.Helper()
	con, _ := os.ReadFile(vm.console)
	msg := fmt.Sprintf(format, args...)
	if vm.killed.Load() {
		msg += "\n(the VM was killed at the end of its lifetime: hung, or the test ran out of time)"
	}
	vm.t.Fatalf("%s\n(VM serial console: %s; its end:\n%s)", msg, vm.console, harness.Tail(string(con), 3000))
}

// cleanup powers the VM off (killing it if it does not stop in time) and
// removes its dir, unless the test failed: then the console log is kept
// and named.
func (vm *VM) cleanup() {
	if vm.qemu != nil && vm.qemu.Process != nil {
		if os.Getenv(TraceBranchesEnv) != "" {
			vm.t.Log(vm.branchReport())
		}
		vm.shutdown()
		vm.killer.Stop()
	}
	if vm.master != nil {
		_ = vm.master.Process.Kill()
		_ = vm.master.Wait()
	}
	if vm.t.Failed() || os.Getenv(KeepEnv) != "" {
		vm.t.Logf("VM serial console log kept: %s", vm.console)
		return
	}
	_ = os.RemoveAll(vm.dir)
}

// stop powers the VM off as cleanup does, for a VM no test holds: it
// reports on stderr, and keeps the console log when keep is true.
func (vm *VM) stop(keep bool) {
	if os.Getenv(TraceBranchesEnv) != "" {
		fmt.Fprintln(os.Stderr, "node: "+vm.branchReport())
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, _, _ = vm.exec(ctx, "systemctl --no-block poweroff", nil)
	cancel()
	select {
	case <-vm.exited:
		fmt.Fprintf(os.Stderr, "node: shared VM powered off in %v\n", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(shutdownTimeout):
		fmt.Fprintf(os.Stderr, "node: shared VM still up %v after poweroff: killed\n", shutdownTimeout)
		_ = vm.qemu.Process.Kill()
		<-vm.exited
	}
	vm.killer.Stop()
	if vm.master != nil {
		_ = vm.master.Process.Kill()
		_ = vm.master.Wait()
	}
	if keep || os.Getenv(KeepEnv) != "" {
		fmt.Fprintf(os.Stderr, "node: shared VM serial console log kept: %s\n", vm.console)
		return
	}
	_ = os.RemoveAll(vm.dir)
}

// shutdown asks systemd to power off and waits for qemu to exit; a VM
// still up after shutdownTimeout is killed.
func (vm *VM) shutdown() {
	select {
	case <-vm.exited:
		return
	default:
	}
	start := time.Now()
	// The connection may drop as the guest goes down: ignore its error.
	_, _, _ = vm.Exec(time.Minute, "systemctl --no-block poweroff")
	select {
	case <-vm.exited:
		vm.t.Logf("VM powered off in %v", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(shutdownTimeout):
		vm.t.Errorf("VM still up %v after poweroff: killed (serial console: %s)", shutdownTimeout, vm.console)
		_ = vm.qemu.Process.Kill()
		<-vm.exited
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
