package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// userOpaqueXattr marks an opaque dir of an overlay mounted with
// userxattr; crin's mounts use opaqueXattr, but an upper dir may come
// from either.
const userOpaqueXattr = "user.overlay.opaque"

// RootfsDiff writes the writable layer of containerID's rootfs (the upper
// dir of its overlay) to w as an uncompressed OCI layer tar: directories,
// regular files, hard links among them, symlinks, fifos and devices, with
// their modes, owners, mtimes and the xattrs user.* and
// security.capability. Overlay whiteouts become ".wh.<name>" entries and
// opaque directories get a ".wh..wh..opq" entry; overlay's own xattrs are
// left out, and so are sockets, which no layer can hold.
//
// exclude lists container paths ("/proc", "/run/secrets", mount
// destinations) that are left out with everything below them. Symlinks
// are written as symlinks and never followed. The layer should not change
// meanwhile: checkpoint calls it while the container is paused.
//
// A container without a rootfs is errdefs.ErrNotFound. On error w may
// hold part of a tar.
func (s *Service) RootfsDiff(ctx context.Context, containerID string, w io.Writer, exclude []string) error {
	if err := checkContainerID(containerID); err != nil {
		return err
	}
	upper := filepath.Join(s.containerDir(containerID), "upper")
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rootfs diff of %s: no writable layer: %w", containerID, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("rootfs diff of %s: open %s: %w", containerID, upper, err)
	}
	d := &diffWriter{
		ctx:     ctx,
		tw:      tar.NewWriter(w),
		exclude: excludedPaths(exclude),
		links:   map[inode]string{},
		log:     s.log,
	}
	if err := d.dir(fd, ""); err != nil {
		return fmt.Errorf("rootfs diff of %s: %w", containerID, err)
	}
	if err := d.tw.Close(); err != nil {
		return fmt.Errorf("rootfs diff of %s: %w", containerID, err)
	}
	return nil
}

// ApplyRootfsDiff unpacks r, a layer tar such as RootfsDiff writes, onto
// the writable layer of containerID's rootfs, exactly as an image layer is
// unpacked: whiteouts become overlay whiteouts, no entry can land outside
// the layer (such an entry wraps ErrUnsafeEntry and is named in the
// error), owners are applied when crind runs as root, and
// Config.MaxUnpackedBytes bounds its size. It is for a container that has
// a rootfs (PrepareRootfs) but has not run: overlayfs does not promise to
// show changes made beneath it while it is in use.
//
// A container without a rootfs is errdefs.ErrNotFound. On error the layer
// may hold part of the diff; the caller removes the container.
func (s *Service) ApplyRootfsDiff(ctx context.Context, containerID string, r io.Reader) error {
	defer s.fs.changed() // FsInfo measures again
	if err := checkContainerID(containerID); err != nil {
		return err
	}
	upper := filepath.Join(s.containerDir(containerID), "upper")
	fi, err := os.Lstat(upper)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("apply rootfs diff to %s: no writable layer: %w", containerID, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("apply rootfs diff to %s: %w", containerID, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("apply rootfs diff to %s: %s is not a directory", containerID, upper)
	}
	opts := unpackOptions{
		chown:  os.Geteuid() == 0,
		log:    s.log,
		budget: newUnpackBudget(s.cfg.MaxUnpackedBytes),
	}
	if err := unpackTar(ctx, r, upper, opts); err != nil {
		return fmt.Errorf("apply rootfs diff to %s: %w", containerID, err)
	}
	return nil
}

// excludedPaths turns container paths into layer paths: clean, relative,
// "" for the root itself.
func excludedPaths(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, strings.TrimPrefix(path.Clean("/"+p), "/"))
	}
	return out
}

type inode struct{ dev, ino uint64 }

// diffWriter is the state of one RootfsDiff. Every file is reached through
// its parent's fd and opened with O_NOFOLLOW, so that nothing outside the
// upper dir is read.
type diffWriter struct {
	ctx     context.Context
	tw      *tar.Writer
	exclude []string         // layer paths, see excludedPaths
	links   map[inode]string // first path of each file with more than one link
	log     *slog.Logger
}

func (d *diffWriter) excluded(rel string) bool {
	for _, e := range d.exclude {
		if e == "" || rel == e || strings.HasPrefix(rel, e+"/") {
			return true
		}
	}
	return false
}

// dir writes the entries of the directory fd, at rel in the layer ("" for
// its root), sorted by name, and closes fd.
func (d *diffWriter) dir(fd int, rel string) error {
	f := os.NewFile(uintptr(fd), "/"+rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read dir /%s: %w", rel, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		if err := d.entry(fd, rel, n); err != nil {
			return err
		}
	}
	return nil
}

