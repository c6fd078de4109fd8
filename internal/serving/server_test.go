package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// logSink is a text slog handler writing to a buffer, safe for use by
// several goroutines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLogSink(level slog.Level) (*logSink, *slog.Logger) {
	s := &logSink{}
	return s, slog.New(NewContextHandler(slog.NewTextHandler(s, &slog.HandlerOptions{Level: level})))
}

func unary(t *testing.T, log *slog.Logger, m *Metrics, method string, req any, h grpc.UnaryHandler) (any, error) {
	t.Helper()
	return Interceptor(log, m)(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/" + method}, h)
}

func TestInterceptorCodes(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "nosuchhost.invalid", IsNotFound: true}
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"invalid", fmt.Errorf("port[0] 70000: must be 1-65535: %w", errdefs.ErrInvalidArgument), codes.InvalidArgument},
		{"dns in a join (panicked errgrpc)", fmt.Errorf("pull: %w", errors.Join(errors.New("mirror: 404"), &url.Error{Op: "Get", URL: "u", Err: dns})), codes.Unavailable},
		{"unknown", errors.New("boom"), codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, log := newLogSink(slog.LevelInfo)
			_, err := unary(t, log, nil, "PullImage", &runtimeapi.PullImageRequest{}, func(context.Context, any) (any, error) { return nil, tc.err })
			if status.Code(err) != tc.want {
				t.Errorf("code %s (%v), want %s", status.Code(err), err, tc.want)
			}
		})
	}
}

func TestInterceptorRecoversPanic(t *testing.T) {
	sink, log := newLogSink(slog.LevelInfo)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var handlerID string
	_, err := unary(t, log, m, "CreateContainer", &runtimeapi.CreateContainerRequest{PodSandboxId: "p1"}, func(ctx context.Context, _ any) (any, error) {
		handlerID = RequestID(ctx)
		var mp map[string]int
		mp["x"] = 1 //nolint:staticcheck // a nil-map write: the runtime panic of a handler bug, on purpose
		return nil, nil
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("err %v, want Internal naming the panic", err)
	}
	if got := panicCount(t, m, "cri", "CreateContainer"); got != 1 {
		t.Errorf("crin_panics_total{server=cri,rpc=CreateContainer} = %v, want 1", got)
	}
	out := sink.String()
	if n := strings.Count(out, "[running]"); n != 1 {
		t.Errorf("stack logged %d times, want once:\n%s", n, out)
	}
	if handlerID == "" || strings.Count(out, "request_id="+handlerID) < 2 {
		t.Errorf("panic and failure lines do not both carry request_id=%s:\n%s", handlerID, out)
	}
	if !strings.Contains(out, "rpc=CreateContainer") {
		t.Errorf("log lacks rpc=CreateContainer:\n%s", out)
	}
	// The interceptor still serves afterwards.
	if _, err := unary(t, log, m, "Version", &runtimeapi.VersionRequest{}, func(context.Context, any) (any, error) { return &runtimeapi.VersionResponse{}, nil }); err != nil {
		t.Errorf("next request: %v", err)
	}
}

func TestStreamInterceptorRecoversPanic(t *testing.T) {
	_, log := newLogSink(slog.LevelInfo)
	m := NewMetrics(prometheus.NewRegistry())
	err := StreamInterceptor(log, m)(nil, fakeServerStream{}, &grpc.StreamServerInfo{FullMethod: "/x/Watch"}, func(any, grpc.ServerStream) error {
		panic("boom")
	})
	if status.Code(err) != codes.Internal {
		t.Errorf("err %v, want Internal", err)
	}
	if got := panicCount(t, m, "cri", "Watch"); got != 1 {
		t.Errorf("panics = %v, want 1", got)
	}
}

type fakeServerStream struct{ grpc.ServerStream }

func (fakeServerStream) Context() context.Context { return context.Background() }

// TestInterceptorLogsAreCapped sends a request with a 1 MB name: the
// failure line and the Debug payload lines stay small, and the failure
// line names the request.
func TestInterceptorLogsAreCapped(t *testing.T) {
	sink, log := newLogSink(slog.LevelDebug)
	huge := strings.Repeat("n", 1<<20)
	req := &runtimeapi.CreateContainerRequest{
		PodSandboxId: "pod1",
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: huge, Attempt: 2},
			Image:    &runtimeapi.ImageSpec{Image: "busybox"},
			Envs:     []*runtimeapi.KeyValue{{Key: "PASSWORD", Value: []byte("hunter2")}},
		},
	}
	_, err := unary(t, log, nil, "CreateContainer", req, func(ctx context.Context, r any) (any, error) {
		name := r.(*runtimeapi.CreateContainerRequest).GetConfig().GetMetadata().GetName()
		return nil, fmt.Errorf("config.metadata.name %q: longer than 255 bytes: %w", name, errdefs.ErrInvalidArgument)
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err %v, want InvalidArgument", err)
	}
	if n := len(status.Convert(err).Message()); n > MaxStatusMessage+64 {
		t.Errorf("status message is %d bytes", n)
	}
	var failed string
	for _, line := range strings.Split(sink.String(), "\n") {
		if len(line) > 8<<10 {
			t.Errorf("a %d byte log line: %.200s", len(line), line)
		}
		if strings.Contains(line, "request failed") {
			failed = line
		}
	}
	for _, want := range []string{"request_id=", "rpc=CreateContainer", "code=InvalidArgument", "duration=", `pod_sandbox_id=\"pod1\"`, `config.metadata.attempt=\"2\"`, `config.image.image=\"busybox\"`, "config.metadata.name="} {
		if !strings.Contains(failed, want) {
			t.Errorf("failure line lacks %s: %s", want, failed)
		}
	}
	if strings.Contains(failed, "hunter2") {
		t.Errorf("failure line carries env values: %s", failed)
	}
}

