package image

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/poll"
	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func newService(t *testing.T, cfg Config) *Service {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = filepath.Join(t.TempDir(), "root")
	}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// layerDirs lists the unpacked layer dirs under root.
func layerDirs(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "l"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func blobCount(t *testing.T, root string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func imageID(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func diffIDs(t *testing.T, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range cf.RootFS.DiffIDs {
		out = append(out, d.String())
	}
	return out
}

func TestPullByTagAndGet(t *testing.T) {
	host := imagetest.StartRegistry(t)
	bb := imagetest.Busybox(t)
	digest := imagetest.Push(t, host, "library/busybox:latest", bb)
	s := newService(t, Config{})
	ctx := ctxT(t)

	ref := host + "/library/busybox:latest"
	img, err := s.Pull(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Image{
		ID:          imageID(t, bb),
		RepoTags:    []string{ref},
		RepoDigests: []string{host + "/library/busybox@" + digest},
		Size:        img.Size,
		Config: RuntimeConfig{
			Cmd: []string{"sh"},
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		Layers: diffIDs(t, bb),
	}
	if diff := cmp.Diff(want, img); diff != "" {
		t.Errorf("pulled image (-want +got):\n%s", diff)
	}
	layers, _ := bb.Layers()
	wantSize, _ := layers[0].Size()
	if img.Size != uint64(wantSize) {
		t.Errorf("size %d, want %d", img.Size, wantSize)
	}

	// The layer is unpacked: busybox and its applet links are there.
	dirs := layerDirs(t, s.root)
	if len(dirs) != 1 {
		t.Fatalf("layer dirs %v, want 1", dirs)
	}
	l := filepath.Join(s.root, "l", dirs[0])
	if fi, err := os.Stat(filepath.Join(l, "bin", "busybox")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/busybox: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(l, "bin", "sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh -> %q, %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(l, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmp: %v %v, want sticky", fi, err)
	}

	hexID := strings.TrimPrefix(img.ID, "sha256:")
	for _, q := range []string{ref, host + "/library/busybox", host + "/library/busybox@" + digest,
		img.ID, hexID, hexID[:12], "sha256:" + hexID[:16]} {
		t.Run("get "+q, func(t *testing.T) {
			got, err := s.Get(q)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != img.ID {
				t.Errorf("id %s, want %s", got.ID, img.ID)
			}
		})
	}
	for _, q := range []string{"busybox", host + "/library/busybox:other", hexID[:11] + "0", "sha256:" + strings.Repeat("f", 64), strings.Repeat("e", 12)} {
		t.Run("get unknown "+q, func(t *testing.T) {
			if _, err := s.Get(q); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("err %v, want ErrNotFound", err)
			}
		})
	}
	if _, err := s.Get("Not A Ref"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Get bad ref: %v, want ErrInvalidArgument", err)
	}
	if list := s.List(); len(list) != 1 || list[0].ID != img.ID {
		t.Errorf("List = %v", list)
	}

	// Pull again: nothing new, same image.
	again, err := s.Pull(ctx, ref, nil)
	if err != nil || again.ID != img.ID || len(layerDirs(t, s.root)) != 1 {
		t.Errorf("second pull: %v, %v, layer dirs %v", again, err, layerDirs(t, s.root))
	}
}

func TestPullByDigest(t *testing.T) {
	host := imagetest.StartRegistry(t)
	bb := imagetest.Busybox(t)
	digest := imagetest.Push(t, host, "library/busybox:latest", bb)
	s := newService(t, Config{})
	ref := host + "/library/busybox@" + digest
	img, err := s.Pull(ctxT(t), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != imageID(t, bb) || len(img.RepoTags) != 0 || !slices.Equal(img.RepoDigests, []string{ref}) {
		t.Errorf("image %+v; want id %s, no tags, digest %s", img, imageID(t, bb), ref)
	}
	// A digest that the registry does not have.
	missing := host + "/library/busybox@sha256:" + strings.Repeat("a", 64)
	if _, err := s.Pull(ctxT(t), missing, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pull %s: %v, want ErrNotFound", missing, err)
	}
}

func TestPullIndexPicksPlatform(t *testing.T) {
	host := imagetest.StartRegistry(t)
	mine := imagetest.OCI(imagetest.Image(t, v1.Config{Cmd: []string{"mine"}}, imagetest.Layer(t, imagetest.File("arch", runtime.GOARCH, 0o644))))
	other := imagetest.OCI(imagetest.Image(t, v1.Config{Cmd: []string{"other"}}, imagetest.Layer(t, imagetest.File("arch", "other", 0o644))))
	idx := imagetest.Index(t, map[string]v1.Image{
		"linux/" + runtime.GOARCH: mine,
		"linux/s390x":             other,
	})
	digest := imagetest.PushIndex(t, host, "multi:v1", idx)
	s := newService(t, Config{})
	img, err := s.Pull(ctxT(t), host+"/multi:v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != imageID(t, mine) || !slices.Equal(img.Config.Cmd, []string{"mine"}) {
		t.Errorf("pulled %s %v; want the %s image %s", img.ID, img.Config.Cmd, runtime.GOARCH, imageID(t, mine))
	}
	if !slices.Equal(img.RepoDigests, []string{host + "/multi@" + digest}) {
		t.Errorf("repo digests %v; want the index digest %s", img.RepoDigests, digest)
	}
	// An index without our platform.
	imagetest.PushIndex(t, host, "foreign:v1", imagetest.Index(t, map[string]v1.Image{"linux/s390x": other}))
	if _, err := s.Pull(ctxT(t), host+"/foreign:v1", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pull of an index without linux/%s: %v, want ErrNotFound", runtime.GOARCH, err)
	}
}

func TestPullThroughMirror(t *testing.T) {
	mirror := imagetest.StartRegistry(t)
	bb := imagetest.Busybox(t)
	imagetest.Push(t, mirror, "cache/library/busybox:latest", bb)
	origin := imagetest.StartRegistry(t) // has nothing
	var originHits atomic.Int32
	originObserved := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{
		Observe: func(*http.Request) { originHits.Add(1) },
	})
	s := newService(t, Config{Mirrors: map[string][]Endpoint{
		// A dead mirror first: the next one is tried.
		"docker.io":    {{URL: "http://127.0.0.1:1/dead"}, {URL: "http://" + mirror + "/cache"}},
		origin:         {{URL: "http://" + mirror + "/cache"}},
		originObserved: {{URL: "http://" + mirror + "/cache"}},
	}})
	tests := []struct{ ref, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{origin + "/library/busybox", origin + "/library/busybox:latest"},
		{originObserved + "/library/busybox:latest", originObserved + "/library/busybox:latest"},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			img, err := s.Pull(ctxT(t), tc.ref, nil)
			if err != nil {
				t.Fatal(err)
			}
			if img.ID != imageID(t, bb) || !slices.Contains(img.RepoTags, tc.want) {
				t.Errorf("image %s tags %v; want %s tagged %s", img.ID, img.RepoTags, imageID(t, bb), tc.want)
			}
			if _, err := s.Get(tc.want); err != nil {
				t.Errorf("get %s: %v", tc.want, err)
			}
		})
	}
	if n := originHits.Load(); n != 0 {
		t.Errorf("origin got %d requests although the mirror had the image", n)
	}
	// Not on the mirror: the origin answers, and its answer is the error.
	if _, err := s.Pull(ctxT(t), origin+"/library/nothere:v1", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pull of a missing image: %v, want ErrNotFound", err)
	}
}

func TestPullErrors(t *testing.T) {
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	locked := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Username: "u", Password: "p"})
	imagetest.Push(t, locked, "private:v1", imagetest.Busybox(t))
	s := newService(t, Config{})
	tests := []struct {
		name string
		ref  string
		auth *Auth
		want error
	}{
		{"bad ref", "Bad/Ref", nil, errdefs.ErrInvalidArgument},
		{"empty ref", "", nil, errdefs.ErrInvalidArgument},
		{"unknown tag", host + "/library/busybox:nope", nil, errdefs.ErrNotFound},
		{"unknown repo", host + "/library/nope:latest", nil, errdefs.ErrNotFound},
		{"no credentials", locked + "/private:v1", nil, errdefs.ErrUnauthenticated},
		{"wrong credentials", locked + "/private:v1", &Auth{Username: "u", Password: "x"}, errdefs.ErrUnauthenticated},
		{"unreachable", "127.0.0.1:1/x:y", nil, errdefs.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Pull(ctxT(t), tc.ref, tc.auth)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.ref != "" && !strings.Contains(err.Error(), strings.Split(tc.ref, ":")[0]) {
				t.Errorf("error %q does not name the reference", err)
			}
		})
	}
	img, err := s.Pull(ctxT(t), locked+"/private:v1", &Auth{Username: "u", Password: "p"})
	if err != nil {
		t.Fatalf("pull with credentials: %v", err)
	}
	if len(img.RepoTags) != 1 {
		t.Errorf("tags %v", img.RepoTags)
	}
}

