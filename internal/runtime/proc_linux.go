package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// pollGoneEvery is how often waitGone looks at /proc when it cannot sleep
// on a pidfd.
const pollGoneEvery = 20 * time.Millisecond

// alive reports whether pid runs (a zombie counts as gone: its reaper may
// not be us).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	return data[i+2] != 'Z' && data[i+2] != 'X'
}

// waitGone waits until pid is gone, for at most d or until ctx ends; it
// reports success. pid need not be our child: it sleeps on a pidfd, which
// the kernel makes readable when the process exits, so a shim that exits
// at once is seen at once; without pidfds (Linux before 5.10) it polls
// /proc.
func waitGone(ctx context.Context, pid int, d time.Duration) bool {
	if !alive(pid) {
		return true
	}
	if gone, ok := waitPidfd(ctx, pid, d); ok {
		return gone
	}
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(pollGoneEvery)
	}
	return true
}

// waitPidfd is waitGone on a pidfd in Go's poller. ok is false when pidfds
// cannot be used here and the caller must poll.
func waitPidfd(ctx context.Context, pid int, d time.Duration) (gone, ok bool) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return true, true
	}
	if err != nil {
		return false, false
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false, false
	}
	// A file the poller does not take refuses deadlines.
	if err := f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false, false
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	// The pidfd was registered with the poller when it was opened, so an
	// exit after this first look still wakes the wait below.
	err = rc.Read(func(uintptr) bool { return !alive(pid) })
	return err == nil, true
}

// reapChild reaps child p (a shim crind started) once it exits. It waits
// parked in Go's poller on a pidfd, not in a blocking wait: that would
// hold an OS thread (with its stacks, about 50 KiB) for as long as each
// pod runs. Without a pollable pidfd it falls back to the blocking wait.
// p stays the caller's (to read its Pid, to Kill it: its own handle is a
// pidfd, so a kill after the reaping reaches no other process); Go closes
// that handle once p is unreachable.
func reapChild(p *os.Process) {
	fd, err := unix.PidfdOpen(p.Pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		go func() { _, _ = p.Wait() }()
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		go func() { _, _ = p.Wait() }()
		return
	}
	go func() {
		defer f.Close()
		// Registered with the poller when opened: an exit before the
		// first look still wakes the wait.
		_ = rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 0); err == nil && n == 0 {
				return false // still running
			}
			_ = unix.Waitid(unix.P_PIDFD, int(fd), nil, unix.WEXITED, nil)
			return true
		})
	}()
}

// zombieExit reads how a zombie pid ended (its wait status, from
// /proc/<pid>/stat) if the process is still a zombie nobody reaped yet.
func zombieExit(pid int) (unix.WaitStatus, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) || data[i+2] != 'Z' {
		return 0, false
	}
	// Field 52 (exit_code) is the last; the fields after the command
	// name start at field 3.
	f := bytes.Fields(data[i+1:])
	if len(f) < 50 {
		return 0, false
	}
	v, err := strconv.Atoi(string(f[49]))
	if err != nil {
		return 0, false
	}
	return unix.WaitStatus(v), true
}

// isShimOf reports whether pid is the crin-shim that serves dir: its
// command line carries "-dir <dir>". A pid file can outlive its process
// and the number can be reused by anything.
func isShimOf(pid int, dir string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(data), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-dir" && filepath.Clean(args[i+1]) == filepath.Clean(dir) {
			return true
		}
	}
	return false
}