func TestDebugPayloadRedactsAuth(t *testing.T) {
	p := debugPayload(&runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "r/x"}, Auth: &runtimeapi.AuthConfig{Username: "u", Password: "hunter2"}})
	if strings.Contains(p, "hunter2") || !strings.Contains(p, "r/x") {
		t.Errorf("debug payload %q", p)
	}
}

// TestContextHandler checks that a handler's own log lines, written with
// the request's context through a logger derived with With, carry the
// request id.
func TestContextHandler(t *testing.T) {
	sink, log := newLogSink(slog.LevelInfo)
	derived := log.With("pod_id", "p1")
	var id string
	_, _ = unary(t, log, nil, "RunPodSandbox", &runtimeapi.RunPodSandboxRequest{}, func(ctx context.Context, _ any) (any, error) {
		id = RequestID(ctx)
		derived.InfoContext(ctx, "pod sandbox started")
		return &runtimeapi.RunPodSandboxResponse{}, nil
	})
	derived.Info("no request")
	out := sink.String()
	if !strings.Contains(out, `msg="pod sandbox started" pod_id=p1 request_id=`+id+" rpc=RunPodSandbox") {
		t.Errorf("handler's line lacks the request id %s:\n%s", id, out)
	}
	if strings.Contains(out[strings.Index(out, "no request"):], "request_id") {
		t.Errorf("a line without a request carries a request id:\n%s", out)
	}
	if h := NewContextHandler(log.Handler()); h != log.Handler() {
		t.Errorf("wrapping twice made a second wrapper")
	}
}

func TestRecoverHTTP(t *testing.T) {
	sink, log := newLogSink(slog.LevelInfo)
	m := NewMetrics(prometheus.NewRegistry())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boom/{id}", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("GET /late", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		panic("late")
	})
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) {
		if RequestID(r.Context()) == "" {
			t.Errorf("handler's context has no request id")
		}
		_, _ = w.Write([]byte("fine"))
	})
	srv := httptest.NewServer(RecoverHTTP(log, m, "admin", mux))
	defer srv.Close()
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/boom/1", http.StatusInternalServerError},
		{"/late", http.StatusAccepted},
		{"/ok", http.StatusOK},
		{"/boom/2", http.StatusInternalServerError},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
	if got := panicCount(t, m, "admin", "GET /boom/{id}"); got != 2 {
		t.Errorf("panics{admin, GET /boom/{id}} = %v, want 2", got)
	}
	if got := panicCount(t, m, "admin", "GET /late"); got != 1 {
		t.Errorf("panics{admin, GET /late} = %v, want 1", got)
	}
	if n := strings.Count(sink.String(), "[running]"); n != 3 {
		t.Errorf("%d stacks logged, want 3", n)
	}
}

// panicCount reads crin_panics_total{server, rpc}.
func panicCount(t *testing.T, m *Metrics, server, rpc string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.panics)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "crin_panics_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range mt.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["server"] == server && got["rpc"] == rpc {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestRecoverSession checks that a panic in a streaming session becomes
// the session's Internal error, logged and counted, on whatever goroutine
// the streaming library runs it.
func TestRecoverSession(t *testing.T) {
	sink, log := newLogSink(slog.LevelInfo)
	m := NewMetrics(prometheus.NewRegistry())
	session := func() (err error) {
		defer RecoverSession(context.Background(), log, m, "portforward", &err)
		panic("session broke")
	}
	errc := make(chan error, 1)
	go func() { errc <- session() }()
	err := <-errc
	if !errdefs.IsInternal(err) || !strings.Contains(err.Error(), "session broke") {
		t.Errorf("err %v, want Internal naming the panic", err)
	}
	if got := panicCount(t, m, "stream", "portforward"); got != 1 {
		t.Errorf("panics{stream, portforward} = %v, want 1", got)
	}
	if !strings.Contains(sink.String(), "[running]") {
		t.Errorf("no stack logged:\n%s", sink.String())
	}
}