// entry writes name in the directory pfd (at parent in the layer) and,
// for a directory, what it holds.
func (d *diffWriter) entry(pfd int, parent, name string) error {
	rel := path.Join(parent, name)
	if d.excluded(rel) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat /%s: %w", rel, err)
	}
	mtime := time.Unix(st.Mtim.Unix())
	if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
		return d.tw.WriteHeader(&tar.Header{
			Name: path.Join(parent, whiteoutPrefix+name), Typeflag: tar.TypeReg, ModTime: mtime, Format: tar.FormatPAX,
		})
	}
	if st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		d.log.DebugContext(d.ctx, "socket left out of rootfs diff", "path", "/"+rel)
		return nil
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: mtime,
		Format:  tar.FormatPAX,
	}
	opaque, err := xattrRecords(pfd, name, hdr)
	if err != nil {
		return fmt.Errorf("xattrs of /%s: %w", rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return d.subdir(pfd, name, hdr, opaque)
	case unix.S_IFREG:
		return d.file(pfd, name, hdr, &st)
	case unix.S_IFLNK:
		target, err := readlinkat(pfd, name)
		if err != nil {
			return fmt.Errorf("read link /%s: %w", rel, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	default:
		return fmt.Errorf("/%s: unknown file type %#o", rel, st.Mode&unix.S_IFMT)
	}
	return d.tw.WriteHeader(hdr)
}

// subdir writes the directory name in pfd, its opaque marker, and its
// entries.
func (d *diffWriter) subdir(pfd int, name string, hdr *tar.Header, opaque bool) error {
	rel := hdr.Name
	hdr.Typeflag = tar.TypeDir
	hdr.Name += "/"
	if err := d.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if opaque {
		if err := d.tw.WriteHeader(&tar.Header{
			Name: path.Join(rel, whiteoutOpaque), Typeflag: tar.TypeReg, ModTime: hdr.ModTime, Format: tar.FormatPAX,
		}); err != nil {
			return err
		}
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /%s: %w", rel, err)
	}
	return d.dir(fd, rel)
}

// file writes the regular file name in pfd, or a hard link to the path it
// was first written at.
func (d *diffWriter) file(pfd int, name string, hdr *tar.Header, st *unix.Stat_t) error {
	if st.Nlink > 1 {
		key := inode{st.Dev, st.Ino}
		if first, ok := d.links[key]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			hdr.PAXRecords = nil // a hard link has its target's xattrs
			return d.tw.WriteHeader(hdr)
		}
		d.links[key] = hdr.Name
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /%s: %w", hdr.Name, err)
	}
	f := os.NewFile(uintptr(fd), "/"+hdr.Name)
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if err := d.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(d.tw, f, st.Size); err != nil {
		return fmt.Errorf("copy /%s: %w", hdr.Name, err)
	}
	return nil
}

// xattrRecords adds the xattrs of name in pfd that a layer carries to
// hdr's PAX records, and reports whether they mark an opaque directory.
func xattrRecords(pfd int, name string, hdr *tar.Header) (bool, error) {
	p := fmt.Sprintf("/proc/self/fd/%d/%s", pfd, name)
	keys, err := listXattrs(p)
	if err != nil {
		return false, err
	}
	opaque := false
	for _, k := range keys {
		isOpaque := k == opaqueXattr || k == userOpaqueXattr
		keep := k == "security.capability" || (strings.HasPrefix(k, "user.") && !strings.HasPrefix(k, "user.overlay."))
		if !isOpaque && !keep {
			continue
		}
		v, err := getXattr(p, k)
		if err != nil {
			return false, err
		}
		if isOpaque {
			opaque = opaque || v == "y"
			continue
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+k] = v
	}
	return opaque, nil
}

// listXattrs lists the xattr names of p without following a final
// symlink; a filesystem without xattrs has none.
func listXattrs(p string) ([]string, error) {
	for {
		n, err := unix.Llistxattr(p, nil)
		if errors.Is(err, unix.ENOTSUP) || n == 0 {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, err
		}
		return strings.FieldsFunc(string(buf[:n]), func(r rune) bool { return r == 0 }), nil
	}
}

func getXattr(p, key string) (string, error) {
	for {
		n, err := unix.Lgetxattr(p, key, nil)
		if err != nil {
			return "", fmt.Errorf("get %s: %w", key, err)
		}
		buf := make([]byte, n)
		n, err = unix.Lgetxattr(p, key, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("get %s: %w", key, err)
		}
		return string(buf[:n]), nil
	}
}

// readlinkat reads the target of the symlink name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
