package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/crin-dev/crin/internal/nri"
)

// fakePlugins is a pluginLister with a fixed list.
type fakePlugins []nri.PluginInfo

func (f fakePlugins) Plugins() []nri.PluginInfo { return f }

// fakeOwners is an ownerSource over a map of containers; err, when set,
// is returned for every container.
type fakeOwners struct {
	containers map[string]map[string]string
	err        error
}

func (f fakeOwners) NRIOwners(id string) (map[string]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	m, ok := f.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	return m, nil
}

func TestAdminPlugins(t *testing.T) {
	h := newAdminHandler(fakePlugins{
		{Index: "00", Name: "default-validator", Kind: nri.KindBuiltin, Events: []string{"ValidateContainerAdjustment"}, State: nri.StateReady, RequestTimeout: 2 * time.Second},
		{Index: "10", Name: "resources", Kind: nri.KindPreinstalled, Events: []string{"CreateContainer", "UpdateContainer"}, State: nri.StateReady,
			FailurePolicy: nri.FailurePolicy{FailRequest: true}, Required: true, RequestTimeout: 500 * time.Millisecond,
			Calls: 12, Failures: 1, Latency: 1500 * time.Microsecond},
		{Index: "90", Name: "late", Kind: nri.KindExternal, State: nri.StateSynchronizing},
		{Index: "95", Name: "stuck", Kind: nri.KindPreinstalled, State: nri.StateBackoff, RequestTimeout: 2 * time.Second,
			Restarts: 3, LastError: "synchronize nri plugin: timed out", Backoff: 8 * time.Second,
			NextAttempt: time.Date(2026, 11, 24, 7, 0, 8, 0, time.FixedZone("x", 3600))},
	}, fakeOwners{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/nri/plugins", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	// Decode generically: the test pins the wire names crinctl relies on.
	var got []map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("body is not a JSON list: %v\n%s", err, rec.Body)
	}
	want := []map[string]any{
		{"index": "00", "name": "default-validator", "kind": "builtin", "events": []any{"ValidateContainerAdjustment"}, "state": "ready",
			"failure_policy": map[string]any{"fail_request": false, "keep_connected": false}, "required": false,
			"request_timeout": "2s", "calls": float64(0), "failures": float64(0), "mean_latency": "0s"},
		{"index": "10", "name": "resources", "kind": "preinstalled", "events": []any{"CreateContainer", "UpdateContainer"}, "state": "ready",
			"failure_policy": map[string]any{"fail_request": true, "keep_connected": false}, "required": true,
			"request_timeout": "500ms", "calls": float64(12), "failures": float64(1), "mean_latency": "1.5ms"},
		{"index": "90", "name": "late", "kind": "external", "events": []any{}, "state": "synchronizing",
			"failure_policy": map[string]any{"fail_request": false, "keep_connected": false}, "required": false,
			"request_timeout": "0s", "calls": float64(0), "failures": float64(0), "mean_latency": "0s"},
		{"index": "95", "name": "stuck", "kind": "preinstalled", "events": []any{}, "state": "backoff",
			"failure_policy": map[string]any{"fail_request": false, "keep_connected": false}, "required": false,
			"request_timeout": "2s", "calls": float64(0), "failures": float64(0), "mean_latency": "0s",
			"restarts": float64(3), "last_error": "synchronize nri plugin: timed out", "backoff": "8s", "next_attempt": "2026-11-24T06:00:08Z"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plugins (-want +got):\n%s", diff)
	}
}

func TestAdminErrors(t *testing.T) {
	owners := fakeOwners{containers: map[string]map[string]string{
		"c1": {"memory limit": "10-resources", `env "FOO"`: "20-env"},
		"c2": nil,
	}}
	for _, tc := range []struct {
		name       string
		h          http.Handler
		method     string
		path       string
		wantStatus int
		wantBody   string // substring
	}{
		{"owners", newAdminHandler(nil, owners), "GET", "/v1/containers/c1/nri-owners", 200, `"memory limit": "10-resources"`},
		{"no owners is an empty object", newAdminHandler(nil, owners), "GET", "/v1/containers/c2/nri-owners", 200, "{}"},
		{"unknown container", newAdminHandler(nil, owners), "GET", "/v1/containers/nope/nri-owners", 404, `"error": "nri owners of container nope: container \"nope\": not found"`},
		{"owners not implemented", newAdminHandler(nil, fakeOwners{err: errdefs.ErrNotImplemented}), "GET", "/v1/containers/c1/nri-owners", 501, "not implemented"},
		{"owners failure", newAdminHandler(nil, fakeOwners{err: fmt.Errorf("store broke")}), "GET", "/v1/containers/c1/nri-owners", 500, "store broke"},
		{"nri disabled", newAdminHandler(nil, owners), "GET", "/v1/nri/plugins", 503, "nri is disabled"},
		{"no plugins is an empty list", newAdminHandler(fakePlugins{}, owners), "GET", "/v1/nri/plugins", 200, "[]"},
		{"wrong method", newAdminHandler(fakePlugins{}, owners), "POST", "/v1/nri/plugins", 405, ""},
		{"unknown path", newAdminHandler(fakePlugins{}, owners), "GET", "/v1/pods", 404, "no admin endpoint GET /v1/pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.wantStatus {
				t.Errorf("status = %d, want %d (%s)", rec.Code, tc.wantStatus, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("body %q does not contain %q", rec.Body, tc.wantBody)
			}
		})
	}
}

func TestAdminSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "state", "admin.sock")
	// A stale socket from a crashed crind is replaced.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	lis, err := listenAdmin(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode = %v, want a 0600 socket", st.Mode())
	}
	srv := newAdminServer(fakePlugins{{Index: "00", Name: "v"}}, fakeOwners{}, slog.New(slog.DiscardHandler), nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	resp, err := client.Get("http://crind/v1/nri/plugins")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name": "v"`) {
		t.Errorf("over the socket: %d %s", resp.StatusCode, body)
	}
	client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
}

// panickyOwners panics on every lookup.
type panickyOwners struct{}

func (panickyOwners) NRIOwners(string) (map[string]string, error) { panic("owners broke") }

// TestAdminPanicFailsOneRequest checks that a panic in an admin endpoint
// answers 500 and leaves the server serving.
func TestAdminPanicFailsOneRequest(t *testing.T) {
	var logs bytes.Buffer
	srv := httptest.NewServer(newAdminServer(fakePlugins{{Index: "00", Name: "v"}}, panickyOwners{}, slog.New(slog.NewTextHandler(&logs, nil)), nil).Handler)
	defer srv.Close()
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/v1/containers/c1/nri-owners", http.StatusInternalServerError},
		{"/v1/nri/plugins", http.StatusOK},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
	if !strings.Contains(logs.String(), "owners broke") || !strings.Contains(logs.String(), "server=admin") {
		t.Errorf("panic not logged:\n%s", logs.String())
	}
}
