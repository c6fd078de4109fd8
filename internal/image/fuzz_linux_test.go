package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// unpackJail is a layer dir with a sibling "outside" dir holding a canary
// file: an unpack into <parent>/layer must leave everything else under
// parent as it was.
type unpackJail struct {
	parent, dir, outside string
}

func newUnpackJail(t *testing.T) unpackJail {
	parent := t.TempDir()
	j := unpackJail{parent: parent, dir: filepath.Join(parent, "layer"), outside: filepath.Join(parent, "outside")}
	for _, d := range []string{j.dir, j.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(j.outside, "canary"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	return j
}

// check fails the test if anything outside the layer dir changed.
func (j unpackJail) check(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir(j.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch p {
		case j.parent, j.outside:
			return nil
		case j.dir:
			return filepath.SkipDir
		case filepath.Join(j.outside, "canary"):
			b, err := os.ReadFile(p)
			if err != nil || string(b) != "canary" || !d.Type().IsRegular() {
				t.Errorf("canary changed: %q %v %v", b, d.Type(), err)
			}
			return nil
		}
		t.Errorf("unpack wrote %s, outside its dir", p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// unpackFuzzOptions bound what one fuzz input may write.
func unpackFuzzOptions() unpackOptions {
	return unpackOptions{budget: newUnpackBudget(1 << 20)}
}

// escapeSeeds are layers that try to write outside their root.
func escapeSeeds() [][]imagetest.Entry {
	return [][]imagetest.Entry{
		{imagetest.File("../outside/canary", "pwned", 0o644)},
		{imagetest.File("/etc/crin-fuzz", "x", 0o644)},
		{imagetest.Symlink("link", "../outside"), imagetest.File("link/canary", "pwned", 0o644)},
		{imagetest.Symlink("abs", "/"), imagetest.File("abs/tmp/crin-fuzz", "x", 0o644)},
		{imagetest.Dir("d", 0o755), imagetest.Symlink("d/up", ".."), imagetest.File("d/up/../outside/x", "x", 0o644)},
		{imagetest.Hardlink("h", "../outside/canary")},
		{imagetest.Symlink("s", "../outside/canary"), imagetest.Hardlink("h", "s"), imagetest.File("h", "x", 0o644)},
		{imagetest.File("a", "x", 0o644), imagetest.Whiteout("", "a"), imagetest.Opaque("")},
		{imagetest.Whiteout("", ".."), imagetest.Whiteout("../outside", "canary")},
		{{Name: "dev", Type: tar.TypeChar, Devmajor: 1, Devminor: 3}, {Name: "fifo", Type: tar.TypeFifo}},
		{{Name: "x", Type: tar.TypeReg, Body: "x", Xattrs: map[string]string{"trusted.overlay.redirect": "/outside", "user.a": "b"}}},
	}
}

// FuzzUnpackTar feeds raw bytes, as a tar stream, to the unpacker.
func FuzzUnpackTar(f *testing.F) {
	for _, entries := range escapeSeeds() {
		raw, err := imagetest.TarBytes(entries...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0}, 1024))
	f.Fuzz(func(t *testing.T, raw []byte) {
		j := newUnpackJail(t)
		_ = unpackTar(context.Background(), bytes.NewReader(raw), j.dir, unpackFuzzOptions())
		j.check(t)
	})
}

// FuzzUnpackEntries builds a tar from entries decoded from the fuzz input
// (names and link targets from an alphabet rich in "..", "/" and symlinks
// to the outside), so that the fuzzer reaches the unpacker's path handling
// rather than the tar reader's header checks.
func FuzzUnpackEntries(f *testing.F) {
	f.Add([]byte{2, 3, 10, 1, 0, 4, 12, 0, 0, 2})
	f.Add([]byte{5, 2, 0, 3, 3, 9, 0, 0, 0, 2, 0, 2, 3, 0, 0, 1})
	f.Add([]byte{0, 1, 4, 0, 1, 7, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		j := newUnpackJail(t)
		entries := decodeFuzzEntries(data, j.outside)
		raw, err := imagetest.TarBytes(entries...)
		if err != nil {
			return
		}
		_ = unpackTar(context.Background(), bytes.NewReader(raw), j.dir, unpackFuzzOptions())
		j.check(t)
	})
}

// decodeFuzzEntries reads entries from data: per entry a type byte, a name
// and a link target (each a count byte and that many alphabet tokens), and
// a body length byte. "@OUT" stands for the absolute path of the outside
// dir.
func decodeFuzzEntries(data []byte, outside string) []imagetest.Entry {
	types := []byte{tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo, tar.TypeReg}
	alphabet := []string{"a", "b", "..", ".", "/", "@OUT", "canary", "outside", ".wh.", ".wh..wh..opq", "c/", "../", "/", "x"}
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	word := func() string {
		var sb strings.Builder
		for n := int(next() % 6); n > 0; n-- {
			sb.WriteString(alphabet[int(next())%len(alphabet)])
		}
		return strings.ReplaceAll(sb.String(), "@OUT", outside)
	}
	var out []imagetest.Entry
	for len(data) > 0 && len(out) < 32 {
		typ := types[int(next())%len(types)]
		e := imagetest.Entry{Type: typ, Name: word(), Linkname: word()}
		if typ == tar.TypeReg {
			e.Body = strings.Repeat("z", int(next()))
		}
		if e.Name == "" {
			e.Name = "e"
		}
		out = append(out, e)
	}
	return out
}
