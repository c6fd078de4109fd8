package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// restoreArchiveMax caps what a checkpoint archive may unpack to.
const restoreArchiveMax = 32 << 30

// restoreDir is where the checkpoint archive container id is restored
// from is unpacked, from its CreateContainer until it is removed (the
// start-up sweep removes the dirs of containers no record owns).
func (s *Service) restoreDir(id string) string { return filepath.Join(s.opts.RootDir, "restore", id) }

// removeRestoreDir removes the checkpoint container id was restored from
// (a failure is logged: the start-up sweep removes it later).
func (s *Service) removeRestoreDir(ctx context.Context, id string) {
	if s.opts.RootDir == "" {
		return
	}
	if err := os.RemoveAll(s.restoreDir(id)); err != nil {
		s.log.WarnContext(ctx, "remove the checkpoint a container was restored from", "container_id", id, "error", err)
	}
}

// restoreImages is the dir of CRIU images container rec is restored from;
// "" for a container run afresh.
func restoreImages(rec *store.Container) string {
	if rec.RestoreFrom == "" {
		return ""
	}
	return filepath.Join(rec.RestoreFrom, checkpoint.ImagesDir)
}

// createImage finds the image of a container to create. An absolute path
// in config.image.image names a checkpoint archive (as CRI-O takes it):
// where restoring is enabled, it is unpacked into restoreDir(id). A
// container RestorePod makes names its checkpoint's dir in from, which is
// linked (or copied) into restoreDir(id). A restored container's image is
// the one the checkpointed container ran, which must be on the node; the
// restore dir is returned too.
func (s *Service) createImage(ctx context.Context, id string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime, from string, undo *rollback) (*image.Image, string, error) {
	ref := cfg.GetImage().GetImage()
	if from == "" && !filepath.IsAbs(ref) {
		img, err := s.opts.Images.Get(ref)
		if err != nil {
			return nil, "", fmt.Errorf("config.image.image %q: %w", ref, err)
		}
		return img, "", nil
	}
	dir := s.restoreDir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, "", err
	}
	if from != "" {
		ref = from
		undo.add("remove restore dir", func(context.Context) error { return os.RemoveAll(dir) })
		if err := checkpoint.CopyDir(from, dir, true); err != nil {
			return nil, "", fmt.Errorf("copy the checkpoint of container %q from %s: %w", cfg.GetMetadata().GetName(), from, err)
		}
	} else if err := s.unpackArchive(ctx, ref, dir, cfg, rt, undo); err != nil {
		return nil, "", err
	}
	ck, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return nil, "", fmt.Errorf("config.image.image %q: not a checkpoint: %w", ref, err)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpoint.ImagesDir, checkpoint.InventoryFile)); err != nil {
		return nil, "", fmt.Errorf("config.image.image %q: the checkpoint holds no CRIU images: %w", ref, errdefs.ErrInvalidArgument)
	}
	img, err := s.checkpointedImage(ck)
	if err != nil {
		return nil, "", fmt.Errorf("config.image.image %q: %w", ref, err)
	}
	return img, dir, nil
}

// checkpointedImage is the image the container checkpointed in ck ran.
func (s *Service) checkpointedImage(ck checkpoint.ContainerConfig) (*image.Image, error) {
	img, err := s.opts.Images.Get(ck.RootfsImageRef)
	if err != nil && ck.RootfsImageName != "" {
		img, err = s.opts.Images.Get(ck.RootfsImageName)
	}
	if err != nil {
		return nil, fmt.Errorf("the checkpointed container ran image %s (%s), which is not on this node: pull it first: %w",
			ck.RootfsImageName, ck.RootfsImageRef, errdefs.ErrFailedPrecondition)
	}
	return img, nil
}

// unpackArchive unpacks the checkpoint archive at path into dir, once
// checkRestore allows it.
func (s *Service) unpackArchive(ctx context.Context, path, dir string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime, undo *rollback) error {
	if err := s.checkRestore(ctx, path, cfg, rt); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	undo.add("remove restore dir", func(context.Context) error { return os.RemoveAll(dir) })
	if err := checkpoint.Extract(path, dir, restoreArchiveMax); err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) && !errdefs.IsResourceExhausted(err) && !errdefs.IsInvalidArgument(err) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument) // not a tar
		}
		return fmt.Errorf("config.image.image %q: unpack the checkpoint: %w", path, err)
	}
	return nil
}

// checkRestore refuses a restore from the archive at path that cannot be
// done: restoring is off, the file is not there, the handler cannot
// restore, the container asks for a terminal, or CRIU does not work.
func (s *Service) checkRestore(ctx context.Context, path string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime) error {
	field := fmt.Sprintf("config.image.image %q", path)
	if !s.opts.RestoreArchives {
		return fmt.Errorf("%s: a path names a checkpoint archive to restore, and restoring from archives is off (cri.restore_from_archives): %w", field, errdefs.ErrInvalidArgument)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such checkpoint archive: %w", field, errdefs.ErrNotFound)
	case err != nil:
		return fmt.Errorf("%s: %w", field, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s: not a regular file: %w", field, errdefs.ErrInvalidArgument)
	}
	if _, ok := rt.(runtime.Checkpointer); !ok {
		return fmt.Errorf("%s: the pod's runtime handler cannot restore a checkpoint (only handlers of type oci can): %w", field, errdefs.ErrFailedPrecondition)
	}
	if cfg.GetTty() {
		return fmt.Errorf("%s: config.tty: crind does not restore containers on a terminal: %w", field, errdefs.ErrFailedPrecondition)
	}
	return s.criu.check(ctx)
}

// applyRestoreDiff applies the checkpoint's rootfs-diff.tar to the new
// container's writable layer, before the container runs.
func (s *Service) applyRestoreDiff(ctx context.Context, rec *store.Container) error {
	f, err := os.Open(filepath.Join(rec.RestoreFrom, checkpoint.RootfsDiffFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing was changed in the checkpointed container's rootfs
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := s.opts.Images.ApplyRootfsDiff(ctx, rec.ID, f); err != nil {
		return fmt.Errorf("apply the checkpoint's rootfs diff: %w", err)
	}
	return nil
}
