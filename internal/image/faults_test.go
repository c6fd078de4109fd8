package image

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/crin-dev/crin/internal/image/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcCode maps err the way crind's interceptor does, failing the test if
// the mapping panics (a *net.DNSError in the chain used to).
func grpcCode(t *testing.T, err error) (code codes.Code) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("errgrpc.ToGRPC(%q) panicked: %v", err, p)
		}
	}()
	st, _ := status.FromError(errgrpc.ToGRPC(err))
	return st.Code()
}

// noiseImage is an image with one layer whose blob is larger than
// imagetest.StallMinBlob.
func noiseImage(t *testing.T) v1.Image {
	return imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.NoiseFile("noise", 256<<10)))
}

// partialBlobs lists downloads in progress or left behind.
func partialBlobs(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "blobs", "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestPullFaultCodes(t *testing.T) {
	empty := imagetest.StartRegistry(t)
	faults := &imagetest.Faults{}
	redirecting := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults})
	imagetest.Push(t, redirecting, "app:v1", noiseImage(t))
	faults.Set(imagetest.RedirectBlobs)

	s := newService(t, Config{Mirrors: map[string][]Endpoint{
		"nosuchhost.invalid":          {{URL: "http://" + empty}},
		"mirrored.nosuchhost.invalid": {{URL: "http://127.0.0.1:1"}, {URL: "http://" + empty + "/cache"}},
	}})
	tests := []struct {
		name  string
		ref   string
		class error
		code  codes.Code
		names []string
	}{
		{"host does not resolve", "other.nosuchhost.invalid/foo:1", errdefs.ErrUnavailable, codes.Unavailable,
			[]string{"other.nosuchhost.invalid"}},
		{"connection refused", "127.0.0.1:1/foo:1", errdefs.ErrUnavailable, codes.Unavailable, []string{"127.0.0.1:1"}},
		{"mirror 404, upstream does not resolve", "nosuchhost.invalid/foo:1", errdefs.ErrNotFound, codes.NotFound,
			[]string{"http://" + empty, "not found", "https://nosuchhost.invalid", "no such host"}},
		{"dead mirror, mirror 404, upstream does not resolve", "mirrored.nosuchhost.invalid/foo@sha256:" + strings.Repeat("ab", 32),
			errdefs.ErrNotFound, codes.NotFound, []string{"127.0.0.1:1", "http://" + empty + "/cache", "https://mirrored.nosuchhost.invalid"}},
		{"blob redirected to a host that does not resolve", redirecting + "/app:v1", errdefs.ErrUnavailable, codes.Unavailable,
			[]string{imagetest.RedirectHost}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Pull(ctxT(t), tc.ref, nil)
			if !errors.Is(err, tc.class) {
				t.Fatalf("pull %s: %v; want %v", tc.ref, err, tc.class)
			}
			if got := grpcCode(t, fmt.Errorf("pull image.image %q: %w", tc.ref, err)); got != tc.code {
				t.Errorf("gRPC code %v, want %v", got, tc.code)
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("error %q does not name %q", err, n)
				}
			}
		})
	}

	t.Run("digest mismatch", func(t *testing.T) {
		s := newService(t, Config{})
		opts := imagetest.RegistryOptions{Faults: &imagetest.Faults{}}
		host := imagetest.StartRegistryWithOptions(t, opts)
		imagetest.Push(t, host, "app:v1", noiseImage(t))
		opts.Faults.Set(imagetest.CorruptBlobs)
		_, err := s.Pull(ctxT(t), host+"/app:v1", nil)
		if !errors.Is(err, errdefs.ErrDataLoss) || grpcCode(t, err) != codes.DataLoss {
			t.Fatalf("pull of a corrupt blob: %v; want ErrDataLoss", err)
		}
		if p := partialBlobs(t, s.root); len(p) != 0 {
			t.Errorf("partial blobs left: %v", p)
		}
	})
}

