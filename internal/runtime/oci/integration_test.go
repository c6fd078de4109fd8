//go:build integration

package oci

import (
	"golang.org/x/sys/unix"

	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/test/poll"
)

// binDir holds the crin-shim and crin-pause built for this test run.
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration tests need root")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "crin-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	for _, b := range []struct{ out, pkg string }{
		{"crin-shim", "github.com/crin-dev/crin/cmd/crin-shim"},
		{"crin-pause", "github.com/crin-dev/crin/cmd/crin-pause"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b.pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	// runc removes each container's cgroup; the parent is the tests'.
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*/crin-test")
	for _, c := range ctrls {
		os.Remove(c)
	}
	os.Exit(code)
}

type env struct {
	stateDir, root string
	binary         string
}

func newEnv(t *testing.T, binary string) (*Runtime, env) {
	t.Helper()
	state, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "crin-root")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(state)
		os.RemoveAll(root)
	})
	e := env{stateDir: state, root: root, binary: binary}
	return e.open(t), e
}

// open returns a fresh backend on e's directories, as a restarted crind
// would make.
func (e env) open(t *testing.T) *Runtime {
	t.Helper()
	o, err := New(t.Context(), Config{
		Name: filepath.Base(e.binary), Binary: e.binary, Root: e.root,
		ShimBinary: filepath.Join(binDir, "crin-shim"), StateDir: e.stateDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// rootfs makes a busybox root filesystem.
func rootfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "sleep", "echo", "cat", "head", "tail", "printf", "true", "ps", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// testSpec is a minimal spec: own pid, ipc, uts, mount and network
// namespaces, a cgroup under /crin-test.
func testSpec(rootfs, id string, args ...string) *specs.Spec {
	caps := []string{"CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_DAC_OVERRIDE"}
	return &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: rootfs},
		Process: &specs.Process{
			Args: args,
			Env:  []string{"PATH=/bin"},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			NoNewPrivileges: true,
		},
		Hostname: "crin-test",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: "/crin-test/" + id,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			Resources: &specs.LinuxResources{},
		},
	}
}

func testID(t *testing.T) string {
	return fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e9, os.Getpid())
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// create creates a container and registers its deletion.
func create(t *testing.T, o *Runtime, id string, spec *specs.Spec, logPath string) {
	t.Helper()
	if err := o.Create(ctxT(t, time.Minute), runtime.CreateRequest{ID: id, Spec: spec, LogPath: logPath}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Delete(context.Background(), id); err != nil {
			t.Errorf("cleanup Delete: %v", err)
		}
	})
}

// assertGone checks that nothing of id is left: no state dir, no runtime
// state, no shim, no init.
func assertGone(t *testing.T, o *Runtime, id string, pids ...int) {
	t.Helper()
	if _, err := os.Stat(o.dir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir of %s still there: %v", id, err)
	}
	if _, err := o.runtimeState(context.Background(), id); err == nil {
		t.Errorf("runtime still knows %s", id)
	}
	for _, pid := range pids {
		if pid > 0 && alive(pid) {
			t.Errorf("process %d still alive", pid)
		}
	}
	if pids := shimsOf(id); len(pids) > 0 {
		t.Errorf("shims of %s still running: %v", id, pids)
	}
}

// shimsOf lists live crin-shim processes whose command line names id.
func shimsOf(id string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "crin-shim") && strings.Contains(string(cmdline), id) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func readLog(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []string
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			t.Fatalf("bad CRI log record %q", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("bad timestamp in %q: %v", l, err)
		}
		recs = append(recs, strings.Join(f[1:], " "))
	}
	return recs
}

