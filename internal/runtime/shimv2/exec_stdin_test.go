package shimv2

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"google.golang.org/protobuf/types/known/emptypb"
)

// closeIOTask is a shim's task service that only answers CloseIO, and
// says when it did.
type closeIOTask struct {
	task.TTRPCTaskService
	closed chan struct{}
}

func (f *closeIOTask) CloseIO(context.Context, *task.CloseIORequest) (*emptypb.Empty, error) {
	close(f.closed)
	return &emptypb.Empty{}, nil
}

func relayRuntime() *Runtime {
	return &Runtime{cfg: Config{CallTimeout: 10 * time.Second}, log: slog.New(slog.DiscardHandler)}
}

// TestExecStdinReachesALateReader relays a short input to an exec whose
// shim opens its end of the stdin fifo only later, as containerd's shim
// does in the background after Start. The input and its end must both
// reach that reader. (crind used to hold the fifo read-write, write the
// input and close it: with no other process holding the fifo the kernel
// dropped the input, and the shim's read end then waited for ever.)
func TestExecStdinReachesALateReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stdin")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	fake := &closeIOTask{closed: make(chan struct{})}
	stop := relayRuntime().relayExecInput(context.Background(), &conn{task: fake}, "c1", "e1", p, execIO{stdin: strings.NewReader("hello\n")})
	defer stop()
	// Nothing may be written and closed before a reader exists.
	select {
	case <-fake.closed:
		t.Fatal("input relayed and closed before the shim opened its end: it was lost")
	case <-time.After(200 * time.Millisecond):
	}
	rd, err := os.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got, err := io.ReadAll(rd) // until every writer closed
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello\n" {
		t.Errorf("the shim read %q, want %q", got, "hello\n")
	}
	select {
	case <-fake.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("CloseIO never sent after the input ended")
	}
}

// TestExecStdinStopWithoutReader ends a session whose shim never opened
// its end of the stdin fifo: stop returns, and the relay's open with it.
func TestExecStdinStopWithoutReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stdin")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	fake := &closeIOTask{closed: make(chan struct{})}
	pr, pw := io.Pipe() // a client that never sends or closes its input
	defer pw.Close()
	stop := relayRuntime().relayExecInput(context.Background(), &conn{task: fake}, "c1", "e1", p, execIO{stdin: pr})
	done := make(chan struct{})
	go func() {
		stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("stop did not return while the relay waited for a reader")
	}
	// Stopped before any input: nothing relayed, no CloseIO.
	select {
	case <-fake.closed:
		t.Error("CloseIO sent for a session stopped before its shim read")
	default:
	}
}
