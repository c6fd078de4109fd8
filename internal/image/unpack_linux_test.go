package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// snapshot lists every path under dir with its type, size and link target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		out[strings.TrimPrefix(p, dir)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func unpackEntries(t *testing.T, dir string, entries ...imagetest.Entry) error {
	t.Helper()
	raw, err := imagetest.TarBytes(entries...)
	if err != nil {
		t.Fatal(err)
	}
	return unpackTar(context.Background(), bytes.NewReader(raw), dir, unpackOptions{chown: os.Geteuid() == 0})
}

func TestUnpackRefusesEscapes(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(filepath.Join(outside, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		entries []imagetest.Entry
		bad     string // the entry the error must name
	}{
		{"dotdot file", []imagetest.Entry{imagetest.File("../outside/evil", "x", 0o644)}, "../outside/evil"},
		{"dotdot deep", []imagetest.Entry{imagetest.Dir("a", 0o755), imagetest.File("a/../../outside/evil", "x", 0o644)}, "a/../../outside/evil"},
		{"dotdot inside still refused", []imagetest.Entry{imagetest.File("a/../b", "x", 0o644)}, "a/../b"},
		{"absolute", []imagetest.Entry{imagetest.File(outside+"/evil", "x", 0o644)}, outside + "/evil"},
		{"absolute etc", []imagetest.Entry{imagetest.File("/etc/crin-evil", "x", 0o644)}, "/etc/crin-evil"},
		{"relative symlink dir escape", []imagetest.Entry{
			imagetest.Symlink("link", "../outside"),
			imagetest.File("link/evil", "x", 0o644),
		}, "link/evil"},
		{"absolute symlink dir escape", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.File("link/evil", "x", 0o644),
		}, "link/evil"},
		{"symlink escape overwrites existing file", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.File("link/secret", "pwned", 0o644),
		}, "link/secret"},
		{"nested symlink escape", []imagetest.Entry{
			imagetest.Dir("a", 0o755),
			imagetest.Symlink("a/b", "../../outside/sub"),
			imagetest.File("a/b/evil", "x", 0o644),
		}, "a/b/evil"},
		{"dir replaced by symlink", []imagetest.Entry{
			imagetest.Dir("d", 0o755),
			imagetest.Symlink("d", outside),
			imagetest.Dir("d/newdir", 0o755),
		}, "d/newdir"},
		{"mkdir through symlink", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.File("link/x/y/evil", "x", 0o644),
		}, "link/x/y/evil"},
		{"symlink through symlink", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.Symlink("link/evil", "/etc/passwd"),
		}, "link/evil"},
		{"hardlink dotdot target", []imagetest.Entry{imagetest.Hardlink("hl", "../outside/secret")}, "hl"},
		{"hardlink absolute target", []imagetest.Entry{imagetest.Hardlink("hl", outside+"/secret")}, "hl"},
		{"hardlink through symlink", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.Hardlink("hl", "link/secret"),
		}, "hl"},
		{"hardlink placed through symlink", []imagetest.Entry{
			imagetest.File("f", "x", 0o644),
			imagetest.Symlink("link", outside),
			imagetest.Hardlink("link/hl", "f"),
		}, "link/hl"},
		{"fifo through symlink", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			{Name: "link/fifo", Type: tar.TypeFifo, Mode: 0o644},
		}, "link/fifo"},
		{"whiteout through symlink", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.Whiteout("link", "secret"),
		}, "link/.wh.secret"},
		{"opaque through symlink", []imagetest.Entry{
			imagetest.Symlink("link", outside),
			imagetest.Opaque("link"),
		}, "link/.wh..wh..opq"},
		{"whiteout dotdot", []imagetest.Entry{imagetest.Whiteout("..", "outside")}, "../.wh.outside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, outside)
			dir := filepath.Join(t.TempDir(), "layer")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			err := unpackEntries(t, dir, tc.entries...)
			if err == nil {
				t.Fatalf("unpack succeeded; want it refused")
			}
			t.Log(err)
			if !errors.Is(err, ErrUnsafeEntry) {
				t.Errorf("error %q does not wrap ErrUnsafeEntry", err)
			}
			if !strings.Contains(err.Error(), `"`+tc.bad+`"`) {
				t.Errorf("error %q does not name entry %q", err, tc.bad)
			}
			if diff := cmp.Diff(before, snapshot(t, outside)); diff != "" {
				t.Errorf("outside dir changed (-before +after):\n%s", diff)
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(outside, "secret"), &st); err != nil || st.Nlink != 1 {
				t.Errorf("outside secret: nlink %d, err %v; want 1 link", st.Nlink, err)
			}
		})
	}
}

