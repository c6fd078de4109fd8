package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// execInShim runs args in the running container id under the container's
// shim (shim.OpExec): crind writes the process spec, the shim runs
// "<runtime> exec --detach" with stdio it owns, so the process is the
// shim's child, and reports its real exit status. The process never
// outlives the session: when ctx ends, or crind dies, the connection
// closes and the shim kills it. It returns the exit code (-1 with an
// error). A container that is pending, stopped, or has no live shim is
// errdefs.ErrFailedPrecondition; ctx's end is ctx's error.
func (o *Runtime) execInShim(ctx context.Context, id string, args []string, tty bool, streams shim.ExecStreams) (int32, error) {
	dir, err := o.known(id)
	if err != nil {
		return -1, err
	}
	if pending(dir) {
		return -1, fmt.Errorf("exec in container %s: container is %s: %w", id, runtime.StateCreated, errdefs.ErrFailedPrecondition)
	}
	shimDir := shimDirFor(dir)
	if shimDir == "" {
		return -1, fmt.Errorf("exec in container %s: %w: %w", id, errNoShimDir(dir), errdefs.ErrFailedPrecondition)
	}
	// "<runtime> exec" puts the process in the container's cgroups.
	o.primer.prime(func() int { return liveShim(shimDir) })
	proc, err := runtime.ExecProcess(dir, args, tty)
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	opts, cleanup, err := execFiles(dir, proc)
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	defer cleanup()
	opts.TTY = tty
	code, err := shim.Exec(ctx, shim.SocketPath(shimDir), id, opts, streams)
	switch {
	case err == nil:
		return code, nil
	case ctx.Err() != nil:
		return -1, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	case errors.Is(err, shim.ErrShimGone) || errdefs.IsNotFound(err):
		// No shim, or one that does not know it: the container is not
		// running (a stopped one's shim may be gone).
		return -1, fmt.Errorf("exec in container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	return -1, fmt.Errorf("exec in container %s: %w", id, err)
}

// execFiles writes the process spec proc of an exec into the container's
// dir and names the files "<runtime> exec" uses with it (its pid file and
// log beside it); cleanup removes them all (the shim removes them too,
// once the process is gone, should crind die first).
func execFiles(dir string, proc []byte) (shim.ExecOptions, func(), error) {
	f, err := os.CreateTemp(dir, ".exec-*.json")
	if err != nil {
		return shim.ExecOptions{}, nil, err
	}
	base := strings.TrimSuffix(f.Name(), ".json")
	opts := shim.ExecOptions{Process: f.Name(), PidFile: base + ".pid", Log: base + ".log"}
	cleanup := func() {
		for _, p := range []string{opts.Process, opts.PidFile, opts.Log} {
			_ = os.Remove(p)
		}
	}
	_, err = f.Write(proc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return shim.ExecOptions{}, nil, err
	}
	return opts, cleanup, nil
}