func TestLifecycleRunc(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	logPath := filepath.Join(t.TempDir(), "c.log")
	spec := testSpec(rootfs(t), id, "sh", "-c", "echo out; echo err >&2; printf partial; exit 3")
	create(t, o, id, spec, logPath)
	ctx := ctxT(t, time.Minute)

	// Created is pending: only a bundle, no shim, nothing in the runtime.
	st, err := o.Status(ctx, id)
	if err != nil || st.State != runtime.StateCreated || st.Pid != 0 {
		t.Fatalf("Status after create = %+v, %v; want created, no pid yet", st, err)
	}
	if shims := shimsOf(id); len(shims) > 0 {
		t.Errorf("shims of a container not started: %v", shims)
	}
	if _, err := o.runtimeState(ctx, id); err == nil {
		t.Errorf("the runtime knows a container not started")
	}
	ids, err := o.List(ctx)
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v; want [%s]", ids, err, id)
	}
	pid, err := o.Start(ctx, id)
	if err != nil || pid <= 0 {
		t.Fatalf("Start = %d, %v; want a pid", pid, err)
	}
	if _, err := o.Start(ctx, id); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("second Start = %v, want FailedPrecondition", err)
	}
	st, err = o.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateStopped || st.ExitCode != 3 || st.OOMKilled || st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Errorf("Wait = %+v, want stopped, exit 3, times set", st)
	}
	got := readLog(t, logPath)
	for _, want := range []string{"stdout F out", "stderr F err", "stdout P partial"} {
		if !contains(got, want) {
			t.Errorf("log %q lacks record %q", got, want)
		}
	}
	if err := o.Signal(ctx, id, syscall.SIGKILL, runtime.SignalOptions{}); err != nil {
		t.Errorf("Signal on stopped container = %v, want nil", err)
	}
	if err := o.Update(ctx, id, &specs.LinuxResources{}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Update on stopped container = %v, want FailedPrecondition", err)
	}
	shimPid := readPid(filepath.Join(o.dir(id), shim.ShimPidFile))
	if shimPid <= 0 || !alive(shimPid) {
		t.Fatalf("shim pid %d not alive before Delete", shimPid)
	}
	if err := o.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, o, id, shimPid, pid)
	if _, err := o.Status(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Status after Delete = %v, want NotFound", err)
	}
	if err := o.Delete(ctx, id); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestStartFailureLeavesNothing: a container the runtime refuses fails
// its Start with the runtime's message, and nothing of it runs: no shim,
// nothing in the runtime; it is created (never started) again, and
// Delete leaves nothing.
func TestStartFailureLeavesNothing(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	tests := []struct {
		name    string
		spec    func(id string) *specs.Spec
		wantMsg string
	}{
		{
			name:    "missing rootfs",
			spec:    func(id string) *specs.Spec { return testSpec("/nonexistent/rootfs", id, "sh") },
			wantMsg: "/nonexistent/rootfs",
		},
		{
			name:    "missing binary",
			spec:    func(id string) *specs.Spec { return testSpec(rootfs(t), id, "/bin/nope") },
			wantMsg: "nope",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := testID(t)
			ctx := ctxT(t, time.Minute)
			if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: tc.spec(id)}); err != nil {
				t.Fatal(err)
			}
			_, err := o.Start(ctx, id)
			if err == nil {
				o.Delete(context.Background(), id)
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Start error %q does not carry the runtime's message (%q)", err, tc.wantMsg)
			}
			if _, err := o.runtimeState(ctx, id); err == nil {
				t.Errorf("the runtime knows %s after its failed start", id)
			}
			poll.Until(t, time.Minute, "no shim of the failed container", func() (bool, string) {
				shims := shimsOf(id)
				return len(shims) == 0, fmt.Sprint(shims)
			})
			if st, err := o.Status(ctx, id); err != nil || st.State != runtime.StateCreated {
				t.Errorf("Status after a failed start = %+v, %v; want created", st, err)
			}
			if err := o.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			assertGone(t, o, id)
			// The id is free again.
			if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: testSpec(rootfs(t), id, "true")}); err != nil {
				t.Errorf("Create after failure: %v", err)
			}
			if err := o.Delete(context.Background(), id); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestSignal(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	tests := []struct {
		name string
		args []string
		// ready is a file (in the rootfs) the container creates once it
		// is ready for the signal; "" when it is ready at once.
		ready string
		sig   syscall.Signal
		want  int32
	}{
		{"term with handler", []string{"sh", "-c", `trap "exit 7" TERM; : >/tmp/trap-set; while true; do sleep 0.1; done`}, "tmp/trap-set", syscall.SIGTERM, 7},
		{"kill", []string{"sleep", "1000"}, "", syscall.SIGKILL, 137},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := testID(t)
			rfs := rootfs(t)
			create(t, o, id, testSpec(rfs, id, tc.args...), "")
			ctx := ctxT(t, time.Minute)
			if _, err := o.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			if tc.ready != "" {
				waitFile(t, filepath.Join(rfs, tc.ready), time.Minute)
			}
			if err := o.Signal(ctx, id, tc.sig, runtime.SignalOptions{}); err != nil {
				t.Fatal(err)
			}
			st, err := o.Wait(ctx, id)
			if err != nil || st.State != runtime.StateStopped || st.ExitCode != tc.want {
				t.Fatalf("Wait = %+v, %v; want exit %d", st, err, tc.want)
			}
		})
	}
}

