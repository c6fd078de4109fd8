package cri

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/crin-dev/crin/internal/store"
)

// TestSweepDirs: the start-up sweep releases the rootfs and removes the
// pod dirs of ids no record owns, and keeps the known ones, those with a
// record only, and names that are no crind id.
func TestSweepDirs(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "p")
	ctr := h.create(t, pod, "c")
	stalePod, staleCtr := newID(), newID()
	// A record whose recovery failed is in the store, not in memory.
	recorded := newID()
	if err := h.opts.Store.PutContainer(&store.Container{ID: recorded, Name: "r", SandboxID: pod}); err != nil {
		t.Fatal(err)
	}
	pods := filepath.Join(h.opts.RootDir, "pods")
	for _, d := range []string{pod, stalePod, "not-an-id"} {
		if err := os.MkdirAll(filepath.Join(pods, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	h.images.mu.Lock()
	h.images.rootfs[staleCtr] = true
	h.images.rootfs[recorded] = true
	h.images.rootfs["not-an-id"] = true
	h.images.mu.Unlock()

	newRecovery(h.Service).sweepDirs(t.Context())

	for _, d := range []string{pod, "not-an-id"} {
		if _, err := os.Stat(filepath.Join(pods, d)); err != nil {
			t.Errorf("pod dir %s: %v, want it kept", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(pods, stalePod)); !os.IsNotExist(err) {
		t.Errorf("pod dir of a pod no record owns: still there (%v)", err)
	}
	h.images.mu.Lock()
	defer h.images.mu.Unlock()
	if h.images.rootfs[staleCtr] {
		t.Error("the rootfs of a container no record owns was not released")
	}
	if !h.images.rootfs[ctr] || !h.images.rootfs[recorded] || !h.images.rootfs["not-an-id"] {
		t.Errorf("rootfs kept: %v, want %s, %s and not-an-id among them", h.images.rootfs, ctr, recorded)
	}
}
