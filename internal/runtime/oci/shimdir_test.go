package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// A container dir's shim.dir is trusted only when it names a pod's shim
// dir beside the container's: what shimDirFor returns may be removed.
func TestShimDirFor(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "c1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := shimDirFor(dir); got != "" {
		t.Errorf("without %s: shimDirFor = %q, want none", shim.ShimDirFile, got)
	}
	if _, err := shimSocket(dir); !errors.Is(err, shim.ErrShimGone) {
		t.Errorf("without %s: shimSocket error = %v, want ErrShimGone", shim.ShimDirFile, err)
	}
	good := filepath.Join(state, ".pod-p1")
	for _, tc := range []struct{ content, want string }{
		{good, good},
		{"", ""},
		{"/", ""},
		{state, ""},
		{dir, ""},
		{filepath.Join(state, ".pod-p1", ".."), ""},
		{filepath.Join(state, ".pod-../c1"), ""},
		{filepath.Join(state, ".pod-"), ""},
		{filepath.Join(t.TempDir(), ".pod-p1"), ""},
		{".pod-p1", ""},
		{good + "\n", ""},
	} {
		if err := os.WriteFile(filepath.Join(dir, shim.ShimDirFile), []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := shimDirFor(dir); got != tc.want {
			t.Errorf("%s = %q: shimDirFor = %q, want %q", shim.ShimDirFile, tc.content, got, tc.want)
		}
	}
}