func TestExec(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	create(t, o, id, testSpec(rootfs(t), id, "sleep", "1000"), "")
	ctx := ctxT(t, 2*time.Minute)
	if _, err := o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"true"}}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Exec in created container = %v, want FailedPrecondition", err)
	}
	if _, err := o.Start(ctx, id); err != nil {
		t.Fatal(err)
	}

	res, err := o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 5 {
		t.Errorf("Exec = stdout %q stderr %q code %d; want out, err, 5", res.Stdout, res.Stderr, res.ExitCode)
	}

	res, err = o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"sh", "-c", "head -c 100000 /dev/zero"}, MaxOutput: 1000})
	if err != nil || len(res.Stdout) != 1000 || res.ExitCode != 0 {
		t.Errorf("capped Exec = %d bytes, code %d, %v; want 1000 bytes", len(res.Stdout), res.ExitCode, err)
	}

	start := time.Now()
	res, err = o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"sh", "-c", "echo begun; exec sleep 321"}, Timeout: 700 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec with timeout = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timed out Exec took %s", d)
	}
	if string(res.Stdout) != "begun\n" {
		t.Errorf("timed out Exec stdout = %q, want the output so far", res.Stdout)
	}
	ps, err := o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"ps"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ps.Stdout), "sleep 321") {
		t.Errorf("timed out process still runs:\n%s", ps.Stdout)
	}

	if _, err := o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"/bin/nope"}}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Exec of a missing binary = %v, want the runtime's error", err)
	}
}

func memoryCgroup(id string) string {
	return filepath.Join("/sys/fs/cgroup/memory/crin-test", id)
}

func readUint(t *testing.T, path string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestUpdateAndStats(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	spec := testSpec(rootfs(t), id, "sleep", "1000")
	limit := int64(64 << 20)
	spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &limit}
	create(t, o, id, spec, "")
	ctx := ctxT(t, time.Minute)
	if _, err := o.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(memoryCgroup(id), "memory.limit_in_bytes")
	if got := readUint(t, file); got != uint64(limit) {
		t.Fatalf("initial limit %d, want %d", got, limit)
	}
	newLimit := int64(32 << 20)
	if err := o.Update(ctx, id, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &newLimit}}); err != nil {
		t.Fatal(err)
	}
	if got := readUint(t, file); got != uint64(newLimit) {
		t.Errorf("limit after Update %d, want %d", got, newLimit)
	}

	s, err := runtime.CgroupStats(spec.Linux.CgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryUsageBytes == 0 || s.MemoryWorkingSet > s.MemoryUsageBytes || s.PidsCurrent != 1 || s.CPUUsageNanos == 0 {
		t.Errorf("CgroupStats = %+v; want usage > 0, working set <= usage, 1 pid, cpu > 0", s)
	}
	if _, err := runtime.CgroupStats("/crin-test/none-" + id); !errdefs.IsNotFound(err) {
		t.Errorf("CgroupStats of a missing cgroup = %v, want NotFound", err)
	}
}

func TestOOMKilled(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	spec := testSpec(rootfs(t), id, "sh", "-c", "head -c 200m /dev/zero | tail")
	limit := int64(16 << 20)
	mem := &specs.LinuxMemory{Limit: &limit}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
		mem.Swap = &limit
	}
	spec.Linux.Resources.Memory = mem
	create(t, o, id, spec, "")
	ctx := ctxT(t, time.Minute)
	if _, err := o.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err := o.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !st.OOMKilled || st.ExitCode != 137 {
		t.Errorf("Wait = %+v; want OOMKilled, exit 137", st)
	}
	e, err := exitrec.Read(o.dir(id))
	if err != nil || !e.OOMKilled {
		t.Errorf("exit file = %+v, %v; want oom_killed", e, err)
	}
}

