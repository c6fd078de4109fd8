// Package imagetest builds small OCI images and serves them from an
// in-process registry, for tests of the image service and of the whole
// daemon. Nothing here touches the network beyond 127.0.0.1.
//
// The usual flow in a test is:
//
//	host := imagetest.StartRegistry(t)
//	digest := imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
//	// pull host+"/library/busybox:latest" or host+"/library/busybox@"+digest
//
// Every function taking a testing.TB fails the test on error; the ones
// returning an error exist for programs (cmd/testregistry) that have no TB.
package imagetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BusyboxPath is the static busybox binary the busybox image is built from
// (Debian's busybox-static package).
const BusyboxPath = "/bin/busybox"

// epoch is the mtime of every entry the builders write, so that the same
// inputs always give the same digests.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fallbackApplets are linked when "busybox --list" cannot be run.
var fallbackApplets = []string{
	"cat", "cp", "date", "dd", "echo", "env", "false", "grep", "head", "hostname",
	"id", "ip", "kill", "ln", "ls", "mkdir", "mount", "mv", "nc", "ping", "ps",
	"pwd", "rm", "sh", "sleep", "stat", "tail", "test", "top", "touch", "true",
	"uname", "wc", "wget", "whoami",
}

// Entry is one raw tar entry. Builders write it exactly as given: Name and
// Linkname are not cleaned, so an Entry can describe a malicious layer
// ("../x", "/etc/x", a symlink pointing out of the root, ...).
type Entry struct {
	Name     string
	Type     byte  // tar.TypeReg when zero
	Mode     int64 // permission and setuid/setgid/sticky bits; 0644 (0755 for dirs) when zero
	UID, GID int
	Linkname string // target of a symlink or hard link
	Body     string // content of a regular file
	Devmajor int64
	Devminor int64
	Xattrs   map[string]string // written as SCHILY.xattr.* PAX records
}

// Dir is a directory entry.
func Dir(name string, mode int64) Entry { return Entry{Name: name, Type: tar.TypeDir, Mode: mode} }

// File is a regular file entry.
func File(name, body string, mode int64) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Mode: mode, Body: body}
}

// Symlink is a symbolic link entry name -> target.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Linkname: target, Mode: 0o777}
}

// Hardlink is a hard link entry name -> target (a path in the archive).
func Hardlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Linkname: target}
}

// Whiteout is the OCI whiteout entry that deletes dir/name of lower layers.
func Whiteout(dir, name string) Entry {
	return Entry{Name: joinName(dir, ".wh."+name), Type: tar.TypeReg, Mode: 0o600}
}

// Opaque is the OCI opaque whiteout that hides everything lower layers put
// in dir.
func Opaque(dir string) Entry {
	return Entry{Name: joinName(dir, ".wh..wh..opq"), Type: tar.TypeReg, Mode: 0o600}
}

// NoiseFile is a regular file of size bytes that do not compress (the same
// bytes for the same name and size), for layers whose blobs must be large.
func NoiseFile(name string, size int) Entry {
	h := fnv.New64a()
	_, _ = io.WriteString(h, name)
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(size)))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return Entry{Name: name, Type: tar.TypeReg, Mode: 0o644, Body: string(b)}
}

func joinName(dir, name string) string {
	if dir == "" || dir == "." {
		return name
	}
	return strings.TrimSuffix(dir, "/") + "/" + name
}

