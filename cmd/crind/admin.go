package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/admin"
	"github.com/crin-dev/crin/internal/nri"
	"github.com/crin-dev/crin/internal/serving"
)

// The admin API (internal/admin has the wire types and paths) is crind's
// introspection for crinctl, on a unix socket only root can reach (0600 in
// the 0700 state dir).

// pluginLister lists the NRI plugins (*nri.Adaptation).
type pluginLister interface {
	Plugins() []nri.PluginInfo
}

// ownerSource tells which NRI plugin set which field of a container
// (*cri.Service).
type ownerSource interface {
	NRIOwners(id string) (map[string]string, error)
}

// newAdminHandler serves the admin API. plugins is nil when NRI is off.
func newAdminHandler(plugins pluginLister, owners ownerSource) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+admin.PluginsPath, func(w http.ResponseWriter, r *http.Request) {
		if plugins == nil {
			writeAdminError(w, http.StatusServiceUnavailable, "nri is disabled (nri.enable = false in crind's config)")
			return
		}
		infos := plugins.Plugins()
		out := make([]admin.Plugin, 0, len(infos))
		for _, p := range infos {
			out = append(out, adminPluginFrom(p))
		}
		writeAdminJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/containers/{id}/nri-owners", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		m, err := owners.NRIOwners(id)
		if err != nil {
			writeAdminError(w, adminStatus(err), fmt.Sprintf("nri owners of container %s: %v", id, err))
			return
		}
		if m == nil {
			m = map[string]string{}
		}
		writeAdminJSON(w, http.StatusOK, m)
	})
	if pprofEnabled() {
		mountPprof(mux)
	}
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		writeAdminError(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s %s (endpoints: GET /v1/nri/plugins, GET /v1/containers/{id}/nri-owners)", r.Method, r.URL.Path))
	})
	return mux
}

func adminPluginFrom(p nri.PluginInfo) admin.Plugin {
	events := p.Events
	if events == nil {
		events = []string{}
	}
	out := admin.Plugin{
		Index:          p.Index,
		Name:           p.Name,
		Kind:           string(p.Kind),
		Events:         events,
		State:          string(p.State),
		FailurePolicy:  admin.FailurePolicy(p.FailurePolicy),
		Required:       p.Required,
		RequestTimeout: p.RequestTimeout.String(),
		Calls:          p.Calls,
		Failures:       p.Failures,
		MeanLatency:    p.Latency.String(),
		Restarts:       p.Restarts,
		LastError:      p.LastError,
	}
	if p.State == nri.StateBackoff {
		out.Backoff = p.Backoff.String()
		out.NextAttempt = p.NextAttempt.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// adminStatus maps an errdefs class to an HTTP status.
func adminStatus(err error) int {
	switch {
	case errdefs.IsNotFound(err):
		return http.StatusNotFound
	case errdefs.IsInvalidArgument(err):
		return http.StatusBadRequest
	case errdefs.IsNotImplemented(err):
		return http.StatusNotImplemented
	case errdefs.IsUnavailable(err):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeAdminError(w http.ResponseWriter, status int, msg string) {
	writeAdminJSON(w, status, admin.Error{Error: msg})
}

func writeAdminJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// The client may be gone; there is no one left to tell.
	_ = enc.Encode(v)
}

// listenAdmin listens on a fresh unix socket only its owner (root) can
// use. The directory is created 0700 if missing; the socket is chmod 0600
// before anything is served.
func listenAdmin(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale admin socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	return lis, nil
}

// newAdminServer returns the http.Server for the admin API. A request
// that panics fails alone with 500; the panic is logged and counted in m
// (nil: not counted).
func newAdminServer(plugins pluginLister, owners ownerSource, log *slog.Logger, m *serving.Metrics) *http.Server {
	return &http.Server{
		Handler:           serving.RecoverHTTP(log, m, "admin", newAdminHandler(plugins, owners)),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
}
