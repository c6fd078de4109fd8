// Package streamclient is the client side of the streaming protocols
// (remote command v4 for exec and attach, port forward v1) over SPDY, as
// kubectl speaks them: to crind's streaming server in the integration
// suite, to kubelet (which proxies to crind) in the e2e suite. It is
// imported by test code only.
package streamclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/crin-dev/crin/test/harness"
)

// The protocols, as clients name them in the upgrade request.
const (
	RemoteCommandV4 = "v4.channel.k8s.io"
	PortForwardV1   = "portforward.k8s.io"
)

// Dial upgrades a POST to url into a SPDY connection speaking protocol;
// tlsConfig is for an https url (nil for http). It fails t when the
// server does not upgrade or chooses another protocol.
func Dial(t testing.TB, url, protocol string, tlsConfig *tls.Config) httpstream.Connection {
	t.Helper()
	rt, err := spdy.NewRoundTripper(tlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The context bounds the upgrade only: the connection outlives it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpstream.HeaderProtocolVersion, protocol)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade %s: %v: %s", url, err, b)
	}
	if got := resp.Header.Get(httpstream.HeaderProtocolVersion); got != protocol {
		conn.Close()
		t.Fatalf("server chose protocol %q, want %q", got, protocol)
	}
	return conn
}

// CreateStream opens a stream of type typ (error, stdin, stdout, stderr,
// resize) on conn.
func CreateStream(t testing.TB, conn httpstream.Connection, typ string) httpstream.Stream {
	t.Helper()
	h := http.Header{}
	h.Set("streamType", typ)
	s, err := conn.CreateStream(h)
	if err != nil {
		t.Fatalf("create %s stream: %v", typ, err)
	}
	return s
}

// Status is the v4 status the server sends on the error stream when a
// session ends: Status "Success", or a failure whose ExitCode cause
// carries the command's exit code.
type Status struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Details struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details"`
}

// Session is what a remote command produced.
type Session struct {
	Stdout, Stderr string
	// Status is empty when the server sent none.
	Status Status
}

// ExitCode is the exit code a session reported: 0 on success, -1 when
// the status says neither.
func (s *Session) ExitCode() int {
	if s.Status.Status == "Success" {
		return 0
	}
	for _, c := range s.Status.Details.Causes {
		if c.Reason == "ExitCode" {
			var n int
			if _, err := fmt.Sscan(c.Message, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// Options are the streams a session asks for and what the client does
// on them.
type Options struct {
	// TLS is for an https URL.
	TLS *tls.Config
	// Stdin is sent, then the stdin stream is half-closed unless
	// KeepStdin.
	Stdin     string
	KeepStdin bool
	Stdout    bool
	Stderr    bool
	TTY       bool
	// Resize is a terminal size (width, height) sent first, with TTY.
	Resize *[2]uint16
	// UntilStdout closes the connection once stdout contains it.
	UntilStdout string
}

// Run speaks remote command v4 on url: it creates the streams the options
// ask for, feeds stdin, collects the output and the status. A session
// that does not end within a minute fails t.
func Run(t testing.TB, url string, o Options) *Session {
	t.Helper()
	conn := Dial(t, url, RemoteCommandV4, o.TLS)
	defer conn.Close()
	errStream := CreateStream(t, conn, "error")
	var stdin, stdout, stderr httpstream.Stream
	if o.Stdin != "" || o.KeepStdin {
		stdin = CreateStream(t, conn, "stdin")
	}
	if o.Stdout {
		stdout = CreateStream(t, conn, "stdout")
	}
	if o.Stderr {
		stderr = CreateStream(t, conn, "stderr")
	}
	if o.TTY {
		resize := CreateStream(t, conn, "resize")
		if o.Resize != nil {
			b, _ := json.Marshal(map[string]uint16{"Width": o.Resize[0], "Height": o.Resize[1]})
			if _, err := resize.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if stdin != nil {
		if _, err := io.WriteString(stdin, o.Stdin); err != nil {
			t.Fatalf("write stdin: %v", err)
		}
		if !o.KeepStdin {
			stdin.Close()
		}
	}
	return collect(t, conn, url, errStream, stdout, stderr, o.UntilStdout)
}

// collect reads a session's outputs (stdout and stderr may be nil) until
// the server ends it, or until stdout holds until, when that is set.
func collect(t testing.TB, conn httpstream.Connection, url string, errStream, stdout, stderr httpstream.Stream, until string) *Session {
	t.Helper()
	var (
		wg             sync.WaitGroup
		outBuf, errBuf harness.LogBuffer
		statusB        []byte
		sawUntil       = make(chan struct{})
	)
	copyOut := func(dst *harness.LogBuffer, s httpstream.Stream, until string) {
		defer wg.Done()
		buf := make([]byte, 4096)
		closed := false
		for {
			n, err := s.Read(buf)
			_, _ = dst.Write(buf[:n])
			if until != "" && !closed && strings.Contains(dst.String(), until) {
				closed = true
				close(sawUntil)
			}
			if err != nil {
				return
			}
		}
	}
	if stdout != nil {
		wg.Add(1)
		go copyOut(&outBuf, stdout, until)
	}
	if stderr != nil {
		wg.Add(1)
		go copyOut(&errBuf, stderr, "")
	}
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		statusB, _ = io.ReadAll(errStream)
	}()
	select {
	case <-statusDone:
	case <-sawUntil:
		conn.Close()
		<-statusDone
	case <-time.After(time.Minute):
		conn.Close()
		t.Fatalf("session on %s did not end; stdout so far %q", url, outBuf.String())
	}
	wg.Wait()
	res := &Session{Stdout: outBuf.String(), Stderr: errBuf.String()}
	if len(statusB) > 0 {
		if err := json.Unmarshal(statusB, &res.Status); err != nil {
			t.Fatalf("status %q: %v", statusB, err)
		}
	}
	return res
}

// PortForwardGet sends an HTTP/1.0 GET for path to port over conn (a
// port forward v1 connection) as request requestID, and returns the raw
// response. conn can carry further requests with other ids, as kubectl
// port-forward's does.
func PortForwardGet(t testing.TB, conn httpstream.Connection, port int, requestID, path string) string {
	t.Helper()
	h := http.Header{}
	h.Set("streamType", "error")
	h.Set("port", fmt.Sprint(port))
	h.Set("requestID", requestID)
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	var errB harness.LogBuffer
	go func() { _, _ = io.Copy(&errB, errStream) }()
	h.Set("streamType", "data")
	data, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(data, "GET "+path+" HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(data)
	if err != nil {
		t.Fatalf("read forwarded data: %v", err)
	}
	data.Close()
	conn.RemoveStreams(errStream, data)
	if len(body) == 0 {
		t.Logf("port forward of %s to %d: no data; error stream so far: %q", path, port, errB.String())
	}
	return string(body)
}