func TestConcurrentPullsAreDoneOnce(t *testing.T) {
	var manifests, blobs atomic.Int32
	host := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Observe: func(r *http.Request) {
		if imagetest.IsManifestRequest(r) {
			manifests.Add(1)
		}
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			blobs.Add(1)
		}
	}})
	base := imagetest.Layer(t, imagetest.File("base", strings.Repeat("b", 1<<20), 0o644))
	a := imagetest.Image(t, v1.Config{Cmd: []string{"a"}}, base, imagetest.Layer(t, imagetest.File("a", "a", 0o644)))
	b := imagetest.Image(t, v1.Config{Cmd: []string{"b"}}, base, imagetest.Layer(t, imagetest.File("b", "b", 0o644)))
	imagetest.Push(t, host, "app:a", a)
	imagetest.Push(t, host, "app:b", b)
	manifests.Store(0)
	blobs.Store(0)

	s := newService(t, Config{})
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := "a"
			if i%2 == 1 {
				tag = "b"
			}
			img, err := s.Pull(ctxT(t), host+"/app:"+tag, nil)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = img.ID
		}()
	}
	wg.Wait()
	for i, id := range ids {
		want := imageID(t, a)
		if i%2 == 1 {
			want = imageID(t, b)
		}
		if id != want {
			t.Errorf("pull %d got %s, want %s", i, id, want)
		}
	}
	// Each of the two images resolved about once (a caller arriving after a
	// pull finished pulls again; 16 callers starting together rarely do).
	if n := manifests.Load(); n < 2 || n > 4 {
		t.Errorf("%d manifest fetches for 2 images pulled 8 times each", n)
	}
	// Blobs: 2 configs + 3 distinct layers, each fetched once.
	if n := blobs.Load(); n != 5 {
		t.Errorf("%d blob fetches, want 5 (shared layer fetched once)", n)
	}
	if dirs := layerDirs(t, s.root); len(dirs) != 3 {
		t.Errorf("layer dirs %v, want 3", dirs)
	}
}