func TestShimOutlivesCrind(t *testing.T) {
	o1, e := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	create(t, o1, id, testSpec(rootfs(t), id, "sh", "-c", "sleep 2; exit 9"), "")
	ctx := ctxT(t, time.Minute)
	if _, err := o1.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	shimPid := readPid(filepath.Join(o1.dir(id), shim.ShimPidFile))
	// crind starts the shim itself (no second exec), in a session of
	// its own: nothing sent to crind's session or group reaches it.
	if sid, _ := unix.Getsid(shimPid); sid != shimPid {
		t.Errorf("shim %d is not a session leader (sid %d)", shimPid, sid)
	}

	// "crind" goes away; a new one comes up on the same state.
	o1 = nil
	o2 := e.open(t)
	st, err := o2.Status(ctx, id)
	if err != nil || st.State != runtime.StateRunning {
		t.Fatalf("Status from new backend = %+v, %v; want running", st, err)
	}
	// The container exits while nobody is asking.
	waitFile(t, filepath.Join(o2.dir(id), exitrec.File), time.Minute)
	o3 := e.open(t)
	st, err = o3.Wait(ctx, id)
	if err != nil || st.State != runtime.StateStopped || st.ExitCode != 9 {
		t.Fatalf("Wait from new backend = %+v, %v; want exit 9", st, err)
	}

	// Even with the shim gone, the recorded exit stays.
	if err := syscall.Kill(shimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, fmt.Sprintf("shim %d gone", shimPid), func() (bool, string) {
		return !alive(shimPid), "it still runs"
	})
	st, err = o3.Status(ctx, id)
	if err != nil || st.State != runtime.StateStopped || st.ExitCode != 9 {
		t.Fatalf("Status without shim = %+v, %v; want exit 9", st, err)
	}
	if err := o3.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, o3, id, shimPid)
}

func waitFile(t *testing.T, path string, d time.Duration) {
	t.Helper()
	poll.Until(t, d, path+" exists", func() (bool, string) {
		_, err := os.Stat(path)
		return err == nil, fmt.Sprint(err)
	})
}

func TestReopenLog(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	logPath := filepath.Join(t.TempDir(), "c.log")
	create(t, o, id, testSpec(rootfs(t), id, "sh", "-c", "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.05; done"), logPath)
	ctx := ctxT(t, time.Minute)
	if _, err := o.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	hasRecords := func(path string) func() (bool, string) {
		return func() (bool, string) {
			fi, err := os.Stat(path)
			return err == nil && fi.Size() > 0, fmt.Sprint(err)
		}
	}
	poll.Until(t, time.Minute, "records in the log", hasRecords(logPath))
	rotated := logPath + ".1"
	if err := os.Rename(logPath, rotated); err != nil {
		t.Fatal(err)
	}
	if err := o.ReopenLog(ctx, id); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "records in the reopened log", hasRecords(logPath))
	old, fresh := readLog(t, rotated), readLog(t, logPath)
	if len(old) == 0 || len(fresh) == 0 {
		t.Fatalf("old log %d records, new log %d; want both non-empty", len(old), len(fresh))
	}
	if old[0] != "stdout F line0" {
		t.Errorf("first record %q, want %q", old[0], "stdout F line0")
	}
	n := func(rec string) int { v, _ := strconv.Atoi(strings.TrimPrefix(rec, "stdout F line")); return v }
	if last, first := n(old[len(old)-1]), n(fresh[0]); first != last+1 {
		t.Errorf("records lost or repeated across reopen: old ends at %d, new starts at %d", last, first)
	}
}

