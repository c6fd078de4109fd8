package podenv

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestResolvConf(t *testing.T) {
	b, err := resolvConf(&runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"ns.svc", "svc"}, Options: []string{"ndots:5"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "nameserver 10.0.0.10\nsearch ns.svc svc\noptions ndots:5\n"; string(b) != want {
		t.Errorf("resolv.conf = %q, want %q", b, want)
	}
	if _, err := resolvConf(&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1\nnameserver evil"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("server with a newline: %v", err)
	}
}
