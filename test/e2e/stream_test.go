//go:build e2e

package e2e

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"testing"

	"github.com/crin-dev/crin/test/streamclient"
)

// exec runs cmd in a container through kubelet's /exec with stdin, stdout
// and stderr streams, as `kubectl exec -i` does.
func (n *node) exec(t *testing.T, podName, ctr, stdin string, cmd ...string) *streamclient.Session {
	t.Helper()
	q := url.Values{"command": cmd, "output": {"1"}, "error": {"1"}}
	if stdin != "" {
		q.Set("input", "1")
	}
	return streamclient.Run(t, n.url(fmt.Sprintf("/exec/default/%s/%s?%s", podName, ctr, q.Encode())),
		streamclient.Options{TLS: kubeletTLS(), Stdin: stdin, Stdout: true, Stderr: true})
}

// portForwardGet sends an HTTP/1.0 GET for path to port of the pod through
// kubelet's /portForward and returns the raw response.
func (n *node) portForwardGet(t *testing.T, podName string, port int, path string) string {
	t.Helper()
	conn := streamclient.Dial(t, n.url(fmt.Sprintf("/portForward/default/%s", podName)), streamclient.PortForwardV1, kubeletTLS())
	defer conn.Close()
	return streamclient.PortForwardGet(t, conn, port, "0", path)
}

// kubeletTLS trusts kubelet's self-signed serving certificate.
func kubeletTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }
