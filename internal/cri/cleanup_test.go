package cri

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/crin-dev/crin/internal/store"
)

// TestIDMappedCleanupIsRetried: a recorded id-mapped mount cleanup is
// done by the hub's cleanup journal (internal/cleanup, through podenv)
// once no pod or container owns its id, and one whose path lies outside
// the user namespace dir is dropped untouched.
func TestIDMappedCleanupIsRetried(t *testing.T) {
	h := newHub(t)
	h.opts.UserNSDir = filepath.Join(t.TempDir(), "userns")
	h.start(t, false)
	inside := filepath.Join(h.opts.UserNSDir, newID(), "c", newID())
	outside := filepath.Join(t.TempDir(), "keep")
	for _, d := range []string{inside, outside} {
		if err := os.MkdirAll(filepath.Join(d, "m"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []store.Cleanup{
		{Kind: store.CleanupIDMapped, ID: newID(), Path: inside},
		{Kind: store.CleanupIDMapped, ID: newID(), Path: outside},
	} {
		h.cleanups.Defer(t.Context(), c, errors.New("busy"))
	}
	waitFor(t, "the cleanups to be done", func() bool {
		cs, _ := h.opts.Store.Cleanups()
		return len(cs) == 0
	})
	if _, err := os.Stat(inside); !os.IsNotExist(err) {
		t.Errorf("%s: %v, want removed", inside, err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a path outside the user namespace dir was touched: %v", err)
	}
}
