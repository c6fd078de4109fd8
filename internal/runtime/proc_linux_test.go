package runtime

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
