package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/names"
)

// maxMountData is the longest overlay option string mount(2) takes: the
// kernel copies one page, including the terminating NUL.
const maxMountData = 4095

func checkContainerID(id string) error {
	if !names.Valid(id, 128, true) {
		return fmt.Errorf("container id %q: want 1-128 of [A-Za-z0-9_.-], not starting with a dot: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (s *Service) containerDir(id string) string { return filepath.Join(s.root, "containers", id) }

// PrepareRootfs mounts an overlay of imageID's layers plus a fresh upper dir
// for containerID and returns the mountpoint, Root/containers/<id>/rootfs.
// imageID may be any form Get takes. Idempotent for one container; asking
// for a container that already has a rootfs of another image is
// errdefs.ErrAlreadyExists. An unknown image is errdefs.ErrNotFound.
func (s *Service) PrepareRootfs(ctx context.Context, containerID, imageID string) (string, error) {
	defer s.fs.changed() // FsInfo measures again
	if err := checkContainerID(containerID); err != nil {
		return "", err
	}
	s.mu.Lock()
	img, err := s.resolveLocked(imageID)
	if err != nil {
		s.mu.Unlock()
		return "", fmt.Errorf("prepare rootfs of %s: %w", containerID, err)
	}
	lease, ok := s.leases[containerID]
	created := false
	if ok && lease.ImageID != img.ID {
		s.mu.Unlock()
		return "", fmt.Errorf("prepare rootfs of %s: it has a rootfs of image %s: %w", containerID, lease.ImageID, errdefs.ErrAlreadyExists)
	}
	if !ok {
		// In memory first, so that the image's layers are held from
		// now on; on disk below, outside s.mu, where concurrent creates
		// share one transaction (txgroup). A failure from here on is
		// undone by ReleaseRootfs, which drops it from both.
		lease = &leaseRecord{ImageID: img.ID, Layers: slices.Clone(img.Layers)}
		s.leases[containerID] = lease
		created = true
	}
	lowers, err := s.lowerDirsLocked(lease)
	s.mu.Unlock()

	if err == nil && created {
		err = s.update(func(tx *bolt.Tx) error { return put(tx, bucketLeases, containerID, lease) })
	}
	if err == nil {
		err = s.mountRootfs(containerID, lowers, created)
	}
	if err != nil {
		if created {
			// Undo on a context the caller cannot cancel: a half-made
			// rootfs must not stay behind.
			if rerr := s.ReleaseRootfs(context.WithoutCancel(ctx), containerID); rerr != nil {
				s.log.WarnContext(ctx, "undo rootfs", "container_id", containerID, "error", rerr)
			}
		}
		return "", fmt.Errorf("prepare rootfs of %s: %w", containerID, err)
	}
	s.log.DebugContext(ctx, "rootfs mounted", "container_id", containerID, "image_id", img.ID)
	return filepath.Join(s.containerDir(containerID), "rootfs"), nil
}

// lowerDirsLocked lists the layer dirs of lease, names relative to Root,
// bottom first.
func (s *Service) lowerDirsLocked(lease *leaseRecord) ([]string, error) {
	dirs := make([]string, 0, len(lease.Layers))
	for _, d := range lease.Layers {
		l, ok := s.layers[d]
		if !ok {
			return nil, fmt.Errorf("layer %s of image %s is missing", d, lease.ImageID)
		}
		dirs = append(dirs, filepath.Join("l", l.Dir))
	}
	return dirs, nil
}

// Rootfs reports the mountpoint of containerID's rootfs after a restart,
// remounting it (and its image volumes) if it is not mounted. Unknown is errdefs.ErrNotFound.
func (s *Service) Rootfs(ctx context.Context, containerID string) (string, error) {
	if err := checkContainerID(containerID); err != nil {
		return "", err
	}
	s.mu.Lock()
	lease, ok := s.leases[containerID]
	if !ok {
		s.mu.Unlock()
		return "", fmt.Errorf("rootfs of container %s: %w", containerID, errdefs.ErrNotFound)
	}
	lowers, err := s.lowerDirsLocked(lease)
	s.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("rootfs of container %s: %w", containerID, err)
	}
	if err := s.mountRootfs(containerID, lowers, false); err != nil {
		return "", fmt.Errorf("rootfs of container %s: %w", containerID, err)
	}
	if err := s.remountVolumes(containerID); err != nil {
		return "", fmt.Errorf("image volumes of container %s: %w", containerID, err)
	}
	return filepath.Join(s.containerDir(containerID), "rootfs"), nil
}

// ReleaseRootfs unmounts and removes containerID's rootfs and image
// volumes, then the layers only they kept; the images of the volumes can
// be removed again. Releasing an unknown container is not an error.
func (s *Service) ReleaseRootfs(ctx context.Context, containerID string) error {
	defer s.fs.changed() // FsInfo measures again
	if err := checkContainerID(containerID); err != nil {
		return err
	}
	dir := s.containerDir(containerID)
	target := filepath.Join(dir, "rootfs")
	// The volumes first: RemoveAll must never walk into a mounted view.
	if err := s.unmountVolumes(containerID); err != nil {
		return fmt.Errorf("release image volumes of %s: %w", containerID, err)
	}
	if err := unmountAll(target); err != nil {
		return fmt.Errorf("release rootfs of %s: %w", containerID, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("release rootfs of %s: %w", containerID, err)
	}
	s.mu.Lock()
	_, ok := s.leases[containerID]
	vols := s.volumeKeysLocked(containerID)
	if !ok && len(vols) == 0 {
		s.mu.Unlock()
		return nil
	}
	if err := s.update(func(tx *bolt.Tx) error {
		for _, k := range vols {
			if err := tx.Bucket(bucketVolumes).Delete([]byte(k)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketLeases).Delete([]byte(containerID))
	}); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("release rootfs of %s: %w", containerID, err)
	}
	delete(s.leases, containerID)
	for _, k := range vols {
		delete(s.volumes, k)
	}
	trash, err := s.gcLocked()
	s.mu.Unlock()
	s.emptyTrash(ctx, trash)
	if err != nil {
		return fmt.Errorf("release rootfs of %s: %w", containerID, err)
	}
	s.log.DebugContext(ctx, "rootfs released", "container_id", containerID)
	return nil
}

// mountRootfs mounts the overlay of containerID unless it is mounted.
// lowers are relative to Root, bottom first. fresh says the container dir
// is new: a leftover upper dir of an earlier container of that id is wiped.
func (s *Service) mountRootfs(containerID string, lowers []string, fresh bool) error {
	dir := s.containerDir(containerID)
	target := filepath.Join(dir, "rootfs")
	if fresh {
		if err := s.unmountVolumes(containerID); err != nil {
			return err
		}
		if err := unmountAll(target); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	mk := []string{"upper", "work", "rootfs"}
	if len(lowers) == 0 {
		// overlay needs a lower dir; an image without layers gets an
		// empty one, made only then (a new inode is not free: see
		// docs/runtimes.md, Cost).
		mk = append(mk, "empty")
	}
	for _, d := range mk {
		perm := os.FileMode(0o755)
		if d == "work" {
			perm = 0o700
		}
		if err := os.Mkdir(filepath.Join(dir, d), perm); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if m, err := isMountpoint(target); err != nil {
		return err
	} else if m {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "work", "work", "incompat", "volatile")); err == nil {
		// Mounted volatile before and the mount is gone: the node went
		// down (see volatileOpt). The kernel will not mount it again.
		return fmt.Errorf("its writable layer was mounted without syncs (volatile) and the node restarted since: %w", errdefs.ErrFailedPrecondition)
	}
	rel := filepath.Join("containers", containerID)
	if len(lowers) == 0 {
		lowers = []string{filepath.Join(rel, "empty")}
	}
	top := slices.Clone(lowers)
	slices.Reverse(top) // overlay lists the topmost lower dir first
	abs := make([]string, len(top))
	for i, l := range top {
		abs[i] = filepath.Join(s.root, l)
	}
	data := overlayData(abs, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if len(data)+len(volatileOpt) <= maxMountData {
		if err := mountVolatile(data, func(data string) error { return unix.Mount("overlay", target, "overlay", 0, data) }); err != nil {
			return fmt.Errorf("mount overlay on %s: %w", target, err)
		}
		return nil
	}
	data = overlayData(top, filepath.Join(rel, "upper"), filepath.Join(rel, "work"))
	if len(data)+len(volatileOpt) > maxMountData {
		return fmt.Errorf("mount overlay on %s: %d layers do not fit in the mount options", target, len(lowers))
	}
	if err := mountVolatile(data, func(data string) error { return mountFrom(s.root, target, data, 0) }); err != nil {
		return fmt.Errorf("mount overlay on %s (relative paths): %w", target, err)
	}
	return nil
}

func overlayData(lowers []string, upper, work string) string {
	return "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work
}

// volatileOpt makes a container's overlay skip syncing its upper dir, on
// unmount and on syncfs. Without it RemoveContainer's unmount waits for
// everything the container wrote to reach the disk, only to delete it.
// What it gives up is the upper dir after a crash of the node, which a
// container does not keep anyway: kubelet makes its containers anew. (The
// kernel then refuses to mount that upper dir again, so recovery only
// logs that it could not remount an exited container's rootfs;
// docs/recovery.md.)
const volatileOpt = ",volatile"

// noVolatile is set once the kernel refused volatileOpt (before Linux
// 5.10) and a mount without it worked.
var noVolatile atomic.Bool

// mountVolatile mounts with data plus volatileOpt, or without it where the
// kernel does not know it.
func mountVolatile(data string, mount func(data string) error) error {
	if noVolatile.Load() {
		return mount(data)
	}
	err := mount(data + volatileOpt)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	if mount(data) != nil {
		return err
	}
	noVolatile.Store(true)
	return nil
}

// mountFrom mounts an overlay whose option paths are relative to dir. The
// working directory is per process, so the mount runs on a thread that
// unshares it first and is thrown away afterwards (a locked goroutine that
// returns without unlocking ends its thread).
func mountFrom(dir, target, data string, flags uintptr) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare fs: %w", err)
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount("overlay", target, "overlay", flags, data)
	}()
	return <-errc
}

// isMountpoint reports whether p is mounted on: its device differs from its
// parent's.
func isMountpoint(p string) (bool, error) {
	var st, pst unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("stat %s: %w", p, err)
	}
	if err := unix.Lstat(filepath.Dir(p), &pst); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(p), err)
	}
	return st.Dev != pst.Dev, nil
}

// unmountAll unmounts everything mounted on target, detaching lazily what
// is busy.
func unmountAll(target string) error {
	for range 16 {
		m, err := isMountpoint(target)
		if err != nil || !m {
			return err
		}
		err = unix.Unmount(target, 0)
		switch {
		case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("detach %s: %w", target, err)
			}
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", target)
}

// RootfsOwners lists, sorted, the container ids that hold something in
// the store: a rootfs lease, an image volume, or a dir under
// Root/containers (a rootfs whose lease a crash took, or never wrote).
// crind's start-up sweep releases (ReleaseRootfs) those it has no record
// of. It fails only when Root/containers cannot be read.
func (s *Service) RootfsOwners() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.root, "containers"))
	if err != nil {
		return nil, fmt.Errorf("list rootfs: %w", err)
	}
	s.mu.Lock()
	ids := make([]string, 0, len(s.leases)+len(ents))
	for id := range s.leases {
		ids = append(ids, id)
	}
	for k := range s.volumes {
		id, _, _ := strings.Cut(k, "/")
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, e := range ents {
		// Dot names are the store's own (topdir marks, trash).
		if !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}
