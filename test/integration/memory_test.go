//go:build integration

package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestGoRuntimeSettings checks that [go_runtime] reaches crind's own Go
// runtime: the Go collector on the metrics endpoint reports the GC target
// and the soft memory limit the config set (docs/memory.md).
func TestGoRuntimeSettings(t *testing.T) {
	runsOn(t, oci)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	startDaemon(t, daemonOptions{
		metrics:     addr,
		extraConfig: "[go_runtime]\ngc_percent = 40\nmemory_limit_bytes = 67108864\n",
	})
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go_gc_gogc_percent 40\n", "go_gc_gomemlimit_bytes 6.7108864e+07\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
}
