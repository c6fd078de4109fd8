package image

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// FsInfo reports the usage of the image filesystem: the mountpoint holding
// Root, and the bytes (allocated blocks) and inodes used under Root. Rootfs
// mounts under Root are not counted: their upper dirs are, with the figure
// WritableLayerUsage last measured (measured now if it never was).
//
// It does not walk the whole store: blobs and committed layer dirs are
// immutable, so each is measured once and remembered; only what is in
// flight (downloads, unpacks, trash) and what was never seen is walked.
// And the figure itself is reused while nothing changed the store (a pull,
// a removal, a rootfs or volume prepared or released, a writable layer
// measured again) for up to fsInfoMaxAge, so kubelet's calls cost a lock;
// crind's stats sampler asks after each sweep, which keeps it warm.
func (s *Service) FsInfo() (FsUsage, error) {
	s.fs.mu.Lock()
	gen := s.fs.gen
	if !s.fs.totalAt.IsZero() && s.fs.totalGen == gen && time.Since(s.fs.totalAt) < fsInfoMaxAge {
		u := s.fs.total
		s.fs.mu.Unlock()
		return u, nil
	}
	s.fs.mu.Unlock()
	u, err := s.measureFs()
	if err != nil {
		return FsUsage{}, err
	}
	s.fs.mu.Lock()
	// A figure measured across a change is not kept.
	if s.fs.gen == gen {
		s.fs.total, s.fs.totalAt, s.fs.totalGen = u, time.Now(), gen
	}
	s.fs.mu.Unlock()
	return u, nil
}

// measureFs sums the store's usage from the caches and what is in flight.
func (s *Service) measureFs() (FsUsage, error) {
	mp, err := s.fsMountpoint()
	if err != nil {
		return FsUsage{}, fmt.Errorf("image fs info: %w", err)
	}
	var rootSt unix.Stat_t
	if err := unix.Lstat(s.root, &rootSt); err != nil {
		return FsUsage{}, fmt.Errorf("image fs info: %w", err)
	}
	dev := rootSt.Dev
	total := usage{bytes: uint64(rootSt.Blocks) * 512, inodes: 1}
	add := func(u usage) { total.bytes += u.bytes; total.inodes += u.inodes }

	ents, err := os.ReadDir(s.root)
	if err != nil {
		return FsUsage{}, fmt.Errorf("image fs info: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(s.root, e.Name())
		var u usage
		switch e.Name() {
		case "blobs":
			u, err = s.blobsUsage(p, dev)
		case "l":
			u, err = s.layersUsage(p, dev)
		case "containers":
			u, err = s.containersUsage(p, dev)
		default:
			u, err = du(p, dev, false)
		}
		if err != nil {
			return FsUsage{}, fmt.Errorf("image fs info: %w", err)
		}
		add(u)
	}
	return FsUsage{Mountpoint: mp, UsedBytes: total.bytes, InodesUsed: total.inodes}, nil
}

// WritableLayerUsage measures the upper dir of containerID's rootfs (its
// writable layer) now, and remembers the figure for FsInfo. A container
// without a rootfs is errdefs.ErrNotFound.
func (s *Service) WritableLayerUsage(containerID string) (LayerUsage, error) {
	if err := checkContainerID(containerID); err != nil {
		return LayerUsage{}, err
	}
	mp, err := s.fsMountpoint()
	if err != nil {
		return LayerUsage{}, fmt.Errorf("writable layer of %s: %w", containerID, err)
	}
	upper := filepath.Join(s.containerDir(containerID), "upper")
	var st unix.Stat_t
	if err := unix.Lstat(upper, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return LayerUsage{}, fmt.Errorf("writable layer of %s: %w", containerID, errdefs.ErrNotFound)
		}
		return LayerUsage{}, fmt.Errorf("writable layer of %s: %w", containerID, err)
	}
	u, err := du(upper, st.Dev, true)
	if err != nil {
		return LayerUsage{}, fmt.Errorf("writable layer of %s: %w", containerID, err)
	}
	lu := LayerUsage{Mountpoint: mp, UsedBytes: u.bytes, InodesUsed: u.inodes, Time: time.Now()}
	s.fs.mu.Lock()
	if s.fs.uppers == nil {
		s.fs.uppers = map[string]LayerUsage{}
	}
	s.fs.uppers[containerID] = lu
	s.fs.gen++
	s.fs.mu.Unlock()
	return lu, nil
}

// fsMountpoint is the mountpoint of the filesystem holding Root, looked up
// once.
func (s *Service) fsMountpoint() (string, error) {
	s.fs.mu.Lock()
	mp := s.fs.mountpoint
	s.fs.mu.Unlock()
	if mp != "" {
		return mp, nil
	}
	mp, err := mountpointOf(s.root)
	if err != nil {
		return "", err
	}
	s.fs.mu.Lock()
	s.fs.mountpoint = mp
	s.fs.mu.Unlock()
	return mp, nil
}

// blobsUsage counts Root/blobs: committed blobs (immutable, named by
// digest) from the cache, anything else (downloads in progress) walked.
func (s *Service) blobsUsage(dir string, dev uint64) (usage, error) {
	out, ents, err := dirUsage(dir)
	if err != nil {
		return usage{}, err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.Name() != "sha256" {
			u, err := du(p, dev, false)
			if err != nil {
				return usage{}, err
			}
			out.add(u)
			continue
		}
		u, err := s.sha256Usage(p)
		if err != nil {
			return usage{}, err
		}
		out.add(u)
	}
	return out, nil
}

