//go:build integration

package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crin-dev/crin/internal/config"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCommands checks `crind --version`, `crind config default` (which must
// parse back as a valid config) and that a bad config stops crind with the
// key and the value.
func TestCommands(t *testing.T) {
	runsOn(t, oci)
	bin := filepath.Join(buildBinaries(t), "crind")
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "crind ") {
		t.Errorf("crind --version: %q %v", out, err)
	}
	out, err = exec.Command(bin, "config", "default").Output()
	if err != nil {
		t.Fatalf("crind config default: %v", err)
	}
	if err := config.Parse(out, config.Default()); err != nil {
		t.Errorf("printed default config does not parse: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := writeFile(bad, "[cri]\nsocket = \"relative.sock\"\nbogus = 1\n"); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cri.bogus") {
		t.Errorf("bad config: %v %q, want a refusal naming cri.bogus", err, out)
	}
}

// TestMetrics checks the Prometheus endpoint reports per-RPC latency and
// errors.
func TestMetrics(t *testing.T) {
	runsOn(t, oci)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := startDaemon(t, daemonOptions{metrics: addr})
	// Status, not Version: the harness calls Version until crind answers.
	if _, err := d.rs.Status(ctxT(t), &runtimeapi.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	_, _ = d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`crin_cri_request_duration_seconds_count{rpc="Status"} 1`,
		`crin_cri_request_errors_total{code="NotFound",rpc="ContainerStatus"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestNRIMetrics checks NRI plugin calls show on the metrics endpoint, per
// plugin and event.
func TestNRIMetrics(t *testing.T) {
	runsOn(t, oci)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	n := newNRISetup(t)
	n.install(t, "10", "metered", pluginConfig{})
	nriPluginBinary(t)
	d := startDaemon(t, daemonOptions{metrics: addr, extraConfig: n.config()})
	waitConfigured(t, d, n, "10-metered")
	d.runPod(t, podConfig("metered"))
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`crin_nri_plugin_calls_total{event="RunPodSandbox",plugin="10-metered"} 1`,
		`crin_nri_plugin_call_seconds_count{event="RunPodSandbox",plugin="10-metered"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
