// Package memprofile turns the Go runtime's heap profiling off in crind
// unless profiling was asked for. crind's main imports it before anything
// else that allocates much, so its init runs early.
//
// The runtime samples one allocation per 512 KiB by default and keeps a
// record per distinct allocation stack; the first sample maps a 1.4 MiB
// hash table whose pages become resident as distinct stacks are recorded.
// Only a heap profile reads those records, and crind serves one only with
// CRIND_DEBUG_PPROF set (cmd/crind/pprof.go, docs/memory.md).
package memprofile

import (
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Env is the variable that turns crind's profiling endpoints on.
const Env = "CRIND_DEBUG_PPROF"

func init() {
	pprofEnv, _ := syscall.Getenv(Env)
	godebug, _ := syscall.Getenv("GODEBUG")
	if !Keep(pprofEnv, godebug) {
		runtime.MemProfileRate = 0
	}
}

// Keep reports whether heap profiling stays at the runtime's setting:
// profiling is on (pprofEnv true) or GODEBUG sets memprofilerate itself.
func Keep(pprofEnv, godebug string) bool {
	if on, err := strconv.ParseBool(pprofEnv); err == nil && on {
		return true
	}
	for kv := range strings.SplitSeq(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(kv), "memprofilerate=") {
			return true
		}
	}
	return false
}
