package podenv

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func newTestID(t *testing.T) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestSweepCgroups: the start-up sweep removes pod cgroups no record owns
// (and container cgroups of a known pod no record owns) in every
// hierarchy, and keeps the others.
func TestSweepCgroups(t *testing.T) {
	dir := t.TempDir()
	fs := filepath.Join(dir, "cgroup")
	e := New(t.Context(), Config{
		NetNSDir:     filepath.Join(dir, "netns"),
		CgroupParent: "/crin",
		CgroupFS:     fs,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	pod, ctr := newTestID(t), newTestID(t)
	stalePod, staleCtr := newTestID(t), newTestID(t)
	keep := []string{
		filepath.Join("cpu", "crin", pod, pod),
		filepath.Join("cpu", "crin", pod, ctr),
		filepath.Join("memory", "crin", pod, ctr),
		filepath.Join("memory", "crin", "not-an-id"),
	}
	gone := []string{
		filepath.Join("cpu", "crin", stalePod, stalePod),
		filepath.Join("memory", "crin", stalePod),
		filepath.Join("unified", "crin", stalePod, newTestID(t)),
		filepath.Join("cpu", "crin", pod, staleCtr),
	}
	for _, d := range append(append([]string{}, keep...), gone...) {
		if err := os.MkdirAll(filepath.Join(fs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.SweepCgroups(t.Context(), func(id string) bool { return id == pod || id == ctr })
	for _, d := range keep {
		if _, err := os.Stat(filepath.Join(fs, d)); err != nil {
			t.Errorf("%s: %v, want it kept", d, err)
		}
	}
	for _, d := range gone {
		if _, err := os.Stat(filepath.Join(fs, d)); !os.IsNotExist(err) {
			t.Errorf("%s: still there (%v)", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(fs, "memory", "crin", stalePod)); !os.IsNotExist(err) {
		t.Errorf("the stale pod's directory is still there")
	}
}

// TestSweepIDDirs: the sweep removes the entries named by an id (or
// ".pod-" and an id) that no record owns, and keeps the owned ones and
// names that are no crind id.
func TestSweepIDDirs(t *testing.T) {
	dir := t.TempDir()
	e := New(t.Context(), Config{NetNSDir: filepath.Join(dir, "netns"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	owned, stale, stalePod := newTestID(t), newTestID(t), newTestID(t)
	for _, n := range []string{owned, ".pod-" + owned, stale, ".pod-" + stalePod, "not-an-id"} {
		if err := os.MkdirAll(filepath.Join(dir, "s", n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.SweepIDDirs(t.Context(), filepath.Join(dir, "s"), func(id string) bool { return id == owned })
	for _, n := range []string{owned, ".pod-" + owned, "not-an-id"} {
		if _, err := os.Stat(filepath.Join(dir, "s", n)); err != nil {
			t.Errorf("%s: %v, want it kept", n, err)
		}
	}
	for _, n := range []string{stale, ".pod-" + stalePod} {
		if _, err := os.Stat(filepath.Join(dir, "s", n)); !os.IsNotExist(err) {
			t.Errorf("%s: still there (%v)", n, err)
		}
	}
}

func TestUnknownID(t *testing.T) {
	known := newTestID(t)
	unknown := newTestID(t)
	isKnown := func(id string) bool { return id == known }
	tests := []struct {
		path, want string
	}{
		{"/r/pods/" + unknown + "/shm", unknown},
		{"/r/pods/" + known + "/shm", ""},
		{"/r/image/containers/" + unknown + "/rootfs", unknown},
		{"/r/image/layers/" + unknown, ""}, // a digest, not an id
		{"/s/c/" + unknown, unknown},
	}
	for _, tc := range tests {
		if got := unknownID(tc.path, isKnown); got != tc.want {
			t.Errorf("unknownID(%s) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
