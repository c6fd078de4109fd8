package cni

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
)

func TestDefaultConflist(t *testing.T) {
	var conf struct {
		CNIVersion string                   `json:"cniVersion"`
		Name       string                   `json:"name"`
		Plugins    []map[string]interface{} `json:"plugins"`
	}
	if err := json.Unmarshal(DefaultConflist(), &conf); err != nil {
		t.Fatalf("DefaultConflist is not JSON: %v", err)
	}
	if conf.CNIVersion != "1.0.0" || conf.Name != "crin" {
		t.Errorf("cniVersion, name = %q, %q; want 1.0.0, crin", conf.CNIVersion, conf.Name)
	}
	if len(conf.Plugins) == 0 {
		t.Fatal("no plugins")
	}
	br := conf.Plugins[0]
	want := map[string]interface{}{"type": "bridge", "bridge": "crin0", "isGateway": true, "ipMasq": false, "hairpinMode": true}
	for k, v := range want {
		if br[k] != v {
			t.Errorf("bridge %s = %v, want %v", k, br[k], v)
		}
	}
	for i, p := range conf.Plugins {
		if p["ipMasq"] == true {
			t.Errorf("plugin %d masquerades", i)
		}
		if p["type"] == "portmap" && p["snat"] != false {
			t.Errorf("plugin %d (portmap) masquerades", i)
		}
		ipam, _ := p["ipam"].(map[string]interface{})
		if ipam == nil {
			continue
		}
		b, _ := json.Marshal(ipam["routes"])
		if strings.Contains(string(b), "0.0.0.0/0") || strings.Contains(string(b), "::/0") {
			t.Errorf("plugin %d has a default route: %s", i, b)
		}
		if ipam["type"] != "host-local" {
			t.Errorf("plugin %d ipam type = %v, want host-local", i, ipam["type"])
		}
	}
	list, err := parseConfig(DefaultConflist(), true)
	if err != nil {
		t.Fatalf("libcni rejects the default conflist: %v", err)
	}
	if list.Name != "crin" || len(list.Plugins) != len(conf.Plugins) {
		t.Errorf("libcni parsed name %q with %d plugins", list.Name, len(list.Plugins))
	}
}

func TestInstallDefault(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string // present before
		missing   bool              // conf dir does not exist
		wantWrote bool
	}{
		{name: "missing dir", missing: true, wantWrote: true},
		{name: "empty dir", wantWrote: true},
		{name: "unrelated files only", files: map[string]string{"README": "x", "a.conf.bak": "x", "sub/10-x.conflist": "{}"}, wantWrote: true},
		{name: "has conflist", files: map[string]string{"99-other.conflist": "{}"}},
		{name: "has conf", files: map[string]string{"5-other.conf": "{}"}},
		{name: "has json", files: map[string]string{"other.json": "{}"}},
		{name: "has own default", files: map[string]string{DefaultConfFile: "custom"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			if !tc.missing {
				mustMkdir(t, dir)
			}
			for name, content := range tc.files {
				mustWrite(t, filepath.Join(dir, name), content)
			}
			wrote, err := InstallDefault(dir)
			if err != nil {
				t.Fatalf("InstallDefault: %v", err)
			}
			if wrote != tc.wantWrote {
				t.Fatalf("InstallDefault wrote = %v, want %v", wrote, tc.wantWrote)
			}
			got, err := os.ReadFile(filepath.Join(dir, DefaultConfFile))
			switch {
			case tc.wantWrote:
				if err != nil {
					t.Fatalf("read installed file: %v", err)
				}
				if diff := cmp.Diff(string(DefaultConflist()), string(got)); diff != "" {
					t.Errorf("installed file differs (-want +got):\n%s", diff)
				}
			case tc.files[DefaultConfFile] != "":
				if string(got) != tc.files[DefaultConfFile] {
					t.Errorf("existing %s overwritten: %q", DefaultConfFile, got)
				}
			case err == nil:
				t.Errorf("%s written into a dir that has a config", DefaultConfFile)
			}
			// A second call never writes.
			if wrote, err := InstallDefault(dir); err != nil || wrote {
				t.Errorf("second InstallDefault = %v, %v; want false, nil", wrote, err)
			}
		})
	}
}

const (
	bridgeList = `{"cniVersion":"1.0.0","name":"%s","plugins":[{"type":"bridge","bridge":"x0","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}]}`
	singleConf = `{"cniVersion":"0.4.0","name":"%s","type":"bridge","bridge":"x0"}`
)

func conf(format, name string) string { return strings.Replace(format, "%s", name, 1) }

