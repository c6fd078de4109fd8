//go:build integration

package oci

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/test/poll"
)

// lockedWriter is a buffer safe for a writer and a reader.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestAttachTerminal runs a shell on a terminal, with a state dir too long
// for the console socket to live in it: the shim receives the terminal
// from runc, forwards an attach's input and resize to it, and the shell's
// output comes back. (crun refuses this host's hybrid cgroup setup, so it
// is not tried here.)
func TestAttachTerminal(t *testing.T) {
	for _, binary := range []string{"/usr/sbin/runc"} {
		t.Run(filepath.Base(binary), func(t *testing.T) {
			base, err := os.MkdirTemp("", "crin")
			if err != nil {
				t.Fatal(err)
			}
			// A cleanup, not a defer: it must run after the Delete below
			// (cleanups run last-registered first, after the defers), or
			// the shim would lose its dir and outlive the test.
			t.Cleanup(func() { _ = os.RemoveAll(base) })
			e := env{
				stateDir: filepath.Join(base, strings.Repeat("s", 60), strings.Repeat("t", 40)),
				root:     filepath.Join(base, "root"),
				binary:   binary,
			}
			o := e.open(t)
			id := testID(t) + strings.Repeat("x", 20)
			rfs := rootfs(t)
			for _, applet := range []string{"stty", "tr"} {
				if err := os.Symlink("busybox", filepath.Join(rfs, "bin", applet)); err != nil {
					t.Fatal(err)
				}
			}
			spec := testSpec(rfs, id, "sh")
			spec.Version = "1.0.2" // what every runtime here accepts
			spec.Process.Terminal = true
			spec.Mounts = append(spec.Mounts, specs.Mount{
				Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"},
			})
			ctx := ctxT(t, 2*time.Minute)
			if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: spec, Stdin: true}); err != nil {
				t.Fatalf("Create: %v", err)
			}
			// Not t.Context(): it is cancelled before cleanups run.
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := o.Delete(ctx, id); err != nil {
					t.Errorf("Delete: %v", err)
				}
			})
			if console := shim.ConsoleSocketPath(o.dir(id)); !strings.HasPrefix(console, shim.ShortSocketDir) {
				t.Errorf("console socket %s not in the short dir", console)
			} else if _, err := os.Stat(console); err == nil {
				t.Errorf("console socket %s left after create", console)
			}
			if _, err := o.Start(ctx, id); err != nil {
				t.Fatal(err)
			}

			inr, inw := io.Pipe()
			defer inw.Close()
			var out lockedWriter
			sizes := make(chan runtime.TerminalSize, 1)
			sizes <- runtime.TerminalSize{Width: 77, Height: 21}
			done := make(chan error, 1)
			go func() { done <- o.Attach(ctx, id, runtime.AttachRequest{Stdin: inr, Stdout: &out, Resize: sizes}) }()
			// Type until the shell answers: the attach may not be set
			// up when the first line is written.
			poll.Until(t, time.Minute, "the shell answers", func() (bool, string) {
				if strings.Contains(out.String(), "size-21x77") {
					return true, ""
				}
				_, _ = io.WriteString(inw, "echo size-$(stty size | tr ' ' x)\n")
				return false, fmt.Sprintf("output %q", out.String())
			})
			_, _ = io.WriteString(inw, "exit 7\n")
			st, err := o.Wait(ctx, id)
			if err != nil || st.ExitCode != 7 {
				t.Fatalf("Wait = %+v, %v; want exit 7", st, err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Attach = %v, want nil once the container exited", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Attach did not return after the container exited")
			}
		})
	}
}
