//go:build integration

package integration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// backend is a runtime backend of crind the suite can run on (handlerEnv
// picks it).
type backend string

const (
	// oci is runc or crun under crin-shim: the default, and
	// CRIN_TEST_HANDLER=crun.
	oci backend = "oci"
	// shimv2 is a containerd shim v2: CRIN_TEST_HANDLER=runc-v2.
	shimv2 backend = "shimv2"
	// lxc is LXC through crin-lxc under crin-shim: CRIN_TEST_HANDLER=lxc.
	lxc backend = "lxc"
	// gvisor is gVisor's shim v2 runtime (also the shimv2 backend, but
	// its containers run in a sandbox with a kernel of its own):
	// CRIN_TEST_HANDLER=runsc. A test that runs on shimv2 and not here
	// says why beside its runsOn.
	gvisor backend = "gvisor"
)

// currentBackend is the backend handlerEnv selects.
func currentBackend() backend {
	switch os.Getenv(handlerEnv) {
	case shimv2Handler:
		return shimv2
	case lxcHandler:
		return lxc
	case runscHandler:
		return gvisor
	}
	return oci
}

// runsOn says which backends a test runs on; on any other it skips. Every
// test of the suite calls it first (TestEveryTestSaysItsBackends), so the
// matrix is written beside each test: "make integration-shimv2" runs the
// whole suite on the shim v2 backend, and what is not for it skips.
func runsOn(t *testing.T, bs ...backend) {
	t.Helper()
	if cur := currentBackend(); !slices.Contains(bs, cur) {
		t.Skipf("runs on %v, not on the %s backend (%s=%q)", bs, cur, handlerEnv, os.Getenv(handlerEnv))
	}
}

// TestEveryTestSaysItsBackends: every Test function of this suite starts
// with runsOn.
func TestEveryTestSaysItsBackends(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
				continue
			}
			if !startsWithRunsOn(fd) {
				t.Errorf("%s (%s) does not start with runsOn(t, ...): say which backends it runs on", fd.Name.Name, f)
			}
		}
	}
}

func startsWithRunsOn(fd *ast.FuncDecl) bool {
	if fd.Body == nil || len(fd.Body.List) == 0 {
		return false
	}
	es, ok := fd.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == "runsOn"
}
