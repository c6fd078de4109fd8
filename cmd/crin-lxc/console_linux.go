package main

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// sendConsole makes a pseudo-terminal, sends its master to the console
// socket at path (as runc does: the terminal's name, the fd in
// SCM_RIGHTS) and returns the slave, the process's stdio. The terminal
// is one of the host's: liblxc has no way to make it in the container's
// devpts before the process starts.
func sendConsole(path string) (*os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open a terminal: %w", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		return nil, fmt.Errorf("name the terminal: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	slave, err := os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the terminal: %w", err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err == nil {
		_, _, err = conn.WriteMsgUnix([]byte(name), unix.UnixRights(int(master.Fd())), nil)
		conn.Close()
	}
	if err != nil {
		slave.Close()
		return nil, fmt.Errorf("send the terminal to %s: %w", path, err)
	}
	return slave, nil
}

// useTerminal makes t this process's stdin, stdout and stderr, for a
// child to inherit.
func useTerminal(t *os.File) error {
	for fd := 0; fd < 3; fd++ {
		if err := unix.Dup2(int(t.Fd()), fd); err != nil {
			return fmt.Errorf("terminal as fd %d: %w", fd, err)
		}
	}
	return t.Close()
}
