package shimd

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// newStdioServer serves a created container whose input is in.
func newStdioServer(t *testing.T, in *stdio) (*ctr, string) {
	t.Helper()
	s, sock := serveCtr(t, in)
	t.Cleanup(func() { // before servePod's: it waits for the sessions
		s.fan.close()
		in.release()
	})
	return s, sock
}

// attachAsync runs shim.Attach on a goroutine; the channel gets its result.
func attachAsync(sock string, streams shim.AttachStreams) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- shim.Attach(context.Background(), sock, testID, streams) }()
	return errc
}

func waitSubs(t *testing.T, s *ctr, n int) {
	t.Helper()
	waitUntil(t, strconv.Itoa(n)+" attached clients", func() bool {
		s.fan.mu.Lock()
		defer s.fan.mu.Unlock()
		return len(s.fan.subs) == n
	})
}

// readAll reads r on a goroutine into buf until EOF; the channel gets
// everything it read then.
func readAll(r io.Reader, buf *syncBuffer) <-chan string {
	c := make(chan string, 1)
	go func() {
		_, _ = io.Copy(buf, r)
		c <- buf.String()
	}()
	return c
}

func recv[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestAttachStdin feeds two sessions' input to a container's stdin pipe:
// the end of a session's input leaves the container's stdin open.
func TestAttachStdin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, sock := newStdioServer(t, &stdio{in: w})
	got := readAll(r, &syncBuffer{})

	var out1, out2 syncBuffer
	in1r, in1w := io.Pipe()
	e1 := attachAsync(sock, shim.AttachStreams{Stdin: in1r, Stdout: &out1})
	e2 := attachAsync(sock, shim.AttachStreams{Stdin: strings.NewReader("two\n"), Stdout: &out2})
	waitSubs(t, s, 2)
	_, _ = io.WriteString(in1w, "one\n")
	in1w.Close()
	// Both sessions see the output.
	_, _ = s.fan.writer(shim.FrameStdout).Write([]byte("echo\n"))
	waitUntil(t, "both clients to see the output", func() bool {
		return out1.String() == "echo\n" && out2.String() == "echo\n"
	})
	s.fan.close()
	for _, e := range []<-chan error{e1, e2} {
		if err := recv(t, "attach to end", e); err != nil {
			t.Errorf("shim.Attach = %v", err)
		}
	}
	// Neither session's end closed the container's stdin.
	s.stdio.mu.Lock()
	closed := s.stdio.closed
	s.stdio.mu.Unlock()
	if closed {
		t.Error("container stdin closed without stdin_once")
	}
	s.stdio.release()
	in := recv(t, "the container's stdin to end", got)
	if !strings.Contains(in, "one\n") || !strings.Contains(in, "two\n") || len(in) != 8 {
		t.Errorf("container read %q, want one\\n and two\\n", in)
	}
}

// TestAttachStdinOnce: the first session with stdin gets it and its end
// closes the container's stdin; a later session's input goes nowhere.
func TestAttachStdinOnce(t *testing.T) {
	tests := []struct {
		name string
		// end ends the first session: its stdin reaches EOF, or the
		// client goes away while its stdin is still open.
		endByDisconnect bool
	}{
		{name: "stdin eof"},
		{name: "client gone", endByDisconnect: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s, sock := newStdioServer(t, &stdio{in: w, once: true})
			var read syncBuffer
			got := readAll(r, &read)

			// An output-only session does not claim stdin.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			quiet := make(chan error, 1)
			go func() { quiet <- shim.Attach(ctx, sock, testID, shim.AttachStreams{Stdout: io.Discard}) }()
			waitSubs(t, s, 1)

			inr, inw := io.Pipe()
			ctx1, cancel1 := context.WithCancel(context.Background())
			defer cancel1()
			first := make(chan error, 1)
			go func() { first <- shim.Attach(ctx1, sock, testID, shim.AttachStreams{Stdin: inr, Stdout: io.Discard}) }()
			waitSubs(t, s, 2)
			_, _ = io.WriteString(inw, "hello\n")
			waitUntil(t, "the input to reach the container", func() bool { return read.String() == "hello\n" })
			if tc.endByDisconnect {
				cancel1()
			} else {
				inw.Close()
			}
			if in := recv(t, "the container's stdin to end", got); in != "hello\n" {
				t.Errorf("container read %q, want hello", in)
			}
			inw.Close()
			cancel1()
			recv(t, "the first attach to end", first)

			// A later session is answered without stdin.
			sess, _ := s.stdio.session(true)
			if sess {
				t.Error("a session after stdin_once's got stdin")
			}
			cancel()
			if err := recv(t, "the output-only attach to end", quiet); !errors.Is(err, context.Canceled) {
				t.Errorf("output-only shim.Attach = %v, want Canceled", err)
			}
		})
	}
}

