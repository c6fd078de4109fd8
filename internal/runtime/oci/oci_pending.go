package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/internal/trace"
)

// The oci backend's containers that were created but never started: a
// bundle the runtime does not know yet, until Start has the pod's shim run
// it (docs/state-machines.md).

// createFile, in a container's state dir, holds the shim.CreateOptions its
// Start sends.
const createFile = "create.json"

// pending reports whether the container in dir was created but never
// started: the runtime does not know it, no shim has taken it (a shim
// writes the container's shim.pid when it takes it, and removes it again
// when the runtime refused it).
func pending(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, createFile)); err != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, shim.ShimPidFile))
	return errors.Is(err, fs.ErrNotExist)
}

// startLocks are per-container locks that Start holds while a pending
// container becomes a running one, and that Signal takes to decide
// whether the container is pending. Without them a SIGKILL that came
// while Start waited for the pod's shim was recorded as the kill of a
// container that never started (signalPending), the start then ran it
// all the same, and the container ran under its shim with an exit on
// record: nothing killed it, and its shim, which counts it, never exited.
type startLocks struct {
	mu    sync.Mutex
	locks map[string]*startLock
}

type startLock struct {
	token chan struct{} // holds one value while locked
	users int           // holders and waiters; guarded by startLocks.mu
}

// lock locks id's lock and returns its unlock, or ctx's error when ctx
// ends first.
func (l *startLocks) lock(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[string]*startLock)
	}
	k := l.locks[id]
	if k == nil {
		k = &startLock{token: make(chan struct{}, 1)}
		l.locks[id] = k
	}
	k.users++
	l.mu.Unlock()
	select {
	case k.token <- struct{}{}:
		return func() {
			<-k.token
			l.release(id, k)
		}, nil
	case <-ctx.Done():
		l.release(id, k)
		return nil, ctx.Err()
	}
}

func (l *startLocks) release(id string, k *startLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.users--; k.users == 0 {
		delete(l.locks, id)
	}
}

// users is how many hold or wait for id's lock (tests watch it).
func (l *startLocks) users(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.locks[id]; k != nil {
		return k.users
	}
	return 0
}

// startPending has the pod's shim create and start the pending container
// in dir; on error nothing of it runs and it is pending again. The
// caller holds id's start lock.
func (o *Runtime) startPending(ctx context.Context, id, dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, createFile))
	if err != nil {
		return 0, err
	}
	var opts shim.CreateOptions
	if err := json.Unmarshal(data, &opts); err != nil {
		return 0, fmt.Errorf("decode %s: %w", createFile, err)
	}
	opts.Bundle = dir
	shimDir := shimDirFor(dir)
	if shimDir == "" {
		return 0, errNoShimDir(dir)
	}
	if o.beforeShimStart != nil {
		o.beforeShimStart(id)
	}
	resp, err := o.createInShim(ctx, id, shimDir, opts)
	if err == nil {
		// The phase trace of the StartContainer call: crind's side and
		// the way to the shim, the shim's own work, the runtime's own
		// command.
		run := time.Duration(resp.RuntimeNanos)
		trace.Split(ctx, "shim_call", trace.Phase{Name: "shim_work", D: time.Duration(resp.HandleNanos) - run},
			trace.Phase{Name: "runtime_run", D: run})
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		o.rollbackStart(rctx, id, dir, shimDir)
		return 0, err
	}
	return resp.Pid, nil
}

// rollbackStart undoes a failed or cancelled start of a pending
// container: it is deleted from the runtime and the shim drops it; its
// bundle stays, pending again.
func (o *Runtime) rollbackStart(ctx context.Context, id, dir, shimDir string) {
	if _, err := o.run(ctx, runOpts{}, "delete", "--force", id); err != nil && !isRuntimeNotExist(err) {
		o.log.WarnContext(ctx, "rollback start: runtime delete", "container_id", id, "error", err)
	}
	if pid := readPid(filepath.Join(dir, shim.ShimPidFile)); pid > 0 && alive(pid) && isShimOf(pid, shimDir) {
		// The delete above killed the container; once the shim recorded
		// that, it lets go of it.
		deadline := time.Now().Add(deleteStopWait)
		for {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := shim.Do(sctx, shim.SocketPath(shimDir), shim.Request{Op: shim.OpDelete, ID: id})
			cancel()
			if resp.ShimExiting {
				o.stopShim(ctx, pid)
			}
			if err == nil || !errdefs.IsFailedPrecondition(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, f := range []string{shim.ShimPidFile, exitrec.File, shim.InitPidFile} {
		_ = os.Remove(filepath.Join(dir, f))
	}
}

// signalPending "signals" a container the runtime does not know yet:
// SIGKILL records it as killed (exit 137) so it never starts; other
// signals have nothing to reach. The caller holds id's start lock, so no
// start is under way.
func (o *Runtime) signalPending(id, dir string, sig syscall.Signal) error {
	if sig != syscall.SIGKILL {
		return nil
	}
	if _, err := exitrec.Read(dir); err == nil {
		return nil
	}
	e := exitrec.Exit{ExitCode: 128 + int32(sig), Signal: int(sig), FinishedAt: time.Now()}
	if err := exitrec.Write(dir, e); err != nil {
		return fmt.Errorf("signal container %s: %w", id, err)
	}
	return nil
}
