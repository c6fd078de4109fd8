package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func TestDefaultIsValidAndRoundTrips(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"root", "state", "log_level", "default_runtime", "[cri]", "socket", "metrics_address", "stream_address", "[runtimes.runc]", "[cni]", "conf_dir", "[image]", "pull_timeout"} {
		if !strings.Contains(string(b), key) {
			t.Errorf("config default lacks %q:\n%s", key, b)
		}
	}
	c2 := Default()
	if err := Parse(b, c2); err != nil {
		t.Fatalf("the printed default does not parse back: %v", err)
	}
	if c2.Image.PullTimeout != Duration(30*time.Minute) || c2.CRI.Socket != c.CRI.Socket {
		t.Errorf("round trip changed values: %+v", c2)
	}
}

func TestLoadMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "none.toml")
	if _, err := Load(p, MissingOK); err != nil {
		t.Errorf("missing default file: %v", err)
	}
	if _, err := Load(p, MissingError); err == nil {
		t.Errorf("missing explicit file accepted")
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		toml    string
		wantErr []string // substrings of the error; nil means valid
		check   func(*testing.T, *Config)
	}{
		{name: "empty file", toml: "", check: func(t *testing.T, c *Config) {
			if c.GoRuntime != (GoRuntime{GCPercent: DefaultGCPercent, ReleaseAfter: Duration(2 * time.Second)}) {
				t.Errorf("go_runtime = %+v, want gc_percent %d", c.GoRuntime, DefaultGCPercent)
			}
		}},
		{name: "go runtime settings", toml: "[go_runtime]\ngc_percent = 0\nmemory_limit_bytes = 33554432\nrelease_after = \"0s\"\n", check: func(t *testing.T, c *Config) {
			if c.GoRuntime != (GoRuntime{MemoryLimitBytes: 32 << 20}) {
				t.Errorf("go_runtime = %+v", c.GoRuntime)
			}
		}},
		{name: "negative gc_percent", toml: "[go_runtime]\ngc_percent = -1\n", wantErr: []string{"go_runtime.gc_percent", "negative"}},
		{name: "memory limit too small", toml: "[go_runtime]\nmemory_limit_bytes = 1048576\n", wantErr: []string{"go_runtime.memory_limit_bytes", "16 MiB"}},
		{name: "negative memory limit", toml: "[go_runtime]\nmemory_limit_bytes = -5\n", wantErr: []string{"go_runtime.memory_limit_bytes"}},
		{name: "negative release_after", toml: "[go_runtime]\nrelease_after = \"-1s\"\n", wantErr: []string{"go_runtime.release_after"}},
		{name: "mirror and runtime", toml: `
default_runtime = "fast"
[runtimes.fast]
type = "oci"
path = "/usr/bin/crun"
[registry]
plain_http = ["reg.local:5000"]
[registry.mirrors."docker.io"]
endpoints = ["http://127.0.0.1:5000/cache"]
[image]
pull_timeout = "90s"
`, check: func(t *testing.T, c *Config) {
			if c.Runtimes["fast"].Root != "/run/crin/runtimes/fast" {
				t.Errorf("runtime root default = %q", c.Runtimes["fast"].Root)
			}
			if _, ok := c.Runtimes["runc"]; !ok {
				t.Errorf("built-in runc runtime dropped")
			}
			if c.Registry.Mirrors["docker.io"].Endpoints[0] != "http://127.0.0.1:5000/cache" {
				t.Errorf("mirror = %v", c.Registry.Mirrors)
			}
			if time.Duration(c.Image.PullTimeout) != 90*time.Second {
				t.Errorf("pull_timeout = %v", c.Image.PullTimeout)
			}
		}},
		{name: "image caps", toml: `
[image]
pull_progress_timeout = "3s"
max_manifest_bytes = 65536
max_config_bytes = 2048
max_unpacked_bytes = 1073741824
`, check: func(t *testing.T, c *Config) {
			want := Image{PullTimeout: Duration(30 * time.Minute), MaxConcurrentDownloads: 3, PullProgressTimeout: Duration(3 * time.Second),
				MaxManifestBytes: 65536, MaxConfigBytes: 2048, MaxUnpackedBytes: 1 << 30}
			if c.Image != want {
				t.Errorf("image = %+v, want %+v", c.Image, want)
			}
		}},
		{name: "unknown top-level key", toml: "rooot = \"/x\"\n", wantErr: []string{"rooot"}},
		{name: "unknown nested key", toml: "[cri]\nsockett = \"/x\"\n", wantErr: []string{"cri.sockett"}},
		{name: "relative root", toml: "root = \"var/lib\"\n", wantErr: []string{"root", "var/lib", "absolute"}},
		{name: "bad log level", toml: "log_level = \"loud\"\n", wantErr: []string{"log_level", "loud"}},
		{name: "bad duration", toml: "[image]\npull_timeout = \"soon\"\n", wantErr: []string{"pull_timeout"}},
		{name: "wrong type", toml: "[image]\nmax_concurrent_downloads = \"three\"\n", wantErr: []string{"max_concurrent_downloads"}},
		{name: "zero downloads", toml: "[image]\nmax_concurrent_downloads = 0\n", wantErr: []string{"max_concurrent_downloads", "at least 1"}},
		{name: "negative progress timeout", toml: "[image]\npull_progress_timeout = \"-1s\"\n", wantErr: []string{"image.pull_progress_timeout", "-1s", "negative"}},
		{name: "tiny manifest cap", toml: "[image]\nmax_manifest_bytes = 10\n", wantErr: []string{"image.max_manifest_bytes", "10", "at least 1024"}},
		{name: "tiny config cap", toml: "[image]\nmax_config_bytes = 0\n", wantErr: []string{"image.max_config_bytes", "at least 1024"}},
		{name: "negative unpack cap", toml: "[image]\nmax_unpacked_bytes = -5\n", wantErr: []string{"image.max_unpacked_bytes", "-5", "negative"}},
		{name: "unknown default runtime", toml: "default_runtime = \"kata\"\n", wantErr: []string{"default_runtime", "kata", "runc"}},
		{name: "bad runtime type", toml: "[runtimes.x]\ntype = \"vm\"\npath = \"x\"\n", wantErr: []string{"runtimes.x.type", "vm"}},
		{name: "shimv2 runtime", toml: `
[runtimes.runc-v2]
type = "shimv2"
runtime_type = "io.containerd.runc.v2"
[runtimes.runc-v2.options]
binary_name = "/usr/sbin/runc"
`, check: func(t *testing.T, c *Config) {
			r := c.Runtimes["runc-v2"]
			if r.Type != "shimv2" || r.RuntimeType != "io.containerd.runc.v2" || r.Options["binary_name"] != "/usr/sbin/runc" {
				t.Errorf("runtime = %+v", r)
			}
			if r.Root != "/run/crin/runtimes/runc-v2" {
				t.Errorf("runtime root default = %q", r.Root)
			}
		}},
		{name: "shimv2 by path", toml: "[runtimes.k]\ntype = \"shimv2\"\npath = \"/opt/kata/bin/containerd-shim-kata-v2\"\n"},
		{name: "shimv2 without shim", toml: "[runtimes.k]\ntype = \"shimv2\"\n", wantErr: []string{"runtimes.k.runtime_type", "path or a runtime type"}},
		{name: "oci with runtime type", toml: "[runtimes.x]\ntype = \"oci\"\npath = \"runc\"\nruntime_type = \"io.containerd.runc.v2\"\n", wantErr: []string{"runtimes.x.type", "shimv2"}},
		{name: "lxc runtime", toml: "[runtimes.lxc]\ntype = \"lxc\"\n", check: func(t *testing.T, c *Config) {
			if r := c.Runtimes["lxc"]; r.Type != "lxc" || r.Path != "" || r.Root != "/run/crin/runtimes/lxc" {
				t.Errorf("runtime = %+v", r)
			}
		}},
		{name: "lxc with options", toml: "[runtimes.lxc]\ntype = \"lxc\"\n[runtimes.lxc.options]\na = \"b\"\n", wantErr: []string{"runtimes.lxc.type", "shimv2"}},
		{name: "mirror without scheme", toml: "[registry.mirrors.\"docker.io\"]\nendpoints = [\"127.0.0.1:5000\"]\n", wantErr: []string{"endpoints[0]", "127.0.0.1:5000"}},
		{name: "metrics off host", toml: "[cri]\nmetrics_address = \"0.0.0.0:9000\"\n", wantErr: []string{"metrics_address", "loopback"}},
		{name: "metrics disabled", toml: "[cri]\nmetrics_address = \"\"\n"},
		{name: "stream explicit host", toml: "[cri]\nstream_address = \"10.0.0.5:10010\"\n"},
		{name: "stream localhost", toml: "[cri]\nstream_address = \"localhost:0\"\n"},
		{name: "stream disabled", toml: "[cri]\nstream_address = \"\"\n"},
		{name: "stream wildcard", toml: "[cri]\nstream_address = \"0.0.0.0:10010\"\n", wantErr: []string{"cri.stream_address", "0.0.0.0:10010", "wildcard"}},
		{name: "stream no host", toml: "[cri]\nstream_address = \":10010\"\n", wantErr: []string{"cri.stream_address", "explicit"}},
		{name: "stream bad port", toml: "[cri]\nstream_address = \"127.0.0.1:99999\"\n", wantErr: []string{"cri.stream_address", "port"}},
		{name: "stream hostname", toml: "[cri]\nstream_address = \"node1:10010\"\n", wantErr: []string{"cri.stream_address", "IP address"}},
		{name: "socket too long", toml: "[cri]\nsocket = \"/" + strings.Repeat("s", 120) + "\"\n", wantErr: []string{"cri.socket", "108"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			err := Parse([]byte(tc.toml), c)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tc.check != nil {
					tc.check(t, c)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want an error mentioning %v", tc.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error not InvalidArgument: %v", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestFindBinary(t *testing.T) {
	if p, _ := FindBinary("/explicit/x", "x"); p != "/explicit/x" {
		t.Errorf("explicit path ignored: %q", p)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "crin-test-bin"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if p, err := FindBinary("", "crin-test-bin"); err != nil || p != filepath.Join(dir, "crin-test-bin") {
		t.Errorf("FindBinary via PATH = %q, %v", p, err)
	}
	if _, err := FindBinary("", "crin-no-such-binary"); err == nil {
		t.Errorf("missing binary found")
	}
}
