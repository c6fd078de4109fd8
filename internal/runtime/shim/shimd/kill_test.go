package shimd

import (
	"errors"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// TestKill: the shim signals a container's init through its pidfd; it
// leaves "all" of a container without a PID namespace of its own, and a
// container it has no pidfd for, to the runtime; an exited one is not an
// error.
func TestKill(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Skipf("no pidfd: %v", err)
	}
	c := newCtr(slog.New(slog.DiscardHandler), "c1", cmd.Process.Pid, time.Now(), nil, nil)
	c.pidfd = fd
	t.Cleanup(c.closePidfd)

	if err := c.kill(int(unix.SIGKILL), true); !errors.Is(err, shim.ErrUnsupported) {
		t.Errorf("kill --all of a container sharing a PID namespace = %v, want ErrUnsupported", err)
	}
	c.privatePID = true
	if err := c.kill(int(unix.SIGKILL), true); err != nil {
		t.Fatalf("kill = %v", err)
	}
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the init was not killed")
	}
	// Reaped: the pidfd reports the process gone, which is no error.
	if err := c.kill(int(unix.SIGTERM), false); err != nil {
		t.Errorf("kill of a reaped init = %v, want nil", err)
	}
	c.setExited(exitrec.Exit{Pid: cmd.Process.Pid, FinishedAt: time.Now()})
	c.closePidfd()
	if err := c.kill(int(unix.SIGKILL), false); err != nil {
		t.Errorf("kill of an exited container = %v, want nil", err)
	}
	noFD := newCtr(slog.New(slog.DiscardHandler), "c2", 1, time.Now(), nil, nil)
	if err := noFD.kill(int(unix.SIGTERM), false); !errors.Is(err, shim.ErrUnsupported) {
		t.Errorf("kill without a pidfd = %v, want ErrUnsupported", err)
	}
}
