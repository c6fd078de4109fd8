package image

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func TestPullWatchCapsManifests(t *testing.T) {
	body := strings.Repeat("m", 2000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/v2/moved/manifests/"):
			http.Redirect(w, r, "/elsewhere/chunked", http.StatusTemporaryRedirect)
		case strings.HasSuffix(r.URL.Path, "/chunked"):
			w.(http.Flusher).Flush() // no Content-Length
			_, _ = io.WriteString(w, body)
		default:
			_, _ = io.WriteString(w, body)
		}
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path string
		capped     bool
	}{
		{"manifest with its length", "/v2/a/manifests/v1", true},
		{"manifest without a length", "/v2/a/manifests/chunked", true},
		{"manifest redirected elsewhere", "/v2/moved/manifests/v1", true},
		{"blob", "/v2/a/blobs/sha256:00", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			w := newPullWatch(http.DefaultTransport, 1000, 0, cancel)
			defer w.stop()
			c := &http.Client{Transport: w}
			resp, err := c.Get(srv.URL + tc.path)
			var n int
			if err == nil {
				var b []byte
				b, err = io.ReadAll(resp.Body)
				n = len(b)
				resp.Body.Close()
			}
			if tc.capped {
				if !errors.Is(err, errdefs.ErrResourceExhausted) || n > 1001 {
					t.Fatalf("read %d bytes, err %v; want ErrResourceExhausted after at most 1001 bytes", n, err)
				}
			} else if err != nil || n != len(body) {
				t.Fatalf("read %d bytes, err %v", n, err)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.open != 0 {
				t.Errorf("%d requests still open after the body was closed", w.open)
			}
		})
	}
}

func TestPullWatchIgnoresIdleTime(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	w := newPullWatch(http.DefaultTransport, 1000, 50*time.Millisecond, cancel)
	defer w.stop()
	// Nothing open: however long ago the last byte came, no stall.
	w.mu.Lock()
	w.last = time.Now().Add(-time.Hour)
	w.mu.Unlock()
	w.check()
	if ctx.Err() != nil {
		t.Fatalf("cancelled with nothing open: %v", context.Cause(ctx))
	}
	// A request open and nothing received: the timer fires.
	w.begin("h")
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not cancelled with a request open and nothing received")
	}
	var stall *stallError
	if !errors.As(context.Cause(ctx), &stall) || !errors.Is(context.Cause(ctx), errdefs.ErrUnavailable) {
		t.Errorf("cause %v, want a stallError", context.Cause(ctx))
	}
}
