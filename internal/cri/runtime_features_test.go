package cri

import (
	"errors"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/crin-dev/crin/internal/podenv"
)

// TestHandlerFeatures: a handler's features are its runtime's ("" is the
// default handler's), user namespaces only where the pod environment
// offers them (podenv's TestUserNSUsable has the cases), and a handler
// that is not ready offers nothing.
func TestHandlerFeatures(t *testing.T) {
	runc := &features.Features{
		Annotations:  map[string]string{"org.opencontainers.runc.version": "1.1.5"},
		MountOptions: []string{"rro"},
		Linux:        &features.Linux{Namespaces: []string{"mount", "network", "user"}},
	}
	tests := []struct {
		name     string
		handler  string
		notReady error
		wantRRO  bool
	}{
		{name: "runc", handler: "runc", wantRRO: true},
		{name: "the default handler is runc", handler: "", wantRRO: true},
		{name: "runc not ready", handler: "runc", notReady: errors.New("no runc binary"), wantRRO: false},
		{name: "features unknown", handler: "unknown", wantRRO: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{
				opts:     Options{DefaultRuntime: "runc"},
				features: map[string]*features.Features{"runc": runc, "unknown": nil},
				notReady: map[string]error{},
				// No user namespace dir: not offered on this node.
				env: podenv.New(t.Context(), podenv.Config{NetNSDir: t.TempDir() + "/netns"}),
			}
			if tc.notReady != nil {
				s.notReady["runc"] = tc.notReady
			}
			f := s.handlerFeatures(tc.handler)
			if got := f.GetRecursiveReadOnlyMounts(); got != tc.wantRRO {
				t.Errorf("RecursiveReadOnlyMounts = %v, want %v", got, tc.wantRRO)
			}
			if f.GetUserNamespaces() {
				t.Error("UserNamespaces = true on a node that does not offer them")
			}
		})
	}
}