func TestPauseAsInit(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	rfs := rootfs(t)
	data, err := os.ReadFile(filepath.Join(binDir, "crin-pause"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rfs, "pause"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	create(t, o, id, testSpec(rfs, id, "/pause"), "")
	ctx := ctxT(t, time.Minute)
	pid, err := o.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Orphans in the pod's PID namespace become pause's children (when
	// Exec returns, their parent sh has exited); pause reaps them once
	// they exit, so none is left as a zombie.
	if _, err := o.Exec(ctx, id, runtime.ExecRequest{Args: []string{"sh", "-c", "sleep 0.2 & sleep 0.2 & exit 0"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "pause's orphaned children reaped", func() (bool, string) {
		c := children(pid)
		return len(c) == 0, fmt.Sprintf("pid:state %v", c)
	})
	if err := o.Signal(ctx, id, syscall.SIGTERM, runtime.SignalOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := o.Wait(ctx, id)
	if err != nil || st.ExitCode != 0 {
		t.Errorf("pause after SIGTERM = %+v, %v; want exit 0", st, err)
	}
}

// children returns the state ("S", "Z", ...) of each child of parent, by
// pid.
func children(parent int) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid == parent {
			out[pid] = f[0]
		}
	}
	return out
}

func TestFeatures(t *testing.T) {
	tests := []struct {
		binary  string
		wantMax string
		hooks   bool
	}{
		{"/usr/sbin/runc", "1.0.2-dev", true},
		{"crun", "1.0.0", false},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.binary), func(t *testing.T) {
			o, _ := newEnv(t, tc.binary)
			f, err := o.Features(ctxT(t, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if f.OCIVersionMin != "1.0.0" || f.OCIVersionMax != tc.wantMax || (len(f.Hooks) > 0) != tc.hooks {
				t.Errorf("Features = %+v; want max %s, hooks %v", f, tc.wantMax, tc.hooks)
			}
		})
	}
}

func TestDeleteRunning(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	for _, start := range []bool{false, true} {
		t.Run(fmt.Sprintf("started=%v", start), func(t *testing.T) {
			id := testID(t)
			ctx := ctxT(t, time.Minute)
			if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: testSpec(rootfs(t), id, "sleep", "1000")}); err != nil {
				t.Fatal(err)
			}
			st, err := o.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if start {
				if _, err := o.Start(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			shimPid := readPid(filepath.Join(o.dir(id), shim.ShimPidFile))
			if err := o.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			assertGone(t, o, id, shimPid, st.Pid)
		})
	}
}

func TestShimOOMScoreAdj(t *testing.T) {
	_, e := newEnv(t, "/usr/sbin/runc")
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := strconv.Atoi(strings.TrimSpace(string(own)))
	tests := []struct {
		name string
		set  int
		want int
	}{
		{"raised", cur + 7, cur + 7},
		// Lowering needs CAP_SYS_RESOURCE; without it the shim keeps
		// its inherited value and the container is still created.
		{"lowering tolerated", -999, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := New(t.Context(), Config{
				Name: "runc", Binary: e.binary, Root: e.root, StateDir: e.stateDir,
				ShimBinary: filepath.Join(binDir, "crin-shim"), OOMScoreAdj: &tc.set,
			})
			if err != nil {
				t.Fatal(err)
			}
			id := testID(t)
			create(t, o, id, testSpec(rootfs(t), id, "sleep", "100"), "")
			if _, err := o.Start(ctxT(t, time.Minute), id); err != nil {
				t.Fatal(err)
			}
			pid := readPid(filepath.Join(o.dir(id), shim.ShimPidFile))
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			want := tc.want
			if want == -1 {
				want = cur
				if hasSysResource() {
					want = tc.set
				}
			}
			if got != want {
				t.Errorf("shim oom_score_adj = %d, want %d", got, want)
			}
		})
	}
}

// hasSysResource reports whether this process may lower oom_score_adj.
func hasSysResource() bool {
	data, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps&(1<<24) != 0
		}
	}
	return false
}

func TestLongStateDir(t *testing.T) {
	base, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	e := env{
		stateDir: filepath.Join(base, strings.Repeat("s", 60), strings.Repeat("t", 40)),
		root:     filepath.Join(base, "root"),
		binary:   "/usr/sbin/runc",
	}
	o := e.open(t)
	id := testID(t) + strings.Repeat("x", 20)
	create(t, o, id, testSpec(rootfs(t), id, "sh", "-c", "exit 4"), "")
	sock := shim.SocketPath(shimDirFor(o.dir(id)))
	if !strings.HasPrefix(sock, shim.ShortSocketDir) {
		t.Fatalf("socket %s not in the short dir", sock)
	}
	ctx := ctxT(t, time.Minute)
	if _, err := o.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err := o.Wait(ctx, id)
	if err != nil || st.ExitCode != 4 {
		t.Fatalf("Wait = %+v, %v; want exit 4", st, err)
	}
	if err := o.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left behind: %v", sock, err)
	}
}

func TestCreateCancelledLeavesNothing(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	// Cancel at several points of Create: before the shim, while it
	// creates, after.
	for _, after := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			id := testID(t)
			ctx, cancel := context.WithCancel(t.Context())
			timer := time.AfterFunc(after, cancel)
			defer timer.Stop()
			err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: testSpec(rootfs(t), id, "sleep", "10")})
			if err == nil {
				if err := o.Delete(context.Background(), id); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled Create = %v, want Canceled", err)
			}
			assertGone(t, o, id)
		})
	}
}

func TestShimFootprint(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	create(t, o, id, testSpec(rootfs(t), id, "sleep", "1000"), filepath.Join(t.TempDir(), "c.log"))
	if _, err := o.Start(ctxT(t, time.Minute), id); err != nil {
		t.Fatal(err)
	}
	pid := readPid(filepath.Join(o.dir(id), shim.ShimPidFile))
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			t.Logf("shim RSS %d kB", kb)
			if kb == 0 || kb > 16<<10 {
				t.Errorf("shim RSS %d kB; want a small process (< 16 MiB)", kb)
			}
		}
	}
}
