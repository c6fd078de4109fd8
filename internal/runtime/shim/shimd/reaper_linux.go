package shimd

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// unclaimedKeep is how long the reaper keeps the status of a child that
// nobody watched yet: a container's init can exit and be reaped between
// "<runtime> create" returning and the shim calling watch.
const unclaimedKeep = time.Minute

// reaper collects every child of the shim: the containers' inits (which
// become the shim's children because the shim is a child subreaper), the
// runtime processes the shim starts, and orphans reparented to it. Nothing
// in the shim may use exec.Cmd.Wait: the reaper runs for the shim's whole
// life.
type reaper struct {
	sigs chan os.Signal
	done chan struct{}
	wg   sync.WaitGroup

	// mu guards waiters and unclaimed; it is held across starting a
	// process and registering it, so an exit is never dispatched before
	// its waiter.
	mu      sync.Mutex
	waiters map[int]func(unix.WaitStatus)
	// unclaimed holds the statuses of children reaped before anyone
	// watched them, for unclaimedKeep.
	unclaimed map[int]reaped
}

type reaped struct {
	ws unix.WaitStatus
	at time.Time
}

func newReaper() *reaper {
	r := &reaper{
		sigs:      make(chan os.Signal, 8),
		done:      make(chan struct{}),
		waiters:   make(map[int]func(unix.WaitStatus)),
		unclaimed: make(map[int]reaped),
	}
	signal.Notify(r.sigs, unix.SIGCHLD)
	return r
}

// watch registers fn for the exit of pid, a process that is the shim's
// child (or will be once it is reparented) and that was started after
// since. When pid was already reaped after since, fn runs at once; a
// status kept from before since was an earlier process's with the same
// pid, and is dropped.
func (r *reaper) watch(pid int, since time.Time, fn func(unix.WaitStatus)) {
	r.mu.Lock()
	if st, ok := r.unclaimed[pid]; ok {
		delete(r.unclaimed, pid)
		if !st.at.Before(since) {
			r.mu.Unlock()
			fn(st.ws)
			return
		}
	}
	r.waiters[pid] = fn
	r.mu.Unlock()
}

// spawn starts argv with files as its stdin, stdout and stderr (nil ones
// on /dev/null) and returns a channel that receives its wait status.
func (r *reaper) spawn(argv []string, dir string, files ...*os.File) (int, <-chan unix.WaitStatus, error) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, nil, err
	}
	defer null.Close()
	stdio := []*os.File{null, null, null}
	for i, f := range files {
		if f != nil && i < len(stdio) {
			stdio[i] = f
		}
	}
	ch := make(chan unix.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Dir: dir, Files: stdio})
	if err != nil {
		return 0, nil, err
	}
	r.waiters[p.Pid] = func(ws unix.WaitStatus) { ch <- ws }
	// A status kept for an earlier process with this pid is stale.
	delete(r.unclaimed, p.Pid)
	_ = p.Release()
	return p.Pid, ch, nil
}

// runFor runs argv like spawn and waits for it, killing it when timeout
// passes first.
func (r *reaper) runFor(timeout time.Duration, argv []string, dir string, files ...*os.File) (unix.WaitStatus, error) {
	pid, done, err := r.spawn(argv, dir, files...)
	if err != nil {
		return 0, fmt.Errorf("run %s: %w", argv[0], err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ws := <-done:
		return ws, nil
	case <-t.C:
		_ = unix.Kill(pid, unix.SIGKILL)
		<-done
		return 0, fmt.Errorf("%s: timed out after %s", filepath.Base(argv[0]), timeout)
	}
}

// run reaps children until stop is called.
func (r *reaper) run() {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.sweep()
		for {
			select {
			case <-r.done:
				return
			case <-r.sigs:
				r.sweep()
			}
		}
	}()
}

func (r *reaper) sweep() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		fn := r.waiters[pid]
		delete(r.waiters, pid)
		if fn == nil {
			r.keepUnclaimed(pid, ws)
		}
		r.mu.Unlock()
		if fn != nil {
			fn(ws)
		}
	}
}

// keepUnclaimed remembers the status of pid, which nobody watched, and
// forgets those older than unclaimedKeep. r.mu is held.
func (r *reaper) keepUnclaimed(pid int, ws unix.WaitStatus) {
	now := time.Now()
	for p, st := range r.unclaimed {
		if now.Sub(st.at) > unclaimedKeep {
			delete(r.unclaimed, p)
		}
	}
	r.unclaimed[pid] = reaped{ws: ws, at: now}
}

func (r *reaper) stop() {
	signal.Stop(r.sigs)
	close(r.done)
	r.wg.Wait()
}

// exitCode is the shell convention: the status, or 128+signal.
func exitCode(ws unix.WaitStatus) (code int32, sig int) {
	if ws.Signaled() {
		return 128 + int32(ws.Signal()), int(ws.Signal())
	}
	return int32(ws.ExitStatus()), 0
}
