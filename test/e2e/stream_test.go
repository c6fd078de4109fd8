//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// The protocols kubectl speaks to kubelet's /exec and /portForward (kubelet
// proxies them to crind's streaming server).
const (
	remoteCommandV4 = "v4.channel.k8s.io"
	portForwardV1   = "portforward.k8s.io"
)

// dialStream upgrades a POST to kubelet's path into a SPDY connection
// speaking protocol.
func (n *node) dialStream(t *testing.T, path, protocol string) httpstream.Connection {
	t.Helper()
	rt, err := spdy.NewRoundTripper(&tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpstream.HeaderProtocolVersion, protocol)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade %s: %v: %s", path, err, b)
	}
	if got := resp.Header.Get(httpstream.HeaderProtocolVersion); got != protocol {
		conn.Close()
		t.Fatalf("kubelet chose protocol %q, want %q", got, protocol)
	}
	return conn
}

// execResult is what one remote command produced.
type execResult struct {
	stdout, stderr string
	status         struct {
		Status  string `json:"status"`
		Message string `json:"message"`
		Details struct {
			Causes []struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"causes"`
		} `json:"details"`
	}
}

// exitCode is 0 on success, the ExitCode cause otherwise, -1 if neither.
func (r *execResult) exitCode() int {
	if r.status.Status == "Success" {
		return 0
	}
	for _, c := range r.status.Details.Causes {
		if c.Reason == "ExitCode" {
			var code int
			if _, err := fmt.Sscan(c.Message, &code); err == nil {
				return code
			}
		}
	}
	return -1
}

// exec runs cmd in a container through kubelet's /exec with stdin, stdout
// and stderr streams, as `kubectl exec -i` does.
func (n *node) exec(t *testing.T, podName, ctr, stdin string, cmd ...string) *execResult {
	t.Helper()
	q := url.Values{"command": cmd, "output": {"1"}, "error": {"1"}}
	if stdin != "" {
		q.Set("input", "1")
	}
	conn := n.dialStream(t, fmt.Sprintf("/exec/default/%s/%s?%s", podName, ctr, q.Encode()), remoteCommandV4)
	defer conn.Close()
	create := func(typ string) httpstream.Stream {
		h := http.Header{}
		h.Set("streamType", typ)
		s, err := conn.CreateStream(h)
		if err != nil {
			t.Fatalf("create %s stream: %v", typ, err)
		}
		return s
	}
	errStream := create("error")
	var in httpstream.Stream
	if stdin != "" {
		in = create("stdin")
	}
	out, serr := create("stdout"), create("stderr")
	if in != nil {
		if _, err := io.WriteString(in, stdin); err != nil {
			t.Fatalf("write stdin: %v", err)
		}
		in.Close()
	}
	var (
		wg      sync.WaitGroup
		res     execResult
		outB    []byte
		errB    []byte
		statusB []byte
	)
	wg.Add(3)
	go func() { defer wg.Done(); outB, _ = io.ReadAll(out) }()
	go func() { defer wg.Done(); errB, _ = io.ReadAll(serr) }()
	go func() { defer wg.Done(); statusB, _ = io.ReadAll(errStream) }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		conn.Close()
		<-done
		t.Fatalf("exec %v did not end", cmd)
	}
	res.stdout, res.stderr = string(outB), string(errB)
	if len(statusB) > 0 {
		if err := json.Unmarshal(statusB, &res.status); err != nil {
			t.Fatalf("exec status %q: %v", statusB, err)
		}
	} else {
		res.status.Status = "Success"
	}
	return &res
}

// portForwardGet sends an HTTP/1.0 GET for path to port of the pod through
// kubelet's /portForward and returns the raw response.
func (n *node) portForwardGet(t *testing.T, podName string, port int, path string) string {
	t.Helper()
	conn := n.dialStream(t, fmt.Sprintf("/portForward/default/%s", podName), portForwardV1)
	defer conn.Close()
	h := http.Header{}
	h.Set("streamType", "error")
	h.Set("port", fmt.Sprint(port))
	h.Set("requestID", "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	h.Set("streamType", "data")
	data, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	var errB []byte
	errDone := make(chan struct{})
	go func() { defer close(errDone); errB, _ = io.ReadAll(errStream) }()
	if _, err := io.WriteString(data, "GET "+path+" HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(data)
	if err != nil {
		t.Fatalf("read forwarded data: %v", err)
	}
	conn.Close()
	<-errDone
	if s := strings.TrimSpace(string(errB)); s != "" {
		t.Logf("port-forward error stream: %s", s)
	}
	return string(body)
}
