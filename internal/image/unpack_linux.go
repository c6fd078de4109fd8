package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Whiteout names of the OCI layer format.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// unpackBlob unpacks the stored layer blob (gzip, zstd or plain tar) into
// dir, checking that the uncompressed stream has digest diffID, and syncs
// the filesystem so that a rename of dir publishes a complete layer.
func unpackBlob(ctx context.Context, blob, diffID, dir string, opts unpackOptions) error {
	f, err := os.Open(blob)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	magic, _ := br.Peek(4)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("decompress: %w", err)
		}
		defer zr.Close()
		r = zr
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return fmt.Errorf("decompress: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	h := sha256.New()
	tee := io.TeeReader(r, h)
	opts.chown = os.Geteuid() == 0
	if err := unpackTar(ctx, tee, dir, opts); err != nil {
		return err
	}
	// Hash what follows the end-of-archive marker too.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return fmt.Errorf("read layer: %w", err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return fmt.Errorf("uncompressed layer has digest %s, image config says %s: %w", got, diffID, errdefs.ErrDataLoss)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync layer: %w", err)
	}
	return nil
}

// unpackOptions tune unpackTar.
type unpackOptions struct {
	chown  bool // apply the owners of entries (needs CAP_CHOWN)
	log    *slog.Logger
	budget *unpackBudget // nil: no cap
}

// unpackTar extracts the tar stream r into dir, converting OCI whiteouts to
// overlayfs ones. Every path is resolved inside dir with os.Root, so no
// entry can write outside it; such an entry fails the unpack with an error
// naming it and wrapping ErrUnsafeEntry.
func unpackTar(ctx context.Context, r io.Reader, dir string, opts unpackOptions) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if opts.log == nil {
		opts.log = slog.New(slog.DiscardHandler)
	}
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirTimes []dirTime
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeXGlobalHeader:
			continue
		}
		name, err := entryPath(hdr.Name)
		if err != nil {
			return fmt.Errorf("entry %s: %w", quoteEntry(hdr.Name), err)
		}
		if name == "." {
			continue // the layer root itself
		}
		// An entry costs its content and a tar block for its inode, so
		// that a flood of empty files is bounded too.
		// (tar.Reader has made the legacy '\x00' typeflag TypeReg.)
		cost := int64(512)
		if hdr.Typeflag == tar.TypeReg {
			cost += max(hdr.Size, 0)
		}
		if err := opts.budget.take(cost); err != nil {
			return fmt.Errorf("entry %s: %w", quoteEntry(hdr.Name), err)
		}
		if err := extractEntry(root, name, hdr, tr, opts); err != nil {
			switch {
			case isEscape(err):
				err = fmt.Errorf("%w: %w", ErrUnsafeEntry, err)
			case errors.Is(err, unix.ENAMETOOLONG):
				err = fmt.Errorf("%w: %w", ErrBadEntry, err)
			}
			return fmt.Errorf("entry %s: %w", quoteEntry(hdr.Name), err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirTimes = append(dirTimes, dirTime{name, hdr.ModTime})
		}
	}
	// Children changed their dirs' mtimes: restore them last.
	for i := len(dirTimes) - 1; i >= 0; i-- {
		d := dirTimes[i]
		if fi, err := root.Lstat(d.name); err == nil && fi.IsDir() {
			_ = root.Chtimes(d.name, d.mtime, d.mtime)
		}
	}
	return nil
}

// The longest entry name and path a layer may have: NAME_MAX, and
// PATH_MAX less its NUL.
const (
	maxEntryName = 255
	maxEntryPath = 4095
)

// quoteEntry quotes a tar entry name for an error, cut to 256 bytes: a
// name may be as long as the tar header allows.
func quoteEntry(name string) string {
	if len(name) <= 256 {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%q... (%d bytes)", name[:256], len(name))
}

// isEscape reports whether err is os.Root refusing a path that leads out
// of it (the os package does not export that error).
func isEscape(err error) bool {
	return strings.Contains(err.Error(), "path escapes from parent")
}

// entryPath cleans a tar entry name into a path relative to the layer root,
// refusing absolute names and ".." components.
func entryPath(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty name", ErrBadEntry)
	}
	if len(name) > maxEntryPath {
		return "", fmt.Errorf("%w: name of %d bytes, longer than %d", ErrBadEntry, len(name), maxEntryPath)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: absolute path", ErrUnsafeEntry)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: NUL in name", ErrBadEntry)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: \"..\" component", ErrUnsafeEntry)
		}
		if len(c) > maxEntryName {
			return "", fmt.Errorf("%w: a name of %d bytes, longer than %d", ErrBadEntry, len(c), maxEntryName)
		}
	}
	return path.Clean(name), nil
}

