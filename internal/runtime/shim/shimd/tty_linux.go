package shimd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// consoleSocket is where the OCI runtime hands over the master of the
// terminal it made for the container (its --console-socket): it connects
// and sends the descriptor as SCM_RIGHTS.
type consoleSocket struct {
	path string
	l    *net.UnixListener
}

func listenConsole(path string) (*consoleSocket, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("make console socket dir: %w", err)
	}
	_ = os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for the console: %w", err)
	}
	l.SetUnlinkOnClose(true)
	return &consoleSocket{path: path, l: l}, nil
}

// receive accepts the runtime's connection and returns the terminal's
// master, pollable, so reads and writes on it can be interrupted.
func (cs *consoleSocket) receive(timeout time.Duration) (*os.File, error) {
	_ = cs.l.SetDeadline(time.Now().Add(timeout))
	conn, err := cs.l.AcceptUnix()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	buf := make([]byte, 4096) // the runtime sends the terminal's name
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	if len(fds) == 0 {
		return nil, errors.New("no descriptor received")
	}
	for _, fd := range fds[1:] {
		_ = unix.Close(fd)
	}
	fd := fds[0]
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("set terminal non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "console"), nil
}

func (cs *consoleSocket) close() {
	_ = cs.l.Close()
}

// setTerminalSize sets the size of the terminal whose master is f; the
// kernel tells the terminal's foreground process group with SIGWINCH.
func setTerminalSize(f *os.File, width, height uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: width, Row: height})
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("set terminal size %dx%d: %w", width, height, err)
	}
	return nil
}

// sendTerminalEOF types the terminal's end-of-file character (VEOF, ^D
// unless changed) so a reader in canonical mode sees the end of its input.
func sendTerminalEOF(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	eof := byte(4)
	_ = rc.Control(func(fd uintptr) {
		if t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS); err == nil && t.Cc[unix.VEOF] != 0 {
			eof = t.Cc[unix.VEOF]
		}
	})
	if _, err := f.Write([]byte{eof}); err != nil {
		return fmt.Errorf("send terminal end of file: %w", err)
	}
	return nil
}

// hangupReader reads a terminal's master, taking EIO (every process closed
// the terminal) for the end of the output.
type hangupReader struct{ f *os.File }

func (r hangupReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if errors.Is(err, syscall.EIO) {
		return n, io.EOF
	}
	return n, err
}
