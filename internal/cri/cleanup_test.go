package cri

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/crin-dev/crin/internal/runtime"
)

// TestFailedDeleteIsRetried: a runtime delete that fails during a
// rollback is recorded and retried in the background until it works,
// also by a restarted crind.
func TestFailedDeleteIsRetried(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "running"
		if restart {
			name = "after restart"
		}
		t.Run(name, func(t *testing.T) {
			h := newHub(t)
			id := newID()
			if err := h.rt.Create(t.Context(), runtime.CreateRequest{ID: id}); err != nil {
				t.Fatal(err)
			}
			h.rt.mu.Lock()
			h.rt.deleteFails = 1
			if restart {
				h.rt.deleteFails = 2 // the background retry fails too
			}
			h.rt.mu.Unlock()
			if err := h.deleteFromRuntime(t.Context(), "runc", id); err == nil {
				t.Fatal("the first delete did not fail")
			}
			if restart {
				waitFor(t, "a failed retry", func() bool {
					h.rt.mu.Lock()
					defer h.rt.mu.Unlock()
					return h.rt.deleteFails == 0
				})
				h.start(t, false)
			}
			waitFor(t, "the container to be deleted", func() bool {
				h.rt.mu.Lock()
				_, left := h.rt.ctrs[id]
				h.rt.mu.Unlock()
				cs, _ := h.opts.Store.Cleanups()
				return !left && len(cs) == 0
			})
		})
	}
}

// TestSweepCgroups: the start-up sweep removes pod cgroups no record owns
// (and container cgroups of a known pod no record owns) in every
// hierarchy, and keeps the others.
func TestSweepCgroups(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "p")
	ctr := h.create(t, pod, "c")
	stalePod, staleCtr := newID(), newID()
	fs := h.opts.CgroupFS
	keep := []string{
		filepath.Join("cpu", "crin", pod, pod),
		filepath.Join("cpu", "crin", pod, ctr),
		filepath.Join("memory", "crin", pod, ctr),
		filepath.Join("memory", "crin", "not-an-id"),
	}
	gone := []string{
		filepath.Join("cpu", "crin", stalePod, stalePod),
		filepath.Join("memory", "crin", stalePod),
		filepath.Join("unified", "crin", stalePod, newID()),
		filepath.Join("cpu", "crin", pod, staleCtr),
	}
	for _, d := range append(append([]string{}, keep...), gone...) {
		if err := os.MkdirAll(filepath.Join(fs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.sweepCgroups(t.Context())
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

func TestUnknownID(t *testing.T) {
	known := newID()
	unknown := newID()
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
