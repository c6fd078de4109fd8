package checkpoint

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// WriteArchive tars the directory staging into the file dst, uncompressed,
// with names relative to staging ("checkpoint/pages-1.img") and a header
// for every directory. Only regular files, directories and symlinks are
// taken; anything else fails with errdefs.ErrInvalidArgument naming it.
//
// dst appears complete or not at all: the tar is written to a temporary
// file of mode 0600 beside dst, synced, and renamed onto dst. On error
// neither that file nor a new dst is left, and an existing dst is kept.
// dst must not lie inside staging.
func WriteArchive(dst, staging string) error {
	if err := checkOutside(dst, staging); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	tw := tar.NewWriter(tmp)
	if err := filepath.WalkDir(staging, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return addEntry(tw, staging, p)
	}); err != nil {
		return fmt.Errorf("write checkpoint archive %s from %s: %w", dst, staging, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write checkpoint archive %s: %w", dst, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync checkpoint archive %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write checkpoint archive %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("write checkpoint archive: %w", err)
	}
	ok = true
	// The rename is durable once the directory is synced; the archive is
	// complete either way.
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// checkOutside refuses a dst inside staging: the walk would meet the
// archive being written.
func checkOutside(dst, staging string) error {
	absDst, err := filepath.Abs(dst)
	if err != nil {
		return fmt.Errorf("checkpoint archive %q: %w", dst, err)
	}
	absStaging, err := filepath.Abs(staging)
	if err != nil {
		return fmt.Errorf("checkpoint staging dir %q: %w", staging, err)
	}
	rel, err := filepath.Rel(absStaging, absDst)
	if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return fmt.Errorf("checkpoint archive %q is inside its staging dir %q: %w", dst, staging, errdefs.ErrInvalidArgument)
	}
	return nil
}

// addEntry writes the header, and a regular file's content, of p, a path
// under staging. staging itself is the archive's root and has no entry.
func addEntry(tw *tar.Writer, staging, p string) error {
	rel, err := filepath.Rel(staging, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	rel = filepath.ToSlash(rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		return tw.WriteHeader(hdr)
	case unix.S_IFREG:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = st.Size
		return addFile(tw, hdr, p)
	default:
		return fmt.Errorf("%s is %s: only regular files, directories and symlinks are archived: %w",
			rel, typeName(st.Mode), errdefs.ErrInvalidArgument)
	}
}

// addFile writes hdr and the content of the regular file p, which must
// still have the size the header says.
func addFile(tw *tar.Writer, hdr *tar.Header, p string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != hdr.Size {
		err = errors.New("file changed size while archived")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", hdr.Name, err)
	}
	return nil
}

// typeName names the file type in mode, a stat st_mode.
func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a fifo"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	default:
		return fmt.Sprintf("of file type %#o", mode&unix.S_IFMT)
	}
}
