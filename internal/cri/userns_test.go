package cri

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/crin-dev/crin/internal/store"
)

func TestUserNamespacesFeature(t *testing.T) {
	runc := &features.Features{
		Annotations: map[string]string{usernsRuntimeAnnotation: "1.1.5"},
		Linux:       &features.Linux{Namespaces: []string{"mount", "network", "user"}},
	}
	noUser := &features.Features{
		Annotations: map[string]string{usernsRuntimeAnnotation: "1.1.5"},
		Linux:       &features.Linux{Namespaces: []string{"mount", "network"}},
	}
	crun := &features.Features{Linux: &features.Linux{Namespaces: []string{"mount", "network", "user"}}}
	tests := []struct {
		name    string
		handler string
		probe   error
		want    bool
	}{
		{name: "runc, probe passed", handler: "runc", want: true},
		{name: "the default handler is runc", handler: "", want: true},
		{name: "runc, probe failed", handler: "runc", probe: errors.New("no idmap"), want: false},
		{name: "crun (not tested with crind's id-mapped mounts)", handler: "crun", want: false},
		{name: "a runc without user namespaces", handler: "old", want: false},
		{name: "features unknown", handler: "unknown", want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{
				opts:      Options{DefaultRuntime: "runc"},
				features:  map[string]*features.Features{"runc": runc, "crun": crun, "old": noUser, "unknown": nil},
				usernsErr: tc.probe,
			}
			if got := s.handlerFeatures(tc.handler).GetUserNamespaces(); got != tc.want {
				t.Errorf("UserNamespaces = %v, want %v", got, tc.want)
			}
			name := tc.handler
			if name == "" {
				name = "runc"
			}
			err := s.usernsUsable(name)
			if tc.want != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition)) {
				t.Errorf("usernsUsable = %v, want nil: %v (else failed precondition)", err, tc.want)
			}
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
