package shim

import (
	"errors"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper collects every child of the shim: the container's init (which
// becomes the shim's child because the shim is a child subreaper), the
// runtime processes the shim starts, and orphans reparented to it. Nothing
// in the shim may use exec.Cmd.Wait once the reaper runs.
type reaper struct {
	sigs chan os.Signal
	done chan struct{}
	wg   sync.WaitGroup

	// mu guards waiters; it is held across starting a process and
	// registering it, so an exit is never dispatched before its waiter.
	mu      sync.Mutex
	waiters map[int]func(unix.WaitStatus)
}

func newReaper() *reaper {
	r := &reaper{
		sigs:    make(chan os.Signal, 8),
		done:    make(chan struct{}),
		waiters: make(map[int]func(unix.WaitStatus)),
	}
	signal.Notify(r.sigs, unix.SIGCHLD)
	return r
}

// watch registers fn for the exit of pid, a process that is already the
// shim's child (or will be once it is reparented).
func (r *reaper) watch(pid int, fn func(unix.WaitStatus)) {
	r.mu.Lock()
	r.waiters[pid] = fn
	r.mu.Unlock()
}

// spawn starts argv with stdio on /dev/null and returns a channel that
// receives its wait status.
func (r *reaper) spawn(argv []string, dir string) (int, <-chan unix.WaitStatus, error) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, nil, err
	}
	defer null.Close()
	ch := make(chan unix.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Dir: dir, Files: []*os.File{null, null, null}})
	if err != nil {
		return 0, nil, err
	}
	r.waiters[p.Pid] = func(ws unix.WaitStatus) { ch <- ws }
	_ = p.Release()
	return p.Pid, ch, nil
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
		r.mu.Unlock()
		if fn != nil {
			fn(ws)
		}
	}
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
