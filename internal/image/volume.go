package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/names"
)

// Volume is an image volume: a read-only view of an image's layers mounted
// for one container (the CRI Mount.image of kubelet's ImageVolume feature).
type Volume struct {
	// Path is the view's mountpoint, Root/containers/<id>/volumes/<name>.
	Path string
	// Image is the image mounted.
	Image *Image
}

// volumeRecord is an image volume as stored; it keeps its image from
// removal and its layers from garbage collection.
type volumeRecord struct {
	ImageID string   `json:"image_id"`
	Layers  []string `json:"layers"` // diff ids, bottom first
}

func checkVolumeName(name string) error {
	if !names.Valid(name, 64, true) {
		return fmt.Errorf("volume name %q: want 1-64 of [A-Za-z0-9_.-], not starting with a dot: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// volumeKey is the key of a container's volume in Service.volumes and the
// volumes bucket.
func volumeKey(containerID, name string) string { return containerID + "/" + name }

// volumeKeysLocked lists the keys of containerID's volumes.
func (s *Service) volumeKeysLocked(containerID string) []string {
	var keys []string
	for k := range s.volumes {
		if strings.HasPrefix(k, containerID+"/") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// volumeUsersLocked lists the containers that mount imageID as a volume.
func (s *Service) volumeUsersLocked(imageID string) []string {
	var ids []string
	for k, v := range s.volumes {
		if v.ImageID != imageID {
			continue
		}
		id, _, _ := strings.Cut(k, "/")
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// maxSubPathLinks bounds the symlinks ResolveSubPath follows, as the
// kernel's MAXSYMLINKS does for a path walk.
const maxSubPathLinks = 40

// ResolveSubPath returns the path of sub inside the mounted view root (a
// Volume's Path) with every symlink resolved the way it would be with root
// as "/": an absolute link starts again at root and ".." stops there, so
// the result is always inside root and names no symlink (a bind mount of
// it cannot be led out of the image). sub must be a relative path that
// stays inside root and names a directory or a regular file. A path
// outside is errdefs.ErrInvalidArgument; a missing one errdefs.ErrNotFound.
//
// internal/oci's resolveInRoot walks symlinks by the same rules (for
// /etc/passwd in a rootfs, through an os.Root): a change to the rules here
// belongs there too. They stay two because image and oci are spokes that
// do not import each other, and their errors differ (classified here, raw
// fs errors there).
func ResolveSubPath(root, sub string) (string, error) {
	if !filepath.IsLocal(sub) {
		return "", fmt.Errorf("%q: must be a relative path inside the image, without \"..\": %w", sub, errdefs.ErrInvalidArgument)
	}
	rel := "" // resolved so far, relative to root, without symlinks
	todo := strings.Split(filepath.Clean(sub), "/")
	links := 0
	for len(todo) > 0 {
		el := todo[0]
		todo = todo[1:]
		switch el {
		case "", ".":
			continue
		case "..":
			if rel = filepath.Dir(rel); rel == "." {
				rel = ""
			}
			continue
		}
		next := filepath.Join(rel, el)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return "", fmt.Errorf("%q: does not exist in the image: %w", sub, errdefs.ErrNotFound)
			}
			return "", fmt.Errorf("%q: %w", sub, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			rel = next
			continue
		}
		if links++; links > maxSubPathLinks {
			return "", fmt.Errorf("%q: more than %d symlinks: %w", sub, maxSubPathLinks, errdefs.ErrInvalidArgument)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", fmt.Errorf("%q: %w", sub, err)
		}
		if filepath.IsAbs(target) {
			rel = ""
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	p := filepath.Join(root, rel)
	fi, err := os.Lstat(p)
	if err != nil {
		return "", fmt.Errorf("%q: %w", sub, err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%q: is a %s, not a directory or a regular file: %w", sub, fi.Mode().Type(), errdefs.ErrInvalidArgument)
	}
	return p, nil
}
