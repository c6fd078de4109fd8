package oci

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	testPasswd = `# comment
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1::/:/sbin/nologin
app:x:1000:1000:App:/home/app:/bin/sh
broken line
nogroup:x:2000:3000::/:/bin/sh
`
	testGroup = `root:x:0:
wheel:x:10:root,app
app:x:1000:
video:x:44:app
staff:x:50:daemon
`
)

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fakeRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), testPasswd)
	writeFile(t, filepath.Join(root, "etc/group"), testGroup)
	return root
}

func i64(v int64) *int64 { return &v }

func TestResolveUser(t *testing.T) {
	root := fakeRootfs(t)
	tests := []struct {
		name    string
		req     userRequest
		want    specs.User
		wantErr bool
	}{
		{name: "image default is root", want: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 10}}},
		{name: "image name", req: userRequest{imageUser: "app"}, want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 44}}},
		{name: "image uid known", req: userRequest{imageUser: "1000"}, want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 44}}},
		{name: "image uid unknown", req: userRequest{imageUser: "4242"}, want: specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "image uid:gid", req: userRequest{imageUser: "1000:44"}, want: specs.User{UID: 1000, GID: 44, AdditionalGids: []uint32{44, 10}}},
		{name: "image name:group", req: userRequest{imageUser: "daemon:video"}, want: specs.User{UID: 1, GID: 44, AdditionalGids: []uint32{44, 50}}},
		{name: "image unknown name", req: userRequest{imageUser: "nobody"}, wantErr: true},
		{name: "image unknown group", req: userRequest{imageUser: "app:nope"}, wantErr: true},
		{name: "image empty group", req: userRequest{imageUser: "app:"}, wantErr: true},
		{name: "image negative uid", req: userRequest{imageUser: "-1"}, wantErr: true},
		{name: "image uid too large", req: userRequest{imageUser: "4294967295"}, wantErr: true},
		{name: "run_as_user overrides image", req: userRequest{runAsUser: i64(1000), imageUser: "daemon"}, want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 44}}},
		{name: "run_as_user with group", req: userRequest{runAsUser: i64(1000), runAsGroup: i64(5)}, want: specs.User{UID: 1000, GID: 5, AdditionalGids: []uint32{5, 10, 44}}},
		{name: "run_as_username", req: userRequest{runAsUsername: "daemon"}, want: specs.User{UID: 1, GID: 1, AdditionalGids: []uint32{1, 50}}},
		{name: "run_as_username unknown", req: userRequest{runAsUsername: "ghost"}, wantErr: true},
		{name: "run_as_group alone", req: userRequest{runAsGroup: i64(5)}, wantErr: true},
		{name: "negative run_as_user", req: userRequest{runAsUser: i64(-5)}, wantErr: true},
		{
			name: "supplemental groups merged",
			req:  userRequest{imageUser: "app", supplemental: []int64{2000, 44}},
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 10, 44, 2000}},
		},
		{
			name: "strict policy ignores /etc/group",
			req:  userRequest{imageUser: "app", supplemental: []int64{2000}, policy: runtimeapi.SupplementalGroupsPolicy_Strict},
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}},
		},
		{name: "bad supplemental group", req: userRequest{supplemental: []int64{-1}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveUser(root, tc.req)
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
				t.Errorf("user (-want +got):\n%s", d)
			}
		})
	}
}

// An image whose /etc/passwd is a symlink out of the rootfs must not make
// crind read the host file it points at.
func TestResolveUserSymlinkEscape(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "passwd"), "evil:x:4242:4242::/:/bin/sh\n")
	writeFile(t, filepath.Join(outside, "group"), "evilgroup:x:4343:root\n")

	tests := []struct {
		name   string
		target string
	}{
		{name: "absolute", target: filepath.Join(outside, "passwd")},
		{name: "relative", target: strings.Repeat("../", 20) + strings.TrimPrefix(filepath.Join(outside, "passwd"), "/")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tc.target, filepath.Join(root, "etc/passwd")); err != nil {
				t.Fatal(err)
			}
			groupTarget := strings.Replace(tc.target, "passwd", "group", 1)
			if err := os.Symlink(groupTarget, filepath.Join(root, "etc/group")); err != nil {
				t.Fatal(err)
			}
			if _, err := resolveUser(root, userRequest{imageUser: "evil"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("user from outside the rootfs: err = %v, want no such user", err)
			}
			got, err := resolveUser(root, userRequest{imageUser: "4242"})
			if err != nil {
				t.Fatal(err)
			}
			if want := (specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}); !cmp.Equal(want, got) {
				t.Errorf("user = %+v, want %+v (nothing from outside)", got, want)
			}
		})
	}
}

// Symlinks inside the image resolve as if the rootfs were "/".
func TestResolveUserSymlinkInside(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "usr/share/base/passwd"), "app:x:7:8::/:/bin/sh\n")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/share/base/passwd", filepath.Join(root, "etc/passwd")); err != nil {
		t.Fatal(err)
	}
	got, err := resolveUser(root, userRequest{imageUser: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (specs.User{UID: 7, GID: 8, AdditionalGids: []uint32{8}}); !cmp.Equal(want, got) {
		t.Errorf("user = %+v, want %+v", got, want)
	}

	// A symlink loop is an error, not followed forever.
	if err := os.Symlink("group", filepath.Join(root, "etc/group")); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveUser(root, userRequest{imageUser: "app"}); err == nil {
		t.Error("symlink loop on /etc/group: no error")
	}
}

func TestResolveUserNoDatabase(t *testing.T) {
	root := t.TempDir()
	got, err := resolveUser(root, userRequest{imageUser: "10:20"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (specs.User{UID: 10, GID: 20, AdditionalGids: []uint32{20}}); !cmp.Equal(want, got) {
		t.Errorf("user = %+v, want %+v", got, want)
	}
	if _, err := resolveUser(root, userRequest{imageUser: "app"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("named user without /etc/passwd: err = %v, want invalid argument", err)
	}
}
