package checkpoint

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

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
)

// restoreArchiveMax caps what a checkpoint archive may unpack to.
const restoreArchiveMax = 32 << 30

// RestoreImages is the dir of CRIU images a container whose record names
// the restore dir restoreFrom (RestoreImage's) is restored from; "" for a
// container run afresh.
func RestoreImages(restoreFrom string) string {
	if restoreFrom == "" {
		return ""
	}
	return filepath.Join(restoreFrom, ImagesDir)
}

// RestoreImage is CreateContainer's image for container id when it is to
// be restored: an absolute path in cfg.image.image names a checkpoint
// archive (as CRI-O takes it), which, where restoring is enabled, is
// unpacked into RestoreDir(id); a container RestorePod makes names its
// checkpoint's dir in from, which is linked (or copied) there. The image
// is the one the checkpointed container ran, which must be on the node
// (errdefs.ErrFailedPrecondition otherwise); RestoreDir(id) is returned
// too. rt is the pod's runtime; undo is given the step that removes what
// RestoreImage made, for the caller's rollback. Errors name
// config.image.image: a missing archive is errdefs.ErrNotFound, one that
// is not a checkpoint errdefs.ErrInvalidArgument, a restore that cannot
// be done errdefs.ErrFailedPrecondition.
func (m *Manager) RestoreImage(ctx context.Context, id string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime, from string, undo func(name string, step func(context.Context) error)) (*image.Image, string, error) {
	ref := cfg.GetImage().GetImage()
	dir := m.RestoreDir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, "", err
	}
	if from != "" {
		ref = from
		undo("remove restore dir", func(context.Context) error { return os.RemoveAll(dir) })
		if err := CopyDir(from, dir, true); err != nil {
			return nil, "", fmt.Errorf("copy the checkpoint of container %q from %s: %w", cfg.GetMetadata().GetName(), from, err)
		}
	} else if err := m.unpackArchive(ctx, ref, dir, cfg, rt, undo); err != nil {
		return nil, "", err
	}
	ck, err := ReadConfig(dir)
	if err != nil {
		return nil, "", fmt.Errorf("config.image.image %q: not a checkpoint: %w", ref, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ImagesDir, InventoryFile)); err != nil {
		return nil, "", fmt.Errorf("config.image.image %q: the checkpoint holds no CRIU images: %w", ref, errdefs.ErrInvalidArgument)
	}
	img, err := m.checkpointedImage(ck)
	if err != nil {
		return nil, "", fmt.Errorf("config.image.image %q: %w", ref, err)
	}
	return img, dir, nil
}

// checkpointedImage is the image the container checkpointed in ck ran.
func (m *Manager) checkpointedImage(ck ContainerConfig) (*image.Image, error) {
	img, err := m.c.Images.Get(ck.RootfsImageRef)
	if err != nil && ck.RootfsImageName != "" {
		img, err = m.c.Images.Get(ck.RootfsImageName)
	}
	if err != nil {
		return nil, fmt.Errorf("the checkpointed container ran image %s (%s), which is not on this node: pull it first: %w",
			ck.RootfsImageName, ck.RootfsImageRef, errdefs.ErrFailedPrecondition)
	}
	return img, nil
}

// unpackArchive unpacks the checkpoint archive at path into dir, once
// checkRestore allows it.
func (m *Manager) unpackArchive(ctx context.Context, path, dir string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime, undo func(string, func(context.Context) error)) error {
	if err := m.checkRestore(ctx, path, cfg, rt); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	undo("remove restore dir", func(context.Context) error { return os.RemoveAll(dir) })
	if err := Extract(path, dir, restoreArchiveMax); err != nil {
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
func (m *Manager) checkRestore(ctx context.Context, path string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime) error {
	field := fmt.Sprintf("config.image.image %q", path)
	if !m.c.RestoreArchives {
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
	return m.c.CRIU.Check(ctx)
}

// ApplyRootfsDiff applies the rootfs diff of the checkpoint in
// restoreFrom (RestoreImage's dir) to new container id's writable layer,
// before the container runs. A checkpoint without one changes nothing.
func (m *Manager) ApplyRootfsDiff(ctx context.Context, id, restoreFrom string) error {
	f, err := os.Open(filepath.Join(restoreFrom, RootfsDiffFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing was changed in the checkpointed container's rootfs
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := m.c.Images.ApplyRootfsDiff(ctx, id, f); err != nil {
		return fmt.Errorf("apply the checkpoint's rootfs diff: %w", err)
	}
	return nil
}
