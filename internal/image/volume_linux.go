package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// volumeDir is where containerID's volume name is mounted.
func (s *Service) volumeDir(containerID, name string) string {
	return filepath.Join(s.containerDir(containerID), "volumes", name)
}

// PrepareVolume mounts a read-only view of the layers of the image ref
// names (any form Get takes) for containerID at
// Root/containers/<containerID>/volumes/<name>: an overlay of the layers
// with no upper dir, so nothing can write to it and the layers stay shared.
// The image cannot be removed (Remove fails) and its layers are not
// collected until ReleaseRootfs(containerID), which unmounts and removes
// the container's volumes with its rootfs. Call it after PrepareRootfs of
// the container (which starts from an empty container dir). Idempotent for
// one container and name; the name already used for another image is
// errdefs.ErrAlreadyExists. An unknown image is errdefs.ErrNotFound, a bad
// id or name errdefs.ErrInvalidArgument.
func (s *Service) PrepareVolume(ctx context.Context, containerID, name, ref string) (*Volume, error) {
	defer s.fs.changed() // FsInfo measures again
	if err := checkContainerID(containerID); err != nil {
		return nil, err
	}
	if err := checkVolumeName(name); err != nil {
		return nil, err
	}
	key := volumeKey(containerID, name)
	s.mu.Lock()
	img, err := s.resolveLocked(ref)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("prepare image volume %s of %s: %w", name, containerID, err)
	}
	vol, ok := s.volumes[key]
	created := false
	if ok && vol.ImageID != img.ID {
		s.mu.Unlock()
		return nil, fmt.Errorf("prepare image volume %s of %s: it mounts image %s: %w", name, containerID, vol.ImageID, errdefs.ErrAlreadyExists)
	}
	if !ok {
		vol = &volumeRecord{ImageID: img.ID, Layers: slices.Clone(img.Layers)}
		if err := s.update(func(tx *bolt.Tx) error { return put(tx, bucketVolumes, key, vol) }); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("prepare image volume %s of %s: %w", name, containerID, err)
		}
		s.volumes[key] = vol
		created = true
	}
	pub := img.public()
	lowers, err := s.lowerDirsLocked(&leaseRecord{ImageID: vol.ImageID, Layers: vol.Layers})
	s.mu.Unlock()

	if err == nil {
		err = s.mountVolume(containerID, name, lowers)
	}
	if err != nil {
		if created {
			// A half-made volume must not stay behind, whatever the
			// caller's ctx says.
			if rerr := s.releaseVolume(context.WithoutCancel(ctx), containerID, name); rerr != nil {
				s.log.WarnContext(ctx, "undo image volume", "container_id", containerID, "volume", name, "error", rerr)
			}
		}
		return nil, fmt.Errorf("prepare image volume %s of %s: %w", name, containerID, err)
	}
	s.log.DebugContext(ctx, "image volume mounted", "container_id", containerID, "volume", name, "image_id", img.ID)
	return &Volume{Path: s.volumeDir(containerID, name), Image: pub}, nil
}

// mountVolume mounts the read-only overlay of volume name of containerID
// unless it is mounted. lowers are relative to Root, bottom first.
func (s *Service) mountVolume(containerID, name string, lowers []string) error {
	dir := s.containerDir(containerID)
	target := s.volumeDir(containerID, name)
	for _, d := range []struct {
		path string
		perm os.FileMode
	}{{dir, 0o700}, {filepath.Join(dir, "volumes"), 0o700}, {target, 0o755}, {filepath.Join(dir, "empty"), 0o755}} {
		if err := os.Mkdir(d.path, d.perm); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if m, err := isMountpoint(target); err != nil {
		return err
	} else if m {
		return nil
	}
	// Without an upper dir overlayfs wants two lower dirs at least: the
	// container's empty dir is always the bottom one.
	top := slices.Clone(lowers)
	slices.Reverse(top) // overlay lists the topmost lower dir first
	top = append(top, filepath.Join("containers", containerID, "empty"))
	abs := make([]string, len(top))
	for i, l := range top {
		abs[i] = filepath.Join(s.root, l)
	}
	const flags = unix.MS_RDONLY
	if data := "lowerdir=" + strings.Join(abs, ":"); len(data) <= maxMountData {
		if err := unix.Mount("overlay", target, "overlay", flags, data); err != nil {
			return fmt.Errorf("mount overlay on %s: %w", target, err)
		}
		return nil
	}
	data := "lowerdir=" + strings.Join(top, ":")
	if len(data) > maxMountData {
		return fmt.Errorf("mount overlay on %s: %d layers do not fit in the mount options", target, len(lowers))
	}
	if err := mountFrom(s.root, target, data, flags); err != nil {
		return fmt.Errorf("mount overlay on %s (relative paths): %w", target, err)
	}
	return nil
}

// remountVolumes mounts containerID's volumes that are not mounted (after
// a reboot).
func (s *Service) remountVolumes(containerID string) error {
	type vol struct {
		name   string
		lowers []string
	}
	var vols []vol
	s.mu.Lock()
	for _, k := range s.volumeKeysLocked(containerID) {
		rec := s.volumes[k]
		lowers, err := s.lowerDirsLocked(&leaseRecord{ImageID: rec.ImageID, Layers: rec.Layers})
		if err != nil {
			s.mu.Unlock()
			return err
		}
		vols = append(vols, vol{strings.TrimPrefix(k, containerID+"/"), lowers})
	}
	s.mu.Unlock()
	for _, v := range vols {
		if err := s.mountVolume(containerID, v.name, v.lowers); err != nil {
			return err
		}
	}
	return nil
}

// unmountVolumes unmounts every volume mounted under containerID's dir,
// recorded or not.
func (s *Service) unmountVolumes(containerID string) error {
	dir := filepath.Join(s.containerDir(containerID), "volumes")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := unmountAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// releaseVolume undoes one PrepareVolume that failed half-way.
func (s *Service) releaseVolume(ctx context.Context, containerID, name string) error {
	target := s.volumeDir(containerID, name)
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	key := volumeKey(containerID, name)
	s.mu.Lock()
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketVolumes).Delete([]byte(key)) }); err != nil {
		s.mu.Unlock()
		return err
	}
	delete(s.volumes, key)
	trash, err := s.gcLocked()
	s.mu.Unlock()
	s.emptyTrash(ctx, trash)
	return err
}
