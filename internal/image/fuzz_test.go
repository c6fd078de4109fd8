package image

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/crin-dev/crin/internal/image/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The fuzz targets here run their seeds in every `go test`; `go test
// -fuzz=FuzzX ./internal/image` explores further.

func FuzzParseReference(f *testing.F) {
	for _, s := range []string{
		"busybox", "busybox:1.36", "docker.io/library/busybox:latest", "library/busybox",
		"127.0.0.1:5000/a/b/c:v1", "localhost/x@sha256:" + strings.Repeat("a", 64),
		"nosuchhost.invalid/foo:1", "Bad/Ref", "", " busybox", "a//b", "a/../b", "x:", "@sha256:",
		"[::1]:5000/x:y", "x__y/z--w:tag_1.2", strings.Repeat("a/", 200) + "b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseReference(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("parseReference(%q): %v, not ErrInvalidArgument", s, err)
			}
			return
		}
		if (r.tag == "") == (r.digest == "") {
			t.Fatalf("parseReference(%q) = %+v: want exactly one of tag and digest", s, r)
		}
		// The normalized form names the same image.
		again, err := parseReference(r.String())
		if err != nil || again != r {
			t.Fatalf("parseReference(%q) = %q, which parses to %+v, %v", s, r.String(), again, err)
		}
	})
}

// manifestSeeds are registry bodies: a real manifest and config, an index,
// and near misses.
func manifestSeeds(f *testing.F) (manifests, configs [][]byte) {
	img := imagetest.Image(f, v1.Config{Cmd: []string{"sh"}}, imagetest.Layer(f, imagetest.File("a", "x", 0o644)))
	raw, err := img.RawManifest()
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		f.Fatal(err)
	}
	idx, err := imagetest.Index(f, map[string]v1.Image{"linux/amd64": img}).RawManifest()
	if err != nil {
		f.Fatal(err)
	}
	oci, err := imagetest.OCI(img).RawManifest()
	if err != nil {
		f.Fatal(err)
	}
	manifests = [][]byte{raw, oci, idx, []byte("{}"), []byte("null"), []byte(`{"schemaVersion":2,"layers":[{"digest":"sha256:x","size":-1}]}`),
		[]byte(`{"schemaVersion":2,"config":{"digest":"md5:00","size":1}}`), []byte("\xff")}
	configs = [][]byte{cfg, []byte("{}"), []byte(`{"rootfs":{"diff_ids":["sha256:00"]}}`), []byte("[")}
	return manifests, configs
}

func FuzzDecodeManifest(f *testing.F) {
	manifests, _ := manifestSeeds(f)
	for _, m := range manifests {
		f.Add(m, int64(4<<20))
	}
	f.Add(manifests[0], int64(1))
	f.Fuzz(func(t *testing.T, raw []byte, maxConfig int64) {
		mf, err := decodeManifest(raw, maxConfig)
		if err != nil {
			if c := errdefs.Resolve(err); !errors.Is(c, errdefs.ErrInvalidArgument) && !errors.Is(c, errdefs.ErrNotImplemented) && !errors.Is(c, errdefs.ErrResourceExhausted) {
				t.Fatalf("decodeManifest: %v has class %v", err, c)
			}
			return
		}
		if mf.Config.Size > maxConfig || mf.Config.Size < 0 || mf.Config.Digest.Algorithm != "sha256" {
			t.Fatalf("accepted config descriptor %+v (cap %d)", mf.Config, maxConfig)
		}
		for _, l := range mf.Layers {
			if !slices.Contains(acceptedLayerTypes, l.MediaType) || l.Size < 0 || len(l.Digest.Hex) != 64 {
				t.Fatalf("accepted layer %+v", l)
			}
			if _, err := (&Service{root: "/"}).blobPath(l.Digest.String()); err != nil {
				t.Fatalf("accepted layer digest %s has no blob path: %v", l.Digest, err)
			}
		}
	})
}

func FuzzDecodeConfig(f *testing.F) {
	manifests, configs := manifestSeeds(f)
	for _, c := range configs {
		f.Add(c, manifests[0])
	}
	f.Fuzz(func(t *testing.T, raw, rawManifest []byte) {
		var mf v1.Manifest
		if json.Unmarshal(rawManifest, &mf) != nil {
			return
		}
		cf, err := decodeConfig(raw, &mf)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("decodeConfig: %v, not ErrInvalidArgument", err)
			}
			return
		}
		if len(cf.RootFS.DiffIDs) != len(mf.Layers) {
			t.Fatalf("accepted %d diff ids for %d layers", len(cf.RootFS.DiffIDs), len(mf.Layers))
		}
		for _, d := range cf.RootFS.DiffIDs {
			if _, err := (&Service{dirs: map[string]string{}}).reserveDir(d.String()); err != nil && errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("accepted diff id %s that reserveDir refuses: %v", d, err)
			}
		}
		_ = runtimeConfig(cf.Config)
	})
}
