package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/crin-dev/crin/internal/config"
)

// goRuntime is what crind sets in its own Go runtime: the GC target
// (GOGC) and the soft memory limit (GOMEMLIMIT). A field is applied only
// when its set flag is true.
type goRuntime struct {
	gcPercent    int
	setGCPercent bool
	memoryLimit  int64
	setLimit     bool
}

// goRuntimeFrom maps [go_runtime] gc_percent and memory_limit_bytes onto
// the runtime settings. The environment variables, when set, win: the runtime has
// already applied them. gc_percent 0 and memory_limit_bytes 0 leave Go's
// defaults.
func goRuntimeFrom(cfg config.GoRuntime, lookupEnv func(string) (string, bool)) goRuntime {
	set := func(key string) bool { v, ok := lookupEnv(key); return ok && v != "" }
	var g goRuntime
	if !set("GOGC") && cfg.GCPercent > 0 {
		g.gcPercent, g.setGCPercent = cfg.GCPercent, true
	}
	if !set("GOMEMLIMIT") && cfg.MemoryLimitBytes > 0 {
		g.memoryLimit, g.setLimit = cfg.MemoryLimitBytes, true
	}
	return g
}

// tuneGoRuntime applies [go_runtime] (docs/memory.md).
func tuneGoRuntime(ctx context.Context, cfg *config.Config, log *slog.Logger) {
	g := goRuntimeFrom(cfg.GoRuntime, os.LookupEnv)
	if g.setGCPercent {
		debug.SetGCPercent(g.gcPercent)
	}
	if g.setLimit {
		debug.SetMemoryLimit(g.memoryLimit)
	}
	// SetGCPercent(-1) and SetMemoryLimit(-1) read without changing.
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	log.DebugContext(ctx, "go runtime", "gc_percent", gc, "memory_limit_bytes", debug.SetMemoryLimit(-1))
}
