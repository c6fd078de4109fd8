package oci

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/cgroups/v3"
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