func TestRemoveAndGC(t *testing.T) {
	host := imagetest.StartRegistry(t)
	base := imagetest.Layer(t, imagetest.File("base", "shared", 0o644))
	a := imagetest.Image(t, v1.Config{Cmd: []string{"a"}}, base, imagetest.Layer(t, imagetest.File("a", "a", 0o644)))
	b := imagetest.Image(t, v1.Config{Cmd: []string{"b"}}, base, imagetest.Layer(t, imagetest.File("b", "b", 0o644)))
	imagetest.Push(t, host, "app:a", a)
	imagetest.Push(t, host, "app:a2", a)
	imagetest.Push(t, host, "app:b", b)
	s := newService(t, Config{})
	ctx := ctxT(t)
	for _, tag := range []string{"a", "a2", "b"} {
		if _, err := s.Pull(ctx, host+"/app:"+tag, nil); err != nil {
			t.Fatal(err)
		}
	}
	imgA, err := s.Get(host + "/app:a")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{host + "/app:a", host + "/app:a2"}; !slices.Equal(imgA.RepoTags, want) {
		t.Errorf("tags %v, want %v", imgA.RepoTags, want)
	}
	if n := len(layerDirs(t, s.root)); n != 3 {
		t.Fatalf("%d layer dirs, want 3", n)
	}
	// 2 images x (manifest + config) + 3 layers.
	if n := blobCount(t, s.root); n != 7 {
		t.Fatalf("%d blobs, want 7", n)
	}

	// Removing one tag removes the image and all its tags; the shared layer stays.
	if err := s.Remove(ctx, host+"/app:a2"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{host + "/app:a", host + "/app:a2", imgA.ID} {
		if _, err := s.Get(q); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("get %s after remove: %v, want ErrNotFound", q, err)
		}
	}
	if n := len(layerDirs(t, s.root)); n != 2 {
		t.Errorf("%d layer dirs after removing a, want 2", n)
	}
	if n := blobCount(t, s.root); n != 4 {
		t.Errorf("%d blobs after removing a, want 4", n)
	}
	if err := s.Remove(ctx, host+"/app:a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second remove: %v, want ErrNotFound", err)
	}
	if err := s.Remove(ctx, host+"/app:b"); err != nil {
		t.Fatal(err)
	}
	if dirs := layerDirs(t, s.root); len(dirs) != 0 {
		t.Errorf("layer dirs %v left after removing every image", dirs)
	}
	if n := blobCount(t, s.root); n != 0 {
		t.Errorf("%d blobs left after removing every image", n)
	}
	if l := s.List(); len(l) != 0 {
		t.Errorf("List = %v", l)
	}
}

