package imagetest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestBusyboxRoundTrip(t *testing.T) {
	img := Busybox(t)
	host := StartRegistry(t)
	digest := Push(t, host, "library/busybox:latest", img)

	ref, err := name.ParseReference(host + "/library/busybox@" + digest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Cmd, []string{"sh"}) || len(cf.Config.Env) != 1 || cf.OS != "linux" {
		t.Errorf("config %+v", cf.Config)
	}
	files := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(got))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = hdr
	}
	for _, want := range []string{"bin/busybox", "bin/sh", "bin/sleep", "bin/cat", "bin/ps", "bin/wget", "etc/passwd", "etc/group", "tmp"} {
		if files[want] == nil {
			t.Errorf("%s missing from busybox image", want)
		}
	}
	if h := files["tmp"]; h != nil && h.Mode&0o7777 != 0o1777 {
		t.Errorf("tmp mode %o, want 1777", h.Mode)
	}
	if h := files["bin/sh"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox") {
		t.Errorf("bin/sh: type %c -> %q", h.Typeflag, h.Linkname)
	}
	// Builds are reproducible: the same digest every time.
	again, err := BuildBusybox()
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := again.Digest(); d.String() != digest {
		t.Errorf("rebuilt digest %s, want %s", d, digest)
	}
}

func TestTarBytesKeepsNamesAsGiven(t *testing.T) {
	raw, err := TarBytes(File("../evil", "x", 0), Symlink("l", "/etc"), Whiteout("a", "b"), Opaque("c"))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if want := []string{"../evil", "l", "a/.wh.b", "c/.wh..wh..opq"}; !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
}