func TestConfigSelection(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string
		wantNetwork string
		wantPlugins int
		wantErr     string // substring of the Status error
	}{
		{name: "no dir", files: nil, wantErr: "no cni network config"},
		{name: "no config files", files: map[string]string{"README.md": "x"}, wantErr: "no cni network config"},
		{
			name:        "lexically first wins",
			files:       map[string]string{"20-b.conflist": conf(bridgeList, "b"), "10-a.conflist": conf(bridgeList, "a"), "30-c.conf": conf(singleConf, "c")},
			wantNetwork: "a", wantPlugins: 1,
		},
		{
			name:        "conf is wrapped into a list",
			files:       map[string]string{"10-c.conf": conf(singleConf, "c"), "20-b.conflist": conf(bridgeList, "b")},
			wantNetwork: "c", wantPlugins: 1,
		},
		{
			name:        "json list",
			files:       map[string]string{"10-j.json": conf(bridgeList, "j")},
			wantNetwork: "j", wantPlugins: 1,
		},
		{
			name:        "json single plugin",
			files:       map[string]string{"10-j.json": conf(singleConf, "j")},
			wantNetwork: "j", wantPlugins: 1,
		},
		{
			name:        "unusable first file is skipped",
			files:       map[string]string{"00-bad.conflist": "{not json", "05-noplugins.conflist": `{"cniVersion":"1.0.0","name":"e","plugins":[]}`, "10-ok.conflist": conf(bridgeList, "ok")},
			wantNetwork: "ok", wantPlugins: 1,
		},
		{
			name:    "nothing usable",
			files:   map[string]string{"00-bad.conflist": "{not json", "10-notype.conf": `{"cniVersion":"1.0.0","name":"n"}`},
			wantErr: "no usable cni network config",
		},
		{
			name:    "conflist without cniVersion",
			files:   map[string]string{"10-x.conflist": `{"name":"x","plugins":[{"type":"bridge"}]}`},
			wantErr: "no cniVersion",
		},
		{
			name:        "directories are ignored",
			files:       map[string]string{"00-dir.conflist/x": "x", "10-ok.conflist": conf(bridgeList, "ok")},
			wantNetwork: "ok", wantPlugins: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			for name, content := range tc.files {
				mustWrite(t, filepath.Join(dir, name), content)
			}
			m := newTestManager(t, dir, fakeBinDir(t, "bridge"))
			err := m.Status()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Status() = %v, want error containing %q", err, tc.wantErr)
				}
				if !errdefs.IsFailedPrecondition(err) {
					t.Errorf("Status() error %v is not FailedPrecondition", err)
				}
				if got := m.NetworkName(); got != "" {
					t.Errorf("NetworkName() = %q with no usable config", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Status() = %v", err)
			}
			list, _, err := m.current()
			if err != nil {
				t.Fatal(err)
			}
			if list.Name != tc.wantNetwork || len(list.Plugins) != tc.wantPlugins {
				t.Errorf("loaded network %q with %d plugins, want %q with %d", list.Name, len(list.Plugins), tc.wantNetwork, tc.wantPlugins)
			}
		})
	}
}

func TestStatusReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	m := newTestManager(t, dir, fakeBinDir(t, "bridge"))
	if err := m.Status(); err == nil {
		t.Fatal("Status() = nil with no config dir")
	}

	mustWrite(t, filepath.Join(dir, "20-b.conflist"), conf(bridgeList, "b"))
	if err := m.Status(); err != nil {
		t.Fatalf("Status() after adding a config = %v", err)
	}
	if got := m.NetworkName(); got != "b" {
		t.Fatalf("NetworkName() = %q, want b", got)
	}

	// A lexically earlier file takes over.
	mustWrite(t, filepath.Join(dir, "10-a.conflist"), conf(bridgeList, "a"))
	if got := m.NetworkName(); got != "a" {
		t.Fatalf("NetworkName() after adding 10-a = %q, want a", got)
	}

	// Rewriting a file in place (same size) is seen through its mtime.
	mustWrite(t, filepath.Join(dir, "10-a.conflist"), conf(bridgeList, "c"))
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "10-a.conflist"), future, future); err != nil {
		t.Fatal(err)
	}
	if got := m.NetworkName(); got != "c" {
		t.Fatalf("NetworkName() after rewriting 10-a = %q, want c", got)
	}

	// A plugin of the network missing from the bin dirs is reported.
	mustWrite(t, filepath.Join(dir, "05-x.conflist"), `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"no-such-plugin"}]}`)
	err := m.Status()
	if err == nil || !strings.Contains(err.Error(), `plugin "no-such-plugin" not found`) {
		t.Fatalf("Status() with a missing plugin = %v", err)
	}

	for _, f := range []string{"05-x.conflist", "10-a.conflist", "20-b.conflist"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Status(); err == nil || !strings.Contains(err.Error(), "no cni network config") {
		t.Fatalf("Status() after removing every config = %v", err)
	}
}

