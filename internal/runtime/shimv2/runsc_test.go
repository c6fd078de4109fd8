package shimv2

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/protobuf/proto"

	"github.com/crin-dev/crin/internal/oci"
)

// fakeRunsc puts an executable "runsc" in a dir of its own on $PATH.
func fakeRunsc(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "runsc")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return bin
}

func TestRunscOptions(t *testing.T) {
	bin := fakeRunsc(t)
	root := t.TempDir()
	opts := map[string]string{"platform": "systrap", "systemd_cgroup": "true", "log_level": "debug", "overlay2": "root:memory"}
	a, gotBin, err := runscOptions(opts, root)
	if err != nil {
		t.Fatal(err)
	}
	if gotBin != bin {
		t.Errorf("runsc %q, want %q", gotBin, bin)
	}
	if a.GetTypeUrl() != "runtimeoptions.v1.Options" {
		t.Errorf("type url %q", a.GetTypeUrl())
	}
	var ro runtimeoptions.Options
	if err := proto.Unmarshal(a.GetValue(), &ro); err != nil {
		t.Fatal(err)
	}
	if ro.GetConfigPath() != filepath.Join(root, runscConfigFile) || ro.GetTypeUrl() != "io.containerd.runsc.v1.options" {
		t.Fatalf("options %v", &ro)
	}
	data, err := os.ReadFile(ro.GetConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	// What the shim decodes (its Options' toml keys).
	var got struct {
		BinaryName  string            `toml:"binary_name"`
		Root        string            `toml:"root"`
		LogLevel    string            `toml:"log_level"`
		RunscConfig map[string]string `toml:"runsc_config"`
	}
	if err := toml.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	want := map[string]string{"platform": "systrap", "systemd-cgroup": "true", "overlay2": "root:memory"}
	if got.BinaryName != bin || got.Root != root || got.LogLevel != "debug" || len(got.RunscConfig) != len(want) {
		t.Fatalf("config:\n%s", data)
	}
	for k, v := range want {
		if got.RunscConfig[k] != v {
			t.Errorf("runsc_config[%s] = %q, want %q", k, got.RunscConfig[k], v)
		}
	}
}

func TestRunscOptionsRefused(t *testing.T) {
	fakeRunsc(t)
	for _, tc := range []struct {
		name string
		opts map[string]string
		want error
	}{
		{"root is the handler's", map[string]string{"root": "/x"}, errdefs.ErrInvalidArgument},
		{"not a flag", map[string]string{"Platform X": "y"}, errdefs.ErrInvalidArgument},
		{"no such runsc", map[string]string{"binary_name": "/nonexistent/runsc"}, errdefs.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runscOptions(tc.opts, t.TempDir())
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			for k := range tc.opts {
				if !strings.Contains(err.Error(), k) {
					t.Errorf("error %q does not name %q", err, k)
				}
			}
		})
	}
}

func TestDecodeMetrics(t *testing.T) {
	d2, _ := proto.Marshal(&v2.Metrics{
		CPU:    &v2.CPUStat{UsageUsec: 7, UserUsec: 5, SystemUsec: 2},
		Memory: &v2.MemoryStat{Usage: 4096, File: 1024, InactiveFile: 512, UsageLimit: 1 << 63},
		Pids:   &v2.PidsStat{Current: 3},
	})
	d1, _ := proto.Marshal(&v1.Metrics{
		CPU:    &v1.CPUStat{Usage: &v1.CPUUsage{Total: 9000, User: 6000, Kernel: 3000}},
		Memory: &v1.MemoryStat{Cache: 100, TotalInactiveFile: 50, Usage: &v1.MemoryEntry{Usage: 2048, Limit: 1 << 20}},
		Pids:   &v1.PidsStat{Current: 2},
	})
	st, err := decodeMetrics(metricsV2URL, d2)
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUUsageNanos != 7000 || st.CPUUserNanos != 5000 || st.CPUSystemNanos != 2000 || st.MemoryUsageBytes != 4096 ||
		st.MemoryWorkingSet != 3584 || st.MemoryCacheBytes != 1024 || st.MemoryLimitBytes != 0 || st.PidsCurrent != 3 {
		t.Errorf("v2: %+v", st)
	}
	st, err = decodeMetrics(metricsV1URL, d1)
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUUsageNanos != 9000 || st.MemoryUsageBytes != 2048 || st.MemoryWorkingSet != 1998 || st.MemoryLimitBytes != 1<<20 || st.PidsCurrent != 2 {
		t.Errorf("v1: %+v", st)
	}
	if _, err := decodeMetrics("x.Metrics", nil); err == nil {
		t.Error("unknown type decoded")
	}
}

