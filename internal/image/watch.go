package image

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// pullWatch is the HTTP side of one pull. It caps manifest bodies, and it
// cancels the pull when the registry sends nothing for the progress timeout
// while the pull waits for it (a request without its response, or a body
// not read to its end). Time spent unpacking, with no request open, does not
// count.
type pullWatch struct {
	base        http.RoundTripper
	maxManifest int64
	timeout     time.Duration // 0: no progress bound
	cancel      context.CancelCauseFunc
	timer       *time.Timer // runs check; nil without a timeout

	// mu guards the fields below.
	mu     sync.Mutex
	active map[string]int // open requests and bodies, by host
	open   int            // sum of active
	last   time.Time      // last byte or response, or when open became 1
	done   bool           // stop was called
}

// stallError is the cause a pull is cancelled with when its registry stops
// sending.
type stallError struct {
	hosts   []string
	timeout time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("registry %s sent nothing for %s (image.pull_progress_timeout)", strings.Join(e.hosts, ", "), e.timeout)
}

func (e *stallError) Unwrap() error { return errdefs.ErrUnavailable }

// newPullWatch watches the requests of one pull made through base; cancel
// cancels the pull.
func newPullWatch(base http.RoundTripper, maxManifest int64, timeout time.Duration, cancel context.CancelCauseFunc) *pullWatch {
	w := &pullWatch{base: base, maxManifest: maxManifest, timeout: timeout, cancel: cancel, active: map[string]int{}}
	if timeout > 0 {
		w.timer = time.AfterFunc(time.Hour, w.check)
		w.timer.Stop()
	}
	return w
}

// stop ends the watch; the pull is no longer cancelled for a stall.
func (w *pullWatch) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// check runs when the timer fires: it cancels the pull if nothing arrived
// for the timeout while something was open, else re-arms.
func (w *pullWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.open == 0 {
		return
	}
	if idle := time.Since(w.last); idle < w.timeout {
		w.timer.Reset(w.timeout - idle)
		return
	}
	hosts := make([]string, 0, len(w.active))
	for h := range w.active {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	w.done = true
	w.cancel(&stallError{hosts: hosts, timeout: w.timeout})
}

func (w *pullWatch) begin(host string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.active[host]++
	w.open++
	if w.open == 1 {
		w.last = time.Now()
		if w.timer != nil && !w.done {
			w.timer.Reset(w.timeout)
		}
	}
}

func (w *pullWatch) end(host string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active[host]--; w.active[host] <= 0 {
		delete(w.active, host)
	}
	w.open--
}

func (w *pullWatch) progress() {
	if w.timer == nil {
		return
	}
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

// RoundTrip implements http.RoundTripper.
func (w *pullWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	w.begin(host)
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		w.end(host)
		return nil, err
	}
	w.progress()
	var limit int64 = -1
	if isManifestRequest(req) {
		limit = w.maxManifest
		if resp.ContentLength > limit {
			_ = resp.Body.Close()
			w.end(host)
			return nil, manifestTooLarge(host, fmt.Sprintf("%d bytes", resp.ContentLength), limit)
		}
	}
	resp.Body = &watchedBody{rc: resp.Body, w: w, host: host, limit: limit}
	return resp, nil
}

// isManifestRequest reports whether req, or the request it was redirected
// from, reads a manifest or an index.
func isManifestRequest(req *http.Request) bool {
	for req != nil {
		if strings.Contains(req.URL.Path, "/manifests/") {
			return true
		}
		if req.Response == nil {
			return false
		}
		req = req.Response.Request
	}
	return false
}

func manifestTooLarge(host, size string, limit int64) error {
	return fmt.Errorf("manifest from %s is %s, over the %d-byte cap (image.max_manifest_bytes): %w",
		host, size, limit, errdefs.ErrResourceExhausted)
}

// watchedBody reports the bytes it reads to its watch and refuses to read
// past limit (when not negative).
type watchedBody struct {
	rc    io.ReadCloser
	w     *pullWatch
	host  string
	limit int64
	n     int64
	once  sync.Once
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.limit >= 0 && int64(len(p)) > b.limit-b.n+1 {
		// Never read more than one byte past the cap.
		p = p[:b.limit-b.n+1]
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		b.w.progress()
		b.n += int64(n)
	}
	if b.limit >= 0 && b.n > b.limit {
		b.finish()
		return 0, manifestTooLarge(b.host, "more than that", b.limit)
	}
	if err != nil {
		b.finish()
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.finish()
	return b.rc.Close()
}

func (b *watchedBody) finish() { b.once.Do(func() { b.w.end(b.host) }) }
