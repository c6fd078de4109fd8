package cri

import (
	"context"
	"slices"
)

// rootfsOwnerLister is an image store that can list the containers that
// hold a rootfs, an image volume or a rootfs dir in it (image.Service).
type rootfsOwnerLister interface {
	RootfsOwners() ([]string, error)
}

// sweepDirs removes what a crind killed in the middle of a create or a
// remove left on disk for pods and containers no record owns: container
// rootfs (upper dirs, leases and image volumes, through the image store,
// whose own start-up removed unrecorded layers, blobs and downloads), pod
// dirs (<root>/pods/<id>), unpacked checkpoints (<root>/restore/<id>) and runtime state dirs (<state>/c/<id>,
// <state>/c/.pod-<id>). It runs after the sweeps of mounts and shims, so no
// mount or shim of theirs is left; a dir that still has a mount below it
// is left alone and logged. Names that are not of crind's form are left
// alone and logged too: crind cannot tell whose they are.
func (r *recovery) sweepDirs(ctx context.Context) {
	owned, err := r.recordedIDs()
	if err != nil {
		r.log.WarnContext(ctx, "sweep dirs: read the records", "error", err)
		return
	}
	r.sweepRootfs(ctx, owned)
	r.env.SweepPodDirs(ctx, owned)
	if r.rootDir != "" {
		r.env.SweepIDDirs(ctx, r.ckpt.RestoreDirs(), owned)
	}
	var done []string
	for _, rt := range r.runtimes {
		if l, ok := rt.(stateDirLister); ok && !slices.Contains(done, l.StateDir()) {
			done = append(done, l.StateDir())
			r.env.SweepIDDirs(ctx, l.StateDir(), owned)
		}
	}
}

// recordedIDs returns a func reporting whether an id is a pod or
// container crind knows or has a record of: a record whose recovery
// failed (and so is not in memory) still owns its files.
func (r *recovery) recordedIDs() (func(string) bool, error) {
	sbs, err := r.store.Sandboxes()
	if err != nil {
		return nil, err
	}
	cs, err := r.store.Containers()
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool, len(sbs)+len(cs))
	for _, r := range sbs {
		ids[r.ID] = true
	}
	for _, r := range cs {
		ids[r.ID] = true
	}
	return func(id string) bool { return ids[id] || r.hub.knownID(id) }, nil
}

// sweepRootfs releases the rootfs of containers no record owns.
func (r *recovery) sweepRootfs(ctx context.Context, owned func(string) bool) {
	l, ok := r.images.(rootfsOwnerLister)
	if !ok {
		return
	}
	ids, err := l.RootfsOwners()
	if err != nil {
		r.log.WarnContext(ctx, "sweep rootfs", "error", err)
		return
	}
	for _, id := range ids {
		if owned(id) {
			continue
		}
		if !isID(id) {
			r.log.WarnContext(ctx, "left alone a rootfs whose name is no crind id", "name", id)
			continue
		}
		if err := r.images.ReleaseRootfs(ctx, id); err != nil {
			r.log.WarnContext(ctx, "release the rootfs of a container no record owns", "container_id", id, "error", err)
			continue
		}
		r.log.InfoContext(ctx, "released the rootfs of a container no record owns", "container_id", id)
	}
}
