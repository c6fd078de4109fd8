//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// handlerEnv names the runtime handler the suite runs pods on when they
// name none: empty (the built-in default, runc under crin-shim), crun
// (under crin-shim; only where crun can run, e.g. the node lane's cgroup
// v2 VM), shimv2Handler (containerd-shim-runc-v2), lxcHandler (LXC
// through crin-lxc) or runscHandler (gVisor's containerd-shim-runsc-v1;
// only in the node lane's VM). With
//
//	CRIN_TEST_HANDLER=runc-v2 go test -tags integration -run 'TestExitCodes' ./test/integration/
//
// a test written for runc runs unchanged on the shim v2 backend. Tests of
// crin-shim's own faults (killing it, reading its files) only make sense on
// the default.
const handlerEnv = "CRIN_TEST_HANDLER"

// shimv2Config configures shimv2Handler: Debian's containerd-shim-runc-v2
// driving the runc the oci backend uses.
func shimv2Config(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("containerd-shim-runc-v2"); err != nil {
		t.Fatalf("containerd-shim-runc-v2 not installed (scripts/deps.sh installs Debian's containerd): %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
[runtimes.%s]
type = "shimv2"
runtime_type = "io.containerd.runc.v2"
[runtimes.%s.options]
binary_name = %q
`, shimv2Handler, shimv2Handler, runc)
}

// lxcHandler is the handler of the lxc runtime type: LXC containers
// through crin-lxc (built next to crind) under crin-shim.
const lxcHandler = "lxc"

// lxcConfig configures lxcHandler.
func lxcConfig() string {
	return fmt.Sprintf("\n[runtimes.%s]\ntype = \"lxc\"\n", lxcHandler)
}

// runscHandler is gVisor through its shim v2 runtime, on the systrap
// platform (docs/runtimes.md, "gVisor"). runsc and the shim are in
// $PATH (the node lane copies them into its VM).
const runscHandler = "runsc"

// runscConfig configures runscHandler.
func runscConfig(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"containerd-shim-runsc-v1", "runsc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not installed (scripts/gvisor.sh builds it; the node lane copies it into its VM): %v", bin, err)
		}
	}
	return fmt.Sprintf(`
[runtimes.%s]
type = "shimv2"
runtime_type = "io.containerd.runsc.v1"
[runtimes.%s.options]
platform = "systrap"
`, runscHandler, runscHandler)
}

// defaultHandlerConfig makes $CRIN_TEST_HANDLER the default runtime of
// the daemon whose config is cfg (extra is the test's own part of it).
func defaultHandlerConfig(t *testing.T, cfg, extra string) string {
	h := os.Getenv(handlerEnv)
	switch h {
	case "":
		return cfg
	case shimv2Handler:
		if !strings.Contains(extra, "[runtimes."+shimv2Handler+"]") {
			cfg += shimv2Config(t)
		}
	case lxcHandler:
		if !strings.Contains(extra, "[runtimes."+lxcHandler+"]") {
			cfg += lxcConfig()
		}
	case runscHandler:
		if !strings.Contains(extra, "[runtimes."+runscHandler+"]") {
			cfg += runscConfig(t)
		}
	case "crun":
		// configured by default (type oci under crin-shim)
	default:
		t.Fatalf("%s=%q: the suite knows %q, %q, %q and crun", handlerEnv, h, shimv2Handler, lxcHandler, runscHandler)
	}
	t.Logf("%s=%s: pods naming no handler run on %s", handlerEnv, h, h)
	// Top-level keys come before the first table.
	return fmt.Sprintf("default_runtime = %q\n", h) + cfg
}
