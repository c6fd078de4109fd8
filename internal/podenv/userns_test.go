package podenv

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// TestUserNSUsable: user namespaces are offered with a runc that has
// them, on a host whose start-up probe passed, and refused as a failed
// precondition otherwise.
func TestUserNSUsable(t *testing.T) {
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
		name     string
		features *features.Features
		probe    error
		want     bool
	}{
		{name: "runc, probe passed", features: runc, want: true},
		{name: "runc, probe failed", features: runc, probe: errors.New("no idmap"), want: false},
		{name: "crun (not tested with crind's id-mapped mounts)", features: crun, want: false},
		{name: "a runc without user namespaces", features: noUser, want: false},
		{name: "features unknown", features: nil, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &Env{usernsErr: tc.probe}
			err := e.UserNSUsable("h", tc.features)
			if tc.want != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition)) {
				t.Errorf("UserNSUsable = %v, want nil: %v (else failed precondition)", err, tc.want)
			}
		})
	}
}

// TestNoUserNSDir: without a user namespace dir, the probe finds user
// namespaces not offered, whatever the runtime.
func TestNoUserNSDir(t *testing.T) {
	e := New(t.Context(), Config{NetNSDir: t.TempDir() + "/netns", PauseBinary: "/pause"})
	runc := &features.Features{
		Annotations: map[string]string{usernsRuntimeAnnotation: "1.1.5"},
		Linux:       &features.Linux{Namespaces: []string{"user"}},
	}
	if err := e.UserNSUsable("runc", runc); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("UserNSUsable = %v, want failed precondition", err)
	}
}
