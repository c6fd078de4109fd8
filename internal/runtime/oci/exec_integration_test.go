//go:build integration

package oci

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/test/poll"
)

// TestExecTerminal runs an interactive shell on a terminal through the
// container's shim, with a state dir too long for the exec's console
// socket to live in it: input typed reaches it, a resize reaches its
// terminal, its exit code comes back, and the exec leaves no file
// behind.
func TestExecTerminal(t *testing.T) {
	base, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	// A cleanup, not a defer: it must run after the Delete below.
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	e := env{
		stateDir: filepath.Join(base, strings.Repeat("s", 60), strings.Repeat("t", 40)),
		root:     filepath.Join(base, "root"),
		binary:   "/usr/sbin/runc",
	}
	o := e.open(t)
	id := testID(t) + strings.Repeat("x", 20)
	rfs := rootfs(t)
	for _, applet := range []string{"stty", "tr"} {
		if err := os.Symlink("busybox", filepath.Join(rfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	spec := testSpec(rfs, id, "sleep", "1000")
	spec.Version = "1.0.2"
	spec.Mounts = append(spec.Mounts, specs.Mount{
		Destination: "/dev/pts", Type: "devpts", Source: "devpts",
		Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"},
	})
	ctx := ctxT(t, 2*time.Minute)
	if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: spec}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := o.Delete(ctx, id); err != nil {
			t.Errorf("Delete: %v", err)
		}
	})
	if _, err := o.ExecStream(ctx, id, runtime.StreamExecRequest{Args: []string{"true"}, Stdout: io.Discard}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("ExecStream in a created container = %v, want FailedPrecondition", err)
	}
	if _, err := o.Start(ctx, id); err != nil {
		t.Fatal(err)
	}

	inr, inw := io.Pipe()
	defer inw.Close()
	var out lockedWriter
	sizes := make(chan runtime.TerminalSize, 1)
	sizes <- runtime.TerminalSize{Width: 66, Height: 19}
	type result struct {
		code int32
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := o.ExecStream(ctx, id, runtime.StreamExecRequest{Args: []string{"sh"}, TTY: true, Stdin: inr, Stdout: &out, Resize: sizes})
		// Typing into a session that ended fails instead of blocking.
		inr.CloseWithError(fmt.Errorf("exec ended: %d, %v", code, err))
		done <- result{code, err}
	}()
	poll.Until(t, time.Minute, "the shell answers", func() (bool, string) {
		if strings.Contains(out.String(), "size-19x66") {
			return true, ""
		}
		if _, err := io.WriteString(inw, "echo size-$(stty size | tr ' ' x)\n"); err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("output %q", out.String())
	})
	_, _ = io.WriteString(inw, "exit 9\n")
	select {
	case r := <-done:
		if r.err != nil || r.code != 9 {
			t.Errorf("ExecStream = %d, %v; want exit 9", r.code, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ExecStream did not return after the shell exited")
	}
	left, _ := filepath.Glob(filepath.Join(o.dir(id), ".exec-*"))
	if len(left) > 0 {
		t.Errorf("exec files left: %v", left)
	}
}