func TestRetagKeepsOldImageByDigest(t *testing.T) {
	host := imagetest.StartRegistry(t)
	v1img := imagetest.Image(t, v1.Config{Cmd: []string{"v1"}}, imagetest.Layer(t, imagetest.File("v", "1", 0o644)))
	v2img := imagetest.Image(t, v1.Config{Cmd: []string{"v2"}}, imagetest.Layer(t, imagetest.File("v", "2", 0o644)))
	s := newService(t, Config{})
	imagetest.Push(t, host, "app:latest", v1img)
	old, err := s.Pull(ctxT(t), host+"/app", nil)
	if err != nil {
		t.Fatal(err)
	}
	imagetest.Push(t, host, "app:latest", v2img)
	cur, err := s.Pull(ctxT(t), host+"/app", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.RepoTags) != 0 || len(got.RepoDigests) != 1 {
		t.Errorf("old image tags %v digests %v; want no tag, its digest", got.RepoTags, got.RepoDigests)
	}
	if g, _ := s.Get(host + "/app:latest"); g == nil || g.ID != cur.ID {
		t.Errorf("tag resolves to %v, want %s", g, cur.ID)
	}
}

func TestPullRefusesEscapingLayer(t *testing.T) {
	host := imagetest.StartRegistry(t)
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	evil := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File("ok", "fine", 0o644)),
		imagetest.Layer(t,
			imagetest.Symlink("escape", victim),
			imagetest.File("escape/pwned", "x", 0o644),
		))
	imagetest.Push(t, host, "evil:v1", evil)
	imagetest.Push(t, host, "dotdot:v1", imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File("../../../../../../../../"+victim[1:]+"/pwned", "x", 0o644))))
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), Config{Root: filepath.Join(base, "root")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, entry string }{
		{"evil:v1", "escape/pwned"},
		{"dotdot:v1", "../../"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			_, err := s.Pull(ctxT(t), host+"/"+tc.ref, nil)
			if !errors.Is(err, ErrUnsafeEntry) || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("pull: %v; want ErrUnsafeEntry naming %q", err, tc.entry)
			}
			if ents, _ := os.ReadDir(victim); len(ents) != 0 {
				t.Errorf("written outside the root: %v", ents)
			}
			if _, err := s.Get(host + "/" + tc.ref); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("image recorded after a refused pull: %v", err)
			}
			// The other layer's unpack may still be winding down.
			poll.Until(t, 30*time.Second, "no temporary layer dir left", func() (bool, string) {
				dirs := layerDirs(t, s.root)
				return !slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(d, ".") }), fmt.Sprint(dirs)
			})
		})
	}
	// The good layer of the refused image is dropped.
	poll.Until(t, 30*time.Second, "no layer dir left after refused pulls", func() (bool, string) {
		dirs := layerDirs(t, s.root)
		return len(dirs) == 0, fmt.Sprint(dirs)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newService(t, Config{Root: s.root})
	if dirs := layerDirs(t, s2.root); len(dirs) != 0 {
		t.Errorf("layer dirs %v survive a restart with no image using them", dirs)
	}
}

func TestRestartKeepsImagesAndCleansLeftovers(t *testing.T) {
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	root := filepath.Join(t.TempDir(), "root")
	s, err := New(t.Context(), Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Pull(ctxT(t), host+"/library/busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a crash might leave: a half download, a half unpack, a layer
	// unpacked but never recorded.
	for _, d := range []string{"blobs/tmp/blob-123", "l/.tmp-123/bin", "l/0123456789ab/etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s = newService(t, Config{Root: root})
	got, err := s.Get(host + "/library/busybox:latest")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(img, got); diff != "" {
		t.Errorf("image after restart (-before +after):\n%s", diff)
	}
	if dirs := layerDirs(t, root); len(dirs) != 1 || dirs[0] == "0123456789ab" {
		t.Errorf("layer dirs after restart %v; want only the image's", dirs)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "blobs", "tmp")); len(ents) != 0 {
		t.Errorf("temporary blobs left: %v", ents)
	}
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("root mode %v, %v; want 0700", fi.Mode(), err)
	}
	u, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	if u.Mountpoint == "" || u.UsedBytes < img.Size || u.InodesUsed < 10 {
		t.Errorf("FsInfo %+v; want a mountpoint and at least %d bytes, 10 inodes", u, img.Size)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no root":    {},
		"colon root": {Root: filepath.Join(t.TempDir(), "a:b")},
		"bad mirror": {Root: t.TempDir(), Mirrors: map[string][]Endpoint{"docker.io": {{URL: "ftp://x"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(t.Context(), cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("New: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestPlainHTTPHosts(t *testing.T) {
	// ggcr reaches 127.0.0.1 and localhost over http by itself; any other
	// address (127.0.0.2 here) needs PlainHTTP.
	srv, host, err := imagetest.Serve("127.0.0.2:0", imagetest.RegistryOptions{})
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	imagetest.Push(t, host, "app:v1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("f", "x", 0o644))))

	s := newService(t, Config{})
	if _, err := s.Pull(ctxT(t), host+"/app:v1", nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("pull over https from a plain http registry: %v, want ErrUnavailable", err)
	}
	s = newService(t, Config{PlainHTTP: []string{host}})
	if _, err := s.Pull(ctxT(t), host+"/app:v1", nil); err != nil {
		t.Errorf("pull with %s in PlainHTTP: %v", host, err)
	}
}

// TestPullRefusesBadEntries checks that a layer entry no file system can
// hold, or a whiteout that hides nothing, fails the pull as
// InvalidArgument (ErrBadEntry) naming the layer and the entry, and that
// nothing of the image is left.
func TestPullRefusesBadEntries(t *testing.T) {
	host := imagetest.StartRegistry(t)
	long := strings.Repeat("n", 4000)
	imagetest.Push(t, host, "whiteout:v1", imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File("a/.wh..", "", 0o644))))
	imagetest.Push(t, host, "long:v1", imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File(long, "x", 0o644))))
	s, err := New(t.Context(), Config{Root: filepath.Join(t.TempDir(), "root")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, entry string }{
		{"whiteout:v1", `"a/.wh.."`},
		{"long:v1", "(4000 bytes)"},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			_, err := s.Pull(ctxT(t), host+"/"+tc.ref, nil)
			if !errors.Is(err, ErrBadEntry) || !errors.Is(err, errdefs.ErrInvalidArgument) ||
				!strings.Contains(err.Error(), "unpack layer sha256:") || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("pull: %v; want ErrBadEntry naming the layer and %s", err, tc.entry)
			}
			if len(err.Error()) > 1024 {
				t.Errorf("error of %d bytes: the entry name is not cut", len(err.Error()))
			}
			if _, err := s.Get(host + "/" + tc.ref); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("image recorded after a refused pull: %v", err)
			}
		})
	}
}
