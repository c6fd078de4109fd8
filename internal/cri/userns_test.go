package cri

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go/features"
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
