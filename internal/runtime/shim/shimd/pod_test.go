package shimd

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// TestPodShim drives one shim's container set through the protocol with
// a creator that makes no process: routing by id, refusals, and the shim
// exiting after its last container.
func TestPodShim(t *testing.T) {
	ctx := context.Background()
	made := map[string]*ctr{}
	create := func(id string, o shim.CreateOptions) (*ctr, error) {
		if id == "bad" {
			return nil, errors.New("runc create: boom")
		}
		logw, _ := crilog.Open("", crilog.Options{})
		c := newCtr(slog.New(slog.DiscardHandler), id, 100+len(made), time.Now(), logw, nil)
		made[id] = c
		return c, nil
	}
	l, sock := listenTemp(t)
	p := servePod(t, l, create)
	mk := func(id string) (shim.Response, error) {
		return shim.Do(ctx, sock, shim.Request{Op: shim.OpCreate, ID: id, Create: &shim.CreateOptions{Bundle: "/b/" + id}})
	}

	if _, err := mk("a"); err != nil {
		t.Fatalf("create a: %v", err)
	}
	if resp, err := mk("b"); err != nil || resp.Pid != 101 {
		t.Fatalf("create b = %+v, %v; want pid 101", resp, err)
	}
	refusals := []struct {
		name string
		req  shim.Request
		is   func(error) bool
	}{
		{"same id", shim.Request{Op: shim.OpCreate, ID: "a", Create: &shim.CreateOptions{Bundle: "/b/a"}}, errdefs.IsAlreadyExists},
		{"no options", shim.Request{Op: shim.OpCreate, ID: "c"}, errdefs.IsInvalidArgument},
		{"relative bundle", shim.Request{Op: shim.OpCreate, ID: "c", Create: &shim.CreateOptions{Bundle: "b"}}, errdefs.IsInvalidArgument},
		{"path in id", shim.Request{Op: shim.OpCreate, ID: "../c", Create: &shim.CreateOptions{Bundle: "/b"}}, errdefs.IsInvalidArgument},
		{"no id", shim.Request{Op: shim.OpState}, errdefs.IsInvalidArgument},
		{"unknown id", shim.Request{Op: shim.OpState, ID: "zz"}, errdefs.IsNotFound},
		{"delete running", shim.Request{Op: shim.OpDelete, ID: "a"}, errdefs.IsFailedPrecondition},
		{"shutdown with live containers", shim.Request{Op: shim.OpShutdown}, errdefs.IsFailedPrecondition},
		{"release with containers", shim.Request{Op: shim.OpRelease}, errdefs.IsFailedPrecondition},
	}
	for _, r := range refusals {
		if _, err := shim.Do(ctx, sock, r.req); !r.is(err) {
			t.Errorf("%s: %v, want another class", r.name, err)
		}
	}
	// A failed create with other containers left keeps the shim.
	if resp, err := mk("bad"); err == nil || resp.ShimExiting {
		t.Errorf("failed create = %+v, %v; want the error, shim staying", resp, err)
	}
	// Requests reach the container they name.
	made["b"].setExited(exitrec.Exit{Pid: 101, FinishedAt: time.Now()})
	for id, want := range map[string]string{"a": shim.StateRunning, "b": shim.StateStopped} {
		if resp, err := shim.Call(ctx, sock, id, shim.OpState); err != nil || resp.State != want {
			t.Errorf("state of %s = %+v, %v; want %s", id, resp, err, want)
		}
	}

	for i, id := range []string{"a", "b"} {
		made[id].setExited(exitrec.Exit{Pid: 100 + i, FinishedAt: time.Now()})
		close(made[id].deleted)
		resp, err := shim.Call(ctx, sock, id, shim.OpDelete)
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
	if _, err := mk("c"); !errors.Is(err, shim.ErrShimExiting) {
		t.Errorf("create on an exiting shim = %v, want shim.ErrShimExiting", err)
	}
}

// TestPodShimFirstCreateFails: a shim whose only create failed exits.
func TestPodShimFirstCreateFails(t *testing.T) {
	p := newPod(slog.New(slog.DiscardHandler), func(string, shim.CreateOptions) (*ctr, error) {
		return nil, errors.New("runc create: boom")
	})
	resp := p.createOp(shim.Request{Op: shim.OpCreate, ID: "a", Create: &shim.CreateOptions{Bundle: "/b"}})
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
	resp := p.createOp(shim.Request{Op: shim.OpCreate, ID: "a", Create: &shim.CreateOptions{Bundle: "/b"}})
	if resp.Code != shim.CodeShimExiting {
		t.Errorf("create after idle exit = %+v, want refused as exiting", resp)
	}
}

// TestPodShimRelease: a shim started ahead of its pod's first container
// exits when released empty, and refuses creates from then on.
func TestPodShimRelease(t *testing.T) {
	ctx := context.Background()
	l, sock := listenTemp(t)
	p := servePod(t, l, nil)
	resp, err := shim.Do(ctx, sock, shim.Request{Op: shim.OpRelease})
	if err != nil || !resp.ShimExiting {
		t.Fatalf("release = %+v, %v; want the shim exiting", resp, err)
	}
	select {
	case <-p.quit:
	case <-time.After(10 * time.Second):
		t.Fatal("a released shim did not quit")
	}
	if resp := p.createOp(shim.Request{Op: shim.OpCreate, ID: "a", Create: &shim.CreateOptions{Bundle: "/b"}}); resp.Code != shim.CodeShimExiting {
		t.Errorf("create after release = %+v, want refused as exiting", resp)
	}
}
