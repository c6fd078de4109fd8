package oci

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestUTSSysctls(t *testing.T) {
	tests := []struct {
		name    string
		sysctls map[string]string
		ns      podNamespaces
		wantErr string
	}{
		{name: "own uts", sysctls: map[string]string{"kernel.domainname": "example.org", "kernel.hostname": "pod"}},
		{name: "slash form", sysctls: map[string]string{"kernel/domainname": "example.org"}},
		{name: "host ipc does not matter", sysctls: map[string]string{"kernel.domainname": "example.org"}, ns: podNamespaces{hostIPC: true}},
		{name: "host network shares the host's uts", sysctls: map[string]string{"kernel.domainname": "example.org"},
			ns: podNamespaces{hostNetwork: true}, wantErr: `linux.sysctls["kernel.domainname"]: not allowed with host network`},
		{name: "other kernel sysctls stay refused", sysctls: map[string]string{"kernel.hostname_x": "1"}, wantErr: "not a namespaced sysctl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkSysctls(tc.sysctls, tc.ns)
			if tc.wantErr != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want InvalidArgument with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.sysctls) {
				t.Errorf("sysctls = %v, want %v", got, tc.sysctls)
			}
		})
	}
}
