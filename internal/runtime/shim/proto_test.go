package shim

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
)

// newTestServer serves a server on a fresh socket; start pretends to start
// the container.
func newTestServer(t *testing.T, start starter) (*ctr, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, SocketFile)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	logw, _ := OpenLog("", LogOptions{})
	s := newCtr(slog.New(slog.DiscardHandler), testID, 1234, start, logw, nil)
	lastPod = servePod(t, l, s)
	return s, sock
}

// lastPod is the pod newTestServer served last (tests do not run in
// parallel).
var lastPod *pod

// testID is the container the test shims serve.
const testID = "c1"

// servePod serves a pod holding the given containers on l until the test
// ends.
func servePod(t *testing.T, l net.Listener, ctrs ...*ctr) *pod {
	t.Helper()
	p := newPod(slog.New(slog.DiscardHandler), nil)
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
	s, sock := newTestServer(t, func() (int, error) { return 1234, nil })

	resp, err := Call(ctx, sock, testID, OpState)
	if err != nil || resp.State != StateCreated || resp.Pid != 1234 {
		t.Fatalf("state = %+v, %v; want created pid 1234", resp, err)
	}
	if _, err := Call(ctx, sock, testID, OpShutdown); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("shutdown of a live container = %v, want FailedPrecondition", err)
	}
	resp, err = Call(ctx, sock, testID, OpStart)
	if err != nil || resp.State != StateRunning || resp.StartedAt.IsZero() {
		t.Fatalf("start = %+v, %v; want running with a start time", resp, err)
	}
	if _, err := Call(ctx, sock, testID, OpStart); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("second start = %v, want FailedPrecondition", err)
	}

	waited := make(chan Response, 1)
	go func() {
		r, err := Call(ctx, sock, testID, OpWait)
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
	s.setExited(Exit{Pid: 1234, ExitCode: 3, FinishedAt: time.Now()})
	select {
	case r := <-waited:
		if r.State != StateStopped || r.Exit == nil || r.Exit.ExitCode != 3 {
			t.Fatalf("wait = %+v, want stopped with exit code 3", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the exit")
	}
	if _, err := Call(ctx, sock, testID, OpShutdown); err != nil {
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
	_, sock := newTestServer(t, func() (int, error) { return 0, errors.New("runc start: boom") })

	_, err := Call(ctx, sock, testID, OpStart)
	if err == nil || errdefs.IsFailedPrecondition(err) {
		t.Fatalf("failed start = %v, want the runtime's error", err)
	}
	resp, _ := Call(ctx, sock, testID, OpState)
	if resp.State != StateCreated || !resp.StartedAt.IsZero() {
		t.Errorf("after failed start state = %+v, want created, no start time", resp)
	}
	if _, err := Call(ctx, sock, testID, "bogus"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("unknown op = %v, want InvalidArgument", err)
	}
	if _, err := Call(ctx, filepath.Join(t.TempDir(), "none.sock"), testID, OpState); !errors.Is(err, ErrShimGone) {
		t.Errorf("call to missing socket = %v, want ErrShimGone", err)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	_, sock := newTestServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Call(ctx, sock, testID, OpWait)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with expiring ctx = %v, want DeadlineExceeded", err)
	}
}
