package cri

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
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

// TestIDMappedCleanupIsRetried: a recorded id-mapped mount cleanup is
// done by the cleanup loop once no pod or container owns its id, and one
// whose path lies outside the user namespace dir is dropped untouched.
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
		h.deferCleanup(t.Context(), c, errors.New("busy"))
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
