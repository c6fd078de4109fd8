package serving

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/containerd/errdefs"
)

// recovered logs a recovered panic with its stack (once), counts it, and
// returns the Internal error that fails the request.
func recovered(ctx context.Context, log *slog.Logger, m *Metrics, server, rpc string, p any) error {
	m.panicked(server, rpc)
	msg := elide(fmt.Sprint(p), maxLoggedError)
	log.ErrorContext(ctx, "request panicked; failed alone, crind keeps serving",
		"server", server, "panic", msg, "stack", string(debug.Stack()))
	return fmt.Errorf("%s: internal error (panic: %s): %w", rpc, msg, errdefs.ErrInternal)
}

// RecoverHTTP wraps an HTTP handler of crind (the streaming server, the
// admin API) so that a panic fails that one request with HTTP 500 (when
// nothing was written yet; a hijacked stream is closed) instead of ending
// crind or, as net/http does on its own, silently dropping the connection.
// The panic is logged once with its stack and counted in
// crin_panics_total{server}. Every request's context carries a request id
// and its route for the log (see NewContextHandler).
//
// http.ErrAbortHandler is passed on: it is how a handler asks net/http to
// abort a response, not a fault.
func RecoverHTTP(log *slog.Logger, m *Metrics, server string, h http.Handler) http.Handler {
	log = slog.New(NewContextHandler(log.Handler()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, _ := withRequest(r.Context(), r.Method+" "+firstSegment(r.URL.Path))
		r = r.WithContext(ctx)
		rw := &recoverWriter{ResponseWriter: w}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler { //nolint:errorlint // a sentinel panic value, never wrapped
				panic(p)
			}
			// The mux stored the matched pattern in r: a bounded label.
			route := r.Pattern
			if route == "" {
				route = r.Method + " " + firstSegment(r.URL.Path)
			}
			err := recovered(ctx, log, m, server, route, p)
			if !rw.wrote && !rw.hijacked {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(rw, r)
	})
}

// firstSegment is the first element of an URL path ("/exec/TOKEN" is
// "/exec"): streaming URLs carry one-time tokens, which must not become
// metric labels or log noise.
func firstSegment(p string) string {
	p = strings.TrimPrefix(p, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		p = p[:i]
	}
	if len(p) > 32 {
		p = p[:32]
	}
	return "/" + p
}

// recoverWriter notes whether the response was started or the connection
// taken over, so a recovered panic knows whether it can still answer 500.
// It passes Flush and Hijack on: the streaming server upgrades connections.
type recoverWriter struct {
	http.ResponseWriter
	wrote    bool
	hijacked bool
}

func (w *recoverWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *recoverWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *recoverWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recoverWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("hijack: %T cannot be hijacked: %w", w.ResponseWriter, errors.ErrUnsupported)
	}
	w.hijacked = true
	return hj.Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recoverWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// RecoverSession turns a panic in a streaming session (exec, attach,
// port forward, which the streaming server may run on goroutines of its
// own, out of RecoverHTTP's reach) into the session's Internal error,
// logged once with its stack and counted as crin_panics_total{server=
// "stream", rpc=kind}. Use as
// defer serving.RecoverSession(ctx, log, m, "exec", &err): it must be
// the deferred call itself, or recover finds nothing.
func RecoverSession(ctx context.Context, log *slog.Logger, m *Metrics, kind string, err *error) {
	if p := recover(); p != nil {
		*err = recovered(ctx, slog.New(NewContextHandler(log.Handler())), m, "stream", kind, p)
	}
}
