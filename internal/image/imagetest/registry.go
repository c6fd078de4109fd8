package imagetest

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// RegistryOptions tune a test registry.
type RegistryOptions struct {
	// Username and Password, when set, are required (HTTP basic auth) for
	// every GET. HEAD and pushes stay open so that Push works without
	// credentials.
	Username, Password string
	// Observe, when set, is called for every request before it is served
	// (from the server's goroutines: it must be safe for concurrent use).
	Observe func(*http.Request)
	// Faults, when set, makes the registry misbehave as it says.
	Faults *Faults
}

// Fault is a way a test registry misbehaves.
type Fault int32

// The faults a registry can inject.
const (
	// Healthy serves every request.
	Healthy Fault = iota
	// StallBlobs answers a GET of a blob larger than StallMinBlob with its
	// headers and half its body, then sends nothing until the client goes
	// away.
	StallBlobs
	// RedirectBlobs redirects (307) every blob GET to the same path on
	// RedirectHost, a host that does not resolve.
	RedirectBlobs
	// HugeManifests answers every manifest GET with a HugeManifestSize body
	// (a manifest padded with spaces), streamed without Content-Length.
	HugeManifests
	// CorruptBlobs answers blob GETs with one byte of the content changed.
	CorruptBlobs
)

// Sizes and hosts of the faults.
const (
	StallMinBlob     = 64 << 10
	HugeManifestSize = 50 << 20
	RedirectHost     = "cdn.nosuchhost.invalid"
)

// Faults holds the fault a registry injects; Set switches it at any time.
// The zero value is Healthy.
type Faults struct{ f atomic.Int32 }

// Set makes the registry inject f from its next request on.
func (fs *Faults) Set(f Fault) { fs.f.Store(int32(f)) }

func (fs *Faults) get() Fault {
	if fs == nil {
		return Healthy
	}
	return Fault(fs.f.Load())
}

// serveFault serves r with fault f, or returns false when f does not apply
// to r.
func serveFault(f Fault, reg http.Handler, w http.ResponseWriter, r *http.Request) bool {
	blob := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:")
	switch {
	case f == RedirectBlobs && blob:
		http.Redirect(w, r, "http://"+RedirectHost+r.URL.Path, http.StatusTemporaryRedirect)
		return true
	case f == HugeManifests && IsManifestRequest(r):
		w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
		w.WriteHeader(http.StatusOK)
		head := `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","layers":[`
		_, _ = io.WriteString(w, head)
		pad := []byte(strings.Repeat(" ", 64<<10))
		for n := len(head); n < HugeManifestSize-2; n += len(pad) {
			if _, err := w.Write(pad); err != nil {
				return true
			}
		}
		_, _ = io.WriteString(w, "]}")
		return true
	case (f == StallBlobs || f == CorruptBlobs) && blob:
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if rec.Code != http.StatusOK || (f == StallBlobs && len(body) <= StallMinBlob) {
			return false
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(http.StatusOK)
		if f == CorruptBlobs {
			body[len(body)/2] ^= 0xff
			_, _ = w.Write(body)
			return true
		}
		_, _ = w.Write(body[:len(body)/2])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		<-r.Context().Done()
		return true
	}
	return false
}

// Handler returns the registry as an http.Handler.
func Handler(opts RegistryOptions) http.Handler {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.Observe != nil {
			opts.Observe(r)
		}
		if opts.Username != "" && r.Method == http.MethodGet {
			u, p, ok := r.BasicAuth()
			if !ok || u != opts.Username || p != opts.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="imagetest"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if f := opts.Faults.get(); f != Healthy && serveFault(f, reg, w, r) {
			return
		}
		reg.ServeHTTP(w, r)
	})
}

// Serve serves a registry on addr ("127.0.0.1:0" for a random port) until
// Close is called on the returned server. It returns the server and the
// host:port it listens on.
func Serve(addr string, opts RegistryOptions) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: Handler(opts), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends when srv is closed
	return srv, ln.Addr().String(), nil
}

// StartRegistry serves an empty registry on 127.0.0.1 at a random port for
// the lifetime of the test and returns its host:port. ggcr (and so the
// image service) reaches 127.0.0.1 over plain http without configuration.
func StartRegistry(t testing.TB) string {
	t.Helper()
	return StartRegistryWithOptions(t, RegistryOptions{})
}

// StartRegistryWithOptions is StartRegistry with options.
func StartRegistryWithOptions(t testing.TB, opts RegistryOptions) string {
	t.Helper()
	srv, host, err := Serve("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return host
}

// PushImage pushes img to host as repoTag ("library/busybox:latest") and
// returns the manifest digest ("sha256:...").
func PushImage(ctx context.Context, host, repoTag string, img v1.Image) (string, error) {
	ref, err := name.ParseReference(host+"/"+repoTag, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("parse %s/%s: %w", host, repoTag, err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuth(authn.Anonymous)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", ref, err)
	}
	return d.String(), nil
}

// Push is PushImage for tests.
func Push(t testing.TB, host, repoTag string, img v1.Image) string {
	t.Helper()
	d, err := PushImage(t.Context(), host, repoTag, img)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushIndex pushes an image index (see Index) as repoTag and returns its
// digest.
func PushIndex(t testing.TB, host, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// IsManifestRequest reports whether r reads a manifest (GET, not HEAD), for
// counting pulls with RegistryOptions.Observe.
func IsManifestRequest(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/")
}