func TestSetPodCIDR(t *testing.T) {
	tests := []struct {
		name       string
		cidr       string
		wantErr    bool
		wantRanges []string
	}{
		{name: "ipv4", cidr: "10.244.1.0/24", wantRanges: []string{"10.244.1.0/24"}},
		{name: "host bits are cleared", cidr: "10.244.1.7/24", wantRanges: []string{"10.244.1.0/24"}},
		{name: "dual stack", cidr: "10.244.1.0/24,fd00:10::/64", wantRanges: []string{"10.244.1.0/24", "fd00:10::/64"}},
		{name: "empty clears", cidr: "", wantRanges: nil},
		{name: "not a cidr", cidr: "10.244.1.0", wantErr: true},
		{name: "garbage", cidr: "pods", wantErr: true},
		{name: "bad prefix", cidr: "10.0.0.0/33", wantErr: true},
		{name: "one bad of two", cidr: "10.244.1.0/24,nope", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t, t.TempDir(), t.TempDir())
			const before = "192.168.77.0/24"
			if err := m.SetPodCIDR(before); err != nil {
				t.Fatal(err)
			}
			err := m.SetPodCIDR(tc.cidr)
			if tc.wantErr {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("SetPodCIDR(%q) = %v, want InvalidArgument", tc.cidr, err)
				}
				tc.wantRanges = []string{before} // unchanged
			} else if err != nil {
				t.Fatalf("SetPodCIDR(%q) = %v", tc.cidr, err)
			}
			rt := m.runtimeConf(Pod{ID: "p"}, "/ns")
			var got []string
			if r, ok := rt.CapabilityArgs["ipRanges"].([][]map[string]interface{}); ok {
				for _, set := range r {
					for _, rng := range set {
						got = append(got, rng["subnet"].(string))
					}
				}
			}
			if diff := cmp.Diff(tc.wantRanges, got); diff != "" {
				t.Errorf("ipRanges (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRuntimeConf(t *testing.T) {
	m := newTestManager(t, t.TempDir(), t.TempDir())
	pod := Pod{
		ID: "abc", Name: "web", Namespace: "default", UID: "u-1", NetNS: "/run/netns/abc",
		Ports: []PortMapping{
			{Protocol: "TCP", ContainerPort: 80, HostPort: 8080, HostIP: "127.0.0.1"},
			{Protocol: "udp", ContainerPort: 53}, // no host port: not a mapping
			{ContainerPort: 443, HostPort: 8443},
		},
	}
	rt := m.runtimeConf(pod, pod.NetNS)
	wantArgs := [][2]string{
		{"IgnoreUnknown", "1"},
		{"K8S_POD_NAMESPACE", "default"},
		{"K8S_POD_NAME", "web"},
		{"K8S_POD_INFRA_CONTAINER_ID", "abc"},
		{"K8S_POD_UID", "u-1"},
	}
	if diff := cmp.Diff(wantArgs, rt.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if rt.ContainerID != "abc" || rt.NetNS != "/run/netns/abc" || rt.IfName != "eth0" {
		t.Errorf("runtime conf = %+v", rt)
	}
	wantPorts := []map[string]interface{}{
		{"hostPort": int32(8080), "containerPort": int32(80), "protocol": "tcp", "hostIP": "127.0.0.1"},
		{"hostPort": int32(8443), "containerPort": int32(443), "protocol": "tcp"},
	}
	if diff := cmp.Diff(wantPorts, rt.CapabilityArgs["portMappings"]); diff != "" {
		t.Errorf("portMappings (-want +got):\n%s", diff)
	}
	if _, ok := rt.CapabilityArgs["ipRanges"]; ok {
		t.Error("ipRanges passed with no pod CIDR set")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{BinDirs: []string{"/x"}}, {ConfDir: "/x"}} {
		if _, err := New(cfg); !errdefs.IsInvalidArgument(err) {
			t.Errorf("New(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
}

func newTestManager(t *testing.T, confDir, binDir string) *Manager {
	t.Helper()
	m, err := New(Config{ConfDir: confDir, BinDirs: []string{binDir}, CacheDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeBinDir returns a dir holding empty executables with the given names.
func fakeBinDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