// TarBytes returns the uncompressed tar stream of entries, in order.
func TarBytes(entries ...Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{
			Typeflag: typ,
			Name:     e.Name,
			Linkname: e.Linkname,
			Mode:     mode,
			Uid:      e.UID,
			Gid:      e.GID,
			Devmajor: e.Devmajor,
			Devminor: e.Devminor,
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if len(e.Xattrs) > 0 {
			hdr.PAXRecords = map[string]string{}
			for k, v := range e.Xattrs {
				hdr.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write tar header %q: %w", e.Name, err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				return nil, fmt.Errorf("write tar body %q: %w", e.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	return buf.Bytes(), nil
}

// LayerFromTar wraps an uncompressed tar stream as a gzip-compressed layer.
func LayerFromTar(raw []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	})
}

// Layer builds a gzip-compressed layer holding entries exactly as given.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	raw, err := TarBytes(entries...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := LayerFromTar(raw)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// NewImage builds a linux image for runtime.GOARCH (Docker v2 schema 2 media
// types) with layers bottom first and the given runtime config.
func NewImage(cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// Image is NewImage for tests.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := NewImage(cfg, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// OCI returns img with OCI media types (manifest and config) instead of
// Docker's. Its layers keep their own media types.
func OCI(img v1.Image) v1.Image {
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON)
}

// Index builds an OCI image index of images, each annotated with its
// platform ("linux/amd64", "linux/arm64/v8", ...).
func Index(t testing.TB, images map[string]v1.Image) v1.ImageIndex {
	t.Helper()
	keys := make([]string, 0, len(images))
	for k := range images {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, k := range keys {
		p, err := v1.ParsePlatform(k)
		if err != nil {
			t.Fatalf("parse platform %q: %v", k, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        images[k],
			Descriptor: v1.Descriptor{Platform: p},
		})
	}
	return idx
}

// BusyboxEntries are the entries of the busybox image's single layer:
// /bin/busybox, a symlink in /bin for every applet, /etc/passwd with root,
// app (1000) and nobody (65534), /etc/group, /tmp (1777), /root, /home/app.
func BusyboxEntries() ([]Entry, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w (install busybox-static)", err)
	}
	applets := fallbackApplets
	if out, err := exec.Command(BusyboxPath, "--list").Output(); err == nil {
		applets = strings.Fields(string(out))
	}
	applets = slices.Clone(applets)
	slices.Sort(applets)
	applets = slices.Compact(applets)

	entries := []Entry{
		Dir("bin", 0o755),
		{Name: "bin/busybox", Type: tar.TypeReg, Mode: 0o755, Body: string(bin)},
	}
	for _, a := range applets {
		if a == "busybox" || strings.ContainsAny(a, "/") {
			continue
		}
		entries = append(entries, Symlink("bin/"+a, "busybox"))
	}
	entries = append(entries,
		Dir("dev", 0o755),
		Dir("etc", 0o755),
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"+
			"app:x:1000:1000:app:/home/app:/bin/sh\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644),
		File("etc/group", "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n", 0o644),
		Dir("home", 0o755),
		Entry{Name: "home/app", Type: tar.TypeDir, Mode: 0o755, UID: 1000, GID: 1000},
		Dir("proc", 0o755),
		Dir("root", 0o700),
		Dir("sys", 0o755),
		Dir("tmp", 0o1777),
		Dir("usr", 0o755),
		Dir("var", 0o755),
	)
	return entries, nil
}

// BusyboxConfig is the runtime config of the busybox image.
func BusyboxConfig() v1.Config {
	return v1.Config{
		Cmd: []string{"sh"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
}

// BuildBusybox builds the busybox image (see BusyboxEntries and
// BusyboxConfig). Its digest only depends on the busybox binary.
func BuildBusybox() (v1.Image, error) {
	entries, err := BusyboxEntries()
	if err != nil {
		return nil, err
	}
	raw, err := TarBytes(entries...)
	if err != nil {
		return nil, err
	}
	l, err := LayerFromTar(raw)
	if err != nil {
		return nil, fmt.Errorf("busybox layer: %w", err)
	}
	return NewImage(BusyboxConfig(), l)
}

// Busybox is BuildBusybox for tests.
func Busybox(t testing.TB) v1.Image {
	t.Helper()
	img, err := BuildBusybox()
	if err != nil {
		t.Fatal(err)
	}
	return img
}