func TestPullRefusesHugeManifest(t *testing.T) {
	faults := &imagetest.Faults{}
	host := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults})
	imagetest.Push(t, host, "app:v1", noiseImage(t))
	s := newService(t, Config{})
	faults.Set(imagetest.HugeManifests)
	_, err := s.Pull(ctxT(t), host+"/app:v1", nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || grpcCode(t, err) != codes.ResourceExhausted {
		t.Fatalf("pull of a %d-byte manifest: %v; want ErrResourceExhausted", imagetest.HugeManifestSize, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(defaultMaxManifest)) {
		t.Errorf("error %q does not name the cap", err)
	}
	faults.Set(imagetest.Healthy)
	if _, err := s.Pull(ctxT(t), host+"/app:v1", nil); err != nil {
		t.Fatalf("pull once the manifest is small: %v", err)
	}
	// A cap below the real manifest refuses it too (Content-Length is known).
	small := newService(t, Config{MaxManifestBytes: 100})
	if _, err := small.Pull(ctxT(t), host+"/app:v1", nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("pull with a 100-byte manifest cap: %v; want ErrResourceExhausted", err)
	}
}

func TestPullRefusesLargeConfig(t *testing.T) {
	host := imagetest.StartRegistry(t)
	img := imagetest.Image(t, v1.Config{Env: []string{"X=" + strings.Repeat("x", 2000)}},
		imagetest.Layer(t, imagetest.File("f", "x", 0o644)))
	imagetest.Push(t, host, "app:v1", img)
	s := newService(t, Config{MaxConfigBytes: 1000})
	_, err := s.Pull(ctxT(t), host+"/app:v1", nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "image.max_config_bytes") {
		t.Fatalf("pull of a large config: %v; want ErrResourceExhausted naming image.max_config_bytes", err)
	}
}

func TestPullCapsUnpackedBytes(t *testing.T) {
	host := imagetest.StartRegistry(t)
	img := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.NoiseFile("a", 40<<10)),
		imagetest.Layer(t, imagetest.NoiseFile("b", 40<<10)))
	imagetest.Push(t, host, "app:v1", img)
	s := newService(t, Config{MaxUnpackedBytes: 64 << 10})
	_, err := s.Pull(ctxT(t), host+"/app:v1", nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "image.max_unpacked_bytes") {
		t.Fatalf("pull over the unpack cap: %v; want ErrResourceExhausted naming image.max_unpacked_bytes", err)
	}
	// At most one layer fit; nothing of the failed pull stays.
	if d := layerDirs(t, s.root); len(d) != 0 {
		t.Errorf("layer dirs left: %v", d)
	}
	if n := blobCount(t, s.root); n != 0 {
		t.Errorf("%d blobs left", n)
	}
	big := newService(t, Config{MaxUnpackedBytes: 100 << 10})
	if _, err := big.Pull(ctxT(t), host+"/app:v1", nil); err != nil {
		t.Fatalf("pull under the cap: %v", err)
	}
}

func TestPullAbandonsStalledRegistry(t *testing.T) {
	faults := &imagetest.Faults{}
	var requests sync.Map
	host := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults,
		Observe: func(r *http.Request) { requests.Store(r.URL.Path, true) }})
	imagetest.Push(t, host, "app:v1", noiseImage(t))
	faults.Set(imagetest.StallBlobs)
	s := newService(t, Config{PullProgressTimeout: 500 * time.Millisecond})
	_, err := s.Pull(ctxT(t), host+"/app:v1", nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || grpcCode(t, err) != codes.Unavailable {
		t.Fatalf("pull from a stalled registry: %v; want ErrUnavailable", err)
	}
	for _, want := range []string{host, "image.pull_progress_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if p := partialBlobs(t, s.root); len(p) != 0 {
		t.Errorf("partial blobs left: %v", p)
	}
	if n := blobCount(t, s.root); n != 0 {
		t.Errorf("%d blobs left", n)
	}
	faults.Set(imagetest.Healthy)
	if _, err := s.Pull(ctxT(t), host+"/app:v1", nil); err != nil {
		t.Fatalf("pull once the registry behaves: %v", err)
	}
}

// TestPullAbandonsSilentRegistry pulls from a host that accepts
// connections and never answers: the progress timeout covers waiting for a
// response too.
func TestPullAbandonsSilentRegistry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	s := newService(t, Config{PullProgressTimeout: 300 * time.Millisecond})
	_, err = s.Pull(ctxT(t), ln.Addr().String()+"/app:v1", nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "image.pull_progress_timeout") {
		t.Fatalf("pull from a silent registry: %v; want ErrUnavailable naming image.pull_progress_timeout", err)
	}
}

func TestClassOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"enospc", fmt.Errorf("store blob: %w", &fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}), errdefs.ErrResourceExhausted},
		{"edquot", fmt.Errorf("unpack: %w", syscall.EDQUOT), errdefs.ErrResourceExhausted},
		{"unsafe entry", fmt.Errorf("entry %q: %w", "../x", ErrUnsafeEntry), ErrUnsafeEntry},
		{"classified", fmt.Errorf("x: %w", errdefs.ErrNotFound), errdefs.ErrNotFound},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), errdefs.ErrUnavailable},
		{"plain", errors.New("boom"), errdefs.ErrUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classOf(tc.err); !errors.Is(got, tc.want) {
				t.Errorf("classOf(%v) = %v, want %v", tc.err, got, tc.want)
			}
			err := settle(tc.err)
			if err.Error() != tc.err.Error() || !errors.Is(err, tc.want) {
				t.Errorf("settle(%v) = %v", tc.err, err)
			}
			grpcCode(t, err)
		})
	}
	if c := grpcCode(t, settle(fmt.Errorf("x: %w", ErrUnsafeEntry))); c != codes.InvalidArgument {
		t.Errorf("unsafe entry is %v, want InvalidArgument", c)
	}
}
