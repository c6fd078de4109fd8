package main

import (
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"

	"github.com/crin-dev/crin/cmd/crind/internal/memprofile"
)

// pprofEnabled reports whether CRIND_DEBUG_PPROF (memprofile.Env) is set
// to a true value (1, true): then Go's profiling endpoints are served
// under /debug/pprof/ on the admin socket (root only) and heap profiling
// stays on. Off by default: they are for measuring crind's own memory and
// CPU (docs/memory.md).
func pprofEnabled() bool {
	on, err := strconv.ParseBool(os.Getenv(memprofile.Env))
	return err == nil && on
}

// mountPprof serves the runtime's profiles under /debug/pprof/ on mux.
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