// extractEntry writes one entry at name (already cleaned) inside root.
func extractEntry(root *os.Root, name string, hdr *tar.Header, body io.Reader, opts unpackOptions) error {
	parent, base := path.Split(name)
	parent = path.Clean(parent)
	pdir, err := openParent(root, parent)
	if err != nil {
		return err
	}
	defer pdir.Close()
	pfd := int(pdir.Fd())

	if whiteout, err := applyWhiteout(root, pfd, parent, base); whiteout || err != nil {
		return err
	}
	if err := replaceExisting(root, name, hdr.Typeflag); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeLink {
		// A hard link shares the inode of its target: no metadata of its own.
		return linkEntry(root, name, hdr.Linkname)
	}
	if err := createNode(root, pfd, name, base, hdr, body); err != nil {
		return err
	}
	return setMetadata(pfd, base, hdr, opts)
}

// openParent makes the directory parent of an entry inside root, if
// needed, and opens it.
func openParent(root *os.Root, parent string) (*os.File, error) {
	if parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return nil, err
		}
	}
	pdir, err := root.Open(parent)
	if err != nil {
		return nil, err
	}
	if fi, err := pdir.Stat(); err != nil {
		pdir.Close()
		return nil, err
	} else if !fi.IsDir() {
		pdir.Close()
		return nil, fmt.Errorf("parent %q is not a directory", parent)
	}
	return pdir, nil
}

// applyWhiteout turns an OCI whiteout entry base in parent (the dir pfd)
// into overlayfs's form: an opaque xattr on parent, or a 0/0 char device
// in place of what it hides. It reports whether base was a whiteout.
func applyWhiteout(root *os.Root, pfd int, parent, base string) (bool, error) {
	if base == whiteoutOpaque {
		if err := unix.Fsetxattr(pfd, opaqueXattr, []byte("y"), 0); err != nil {
			return true, fmt.Errorf("mark %q opaque: %w", parent, err)
		}
		return true, nil
	}
	hidden, ok := strings.CutPrefix(base, whiteoutPrefix)
	if !ok {
		return false, nil
	}
	if hidden == "" || hidden == "." || hidden == ".." {
		return true, fmt.Errorf("%w: whiteout %q hides no file", ErrBadEntry, base)
	}
	target := path.Join(parent, hidden)
	if err := root.RemoveAll(target); err != nil {
		return true, err
	}
	if err := unix.Mknodat(pfd, hidden, unix.S_IFCHR, 0); err != nil {
		return true, fmt.Errorf("create whiteout %q: %w", target, err)
	}
	return true, nil
}

// replaceExisting removes what an earlier entry put at name, since this
// entry replaces it, except that a directory is kept when it stays a
// directory.
func replaceExisting(root *os.Root, name string, typeflag byte) error {
	fi, err := root.Lstat(name)
	if err != nil || (fi.IsDir() && typeflag == tar.TypeDir) {
		return nil
	}
	return root.RemoveAll(name)
}

// linkEntry makes name a hard link to target, a path in the archive.
func linkEntry(root *os.Root, name, target string) error {
	clean, err := entryPath(target)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", target, err)
	}
	return root.Link(clean, name)
}

// createNode makes the file, directory, symlink or device node of hdr at
// name (base in the dir pfd), with body as a regular file's content.
// archive/tar's Reader already turns the legacy '\x00' typeflag of old
// tarballs into TypeReg (TypeDir for a name ending in "/"), so those arrive
// here as TypeReg.
func createNode(root *os.Root, pfd int, name, base string, hdr *tar.Header, body io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		return nil
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return errors.New("symlink without target")
		}
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode |= unix.S_IFCHR
		case tar.TypeBlock:
			mode |= unix.S_IFBLK
		default:
			mode |= unix.S_IFIFO
		}
		dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
		if err := unix.Mknodat(pfd, base, mode, int(dev)); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
}

// setMetadata applies the owner, mode, xattrs and times of hdr to base in
// the dir pfd.
func setMetadata(pfd int, base string, hdr *tar.Header, opts unpackOptions) error {
	// Owner first: chown clears setuid/setgid bits and file capabilities.
	if opts.chown {
		if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Fchmodat(pfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	if err := setXattrs(pfd, base, hdr, opts.log); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeDir {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.AccessTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		if hdr.AccessTime.IsZero() {
			ts[0] = ts[1]
		}
		if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("set times: %w", err)
		}
	}
	return nil
}

// setXattrs applies the SCHILY.xattr.* records of hdr to base in the dir
// pfd. Overlay's own trusted.overlay.* attributes are never taken from a
// layer: they would let an image redirect lookups of the merged rootfs.
// Attributes the filesystem or our privileges do not allow are skipped.
func setXattrs(pfd int, base string, hdr *tar.Header, log *slog.Logger) error {
	target := fmt.Sprintf("/proc/self/fd/%d/%s", pfd, base)
	for k, v := range hdr.PAXRecords {
		key, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		if strings.HasPrefix(key, "trusted.overlay.") {
			log.Debug("layer xattr ignored", "entry", hdr.Name, "xattr", key)
			continue
		}
		err := unix.Lsetxattr(target, key, []byte(v), 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EPERM), errors.Is(err, unix.EOPNOTSUPP):
			log.Debug("layer xattr not applied", "entry", hdr.Name, "xattr", key, "error", err)
		default:
			return fmt.Errorf("set xattr %s: %w", key, err)
		}
	}
	return nil
}
