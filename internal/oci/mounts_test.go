package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCRIMounts(t *testing.T) {
	tests := []struct {
		name        string
		mounts      []*runtimeapi.Mount
		want        []specs.Mount
		propagation string
		wantErr     string
		notImpl     bool
	}{
		{
			name:   "private rw",
			mounts: []*runtimeapi.Mount{{ContainerPath: "/data/", HostPath: "/var/lib/x"}},
			want:   []specs.Mount{{Destination: "/data", Type: "bind", Source: "/var/lib/x", Options: []string{"rbind", "rprivate", "rw"}}},
		},
		{
			name: "readonly host-to-container",
			mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/x", Readonly: true,
				Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}},
			want:        []specs.Mount{{Destination: "/data", Type: "bind", Source: "/x", Options: []string{"rbind", "rslave", "ro"}}},
			propagation: "rslave",
		},
		{
			name: "bidirectional wins",
			mounts: []*runtimeapi.Mount{
				{ContainerPath: "/a", HostPath: "/x", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
				{ContainerPath: "/b", HostPath: "/y", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
			},
			want: []specs.Mount{
				{Destination: "/a", Type: "bind", Source: "/x", Options: []string{"rbind", "rslave", "rw"}},
				{Destination: "/b", Type: "bind", Source: "/y", Options: []string{"rbind", "rshared", "rw"}},
			},
			propagation: "rshared",
		},
		{
			name:   "recursive read-only and options",
			mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/x", Readonly: true, RecursiveReadOnly: true, MountOptions: []string{"noexec", "nosuid"}}},
			want:   []specs.Mount{{Destination: "/a", Type: "bind", Source: "/x", Options: []string{"rbind", "rprivate", "rro", "noexec", "nosuid"}}},
		},
		{name: "relative container path", mounts: []*runtimeapi.Mount{{ContainerPath: "etc", HostPath: "/x"}}, wantErr: `mounts[0].container_path "etc": not absolute`},
		{name: "dotdot container path", mounts: []*runtimeapi.Mount{{ContainerPath: "/a/../etc", HostPath: "/x"}}, wantErr: `contains ".."`},
		{name: "root", mounts: []*runtimeapi.Mount{{ContainerPath: "/", HostPath: "/x"}}, wantErr: "cannot mount over the rootfs"},
		{name: "relative host path", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "x"}}, wantErr: `host_path "x": not absolute`},
		{name: "dotdot host path", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/var/../etc"}}, wantErr: `host_path "/var/../etc"`},
		{name: "duplicate", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/x"}, {ContainerPath: "/a/", HostPath: "/y"}}, wantErr: "mounts[1].container_path"},
		{name: "rro without ro", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/x", RecursiveReadOnly: true}}, wantErr: "needs readonly"},
		{name: "bad option", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/x", MountOptions: []string{"suid"}}}, wantErr: `mount_options[0] "suid"`},
		{name: "bad propagation", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", HostPath: "/x", Propagation: 9}}, wantErr: "propagation 9"},
		// ContainerSpec turns prepared image volumes into binds first.
		{name: "unprepared image volume", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", Image: &runtimeapi.ImageSpec{Image: "busybox"}}}, notImpl: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, prop, err := criMounts(tc.mounts)
			if tc.notImpl {
				if !errors.Is(err, errdefs.ErrNotImplemented) {
					t.Fatalf("err = %v, want not implemented", err)
				}
				return
			}
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("mounts (-want +got):\n%s", d)
			}
			if prop != tc.propagation {
				t.Errorf("propagation = %q, want %q", prop, tc.propagation)
			}
		})
	}
}

// Config mounts replace the defaults and the /etc files at the same place,
// and parents are mounted before their children.
func TestContainerMountOverrides(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{
		{ContainerPath: "/etc/hosts", HostPath: "/my/hosts"},
		{ContainerPath: "/dev/shm", HostPath: "/my/shm"},
		{ContainerPath: "/data/sub", HostPath: "/s"},
		{ContainerPath: "/data", HostPath: "/d"},
	}}
	o := containerOpts(t, podConfig(nil), cfg)
	o.HostsPath, o.HostnamePath = "/run/hosts", "/run/hostname"
	s, err := ContainerSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	pos := map[string]int{}
	for i, m := range s.Mounts {
		count[m.Destination]++
		pos[m.Destination] = i
		if m.Destination == "/etc/hosts" && m.Source != "/my/hosts" {
			t.Errorf("/etc/hosts from %s, want the config's", m.Source)
		}
		if m.Destination == "/dev/shm" && m.Source != "/my/shm" {
			t.Errorf("/dev/shm from %s, want the config's", m.Source)
		}
	}
	for d, n := range count {
		if n != 1 {
			t.Errorf("%d mounts at %s", n, d)
		}
	}
	if count["/etc/hostname"] != 1 {
		t.Error("/etc/hostname not mounted")
	}
	if pos["/data"] > pos["/data/sub"] || pos["/dev"] > pos["/dev/shm"] {
		t.Errorf("mount order: %v", pos)
	}
}

func TestHostIPCShm(t *testing.T) {
	pod := podConfig(&runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE})
	o := containerOpts(t, pod, &runtimeapi.ContainerConfig{})
	o.ShmPath = "/run/pod/shm"
	s, err := ContainerSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/dev/shm" && m.Source != "/dev/shm" {
			t.Errorf("/dev/shm = %+v, want the host's", m)
		}
	}
}

func TestCRIDevices(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	devs, rules, err := criDevices([]*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/mynull", Permissions: "rw"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Path != "/dev/mynull" || devs[0].Type != "c" || devs[0].Major != 1 || devs[0].Minor != 3 {
		t.Errorf("devices = %+v", devs)
	}
	if len(rules) != 1 || rules[0].Access != "rw" || !rules[0].Allow || *rules[0].Major != 1 || *rules[0].Minor != 3 {
		t.Errorf("rules = %+v", rules)
	}

	notDevice := filepath.Join(t.TempDir(), "file")
	writeFile(t, notDevice, "")
	for _, tc := range []struct {
		name string
		dev  *runtimeapi.Device
		want string
	}{
		{name: "bad permissions", dev: &runtimeapi.Device{HostPath: "/dev/null", ContainerPath: "/dev/x", Permissions: "rwx"}, want: `permissions "rwx"`},
		{name: "repeated permission", dev: &runtimeapi.Device{HostPath: "/dev/null", ContainerPath: "/dev/x", Permissions: "rr"}, want: `permissions "rr"`},
		{name: "relative container path", dev: &runtimeapi.Device{HostPath: "/dev/null", ContainerPath: "dev/x"}, want: "container_path"},
		{name: "missing", dev: &runtimeapi.Device{HostPath: "/dev/nonexistent-crin", ContainerPath: "/dev/x"}, want: "no such device"},
		{name: "not a device", dev: &runtimeapi.Device{HostPath: notDevice, ContainerPath: "/dev/x"}, want: "not a device node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := criDevices([]*runtimeapi.Device{tc.dev})
			wantInvalid(t, err, tc.want)
		})
	}
}

func TestDefaultDeviceRules(t *testing.T) {
	s, err := ContainerSpec(containerOpts(t, podConfig(nil), &runtimeapi.ContainerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) == 0 || rules[0].Allow || rules[0].Access != "rwm" || rules[0].Type != "" {
		t.Fatalf("first rule = %+v, want deny all", rules)
	}
	for _, r := range rules[1:] {
		if !r.Allow || r.Major == nil {
			t.Errorf("rule %+v: want a specific allow", r)
		}
	}
}
