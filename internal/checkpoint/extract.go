package checkpoint

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/containerd/errdefs"
)

// entryCost is what every entry counts against Extract's limit besides
// its content: a tar header block, so that a flood of empty entries is
// bounded too.
const entryCost = 512

// Extract unpacks the checkpoint archive at path archive (an uncompressed
// tar) into dir, an existing empty directory.
//
// Extract trusts nothing in the archive. Every entry is created inside
// dir: an absolute name or a ".." component is refused, and so is an entry
// whose parent is not a directory made by this extraction, so a symlink
// the archive holds is created as a symlink but never followed. Hard
// links, device nodes and fifos are refused, and so is an entry that
// already exists (unless both are directories). The content of regular
// files plus 512 bytes per entry must stay within limit bytes; more is
// errdefs.ErrResourceExhausted naming the limit. A refused entry is
// errdefs.ErrInvalidArgument naming it. On any error dir is emptied again.
func Extract(archive, dir string, limit int64) (err error) {
	if limit <= 0 {
		return fmt.Errorf("extract checkpoint archive %s: limit %d: must be positive: %w", archive, limit, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("extract checkpoint archive: %w", err)
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extract checkpoint archive %s: %w", archive, err)
	}
	defer root.Close()
	if err := checkEmpty(root, dir); err != nil {
		return fmt.Errorf("extract checkpoint archive %s: %w", archive, err)
	}
	defer func() {
		if err != nil {
			clearRoot(root)
		}
	}()
	x := extractor{root: root, limit: limit}
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<16))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("extract checkpoint archive %s: read tar: %w", archive, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("extract checkpoint archive %s: entry %q: %w", archive, hdr.Name, err)
		}
	}
	// Modes last: a directory without write permission still had to take
	// its entries.
	for _, d := range x.dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("extract checkpoint archive %s: %w", archive, err)
		}
	}
	return nil
}

// extractor is the state of one Extract.
type extractor struct {
	root  *os.Root
	limit int64
	used  int64
	dirs  []dirMode // directories with entries, to chmod at the end
}

type dirMode struct {
	name string
	mode fs.FileMode
}

// entry creates the file, directory or symlink of hdr, with body as a
// regular file's content.
func (x *extractor) entry(hdr *tar.Header, body io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	cost := int64(entryCost)
	if hdr.Typeflag == tar.TypeReg {
		cost += max(hdr.Size, 0)
	}
	if x.used += cost; x.used > x.limit || x.used < 0 {
		return fmt.Errorf("archive expands to more than the limit of %d bytes: %w", x.limit, errdefs.ErrResourceExhausted)
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("the archive root is not a directory: %w", errdefs.ErrInvalidArgument)
		}
		return nil
	}
	if err := x.parents(name); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeDir {
		if fi, err := x.root.Lstat(name); err == nil {
			return fmt.Errorf("an earlier entry, a %s, has this name: %w", kind(fi), errdefs.ErrInvalidArgument)
		}
	}
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(name, mode)
	case tar.TypeReg:
		return x.file(name, mode, body)
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return fmt.Errorf("symlink without a target: %w", errdefs.ErrInvalidArgument)
		}
		return x.root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		return fmt.Errorf("hard links are not allowed: %w", errdefs.ErrInvalidArgument)
	case tar.TypeChar, tar.TypeBlock:
		return fmt.Errorf("device nodes are not allowed: %w", errdefs.ErrInvalidArgument)
	case tar.TypeFifo:
		return fmt.Errorf("fifos are not allowed: %w", errdefs.ErrInvalidArgument)
	default:
		return fmt.Errorf("entry type %q is not allowed: %w", hdr.Typeflag, errdefs.ErrInvalidArgument)
	}
}

// cleanName turns a tar entry name into a clean path relative to the
// extraction root, refusing names that could leave it.
func cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("empty name: %w", errdefs.ErrInvalidArgument)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("absolute name: %w", errdefs.ErrInvalidArgument)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("NUL in name: %w", errdefs.ErrInvalidArgument)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("\"..\" in name: %w", errdefs.ErrInvalidArgument)
		}
	}
	return path.Clean(name), nil
}

// parents makes the missing parent directories of name and checks that
// those present are directories, not symlinks: no entry is ever written
// through a symlink.
func (x *extractor) parents(name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	prefix := ""
	for _, c := range strings.Split(dir, "/") {
		prefix = path.Join(prefix, c)
		fi, err := x.root.Lstat(prefix)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := x.root.Mkdir(prefix, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("parent %q is a %s, not a directory: %w", prefix, kind(fi), errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func (x *extractor) dir(name string, mode fs.FileMode) error {
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := x.root.Mkdir(name, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("a directory over an earlier entry, a %s: %w", kind(fi), errdefs.ErrInvalidArgument)
	}
	x.dirs = append(x.dirs, dirMode{name, mode})
	return nil
}

func (x *extractor) file(name string, mode fs.FileMode, body io.Reader) error {
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, body)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkEmpty fails unless the directory of root (named dir) is empty.
func checkEmpty(root *os.Root, dir string) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("extract into %s: directory is not empty: %w", dir, errdefs.ErrInvalidArgument)
	}
	return nil
}

// clearRoot removes what a failed extraction made; best effort, since it
// runs on an error path that already has its error.
func clearRoot(root *os.Root) {
	d, err := root.Open(".")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		_ = root.RemoveAll(n)
	}
}

// kind names the type of fi for an error.
func kind(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return m.Type().String()
	}
}
