package shimv2

import (
	"context"
	"os"
	"path/filepath"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// teardown deletes the task, stops a shim nobody else uses, stops the
// output copiers and removes the bundle. Errors are logged: it is the
// last step of Delete and of a failed Create.
func (r *Runtime) teardown(ctx context.Context, id, dir string, m meta) {
	if b := bundleMeta(dir); m.Address == "" || m.Address == b.Address {
		m.Address = b.Address
		if m.ShimPid <= 0 {
			m.ShimPid = b.ShimPid
		}
	}
	if m.Address != "" {
		if c, err := r.conn(ctx, m.Address); err == nil {
			cctx, cancel := r.callCtx(ctx)
			// The shim now serving the address: not the one recorded at
			// create when that one died and a later container's start
			// made another for the pod. stopShim waits for this one.
			if cr, err := c.task.Connect(cctx, &task.ConnectRequest{ID: id}); err == nil && cr.GetShimPid() > 0 {
				m.ShimPid = int(cr.GetShimPid())
			}
			_, err := c.task.Delete(cctx, &task.DeleteRequest{ID: id})
			if err = fromShim(err); err != nil && !errdefs.IsNotFound(err) {
				r.log.WarnContext(ctx, "delete task", "container_id", id, "error", err)
			}
			if !r.sharedShim(id, m.Address) {
				// The runc shim exits on Shutdown only once it has no task.
				if _, err := c.task.Shutdown(cctx, &task.ShutdownRequest{ID: id}); err != nil && !isClosed(err) {
					r.log.WarnContext(ctx, "shut shim down", "container_id", id, "error", err)
				}
			}
			cancel()
		}
		if !r.sharedShim(id, m.Address) {
			r.stopShim(ctx, m)
		}
	}
	stopLogger(ctx, dir)
	r.closeShimLog(id)
	if err := os.RemoveAll(dir); err != nil {
		r.log.WarnContext(ctx, "remove container state", "container_id", id, "error", err)
	}
	r.releaseSharedState(ctx)
}

// releaseSharedState unmounts the runtime's shared state (sharedState)
// once no container of this backend is left. A create racing with it
// loses only the shortcut: runsc makes the namespace again.
func (r *Runtime) releaseSharedState(ctx context.Context) {
	if r.sharedState == "" {
		return
	}
	if ids, err := r.List(ctx); err != nil || len(ids) > 0 {
		return
	}
	// Creates are not serialized in runsc, so mounts may be stacked.
	for range 16 {
		if unix.Unmount(r.sharedState, unix.MNT_DETACH) != nil {
			return
		}
	}
}

// sharedShim reports whether a container other than id uses the shim at
// address (a pod's shim outlives its first container).
func (r *Runtime) sharedShim(id, address string) bool {
	ents, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name() == id || !e.IsDir() {
			continue
		}
		if m, err := readMeta(filepath.Join(r.cfg.StateDir, e.Name())); err == nil && m.Address == address {
			return true
		}
	}
	return false
}
