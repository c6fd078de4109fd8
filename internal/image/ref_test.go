package image

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseReference(t *testing.T) {
	const dgst = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		in, want string
	}{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"docker.io/busybox", "docker.io/library/busybox:latest"},
		{"index.docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"library/busybox", "docker.io/library/busybox:latest"},
		{"foo/bar:v1", "docker.io/foo/bar:v1"},
		{"quay.io/a/b", "quay.io/a/b:latest"},
		{"localhost:5000/x", "localhost:5000/x:latest"},
		{"127.0.0.1:5001/library/busybox:latest", "127.0.0.1:5001/library/busybox:latest"},
		{"busybox@" + dgst, "docker.io/library/busybox@" + dgst},
		{"busybox:1.36@" + dgst, "docker.io/library/busybox@" + dgst},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			r, err := parseReference(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.String() != tc.want {
				t.Errorf("got %s, want %s", r, tc.want)
			}
		})
	}
}

func TestParseReferenceErrors(t *testing.T) {
	for _, in := range []string{"", "Busybox", "busybox:", "busybox:a:b", " busybox", "busybox@sha256:abc", "a//b", "http://x/y", "127.0.0.1:99999/x:1", "reg:0/x", "[::1]:70000/x"} {
		t.Run(in, func(t *testing.T) {
			_, err := parseReference(in)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err %v, want ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), "image reference") {
				t.Errorf("error %q does not say what was wrong", err)
			}
			if in != "" && !strings.Contains(err.Error(), in) {
				t.Errorf("error %q does not name %q", err, in)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	s := &Service{
		cfg: Config{PlainHTTP: []string{"reg.local:5000"}},
		mirrors: map[string][]endpoint{
			"docker.io": {mustEndpoint(t, "http://127.0.0.1:5000/cache/"), mustEndpoint(t, "https://mirror.example")},
		},
	}
	tests := []struct {
		ref  string
		want []string
	}{
		{"busybox", []string{
			"127.0.0.1:5000/cache/library/busybox:latest",
			"mirror.example/library/busybox:latest",
			"index.docker.io/library/busybox:latest",
		}},
		{"reg.local:5000/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", []string{
			"reg.local:5000/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			r, err := parseReference(tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			eps := s.endpoints(r)
			var got []string
			for _, ep := range eps {
				rr, err := ep.remoteRef(r)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, rr.Name())
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("endpoints\n got %v\nwant %v", got, tc.want)
			}
			if tc.ref == "busybox" && (!eps[0].plain || eps[1].plain) {
				t.Errorf("schemes: %s, %s; want http then https", eps[0], eps[1])
			}
			if strings.HasPrefix(tc.ref, "reg.local") {
				if !eps[0].plain {
					t.Errorf("reg.local:5000 is in PlainHTTP but reached over https")
				}
				rr, _ := eps[0].remoteRef(r)
				if rr.Context().Scheme() != "http" {
					t.Errorf("scheme %s, want http", rr.Context().Scheme())
				}
			}
		})
	}
}

func mustEndpoint(t *testing.T, u string) endpoint {
	t.Helper()
	ep, err := parseEndpoint(u)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestParseEndpointErrors(t *testing.T) {
	for _, u := range []string{"ftp://x", "127.0.0.1:5000", "http://", "http://u:p@x", "http://x/?a=b"} {
		if _, err := parseEndpoint(u); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseEndpoint(%q): %v, want ErrInvalidArgument", u, err)
		}
	}
}
