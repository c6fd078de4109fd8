package shimd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/test/poll"

	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitUntil waits until cond holds (poll.Until, with a deadline a loaded
// machine meets).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, what, func() (bool, string) { return cond(), "" })
}

func TestAttach(t *testing.T) {
	s, sock := newTestServer(t)
	var stdout, stderr syncBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- shim.Attach(context.Background(), sock, testID, shim.AttachStreams{Stdout: &stdout, Stderr: &stderr})
	}()
	waitUntil(t, "the client to subscribe", func() bool {
		s.fan.mu.Lock()
		defer s.fan.mu.Unlock()
		return len(s.fan.subs) == 1
	})
	big := strings.Repeat("x", shim.MaxFrame+10) // more than one frame
	_, _ = s.fan.writer(shim.FrameStdout).Write([]byte("out1\n"))
	_, _ = s.fan.writer(shim.FrameStderr).Write([]byte("err1\n"))
	_, _ = s.fan.writer(shim.FrameStdout).Write([]byte(big))
	waitUntil(t, "the output", func() bool { return len(stdout.String()) == 5+len(big) && stderr.String() == "err1\n" })
	if !strings.HasPrefix(stdout.String(), "out1\n") {
		t.Errorf("stdout starts %q", stdout.String()[:10])
	}
	// The end of the output ends the attachment without error.
	s.fan.close()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("shim.Attach after the output ended = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("shim.Attach did not return after the output ended")
	}

	s.setExited(exitrec.Exit{Pid: 1234})
	if err := shim.Attach(context.Background(), sock, testID, shim.AttachStreams{}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("shim.Attach to an exited container = %v, want FailedPrecondition", err)
	}
}

func TestAttachLagged(t *testing.T) {
	f := newFanout()
	sub, ok := f.subscribe()
	if !ok {
		t.Fatal("subscribe refused")
	}
	for range attachQueue + 1 {
		_, _ = f.writer(shim.FrameStdout).Write([]byte("x"))
	}
	n := 0
	for range sub.ch {
		n++
	}
	if n != attachQueue || !f.wasLagged(sub) {
		t.Errorf("lagging client got %d frames, lagged %v; want %d and cut off", n, f.wasLagged(sub), attachQueue)
	}
	f.close()
	if _, ok := f.subscribe(); ok {
		t.Error("subscribe after close succeeded")
	}
}

func TestAttachCancel(t *testing.T) {
	_, sock := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := shim.Attach(ctx, sock, testID, shim.AttachStreams{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("shim.Attach with an expiring ctx = %v, want DeadlineExceeded", err)
	}
}