func TestUnpackEntries(t *testing.T) {
	root := os.Geteuid() == 0
	dir := t.TempDir()
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	entries := []imagetest.Entry{
		imagetest.Dir("./etc", 0o755),
		imagetest.File("./etc/hosts", "127.0.0.1 localhost\n", 0o644),
		{Name: "bin/su", Type: tar.TypeReg, Mode: 0o4755, Body: "suid"},
		{Name: "home/app", Type: tar.TypeDir, Mode: 0o750, UID: 1000, GID: 1001},
		{Name: "home/app/f", Type: tar.TypeReg, Mode: 0o600, UID: 1000, GID: 1001, Body: "mine",
			Xattrs: map[string]string{"user.crin": "yes", "trusted.overlay.redirect": "/etc"}},
		imagetest.Dir("tmp", 0o1777),
		imagetest.Symlink("bin/sh", "busybox"),
		imagetest.Symlink("etc/abs", "/etc/hosts"), // a target is data: allowed
		imagetest.Hardlink("etc/hosts2", "etc/hosts"),
		{Name: "run/fifo", Type: tar.TypeFifo, Mode: 0o640},
		imagetest.File("replace", "first", 0o644),
		imagetest.Symlink("replace", "/etc/passwd"),
		imagetest.File("replace", "second", 0o644), // replaces the symlink, not written through it
	}
	if root {
		entries = append(entries,
			imagetest.Entry{Name: "dev/null", Type: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
			imagetest.Dir("data", 0o755),
			imagetest.Opaque("data"),
			imagetest.Whiteout("etc", "gone"),
		)
	}
	if err := unpackEntries(t, dir, entries...); err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }

	checks := []struct {
		name, path string
		mode       fs.FileMode
		uid, gid   uint32
	}{
		{"dir", "etc", fs.ModeDir | 0o755, 0, 0},
		{"file", "etc/hosts", 0o644, 0, 0},
		{"setuid", "bin/su", fs.ModeSetuid | 0o755, 0, 0},
		{"owned dir", "home/app", fs.ModeDir | 0o750, 1000, 1001},
		{"owned file", "home/app/f", 0o600, 1000, 1001},
		{"sticky", "tmp", fs.ModeDir | fs.ModeSticky | 0o777, 0, 0},
		{"fifo", "run/fifo", fs.ModeNamedPipe | 0o640, 0, 0},
		{"replaced", "replace", 0o644, 0, 0},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			fi, err := os.Lstat(p(c.path))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != c.mode {
				t.Errorf("mode %v, want %v", fi.Mode(), c.mode)
			}
			if root {
				var s unix.Stat_t
				_ = unix.Lstat(p(c.path), &s)
				if s.Uid != c.uid || s.Gid != c.gid {
					t.Errorf("owner %d:%d, want %d:%d", s.Uid, s.Gid, c.uid, c.gid)
				}
			}
			if !fi.IsDir() && !fi.ModTime().Equal(mtime) {
				t.Errorf("mtime %v, want %v", fi.ModTime(), mtime)
			}
		})
	}
	if got, _ := os.Readlink(p("bin/sh")); got != "busybox" {
		t.Errorf("bin/sh -> %q, want busybox", got)
	}
	if got, _ := os.Readlink(p("etc/abs")); got != "/etc/hosts" {
		t.Errorf("etc/abs -> %q, want /etc/hosts", got)
	}
	if b, _ := os.ReadFile(p("replace")); string(b) != "second" {
		t.Errorf("replace = %q, want second", b)
	}
	var a, b unix.Stat_t
	if err := unix.Stat(p("etc/hosts"), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p("etc/hosts2"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d and %d, nlink %d; want one inode with 2 links", a.Ino, b.Ino, a.Nlink)
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(p("home/app/f"), "user.crin", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("xattr user.crin = %q, %v; want yes", buf[:max(n, 0)], err)
	}
	if _, err := unix.Lgetxattr(p("home/app/f"), "trusted.overlay.redirect", buf); err == nil {
		t.Errorf("trusted.overlay.redirect from the layer was applied")
	}
	if !root {
		return
	}
	var dn unix.Stat_t
	if err := unix.Lstat(p("dev/null"), &dn); err != nil || dn.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(dn.Rdev) != 1 || unix.Minor(dn.Rdev) != 3 {
		t.Errorf("dev/null: mode %o rdev %d:%d err %v; want char 1:3", dn.Mode, unix.Major(dn.Rdev), unix.Minor(dn.Rdev), err)
	}
	var wo unix.Stat_t
	if err := unix.Lstat(p("etc/gone"), &wo); err != nil || wo.Mode&unix.S_IFMT != unix.S_IFCHR || wo.Rdev != 0 {
		t.Errorf("whiteout etc/gone: mode %o rdev %d err %v; want char 0:0", wo.Mode, wo.Rdev, err)
	}
	if _, err := os.Lstat(p("etc/.wh.gone")); !os.IsNotExist(err) {
		t.Errorf("whiteout marker etc/.wh.gone left in the layer: %v", err)
	}
	if n, err := unix.Lgetxattr(p("data"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("data opaque xattr = %q, %v; want y", buf[:max(n, 0)], err)
	}
	if _, err := os.Lstat(p("data/.wh..wh..opq")); !os.IsNotExist(err) {
		t.Errorf("opaque marker left in the layer: %v", err)
	}
}

// TestUnpackLegacyRegularFile checks that an entry with the pre-POSIX
// '\x00' typeflag of old tarballs is unpacked as a regular file, with its
// content counted against the budget.
func TestUnpackLegacyRegularFile(t *testing.T) {
	raw, err := imagetest.TarBytes(imagetest.File("old", "legacy body", 0o644))
	if err != nil {
		t.Fatal(err)
	}
	// tar.Writer never writes '\x00', so patch the first header's
	// typeflag (byte 156) and its checksum (bytes 148-155).
	if raw[156] != tar.TypeReg {
		t.Fatalf("typeflag %q, want %q", raw[156], tar.TypeReg)
	}
	raw[156] = 0
	copy(raw[148:156], "        ")
	sum := 0
	for _, c := range raw[:512] {
		sum += int(c)
	}
	copy(raw[148:156], fmt.Sprintf("%06o\x00 ", sum))

	dir := t.TempDir()
	small := newUnpackBudget(512 + 4)
	err = unpackTar(t.Context(), bytes.NewReader(raw), dir, unpackOptions{budget: small})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("unpack under a budget below the content: %v, want resource exhausted", err)
	}
	if err := unpackTar(t.Context(), bytes.NewReader(raw), dir, unpackOptions{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(dir, "old"))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Errorf("mode %v, want a regular file", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "old")); string(b) != "legacy body" {
		t.Errorf("content %q, want %q", b, "legacy body")
	}
}

func TestUnpackBlobChecksDiffID(t *testing.T) {
	raw, err := imagetest.TarBytes(imagetest.File("a", "x", 0o644))
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(blob, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrong := "sha256:" + strings.Repeat("0", 64)
	err = unpackBlob(context.Background(), blob, wrong, dir, unpackOptions{})
	if err == nil || !strings.Contains(err.Error(), "image config says "+wrong) {
		t.Fatalf("unpack with a wrong diff id: err %v; want a digest mismatch", err)
	}
}
