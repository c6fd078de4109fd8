package shim

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// TestPodShim drives one shim's container set through the protocol with
// a creator that makes no process: routing by id, refusals, and the shim
// exiting after its last container.
func TestPodShim(t *testing.T) {
	ctx := context.Background()
	made := map[string]*ctr{}
	create := func(id string, o CreateOptions) (*ctr, error) {
		if id == "bad" {
			return nil, errors.New("runc create: boom")
		}
		logw, _ := OpenLog("", LogOptions{})
		c := newCtr(slog.New(slog.DiscardHandler), id, 100+len(made), func() (int, error) { return 0, nil }, logw, nil)
		made[id] = c
		return c, nil
	}
	p := newPod(slog.New(slog.DiscardHandler), create)
	sock := filepath.Join(t.TempDir(), SocketFile)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
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
	mk := func(id string) (Response, error) {
		return Do(ctx, sock, Request{Op: OpCreate, ID: id, Create: &CreateOptions{Bundle: "/b/" + id}})
	}

	if _, err := mk("a"); err != nil {
		t.Fatalf("create a: %v", err)
	}
	if resp, err := mk("b"); err != nil || resp.Pid != 101 {
		t.Fatalf("create b = %+v, %v; want pid 101", resp, err)
	}
	refusals := []struct {
		name string
		req  Request
		is   func(error) bool
	}{
		{"same id", Request{Op: OpCreate, ID: "a", Create: &CreateOptions{Bundle: "/b/a"}}, errdefs.IsAlreadyExists},
		{"no options", Request{Op: OpCreate, ID: "c"}, errdefs.IsInvalidArgument},
		{"relative bundle", Request{Op: OpCreate, ID: "c", Create: &CreateOptions{Bundle: "b"}}, errdefs.IsInvalidArgument},
		{"path in id", Request{Op: OpCreate, ID: "../c", Create: &CreateOptions{Bundle: "/b"}}, errdefs.IsInvalidArgument},
		{"no id", Request{Op: OpState}, errdefs.IsInvalidArgument},
		{"unknown id", Request{Op: OpState, ID: "zz"}, errdefs.IsNotFound},
		{"delete running", Request{Op: OpDelete, ID: "a"}, errdefs.IsFailedPrecondition},
		{"shutdown with live containers", Request{Op: OpShutdown}, errdefs.IsFailedPrecondition},
	}
	for _, r := range refusals {
		if _, err := Do(ctx, sock, r.req); !r.is(err) {
			t.Errorf("%s: %v, want another class", r.name, err)
		}
	}
	// A failed create with other containers left keeps the shim.
	if resp, err := mk("bad"); err == nil || resp.ShimExiting {
		t.Errorf("failed create = %+v, %v; want the error, shim staying", resp, err)
	}
	// Requests reach the container they name.
	if _, err := Call(ctx, sock, "b", OpStart); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"a": StateCreated, "b": StateRunning} {
		if resp, err := Call(ctx, sock, id, OpState); err != nil || resp.State != want {
			t.Errorf("state of %s = %+v, %v; want %s", id, resp, err, want)
		}
	}

	for i, id := range []string{"a", "b"} {
		made[id].setExited(Exit{Pid: 100 + i, FinishedAt: time.Now()})
		close(made[id].deleted)
		resp, err := Call(ctx, sock, id, OpDelete)
		if err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if last := i == 1; resp.ShimExiting != last {
			t.Errorf("delete %s: shim exiting = %v, want %v", id, resp.ShimExiting, last)
		}
	}
	select {
	case <-p.quit:
	case <-time.After(5 * time.Second):
		t.Fatal("the shim did not quit after its last container")
	}
	if _, err := mk("c"); !errors.Is(err, ErrShimExiting) {
		t.Errorf("create on an exiting shim = %v, want ErrShimExiting", err)
	}
}

// TestPodShimFirstCreateFails: a shim whose only create failed exits.
func TestPodShimFirstCreateFails(t *testing.T) {
	p := newPod(slog.New(slog.DiscardHandler), func(string, CreateOptions) (*ctr, error) {
		return nil, errors.New("runc create: boom")
	})
	resp := p.createOp(Request{Op: OpCreate, ID: "a", Create: &CreateOptions{Bundle: "/b"}})
	if resp.Error == "" || !resp.ShimExiting {
		t.Errorf("first create = %+v, want its error and the shim exiting", resp)
	}
}

// TestPodShimIdle: a shim never asked for a container exits by itself.
func TestPodShimIdle(t *testing.T) {
	p := newPod(slog.New(slog.DiscardHandler), nil)
	p.exitWhenIdle(10 * time.Millisecond)
	select {
	case <-p.quit:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle shim did not exit")
	}
	resp := p.createOp(Request{Op: OpCreate, ID: "a", Create: &CreateOptions{Bundle: "/b"}})
	if resp.Code != CodeShimExiting {
		t.Errorf("create after idle exit = %+v, want refused as exiting", resp)
	}
}
