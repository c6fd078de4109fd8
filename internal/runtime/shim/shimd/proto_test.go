package shimd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// newTestServer serves a pod holding one running container, testID, on a
// fresh socket.
func newTestServer(t *testing.T) (*ctr, string) {
	t.Helper()
	return serveCtr(t, nil)
}

// serveCtr serves a pod holding one running container, testID, whose
// input is in, on a fresh socket.
func serveCtr(t *testing.T, in *stdio) (*ctr, string) {
	t.Helper()
	l, sock := listenTemp(t)
	logw, _ := crilog.Open("", crilog.Options{})
	s := newCtr(slog.New(slog.DiscardHandler), testID, 1234, time.Now(), logw, in)
	lastPod = servePod(t, l, nil, s)
	return s, sock
}

// listenTemp listens on a socket in a fresh dir (short enough for a unix
// socket address, unlike t.TempDir's).
func listenTemp(t *testing.T) (net.Listener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, shim.SocketFile)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return l, sock
}

// lastPod is the pod newTestServer served last (tests do not run in
// parallel).
var lastPod *pod

// testID is the container the test shims serve.
const testID = "c1"

// servePod serves a pod holding the given containers, and creating new
// ones with create, on l until the test ends.
func servePod(t *testing.T, l net.Listener, create creator, ctrs ...*ctr) *pod {
	t.Helper()
	p := newPod(slog.New(slog.DiscardHandler), create)
	for _, c := range ctrs {
		p.ctrs[c.id] = c
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.serve(l)
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	return p
}

func TestProtocolLifecycle(t *testing.T) {
	ctx := context.Background()
	s, sock := newTestServer(t)

	resp, err := shim.Call(ctx, sock, testID, shim.OpState)
	if err != nil || resp.State != shim.StateRunning || resp.Pid != 1234 || resp.StartedAt.IsZero() {
		t.Fatalf("state = %+v, %v; want running, pid 1234, with a start time", resp, err)
	}
	if _, err := shim.Call(ctx, sock, testID, shim.OpShutdown); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("shutdown of a live container = %v, want FailedPrecondition", err)
	}
	// "start" was the op of containers created without starting them.
	if _, err := shim.Call(ctx, sock, testID, "start"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("start = %v, want InvalidArgument (no such op)", err)
	}

	waited := make(chan shim.Response, 1)
	go func() {
		r, err := shim.Call(ctx, sock, testID, shim.OpWait)
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	select {
	case r := <-waited:
		t.Fatalf("wait returned before the exit: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	s.setExited(exitrec.Exit{Pid: 1234, ExitCode: 3, FinishedAt: time.Now()})
	select {
	case r := <-waited:
		if r.State != shim.StateStopped || r.Exit == nil || r.Exit.ExitCode != 3 {
			t.Fatalf("wait = %+v, want stopped with exit code 3", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the exit")
	}
	if _, err := shim.Call(ctx, sock, testID, shim.OpShutdown); err != nil {
		t.Fatalf("shutdown after exit: %v", err)
	}
	select {
	case <-lastPod.quit:
	case <-time.After(time.Second):
		t.Fatal("shutdown did not stop the server")
	}
}

func TestProtocolErrors(t *testing.T) {
	ctx := context.Background()
	_, sock := newTestServer(t)

	if _, err := shim.Call(ctx, sock, testID, "bogus"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("unknown op = %v, want InvalidArgument", err)
	}
	if _, err := shim.Call(ctx, filepath.Join(t.TempDir(), "none.sock"), testID, shim.OpState); !errors.Is(err, shim.ErrShimGone) {
		t.Errorf("call to missing socket = %v, want shim.ErrShimGone", err)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	_, sock := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := shim.Call(ctx, sock, testID, shim.OpWait)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with expiring ctx = %v, want DeadlineExceeded", err)
	}
}
