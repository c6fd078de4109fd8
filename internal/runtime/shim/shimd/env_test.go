package shimd

import (
	"os"
	"slices"
	"testing"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// TestShimEnv: crind starts a shim on one P unless it was told otherwise,
// and the shim takes that setting back out of the environment its runtime
// commands inherit.
func TestShimEnv(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	env := shim.Env()
	if !slices.Contains(env, "GOMAXPROCS=1") || !slices.Contains(env, shim.UnsetEnv+"=GOMAXPROCS") {
		t.Fatalf("shim env lacks GOMAXPROCS=1 and its unset marker: %q", env[max(0, len(env)-3):])
	}
	for _, kv := range [][2]string{{"GOMAXPROCS", "1"}, {shim.UnsetEnv, "GOMAXPROCS"}} {
		t.Setenv(kv[0], kv[1])
	}
	t.Setenv("GOGC", "100") // leave this process's collector alone
	tuneGC()
	for _, name := range []string{"GOMAXPROCS", shim.UnsetEnv} {
		if v, set := os.LookupEnv(name); set {
			t.Errorf("%s=%q is left for the runtime commands", name, v)
		}
	}

	t.Setenv("GOMAXPROCS", "2")
	if env := shim.Env(); slices.Contains(env, "GOMAXPROCS=1") {
		t.Errorf("crind's own GOMAXPROCS=2 was overridden for the shim")
	}
}
