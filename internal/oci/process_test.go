package oci

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestProcessArgs(t *testing.T) {
	img := ImageConfig{Entrypoint: []string{"/ep", "-x"}, Cmd: []string{"cmd1", "cmd2"}}
	tests := []struct {
		name    string
		command []string
		args    []string
		img     ImageConfig
		want    []string
		wantErr bool
	}{
		{name: "image only", img: img, want: []string{"/ep", "-x", "cmd1", "cmd2"}},
		{name: "args replace cmd", args: []string{"a"}, img: img, want: []string{"/ep", "-x", "a"}},
		{name: "command drops entrypoint and cmd", command: []string{"/bin/sh"}, img: img, want: []string{"/bin/sh"}},
		{name: "command and args", command: []string{"/bin/sh"}, args: []string{"-c", "true"}, img: img, want: []string{"/bin/sh", "-c", "true"}},
		{name: "cmd only image", img: ImageConfig{Cmd: []string{"/bin/app"}}, want: []string{"/bin/app"}},
		{name: "args without entrypoint", args: []string{"/bin/app", "x"}, img: ImageConfig{Cmd: []string{"/other"}}, want: []string{"/bin/app", "x"}},
		{name: "nothing to run", wantErr: true},
		{name: "NUL in arg", command: []string{"/bin/sh\x00"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := processArgs(&runtimeapi.ContainerConfig{Command: tc.command, Args: tc.args}, tc.img)
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("args (-want +got):\n%s", d)
			}
		})
	}
}

func kv(k, v string) *runtimeapi.KeyValue { return &runtimeapi.KeyValue{Key: k, Value: []byte(v)} }

func TestProcessEnv(t *testing.T) {
	tests := []struct {
		name     string
		image    []string
		envs     []*runtimeapi.KeyValue
		hostname string
		want     []string
		wantErr  bool
	}{
		{
			name:     "default PATH and hostname",
			hostname: "pod1",
			want:     []string{defaultPath, "HOSTNAME=pod1"},
		},
		{
			name:  "image PATH kept, config overrides by name in place",
			image: []string{"PATH=/bin", "A=1", "B=2"},
			envs:  []*runtimeapi.KeyValue{kv("A", "x"), kv("C", "3")},
			want:  []string{"PATH=/bin", "A=x", "B=2", "C=3"},
		},
		{
			name:  "malformed image entries dropped",
			image: []string{"NOEQUALS", "=v", "OK=1", "BAD=a\x00b"},
			want:  []string{defaultPath, "OK=1"},
		},
		{
			name: "value with equals sign",
			envs: []*runtimeapi.KeyValue{kv("Q", "a=b")},
			want: []string{defaultPath, "Q=a=b"},
		},
		{
			name:     "image may override HOSTNAME",
			image:    []string{"HOSTNAME=img"},
			hostname: "pod1",
			want:     []string{defaultPath, "HOSTNAME=img"},
		},
		{name: "empty key", envs: []*runtimeapi.KeyValue{kv("", "x")}, wantErr: true},
		{name: "key with equals", envs: []*runtimeapi.KeyValue{kv("A=B", "x")}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := processEnv(&runtimeapi.ContainerConfig{Envs: tc.envs}, ImageConfig{Env: tc.image}, tc.hostname)
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("env (-want +got):\n%s", d)
			}
		})
	}
}

func TestProcessCwd(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		img     string
		want    string
		wantErr bool
	}{
		{name: "default", want: "/"},
		{name: "image", img: "/srv", want: "/srv"},
		{name: "image relative", img: "app", want: "/app"},
		{name: "config wins", cfg: "/work/", img: "/srv", want: "/work"},
		{name: "config relative", cfg: "work", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := processCwd(&runtimeapi.ContainerConfig{WorkingDir: tc.cfg}, ImageConfig{WorkingDir: tc.img})
			if tc.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want invalid argument", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("cwd = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
