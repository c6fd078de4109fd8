package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestSetHugetlbLimits(t *testing.T) {
	write := func(t *testing.T, dir string, files map[string]string) {
		t.Helper()
		for f, v := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(t *testing.T, dir, f string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	limits := []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 8 << 20}}

	t.Run("v2", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"hugetlb.2MB.max": "4194304", "hugetlb.2MB.rsvd.max": "max"})
		if err := setHugetlbLimits(dir, true, limits); err != nil {
			t.Fatal(err)
		}
		if got := read(t, dir, "hugetlb.2MB.max"); got != "8388608" {
			t.Errorf("hugetlb.2MB.max = %q, want 8388608", got)
		}
		// The runtime left reservations unlimited: so does the update.
		if got := read(t, dir, "hugetlb.2MB.rsvd.max"); got != "max\n" {
			t.Errorf("hugetlb.2MB.rsvd.max = %q, want it left at max", got)
		}
	})
	t.Run("v2 with reservations limited", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"hugetlb.2MB.max": "4194304", "hugetlb.2MB.rsvd.max": "4194304"})
		if err := setHugetlbLimits(dir, true, limits); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"hugetlb.2MB.max", "hugetlb.2MB.rsvd.max"} {
			if got := read(t, dir, f); got != "8388608" {
				t.Errorf("%s = %q, want 8388608", f, got)
			}
		}
	})
	t.Run("v1", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"hugetlb.2MB.limit_in_bytes": "4194304"})
		if err := setHugetlbLimits(dir, false, limits); err != nil {
			t.Fatal(err)
		}
		if got := read(t, dir, "hugetlb.2MB.limit_in_bytes"); got != "8388608" {
			t.Errorf("hugetlb.2MB.limit_in_bytes = %q, want 8388608", got)
		}
	})
	t.Run("already in place", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, map[string]string{"hugetlb.2MB.max": "8388608"})
		if err := setHugetlbLimits(dir, true, limits); err != nil {
			t.Fatal(err)
		}
		// As the kernel shows it, newline and all: not written again.
		if got := read(t, dir, "hugetlb.2MB.max"); got != "8388608\n" {
			t.Errorf("hugetlb.2MB.max = %q, want it left as it was", got)
		}
	})
	t.Run("no cgroup", func(t *testing.T) {
		if err := setHugetlbLimits(filepath.Join(t.TempDir(), "gone"), true, limits); err != nil {
			t.Errorf("a container with no cgroup of its own: %v, want nil", err)
		}
	})
	t.Run("unknown page size", func(t *testing.T) {
		dir := t.TempDir()
		err := setHugetlbLimits(dir, true, []specs.LinuxHugepageLimit{{Pagesize: "3MB", Limit: 3 << 20}})
		if !errdefs.IsInvalidArgument(err) {
			t.Errorf("page size 3MB with no file: %v, want InvalidArgument", err)
		}
	})
	t.Run("page size with a path", func(t *testing.T) {
		err := setHugetlbLimits(t.TempDir(), true, []specs.LinuxHugepageLimit{{Pagesize: "../x", Limit: 1}})
		if !errdefs.IsInvalidArgument(err) {
			t.Errorf("page size ../x: %v, want InvalidArgument", err)
		}
	})
}
