package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// reapChild reaps child p (a shim crind started) once it exits. All
// children wait in one goroutine, parked in Go's poller on an epoll set of
// their pidfds: a goroutine each would cost its stack (8 KiB or more) for
// as long as each pod runs, and a blocking wait each an OS thread (with
// its stacks, about 50 KiB). Without pidfds it falls back to a blocking
// wait. p stays the caller's (to read its Pid, to Kill it: its own handle
// is a pidfd, so a kill after the reaping reaches no other process); Go
// closes that handle once p is unreachable.
func reapChild(p *os.Process) {
	r, err := childReaper()
	if err == nil {
		err = r.add(p.Pid)
	}
	if err != nil {
		go func() { _, _ = p.Wait() }()
	}
}

// reaper reaps the children whose pidfds are in its epoll set.
type reaper struct {
	ep      int         // the epoll set, in Go's poller; never closed
	stopped atomic.Bool // the wait failed: nothing reaps the set any more
}

// childReaper is the process's reaper, started on first use.
var childReaper = sync.OnceValues(func() (*reaper, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking, so that os.NewFile hands it to the poller: an epoll
	// set is readable while any of its fds is.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, err
	}
	f := os.NewFile(uintptr(ep), "reaper")
	rc, err := f.SyscallConn()
	if err == nil {
		// A file the poller did not take refuses deadlines.
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &reaper{ep: ep}
	go func() {
		events := make([]unix.EpollEvent, 16)
		err := rc.Read(func(fd uintptr) bool {
			reapReady(int(fd), events)
			return false // park until the set is readable again
		})
		// Only a closed or broken poller gets here. ep stays open (f is
		// kept) so that its number is never another file's. Later
		// children are reaped each by a wait of their own; those
		// already in the set stay zombies until crind exits.
		r.stopped.Store(true)
		slog.Error("shim reaper stopped", "error", err)
		goruntime.KeepAlive(f)
	}()
	return r, nil
})

// add puts child pid in the set. An exit before this is still seen: the
// pidfd of a zombie is readable.
func (r *reaper) add(pid int) error {
	if r.stopped.Load() {
		return errors.New("shim reaper stopped")
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return err
	}
	return nil
}

// reapReady reaps every child of epoll set ep that has exited, until none
// is left ready.
func reapReady(ep int, events []unix.EpollEvent) {
	for {
		n, err := unix.EpollWait(ep, events, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			// Readable: the child exited, so this does not block.
			_ = unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED|unix.WNOHANG, nil)
			_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil)
			unix.Close(fd)
		}
	}
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