func (s *Service) sha256Usage(dir string) (usage, error) {
	out, ents, err := dirUsage(dir)
	if err != nil {
		return usage{}, err
	}
	s.fs.mu.Lock()
	old := s.fs.blobs
	s.fs.mu.Unlock()
	fresh := make(map[string]usage, len(ents))
	for _, e := range ents {
		u, ok := old[e.Name()]
		if !ok {
			if u, err = lstatUsage(filepath.Join(dir, e.Name())); errors.Is(err, fs.ErrNotExist) {
				continue // collected while we read
			} else if err != nil {
				return usage{}, err
			}
		}
		fresh[e.Name()] = u
		out.add(u)
	}
	s.fs.mu.Lock()
	s.fs.blobs = fresh
	s.fs.mu.Unlock()
	return out, nil
}

// layersUsage counts Root/l: committed layer dirs from the cache (walked
// once), dirs being unpacked or removed walked every time.
func (s *Service) layersUsage(dir string, dev uint64) (usage, error) {
	out, ents, err := dirUsage(dir)
	if err != nil {
		return usage{}, err
	}
	s.mu.Lock()
	committed := make(map[string]bool, len(s.layers))
	for _, l := range s.layers {
		committed[l.Dir] = true
	}
	s.mu.Unlock()
	s.fs.mu.Lock()
	old := s.fs.layers
	s.fs.mu.Unlock()
	fresh := make(map[dirKey]usage, len(committed))
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return usage{}, err
		}
		k := dirKey{e.Name(), st.Ino}
		u, ok := old[k]
		if !ok {
			if u, err = du(p, dev, false); err != nil {
				return usage{}, err
			}
		}
		if committed[e.Name()] {
			fresh[k] = u
		}
		out.add(u)
	}
	s.fs.mu.Lock()
	s.fs.layers = fresh
	s.fs.mu.Unlock()
	return out, nil
}

// containersUsage counts Root/containers: each container's upper dir from
// the last WritableLayerUsage (measured now if never), the rest of its dir
// (work dir, mountpoints) walked, mounted rootfs skipped.
func (s *Service) containersUsage(dir string, dev uint64) (usage, error) {
	out, ents, err := dirUsage(dir)
	if err != nil {
		return usage{}, err
	}
	s.fs.mu.Lock()
	uppers := maps.Clone(s.fs.uppers)
	s.fs.mu.Unlock()
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		id := e.Name()
		seen[id] = true
		cdir := filepath.Join(dir, id)
		sub, err := os.ReadDir(cdir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return usage{}, err
		}
		self, err := lstatUsage(cdir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return usage{}, err
		}
		out.add(self)
		for _, se := range sub {
			p := filepath.Join(cdir, se.Name())
			if se.Name() != "upper" {
				u, err := du(p, dev, false)
				if err != nil {
					return usage{}, err
				}
				out.add(u)
				continue
			}
			lu, ok := uppers[id]
			if !ok {
				if lu, err = s.WritableLayerUsage(id); err != nil {
					if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
						continue
					}
					return usage{}, err
				}
			}
			// the upper dir itself, then what is in it
			up, err := lstatUsage(p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return usage{}, err
			}
			out.add(up)
			out.add(usage{lu.UsedBytes, lu.InodesUsed})
		}
	}
	// Forget containers whose dir is gone.
	s.fs.mu.Lock()
	for id := range s.fs.uppers {
		if !seen[id] {
			delete(s.fs.uppers, id)
		}
	}
	s.fs.mu.Unlock()
	return out, nil
}

func (u *usage) add(v usage) { u.bytes += v.bytes; u.inodes += v.inodes }

// dirUsage is the usage of dir's own inode, and its entries for the
// caller to count each by its own rule.
func dirUsage(dir string) (usage, []os.DirEntry, error) {
	u, err := lstatUsage(dir)
	if err != nil {
		return usage{}, nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return usage{}, nil, err
	}
	return u, ents, nil
}

// lstatUsage is the usage of one inode.
func lstatUsage(p string) (usage, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return usage{}, fs.ErrNotExist
		}
		return usage{}, err
	}
	return usage{bytes: uint64(st.Blocks) * 512, inodes: 1}, nil
}

// du counts the allocated bytes and distinct inodes under root (root itself
// too unless skipRoot), staying on device dev: a mounted rootfs is skipped.
// Entries removed while it walks are skipped.
func du(root string, dev uint64, skipRoot bool) (usage, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var u usage
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		if st.Dev != dev {
			if d.IsDir() {
				return fs.SkipDir // a mounted rootfs
			}
			return nil
		}
		if skipRoot && p == root {
			return nil
		}
		k := inode{st.Dev, st.Ino}
		if seen[k] {
			return nil
		}
		seen[k] = true
		u.inodes++
		u.bytes += uint64(st.Blocks) * 512
		return nil
	})
	if err != nil {
		return usage{}, err
	}
	return u, nil
}

// mountpointOf finds the mountpoint of the filesystem holding p, the
// longest mountpoint in mountinfo that is p or an ancestor of it.
func mountpointOf(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	// A path filter: moby's ParentsFilter takes "/foo" for a parent of
	// "/foobar".
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return real != m.Mountpoint && !strings.HasPrefix(real, strings.TrimSuffix(m.Mountpoint, "/")+"/"), false
	})
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	best := "/"
	for _, m := range mounts {
		if len(m.Mountpoint) > len(best) {
			best = m.Mountpoint
		}
	}
	return best, nil
}
