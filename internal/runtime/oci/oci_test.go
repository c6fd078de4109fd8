package oci

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/crin-dev/crin/internal/runtime"
)

func TestFeaturesFromVersion(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want *features.Features
	}{
		{
			name: "crun 1.8.1",
			out:  "crun version 1.8.1\ncommit: f8a096be\nrundir: /run/crun\nspec: 1.0.0\n+SYSTEMD +SELINUX\n",
			want: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.0"},
		},
		{
			name: "runc 1.1",
			out:  "runc version 1.1.5\ncommit: v1.1.5\nspec: 1.0.2-dev\ngo: go1.19\n",
			want: &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.2-dev"},
		},
		{name: "no spec line", out: "something 1.0\n", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := featuresFromVersion([]byte(tc.out))
			if ok != (tc.want != nil) {
				t.Fatalf("ok = %v, want %v", ok, tc.want != nil)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("features (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{strings.Repeat("a1", 32), true},
		{"pod_sandbox-1.2", true},
		{"", false},
		{"..", false},
		{".hidden", false},
		{"a/b", false},
		{"-rf", false},
		{"a b", false},
		{strings.Repeat("x", 129), false},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			err := runtime.CheckID(tc.id)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("error %v is not InvalidArgument", err)
			}
		})
	}
}

func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 5}
	for _, s := range []string{"abc", "defg", "hij"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" {
		t.Errorf("kept %q, want %q", got, "abcde")
	}
	if (&cappedBuffer{max: 5}).Bytes() != nil {
		t.Error("empty buffer is not nil")
	}
}

func TestIsRuntimeNotExist(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&runtime.RuntimeError{Msg: "container does not exist"}, true},
		{&runtime.RuntimeError{Msg: "open /run/crun/x/status: No such file or directory"}, true},
		{&runtime.RuntimeError{Msg: "container not running"}, false},
		{errors.New("does not exist"), false},
	}
	for _, tc := range tests {
		if got := isRuntimeNotExist(tc.err); got != tc.want {
			t.Errorf("isRuntimeNotExist(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	dir := t.TempDir()
	_, err := New(t.Context(), Config{Name: "x", Binary: "/nonexistent/runc", ShimBinary: "/bin/true", StateDir: dir, Root: dir})
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("missing binary: %v, want InvalidArgument", err)
	}
	_, err = New(t.Context(), Config{Name: "x", Binary: "/bin/true", ShimBinary: "/bin/true"})
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("missing dirs: %v, want InvalidArgument", err)
	}
}

func TestUnknownIDs(t *testing.T) {
	dir := t.TempDir()
	o, err := New(t.Context(), Config{Name: "fake", Binary: "/bin/true", ShimBinary: "/bin/true", StateDir: dir, Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := o.Delete(ctx, "nope"); err != nil {
		t.Errorf("Delete(unknown) = %v, want nil", err)
	}
	if _, err := o.Status(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Status(unknown) = %v, want NotFound", err)
	}
	if _, err := o.Start(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Start(unknown) = %v, want NotFound", err)
	}
	if err := o.Signal(ctx, "nope", 9, runtime.SignalOptions{}); !errdefs.IsNotFound(err) {
		t.Errorf("Signal(unknown) = %v, want NotFound", err)
	}
	if _, err := o.Status(ctx, "../etc"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Status(../etc) = %v, want InvalidArgument", err)
	}
	ids, err := o.List(ctx)
	if err != nil || len(ids) != 0 {
		t.Errorf("List = %v, %v; want empty", ids, err)
	}
}
