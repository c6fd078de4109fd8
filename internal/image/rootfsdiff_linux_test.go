package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// newUpper makes the dirs of containerID's rootfs as PrepareRootfs does,
// without mounting anything, and returns its upper dir.
func newUpper(t *testing.T, s *Service, containerID string) string {
	t.Helper()
	upper := filepath.Join(s.containerDir(containerID), "upper")
	if err := os.MkdirAll(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	return upper
}

// layerTree describes every path under dir as a user of the layer sees
// it: type and mode, owner, content or link target or device, mtime,
// link count of files, and the xattrs a layer carries or overlay reads.
func layerTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d:%d", fi.Mode(), st.Uid, st.Gid)
		whiteout := st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %q nlink=%d", b, st.Nlink)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case st.Mode&unix.S_IFMT == unix.S_IFCHR:
			desc += fmt.Sprintf(" dev %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if !whiteout { // unpackTar makes whiteouts anew
			desc += " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
		}
		for _, k := range []string{"user.crin", opaqueXattr} {
			buf := make([]byte, 64)
			if n, err := unix.Lgetxattr(p, k, buf); err == nil {
				desc += fmt.Sprintf(" %s=%s", k, buf[:n])
			}
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fillUpper writes into upper what a container's writes leave there:
// files added and changed, a hard link, symlinks (one leading out of the
// layer, to outside), owners and an xattr, and as root a deleted file (a
// whiteout) and a dir made anew (opaque). It returns the paths that the
// excludes of TestRootfsDiffRoundTrip leave out.
func fillUpper(t *testing.T, upper, outside string) []string {
	t.Helper()
	root := os.Geteuid() == 0
	p := func(n string) string { return filepath.Join(upper, n) }
	for _, d := range []string{"etc", "bin", "home/app", "proc/1", "run/secrets", "dev/shm", "data", "tmp"} {
		must(t, os.MkdirAll(p(d), 0o755))
	}
	must(t, os.Chmod(p("home/app"), 0o750))
	must(t, os.Chmod(p("tmp"), 0o1777))
	files := map[string]string{
		"etc/hosts": "127.0.0.1 localhost\n", "bin/su": "suid", "home/app/f": "mine", "data/new": "fresh",
		"proc/1/status": "x", "run/secrets/token": "secret", "run/keep": "kept", "dev/shm/x": "x",
	}
	for n, body := range files {
		must(t, os.WriteFile(p(n), []byte(body), 0o644))
	}
	must(t, os.Chmod(p("bin/su"), 0o4755))
	must(t, os.Chmod(p("home/app/f"), 0o600))
	must(t, os.Link(p("etc/hosts"), p("etc/hosts2")))
	must(t, os.Symlink("busybox", p("bin/sh")))
	must(t, os.Symlink(outside, p("escape")))
	must(t, os.Symlink("../../../../../../.."+outside+"/secret", p("etc/escape")))
	must(t, unix.Mkfifo(p("tmp/fifo"), 0o640))
	if err := unix.Lsetxattr(p("home/app/f"), "user.crin", []byte("yes"), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
		t.Fatal(err)
	}
	if root {
		must(t, os.Chown(p("home/app"), 1000, 1001))
		must(t, os.Lchown(p("home/app/f"), 1000, 1001))
		must(t, os.Chmod(p("bin/su"), 0o4755)) // chown cleared it
		must(t, unix.Mknod(p("etc/gone"), unix.S_IFCHR, 0))
		must(t, unix.Setxattr(p("data"), opaqueXattr, []byte("y"), 0))
		// Never copied into a layer: overlay's own.
		must(t, unix.Setxattr(p("etc"), "trusted.overlay.origin", []byte("x"), 0))
	}
	// Fixed times last, on everything, so that they can be compared.
	mtime := time.Date(2026, 11, 28, 4, 5, 6, 0, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	must(t, filepath.WalkDir(upper, func(q string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, q, ts, unix.AT_SYMLINK_NOFOLLOW)
	}))
	return []string{"proc", "proc/1", "proc/1/status", "run/secrets", "run/secrets/token", "dev", "dev/shm", "dev/shm/x"}
}

func tarNames(t *testing.T, raw []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = hdr
	}
}

func TestRootfsDiffRoundTrip(t *testing.T) {
	root := os.Geteuid() == 0
	s := newService(t, Config{})
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600))
	upper := newUpper(t, s, "c1")
	left := fillUpper(t, upper, outside)

	var buf bytes.Buffer
	exclude := []string{"/proc", "/run/secrets/", "dev", "/nonexistent"}
	if err := s.RootfsDiff(ctxT(t), "c1", &buf, exclude); err != nil {
		t.Fatal(err)
	}
	hdrs := tarNames(t, buf.Bytes())
	for name, h := range hdrs {
		if strings.HasPrefix(name, "/") || strings.HasPrefix(name, "./") || strings.Contains(name, "secret") && name != "run/secrets" {
			t.Errorf("entry %q (link %q) in the diff", name, h.Linkname)
		}
	}
	if h := hdrs["escape"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != outside {
		t.Errorf("escape: %+v, want a symlink to %s", h, outside)
	}
	if h := hdrs["etc/hosts2"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "etc/hosts" {
		t.Errorf("etc/hosts2: %+v, want a hard link to etc/hosts", h)
	}
	if root {
		for _, n := range []string{"etc/.wh.gone", "data/.wh..wh..opq"} {
			if hdrs[n] == nil {
				t.Errorf("no %s in the diff", n)
			}
		}
		if _, ok := hdrs["etc/"].PAXRecords["SCHILY.xattr.trusted.overlay.origin"]; ok {
			t.Errorf("overlay's own xattr in the diff")
		}
	}

	fresh := newUpper(t, s, "c2")
	if err := s.ApplyRootfsDiff(ctxT(t), "c2", bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	want := layerTree(t, upper)
	for _, n := range left {
		delete(want, n)
	}
	if diff := cmp.Diff(want, layerTree(t, fresh)); diff != "" {
		t.Errorf("applied diff (-original +applied):\n%s", diff)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "host secret" {
		t.Errorf("outside secret: %q, %v", b, err)
	}
}

// TestRootfsDiffErrors checks that excluding "/" leaves an empty
// but valid tar, and that an unknown container is not found.
func TestRootfsDiffErrors(t *testing.T) {
	s := newService(t, Config{})
	upper := newUpper(t, s, "c1")
	must(t, os.WriteFile(filepath.Join(upper, "f"), []byte("x"), 0o644))
	var buf bytes.Buffer
	if err := s.RootfsDiff(ctxT(t), "c1", &buf, []string{"/"}); err != nil {
		t.Fatal(err)
	}
	if got := tarNames(t, buf.Bytes()); len(got) != 0 {
		t.Errorf("diff excluding / holds %d entries", len(got))
	}
	if err := s.RootfsDiff(ctxT(t), "nope", &buf, nil); !errdefs.IsNotFound(err) {
		t.Errorf("RootfsDiff of an unknown container = %v, want not found", err)
	}
	if err := s.ApplyRootfsDiff(ctxT(t), "nope", bytes.NewReader(buf.Bytes())); !errdefs.IsNotFound(err) {
		t.Errorf("ApplyRootfsDiff to an unknown container = %v, want not found", err)
	}
	if err := s.RootfsDiff(ctxT(t), "../c1", &buf, nil); !errdefs.IsInvalidArgument(err) {
		t.Errorf("RootfsDiff of container ../c1 = %v, want invalid argument", err)
	}
}

// TestApplyRootfsDiffRefusesEscapes checks that a hostile diff is refused
// as a hostile image layer is.
func TestApplyRootfsDiffRefusesEscapes(t *testing.T) {
	s := newService(t, Config{})
	newUpper(t, s, "c1")
	outside := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: outside}))
	must(t, tw.WriteHeader(&tar.Header{Name: "link/evil", Typeflag: tar.TypeReg, Mode: 0o644}))
	must(t, tw.Close())
	err := s.ApplyRootfsDiff(ctxT(t), "c1", &buf)
	if !errors.Is(err, ErrUnsafeEntry) || !strings.Contains(err.Error(), `"link/evil"`) {
		t.Errorf("ApplyRootfsDiff = %v, want ErrUnsafeEntry naming link/evil", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "evil")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("evil written outside the layer: %v", err)
	}
}
