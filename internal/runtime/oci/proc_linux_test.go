package oci

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/test/poll"
)

// orphan starts a sleep of secs seconds that is not the test's child (its
// shell parent exits at once), like a shim is not crind's, and returns its
// pid.
func orphan(t *testing.T, secs string) int {
	t.Helper()
	out, err := exec.Command("sh", "-c", "sleep "+secs+" </dev/null >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	if !alive(pid) {
		t.Fatalf("sleep %d is not running", pid)
	}
	return pid
}

func TestWaitGoneWakesOnExit(t *testing.T) {
	pid := orphan(t, "0.3")
	if gone, ok := waitPidfd(context.Background(), pid, 10*time.Second); !ok {
		t.Skip("no pidfd on this kernel")
	} else if !gone {
		t.Fatalf("waitPidfd(%d) = not gone, want gone", pid)
	}
	if alive(pid) {
		t.Fatalf("waitPidfd returned while %d is alive", pid)
	}
	// The poll fallback would need up to pollGoneEvery more: time one
	// exit against it. A short sleep shows the wake-up, not the deadline.
	pid = orphan(t, "0.2")
	start := time.Now()
	if !waitGone(context.Background(), pid, 10*time.Second) {
		t.Fatalf("waitGone(%d) = false, want true", pid)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waitGone took %s for a 0.2s sleep", d)
	}
	if !waitGone(context.Background(), pid, time.Second) {
		t.Errorf("waitGone of a gone pid = false, want true")
	}
}

func TestWaitGoneDeadlineAndCancel(t *testing.T) {
	pid := orphan(t, "30")
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })

	start := time.Now()
	if waitGone(context.Background(), pid, 100*time.Millisecond) {
		t.Fatalf("waitGone(%d, 100ms) = true while it runs", pid)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Errorf("waitGone with a 100ms limit took %s", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	if waitGone(ctx, pid, time.Minute) {
		t.Fatalf("waitGone(%d) = true after cancel while it runs", pid)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("waitGone returned %s after start, want soon after the 100ms cancel", d)
	}
}

// TestZombieExit: a killed process that nobody reaped yet still tells how
// it ended.
func TestZombieExit(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, ok := zombieExit(pid); ok {
		t.Fatal("zombieExit of a running process says it ended")
	}
	if err := unix.Kill(pid, unix.SIGPIPE); err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	poll.Until(t, 30*time.Second, "the killed process to be a zombie", func() (bool, string) {
		var ok bool
		ws, ok = zombieExit(pid)
		return ok, "not a zombie yet"
	})
	if !ws.Signaled() || ws.Signal() != unix.SIGPIPE {
		t.Errorf("zombieExit(%d) = %v, want killed by SIGPIPE", pid, ws)
	}
	if code, sig := exitCode(ws); code != 141 || sig != int(unix.SIGPIPE) {
		t.Errorf("exitCode = %d, %d, want 141, 13", code, sig)
	}
}

func TestIsShimOf(t *testing.T) {
	// The shell keeps its own argv: "-dir" and the dir are in its cmdline.
	cmd := exec.Command("sh", "-c", "sleep 30; true", "-dir", "/state/c/abc")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	// Until the child has exec'd, its cmdline is the test binary's.
	poll.Until(t, time.Minute, fmt.Sprintf("child %d exec'd sh", pid), func() (bool, string) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return bytes.Contains(b, []byte("-dir\x00")), fmt.Sprintf("cmdline %q", b)
	})
	tests := []struct {
		dir  string
		want bool
	}{
		{"/state/c/abc", true},
		{"/state/c/abc/", true},
		{"/state/c/other", false},
	}
	for _, tc := range tests {
		if got := isShimOf(pid, tc.dir); got != tc.want {
			t.Errorf("isShimOf(%d, %q) = %v, want %v", pid, tc.dir, got, tc.want)
		}
	}
}

// TestReapChildHoldsNoThread: children reaped by reapChild are waited for
// together in the poller, not each in a blocking wait on a thread of its
// own nor in a goroutine of its own, and are reaped (gone from /proc, not
// zombies) once they exit.
func TestReapChildHoldsNoThread(t *testing.T) {
	threads := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	const n = 20
	before := threads()
	goroutines := goruntime.NumGoroutine()
	var procs []*os.Process
	for range n {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd.Process)
		reapChild(cmd.Process)
	}
	pids := make([]int, 0, n)
	for _, p := range procs {
		pids = append(pids, p.Pid)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	})
	// Give blocking waits, if any, the time to take their threads.
	time.Sleep(100 * time.Millisecond)
	if grown := threads() - before; grown >= n/2 {
		t.Errorf("%d children being waited for took %d more threads", n, grown)
	}
	if grown := goruntime.NumGoroutine() - goroutines; grown >= n/2 {
		t.Errorf("%d children being waited for took %d more goroutines", n, grown)
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	poll.Until(t, 30*time.Second, "the children to be reaped", func() (bool, string) {
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				return false, fmt.Sprintf("pid %d is still there (unreaped)", pid)
			}
		}
		return true, ""
	})
}

// TestReapChildZombie: a child that exited before reapChild saw it is
// reaped all the same, and the reaper goes on reaping the next ones.
func TestReapChildZombie(t *testing.T) {
	for i := range 3 {
		cmd := exec.Command("true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		poll.Until(t, 30*time.Second, "the child to exit", func() (bool, string) {
			_, zombie := zombieExit(pid)
			return zombie, fmt.Sprintf("child %d (pid %d) is not a zombie yet", i, pid)
		})
		reapChild(cmd.Process)
		poll.Until(t, 30*time.Second, "the zombie to be reaped", func() (bool, string) {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			return err != nil, fmt.Sprintf("pid %d is still there (unreaped)", pid)
		})
	}
}
