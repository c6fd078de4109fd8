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
func (s *Service) sweepDirs(ctx context.Context) {
	owned, err := s.recordedIDs()
	if err != nil {
		s.log.WarnContext(ctx, "sweep dirs: read the records", "error", err)
		return
	}
	s.sweepRootfs(ctx, owned)
	s.env.SweepPodDirs(ctx, owned)
	if s.opts.RootDir != "" {
		s.env.SweepIDDirs(ctx, s.ckpt.RestoreDirs(), owned)
	}
	var done []string
	for _, rt := range s.opts.Runtimes {
		if l, ok := rt.(stateDirLister); ok && !slices.Contains(done, l.StateDir()) {
			done = append(done, l.StateDir())
			s.env.SweepIDDirs(ctx, l.StateDir(), owned)
		}
	}
}

// recordedIDs returns a func reporting whether an id is a pod or
// container crind knows or has a record of: a record whose recovery
// failed (and so is not in memory) still owns its files.
func (s *Service) recordedIDs() (func(string) bool, error) {
	sbs, err := s.opts.Store.Sandboxes()
	if err != nil {
		return nil, err
	}
	cs, err := s.opts.Store.Containers()
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
	return func(id string) bool { return ids[id] || s.knownID(id) }, nil
}

// sweepRootfs releases the rootfs of containers no record owns.
func (s *Service) sweepRootfs(ctx context.Context, owned func(string) bool) {
	l, ok := s.opts.Images.(rootfsOwnerLister)
	if !ok {
		return
	}
	ids, err := l.RootfsOwners()
	if err != nil {
		s.log.WarnContext(ctx, "sweep rootfs", "error", err)
		return
	}
	for _, id := range ids {
		if owned(id) {
			continue
		}
		if !isID(id) {
			s.log.WarnContext(ctx, "left alone a rootfs whose name is no crind id", "name", id)
			continue
		}
		if err := s.opts.Images.ReleaseRootfs(ctx, id); err != nil {
			s.log.WarnContext(ctx, "release the rootfs of a container no record owns", "container_id", id, "error", err)
			continue
		}
		s.log.InfoContext(ctx, "released the rootfs of a container no record owns", "container_id", id)
	}
}
