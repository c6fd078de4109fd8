package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crin-dev/crin/internal/admin"
)

// pluginsJSON is what crind's admin API answers (see cmd/crind/admin.go).
const pluginsJSON = `[
  {"index": "00", "name": "default-validator", "kind": "builtin", "events": ["ValidateContainerAdjustment"], "state": "ready",
   "failure_policy": {"fail_request": false, "keep_connected": false}, "required": false, "request_timeout": "2s",
   "calls": 3, "failures": 0, "mean_latency": "12.345µs"},
  {"index": "10", "name": "resources", "kind": "preinstalled", "events": ["CreateContainer", "UpdateContainer"], "state": "ready",
   "failure_policy": {"fail_request": true, "keep_connected": false}, "required": true, "request_timeout": "500ms",
   "calls": 12, "failures": 1, "mean_latency": "1.523456ms"},
  {"index": "90", "name": "late", "kind": "external", "events": [], "state": "synchronizing",
   "failure_policy": {"fail_request": false, "keep_connected": false}, "required": false, "request_timeout": "2s",
   "calls": 0, "failures": 0, "mean_latency": "0s"},
  {"index": "95", "name": "stuck", "kind": "preinstalled", "events": [], "state": "backoff",
   "failure_policy": {"fail_request": false, "keep_connected": false}, "required": false, "request_timeout": "2s",
   "calls": 0, "failures": 0, "mean_latency": "0s", "restarts": 3, "last_error": "synchronize: timed out",
   "backoff": "8s", "next_attempt": "2026-11-24T07:00:08Z"}
]`

func TestWritePlugins(t *testing.T) {
	var ps []admin.Plugin
	if err := json.Unmarshal([]byte(pluginsJSON), &ps); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writePlugins(&buf, ps); err != nil {
		t.Fatal(err)
	}
	want := `INDEX  NAME               KIND          STATE                      EVENTS                           CALLS  FAILURES  LATENCY  RESTARTS
00     default-validator  builtin       ready                      ValidateContainerAdjustment      3      0         12µs     0
10     resources          preinstalled  ready                      CreateContainer,UpdateContainer  12     1         1.52ms   0
90     late               external      synchronizing              -                                0      0         -        0
95     stuck              preinstalled  backoff 8s until 07:00:08  -                                0      0         -        3
`
	// The next attempt is shown in local time.
	want = strings.Replace(want, "07:00:08", time.Date(2026, 11, 24, 7, 0, 8, 0, time.UTC).Local().Format(time.TimeOnly), 1)
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestEventList(t *testing.T) {
	all := []string{"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer", "PostCreateContainer", "StartContainer"}
	for _, tc := range []struct {
		events []string
		want   string
	}{
		{nil, "-"},
		{[]string{"CreateContainer"}, "CreateContainer"},
		{all[:3], "RunPodSandbox,StopPodSandbox,RemovePodSandbox"},
		{all, "RunPodSandbox,StopPodSandbox,RemovePodSandbox,+3 more"},
	} {
		if got := eventList(tc.events); got != tc.want {
			t.Errorf("eventList(%v) = %q, want %q", tc.events, got, tc.want)
		}
	}
}

func TestWriteOwners(t *testing.T) {
	var buf bytes.Buffer
	err := writeOwners(&buf, map[string]string{
		"memory limit":        "10-resources",
		`env "FOO"`:           "20-env",
		"cpu shares":          "10-resources",
		"annotation \"a\tb\"": "30-evil",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `FIELD              PLUGIN
annotation "a\tb"  30-evil
cpu shares         10-resources
env "FOO"          20-env
memory limit       10-resources
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// serve runs handler on a unix socket in a short temp dir.
func serve(t *testing.T, handler http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(lis) //nolint:errcheck // ends with Close below
	t.Cleanup(func() { srv.Close() })
	return path
}

func TestRunAgainstSocket(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nri/plugins", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(pluginsJSON))
	})
	mux.HandleFunc("GET /v1/containers/{id}/nri-owners", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "abc" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": "nri owners of container ` + r.PathValue("id") + `: not found"}`))
			return
		}
		w.Write([]byte(`{"memory limit": "10-resources"}`))
	})
	sock := serve(t, mux)
	for _, tc := range []struct {
		name    string
		args    []string
		want    string // substring of stdout
		wantErr string
	}{
		{name: "plugins table", args: []string{"--socket", sock, "plugins"}, want: "10     resources          preinstalled"},
		{name: "plugins json", args: []string{"--socket", sock, "--json", "plugins"}, want: `"name": "late"`},
		{name: "json after command", args: []string{"--socket", sock, "plugins", "--json"}, want: `"index": "00"`},
		{name: "owners", args: []string{"--socket", sock, "owners", "abc"}, want: "memory limit  10-resources"},
		{name: "owners json", args: []string{"--socket", sock, "--json", "owners", "abc"}, want: `{"memory limit": "10-resources"}`},
		{name: "unknown container", args: []string{"--socket", sock, "owners", "zzz"}, wantErr: "crind: nri owners of container zzz: not found"},
		{name: "owners without id", args: []string{"--socket", sock, "owners"}, wantErr: "owners takes one CONTAINER-ID"},
		{name: "unknown command", args: []string{"--socket", sock, "pods"}, wantErr: `unknown command "pods"`},
		{name: "no command", args: []string{"--socket", sock}, wantErr: "no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.args, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output %q does not contain %q", out.String(), tc.want)
			}
		})
	}
}

func TestCrindNotRunning(t *testing.T) {
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	missing := filepath.Join(dir, "none.sock")
	err = run([]string{"--socket", missing, "plugins"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "crind is not running: no admin socket at "+missing) {
		t.Errorf("missing socket: err = %v", err)
	}
	// A socket file nobody listens on: what a crashed crind leaves.
	stale := filepath.Join(dir, "stale.sock")
	lis, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	err = run([]string{"--socket", stale, "plugins"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "nothing listens on "+stale) {
		t.Errorf("stale socket: err = %v", err)
	}
}

func TestSocketFromConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "crin.toml")
	if err := os.WriteFile(cfg, []byte("state = \"/tmp/crin-st\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"--config", cfg, "plugins"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "/tmp/crin-st/crind-admin.sock") {
		t.Errorf("socket not taken from config: %v", err)
	}
	if err := run([]string{"--bogus"}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
		t.Errorf("bad flag: err = %v, want a usage error", err)
	}
}