// openTerminal opens a pseudo-terminal pair: the master pollable as the
// runtime hands it to the shim, and the slave as the container has it.
func openTerminal(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	master = os.NewFile(uintptr(fd), "ptmx")
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		master.Close()
		slave.Close()
	})
	return master, slave
}

// terminalStdio is what the shim makes of a container on a terminal.
func terminalStdio(master *os.File, once bool) *stdio {
	c := &created{term: master}
	return c.stdio(ctrConfig{CreateOptions: shim.CreateOptions{Stdin: true, StdinOnce: once, TTY: true}})
}

// TestAttachTerminal: input reaches the terminal, a resize sets its size,
// and stdin_once ends the terminal's input with its EOF character.
func TestAttachTerminal(t *testing.T) {
	master, slave := openTerminal(t)
	s, sock := newStdioServer(t, terminalStdio(master, true))

	inr, inw := io.Pipe()
	sizes := make(chan shim.TerminalSize, 1)
	sizes <- shim.TerminalSize{Width: 91, Height: 27}
	errc := attachAsync(sock, shim.AttachStreams{Stdin: inr, Stdout: io.Discard, Resize: sizes})
	waitSubs(t, s, 1)
	waitUntil(t, "the terminal size", func() bool {
		ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
		return err == nil && ws.Col == 91 && ws.Row == 27
	})

	// The container reads the line, then the end of its input: a
	// canonical-mode read returning nothing.
	lines := make(chan string, 4)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := slave.Read(buf)
			lines <- string(buf[:n])
			if n == 0 || err != nil {
				return
			}
		}
	}()
	_, _ = io.WriteString(inw, "hello\n")
	if l := recv(t, "a line on the terminal", lines); l != "hello\n" {
		t.Errorf("terminal read %q, want hello", l)
	}
	inw.Close()
	if l := recv(t, "the end of the terminal's input", lines); l != "" {
		t.Errorf("terminal read %q after stdin_once's end, want end of file", l)
	}
	s.fan.close()
	if err := recv(t, "attach to end", errc); err != nil {
		t.Errorf("shim.Attach = %v", err)
	}
}

// TestAttachOldClient: a client that sends nothing after its request (as
// before stdin existed) is an output-only session.
func TestAttachOldClient(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, sock := newStdioServer(t, &stdio{in: w, once: true})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(`{"op":"attach","id":"c1"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	waitSubs(t, s, 1)
	c.Close()
	waitSubs(t, s, 0)
	if got, _ := s.stdio.session(true); !got {
		t.Error("an output-only session used up stdin_once")
	}
}

// TestAttachStdinOnceBlocked: a stdin_once client leaves while its input
// is stuck on a container that reads none. Once the container reads, it
// gets what the shim had taken from the client, then the end of its stdin.
func TestAttachStdinOnceBlocked(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, sock := newStdioServer(t, &stdio{in: w, once: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inr, inw := io.Pipe()
	defer inw.Close()
	errc := make(chan error, 1)
	go func() { errc <- shim.Attach(ctx, sock, testID, shim.AttachStreams{Stdin: inr, Stdout: io.Discard}) }()
	waitSubs(t, s, 1)
	// More than a pipe holds, written in the background: the shim's
	// write blocks once the pipe is full.
	go func() { _, _ = inw.Write(make([]byte, 4<<20)) }()
	waitUntil(t, "the pipe to fill", func() bool {
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ)
		return err == nil && n >= 64<<10
	})
	cancel()
	recv(t, "the attach to end", errc)
	var read syncBuffer
	got := recv(t, "the container's stdin to end", readAll(r, &read))
	if len(got) < 64<<10 {
		t.Errorf("container read %d bytes, want at least the full pipe's", len(got))
	}
	waitSubs(t, s, 0)
}
