package oci

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func idm(host, ctr, n uint32) *runtimeapi.IDMapping {
	return &runtimeapi.IDMapping{HostId: host, ContainerId: ctr, Length: n}
}

func usernsPod(u *runtimeapi.UserNamespace) *runtimeapi.PodSandboxConfig {
	return podConfig(&runtimeapi.NamespaceOption{UsernsOptions: u})
}

func TestPodUserNS(t *testing.T) {
	const (
		P = runtimeapi.NamespaceMode_POD
		N = runtimeapi.NamespaceMode_NODE
	)
	ok := []*runtimeapi.IDMapping{idm(165536, 0, 65536)}
	tests := []struct {
		name    string
		cfg     *runtimeapi.PodSandboxConfig
		want    *UserNS
		wantErr string // substring of an invalid-argument error
	}{
		{name: "no options", cfg: podConfig(nil)},
		{name: "node", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: N})},
		{name: "pod", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: []*runtimeapi.IDMapping{idm(200000, 0, 1000)}}),
			want: &UserNS{UIDs: []specs.LinuxIDMapping{{HostID: 165536, Size: 65536}}, GIDs: []specs.LinuxIDMapping{{HostID: 200000, Size: 1000}}}},
		{name: "pod at the top of the id space", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: []*runtimeapi.IDMapping{idm(1<<32-65537, 0, 65536)}, Gids: ok}),
			want: &UserNS{UIDs: []specs.LinuxIDMapping{{HostID: 1<<32 - 65537, Size: 65536}}, GIDs: []specs.LinuxIDMapping{{HostID: 165536, Size: 65536}}}},
		{name: "node with mappings", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: N, Uids: ok}), wantErr: "mode NODE with uid or gid mappings"},
		{name: "container mode", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER, Uids: ok, Gids: ok}), wantErr: "userns_options.mode CONTAINER"},
		{name: "target mode", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET, Uids: ok, Gids: ok}), wantErr: "userns_options.mode TARGET"},
		{name: "no uid mapping", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Gids: ok}), wantErr: "userns_options.uids: 0 mappings"},
		{name: "two gid mappings", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: []*runtimeapi.IDMapping{idm(165536, 0, 1), idm(300000, 1, 10)}}), wantErr: "userns_options.gids: 2 mappings"},
		{name: "zero length", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: []*runtimeapi.IDMapping{idm(165536, 0, 0)}, Gids: ok}), wantErr: "uids[0].length 0"},
		{name: "root not mapped", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: []*runtimeapi.IDMapping{idm(165536, 1, 65536)}}), wantErr: "gids[0].container_id 1"},
		{name: "host root", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: []*runtimeapi.IDMapping{idm(0, 0, 65536)}, Gids: ok}), wantErr: "uids[0].host_id 0"},
		{name: "overflow", cfg: usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: []*runtimeapi.IDMapping{idm(1<<32-65536, 0, 65536)}}), wantErr: "gids[0]: host_id 4294901760 with length 65536"},
		{name: "host network", cfg: podConfig(&runtimeapi.NamespaceOption{Network: N, UsernsOptions: &runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: ok}}), wantErr: "node's network namespace"},
		{name: "host pid", cfg: podConfig(&runtimeapi.NamespaceOption{Pid: N, UsernsOptions: &runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: ok}}), wantErr: "node's pid namespace"},
		{name: "host ipc", cfg: podConfig(&runtimeapi.NamespaceOption{Ipc: N, UsernsOptions: &runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: ok}}), wantErr: "node's ipc namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodUserNS(tc.cfg)
			if tc.wantErr != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want invalid argument containing %q", err, tc.wantErr)
				}
				// SandboxSpec refuses it the same way.
				if _, err := SandboxSpec(sandboxOpts(tc.cfg)); !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("SandboxSpec err = %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("PodUserNS (-want +got):\n%s", d)
			}
		})
	}
}

func TestSandboxSpecUserNS(t *testing.T) {
	ok := []*runtimeapi.IDMapping{idm(165536, 0, 65536)}
	cfg := usernsPod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ok, Gids: ok})
	if _, err := SandboxSpec(sandboxOpts(cfg)); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not pinned") {
		t.Fatalf("without a pinned user namespace: err = %v, want invalid argument", err)
	}
	o := sandboxOpts(cfg)
	o.UserNSPath = "/run/crin/ns/sb1/user"
	s, err := SandboxSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 165536, Size: 65536}}
	if d := cmp.Diff(want, s.Linux.UIDMappings); d != "" {
		t.Errorf("uidMappings (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, s.Linux.GIDMappings); d != "" {
		t.Errorf("gidMappings (-want +got):\n%s", d)
	}
	if s.Linux.Namespaces[0] != (specs.LinuxNamespace{Type: specs.UserNamespace, Path: o.UserNSPath}) {
		t.Errorf("namespaces[0] = %+v, want the pinned user namespace", s.Linux.Namespaces[0])
	}
}

func TestContainerSpecUserNS(t *testing.T) {
	P := runtimeapi.NamespaceMode_POD
	ok := []*runtimeapi.IDMapping{idm(165536, 0, 65536)}
	pod := usernsPod(&runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: ok})
	tests := []struct {
		name    string
		ctr     *runtimeapi.UserNamespace
		wantErr string
	}{
		{name: "inherits the pod's"},
		{name: "repeats the pod's", ctr: &runtimeapi.UserNamespace{Mode: P, Uids: ok, Gids: ok}},
		{name: "node", ctr: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, wantErr: "mode NODE: the pod's is POD"},
		{name: "other mapping", ctr: &runtimeapi.UserNamespace{Mode: P, Uids: []*runtimeapi.IDMapping{idm(300000, 0, 65536)}, Gids: ok}, wantErr: "differ from its pod's"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				Image:    &runtimeapi.ImageSpec{Image: "busybox"},
				Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: tc.ctr},
				}},
			}
			o := containerOpts(t, pod, cfg)
			o.UserNSPath = "/run/crin/ns/sb1/user"
			s, err := ContainerSpec(o)
			if tc.wantErr != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want invalid argument containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Linux.UIDMappings) != 1 || s.Linux.UIDMappings[0].HostID != 165536 {
				t.Errorf("uidMappings = %+v", s.Linux.UIDMappings)
			}
			if s.Linux.Namespaces[0].Type != specs.UserNamespace || s.Linux.Namespaces[0].Path != o.UserNSPath {
				t.Errorf("namespaces = %+v, want the pod's user namespace first", s.Linux.Namespaces)
			}
		})
	}
}
