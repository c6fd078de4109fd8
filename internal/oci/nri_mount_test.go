package oci

import (
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
)

// TestAdjustedBindMountSource: a plugin's bind mount whose source is
// missing fails at adjustment time naming the plugin and the field.
func TestAdjustedBindMountSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	tests := []struct {
		name  string
		mount *api.Mount
		want  error // nil: accepted
		field string
	}{
		{"missing source", &api.Mount{Destination: "/data", Type: "bind", Source: missing, Options: []string{"rbind"}},
			errdefs.ErrNotFound, `mounts["/data"]: source "` + missing + `" does not exist`},
		{"missing source, bind by option", &api.Mount{Destination: "/data", Source: missing, Options: []string{"bind", "ro"}},
			errdefs.ErrNotFound, `mounts["/data"]: source "` + missing + `" does not exist`},
		{"relative source", &api.Mount{Destination: "/data", Type: "bind", Source: "host/data", Options: []string{"rbind"}},
			errdefs.ErrInvalidArgument, `mounts["/data"] source "host/data": not an absolute path`},
		{"existing source", &api.Mount{Destination: "/data", Type: "bind", Source: t.TempDir(), Options: []string{"rbind"}}, nil, ""},
		{"tmpfs has no host source", &api.Mount{Destination: "/scratch", Type: "tmpfs", Source: "tmpfs"}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := AdjustOptions{
				ContainerID: testCtr, Owners: ownedBy(t, "10-res", keyed((*api.OwningPlugins).ClaimMount, tc.mount.Destination)),
				Features: newerFeatures(), RuntimeName: "runc", Host: hostV2,
			}
			err := ApplyAdjustment(nriBaseSpec(), &api.ContainerAdjustment{Mounts: []*api.Mount{tc.mount}}, o)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			checkRefusal(t, err, tc.want, `nri plugin "10-res" adjusts `, tc.field)
		})
	}
}