func TestParseStartOutput(t *testing.T) {
	for _, tc := range []struct {
		out, want string
	}{
		{"unix:///run/containerd/s/abc\n", "unix:///run/containerd/s/abc"},
		{`{"version":2,"address":"unix:///run/containerd/s/abc","protocol":"ttrpc"}`, "unix:///run/containerd/s/abc"},
		{`{"version":2,"address":"unix:///run/containerd/s/abc","protocol":"grpc"}`, ""},
		{`{"version":3,"address":"unix:///run/containerd/s/abc"}`, ""},
		{"/run/x", ""},
		{"{", ""},
	} {
		got, err := parseStartOutput([]byte(tc.out))
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("parseStartOutput(%q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
}

func TestRunscSpec(t *testing.T) {
	pidPin := specs.LinuxNamespace{Type: specs.PIDNamespace, Path: "/run/crin/ns/pod/pid"}
	mk := func(typ string, ns ...specs.LinuxNamespace) *specs.Spec {
		return &specs.Spec{Annotations: map[string]string{criContainerTypeKey: typ}, Linux: &specs.Linux{Namespaces: ns}}
	}
	net := specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/run/crin/netns/pod"}
	in := mk("container", net, pidPin, specs.LinuxNamespace{Type: specs.MountNamespace})
	got := runscSpec(in)
	if want := []specs.LinuxNamespace{net, {Type: specs.MountNamespace}}; !slices.Equal(got.Linux.Namespaces, want) {
		t.Errorf("container sharing the pod's pid namespace: %v, want %v", got.Linux.Namespaces, want)
	}
	if len(in.Linux.Namespaces) != 3 || in.Linux.Namespaces[1] != pidPin {
		t.Errorf("the caller's spec changed: %v", in.Linux.Namespaces)
	}
	for _, s := range []*specs.Spec{
		mk("container", net, specs.LinuxNamespace{Type: specs.PIDNamespace}), // a pid namespace of its own
		mk("sandbox", pidPin),
	} {
		if got := runscSpec(s); got != s {
			t.Errorf("runscSpec changed %v", s.Linux.Namespaces)
		}
	}
}

// TestCorrectRunscFeatures: the cgroup section runsc prints (a constant
// that says no to v2 and systemd) is corrected, so a spec with unified
// cgroup v2 files (what kubelet sends on a v2 node) fits runsc.
func TestCorrectRunscFeatures(t *testing.T) {
	// The cgroup part of `runsc features` at the pinned version.
	var f features.Features
	if err := json.Unmarshal([]byte(`{"ociVersionMin":"1.0.0","ociVersionMax":"1.2.1",
		"linux":{"cgroup":{"v1":true,"v2":false,"systemd":false,"systemdUser":false,"rdma":false}}}`), &f); err != nil {
		t.Fatal(err)
	}
	s := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{Unified: map[string]string{"memory.oom.group": "1"}}}}
	if err := oci.Fit(s, &f); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("runsc's own features: Fit = %v, want not implemented (else this test tests nothing)", err)
	}
	correctRunscFeatures(&f)
	if err := oci.Fit(s, &f); err != nil {
		t.Errorf("corrected features: Fit = %v", err)
	}
	if !*f.Linux.Cgroup.V1 || !*f.Linux.Cgroup.V2 || !*f.Linux.Cgroup.Systemd || *f.Linux.Cgroup.SystemdUser {
		t.Errorf("cgroup features: %+v", f.Linux.Cgroup)
	}
	correctRunscFeatures(&features.Features{}) // no cgroup section: nothing to correct
}
