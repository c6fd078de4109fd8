package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/trace"
)

// Metrics are the per-RPC metrics of the CRI server and the panic counter
// of every server crind runs. A nil *Metrics records nothing.
type Metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
	panics  *prometheus.CounterVec
	phases  *prometheus.HistogramVec // crin_cri_phase_seconds, see package trace
}

// NewMetrics registers the CRI server's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "crin", Subsystem: "cri", Name: "request_duration_seconds",
			Help:    "Latency of CRI requests by RPC.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"rpc"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Subsystem: "cri", Name: "request_errors_total",
			Help: "CRI requests that returned an error, by RPC and gRPC code.",
		}, []string{"rpc", "code"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "crin", Name: "panics_total",
			Help: "Requests that panicked and were failed alone, by server (cri, stream, admin, metrics) and RPC or route.",
		}, []string{"server", "rpc"}),
	}
	reg.MustRegister(m.latency, m.errors, m.panics)
	m.phases = trace.Histogram(reg)
	return m
}

// phasesOrNil is the phase histogram of m, nil without metrics.
func (m *Metrics) phasesOrNil() *prometheus.HistogramVec {
	if m == nil {
		return nil
	}
	return m.phases
}

func (m *Metrics) observe(rpc string, d time.Duration, code codes.Code) {
	if m == nil {
		return
	}
	m.latency.WithLabelValues(rpc).Observe(d.Seconds())
	if code != codes.OK {
		m.errors.WithLabelValues(rpc, code.String()).Inc()
	}
}

func (m *Metrics) panicked(server, rpc string) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(server, rpc).Inc()
}

type ctxKey int

const requestKey ctxKey = 0

// requestInfo is what a request's context says about it, for logs.
type requestInfo struct {
	id  string
	rpc string
}

// withRequest returns ctx carrying a new request id and the RPC name.
func withRequest(ctx context.Context, rpc string) (context.Context, string) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return context.WithValue(ctx, requestKey, &requestInfo{id: id, rpc: rpc}), id
}

// RequestID returns the request id the interceptor put in ctx, or "".
func RequestID(ctx context.Context) string {
	if ri, ok := ctx.Value(requestKey).(*requestInfo); ok {
		return ri.id
	}
	return ""
}

// Interceptor is the CRI server's unary interceptor: it gives every
// request an id (carried by every log line written with its context, see
// NewContextHandler), records metrics, fails a request that panics with
// Internal instead of crashing crind, and maps errors to gRPC status codes
// (classify): the one place that does, so handlers never import
// grpc/status. Failures are logged at Info with a size-capped summary of
// the request, payloads at Debug, capped too.
func Interceptor(log *slog.Logger, m *Metrics) grpc.UnaryServerInterceptor {
	log = slog.New(NewContextHandler(log.Handler()))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		rpc := rpcName(info.FullMethod)
		ctx, _ = withRequest(ctx, rpc)
		start := time.Now()
		if log.Enabled(ctx, slog.LevelDebug) {
			log.DebugContext(ctx, "request", "payload", debugPayload(req))
		}
		ctx = trace.Start(ctx, m.phasesOrNil(), rpc)
		resp, err := callUnary(ctx, log, m, rpc, req, h)
		d := time.Since(start)
		if err != nil {
			st := toStatus(err)
			m.observe(rpc, d, st.Code())
			log.InfoContext(ctx, "request failed", "code", st.Code().String(), "duration", d,
				"error", elide(st.Message(), maxLoggedError), "request", requestSummary(req))
			return nil, st.Err()
		}
		m.observe(rpc, d, codes.OK)
		if log.Enabled(ctx, slog.LevelDebug) {
			log.DebugContext(ctx, "response", "duration", d, "payload", debugPayload(resp))
		}
		return resp, nil
	}
}

// StreamInterceptor is Interceptor for streaming RPCs (GetContainerEvents,
// the Stream* lists).
func StreamInterceptor(log *slog.Logger, m *Metrics) grpc.StreamServerInterceptor {
	log = slog.New(NewContextHandler(log.Handler()))
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		rpc := rpcName(info.FullMethod)
		ctx, _ := withRequest(ss.Context(), rpc)
		start := time.Now()
		err := callStream(ctx, log, m, rpc, srv, &ctxStream{ServerStream: ss, ctx: ctx}, h)
		d := time.Since(start)
		if err != nil {
			st := toStatus(err)
			m.observe(rpc, d, st.Code())
			log.InfoContext(ctx, "request failed", "code", st.Code().String(), "duration", d,
				"error", elide(st.Message(), maxLoggedError))
			return st.Err()
		}
		m.observe(rpc, d, codes.OK)
		return nil
	}
}

// ctxStream is a server stream whose context carries the request id.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// maxLoggedError caps the error text of a failed request's log line.
const maxLoggedError = 1 << 10

// callUnary runs the handler; a panic becomes an Internal error.
func callUnary(ctx context.Context, log *slog.Logger, m *Metrics, rpc string, req any, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, recovered(ctx, log, m, "cri", rpc, p)
		}
	}()
	return h(ctx, req)
}

func callStream(ctx context.Context, log *slog.Logger, m *Metrics, rpc string, srv any, ss grpc.ServerStream, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = recovered(ctx, log, m, "cri", rpc, p)
		}
	}()
	return h(srv, ss)
}

// recovered logs a recovered panic with its stack (once), counts it, and
// returns the Internal error that fails the request.
func recovered(ctx context.Context, log *slog.Logger, m *Metrics, server, rpc string, p any) error {
	m.panicked(server, rpc)
	msg := elide(fmt.Sprint(p), maxLoggedError)
	log.ErrorContext(ctx, "request panicked; failed alone, crind keeps serving",
		"server", server, "panic", msg, "stack", string(debug.Stack()))
	return fmt.Errorf("%s: internal error (panic: %s): %w", rpc, msg, errdefs.ErrInternal)
}

func rpcName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}

// Register adds the CRI services to srv.
func (s *Service) Register(srv *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(srv, s)
	runtimeapi.RegisterImageServiceServer(srv, s)
}
