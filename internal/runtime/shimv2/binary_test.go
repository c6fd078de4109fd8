package shimv2

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
)

func TestBinaryName(t *testing.T) {
	for _, tc := range []struct {
		name, typ, want string
		wantErr         error
	}{
		{name: "runc", typ: "io.containerd.runc.v2", want: "containerd-shim-runc-v2"},
		{name: "kata", typ: "io.containerd.kata.v2", want: "containerd-shim-kata-v2"},
		{name: "runsc", typ: "io.containerd.runsc.v1", want: "containerd-shim-runsc-v1"},
		{name: "too short", typ: "runc.v2", wantErr: errdefs.ErrInvalidArgument},
		{name: "empty", typ: "", wantErr: errdefs.ErrInvalidArgument},
		{name: "empty part", typ: "io.containerd..v2", wantErr: errdefs.ErrInvalidArgument},
		{name: "path", typ: "io.containerd.../x.v2", wantErr: errdefs.ErrInvalidArgument},
		{name: "slash", typ: "io.containerd.a/b.v2", wantErr: errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BinaryName(tc.typ)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("BinaryName(%q) = %q, %v; want %v", tc.typ, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("BinaryName(%q) = %q, %v; want %q", tc.typ, got, err, tc.want)
			}
		})
	}
}

func TestResolveBinary(t *testing.T) {
	bin := t.TempDir()
	shimPath := filepath.Join(bin, "containerd-shim-fake-v2")
	if err := os.WriteFile(shimPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	explicit := filepath.Join(bin, "my-shim")
	if err := os.WriteFile(explicit, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	for _, tc := range []struct {
		name, path, typ, want string
		wantErr               error
	}{
		{name: "type on PATH", typ: "io.containerd.fake.v2", want: shimPath},
		{name: "explicit path wins", path: explicit, typ: "io.containerd.fake.v2", want: explicit},
		{name: "bare name on PATH", path: "my-shim", want: explicit},
		{name: "type not installed", typ: "io.containerd.missing.v2", wantErr: errdefs.ErrNotFound},
		{name: "path not installed", path: filepath.Join(bin, "nope"), wantErr: errdefs.ErrNotFound},
		{name: "neither", wantErr: errdefs.ErrInvalidArgument},
		{name: "bad type", typ: "runc", wantErr: errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveBinary(tc.path, tc.typ)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ResolveBinary(%q, %q) = %q, %v; want %v", tc.path, tc.typ, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveBinary(%q, %q) = %q, %v; want %q", tc.path, tc.typ, got, err, tc.want)
			}
		})
	}
}

func TestRuncOptions(t *testing.T) {
	o, err := runcOptions(map[string]string{"binary_name": "/usr/sbin/runc", "systemd_cgroup": "false", "no_pivot_root": "true"}, "/run/x")
	if err != nil {
		t.Fatal(err)
	}
	if o.GetBinaryName() != "/usr/sbin/runc" || o.GetRoot() != "/run/x" || !o.GetNoPivotRoot() || o.GetSystemdCgroup() {
		t.Errorf("options = %v", o)
	}
	for _, bad := range []map[string]string{{"binary": "runc"}, {"systemd_cgroup": "maybe"}} {
		if _, err := runcOptions(bad, ""); !errdefs.IsInvalidArgument(err) {
			t.Errorf("runcOptions(%v) error = %v, want invalid argument", bad, err)
		}
	}
}
