package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/errdefs"
)

func TestHybridV2Controllers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("hugetlb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "cgroup.controllers"), []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mode    cgroups.CGMode
		dir     string
		want    []string
		wantErr bool
	}{
		{name: "hybrid with hugetlb on v2", mode: cgroups.Hybrid, dir: dir, want: []string{"hugetlb"}},
		{name: "hybrid with an empty v2", mode: cgroups.Hybrid, dir: empty},
		{name: "legacy", mode: cgroups.Legacy, dir: dir},
		{name: "unified", mode: cgroups.Unified, dir: dir},
		{name: "hybrid, unreadable", mode: cgroups.Hybrid, dir: filepath.Join(dir, "missing"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := hybridV2Controllers(tc.mode, tc.dir)
			if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestCheckSystemdDriver: under the systemd driver, a runtime whose
// features say cgroup.systemd false (crin-lxc's) is not ready, naming the
// setting to change; under cgroupfs, or when the features say nothing,
// Check lets it be.
func TestCheckSystemdDriver(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, features string) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\ncase \"$1\" in\nfeatures) printf '%s' '" + features + "';;\n--version) echo 'fake version 1'; echo 'spec: 1.2.0';;\nesac\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noSystemd := fake("nosystemd", `{"ociVersionMin":"1.0.0","ociVersionMax":"1.2.0","linux":{"cgroup":{"v1":true,"v2":true,"systemd":false}}}`)
	silent := fake("silent", `{"ociVersionMin":"1.0.0","ociVersionMax":"1.2.0"}`)
	for _, c := range []struct {
		bin     string
		systemd bool
		refused bool
	}{
		{noSystemd, true, true},
		{noSystemd, false, false},
		{silent, true, false},
	} {
		o := &Runtime{cfg: Config{Name: "lxc", Binary: c.bin, SystemdCgroup: c.systemd}}
		err := o.Check(context.Background())
		if got := errors.Is(err, errdefs.ErrFailedPrecondition); got != c.refused {
			t.Errorf("%s, systemd driver %v: Check = %v, want refused %v", filepath.Base(c.bin), c.systemd, err, c.refused)
		}
		if c.refused && (err == nil || !strings.Contains(err.Error(), `"cgroupfs"`)) {
			t.Errorf("the error does not say what to set: %v", err)
		}
	}
}
