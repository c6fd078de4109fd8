package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Metrics are the per-RPC metrics of the CRI server.
type Metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
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
	}
	reg.MustRegister(m.latency, m.errors)
	return m
}

type ctxKey int

const requestIDKey ctxKey = 0

// RequestID returns the request id the interceptor put in ctx.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// Interceptor logs every request with its id and RPC, records metrics, and
// maps errdefs-classified errors to gRPC status codes: the one place that
// does, so handlers never import grpc/status.
func Interceptor(log *slog.Logger, m *Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		rid := hex.EncodeToString(b[:])
		ctx = context.WithValue(ctx, requestIDKey, rid)
		rpc := rpcName(info.FullMethod)
		start := time.Now()
		log.DebugContext(ctx, "request", "rpc", rpc, "request_id", rid, "payload", req)
		resp, err := h(ctx, req)
		d := time.Since(start)
		if m != nil {
			m.latency.WithLabelValues(rpc).Observe(d.Seconds())
		}
		if err != nil {
			st := errgrpc.ToGRPC(err)
			code := status.Code(st).String()
			if m != nil {
				m.errors.WithLabelValues(rpc, code).Inc()
			}
			log.InfoContext(ctx, "request failed", "rpc", rpc, "request_id", rid, "code", code, "error", err, "duration", d)
			return nil, st
		}
		log.DebugContext(ctx, "response", "rpc", rpc, "request_id", rid, "duration", d, "payload", resp)
		return resp, nil
	}
}

// StreamInterceptor maps the errors of streaming RPCs (GetContainerEvents,
// the Stream* lists) to gRPC status codes, as Interceptor does for unary
// ones.
func StreamInterceptor(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		if err == nil {
			return nil
		}
		st := errgrpc.ToGRPC(err)
		log.InfoContext(ss.Context(), "stream failed", "rpc", rpcName(info.FullMethod), "code", status.Code(st).String(), "error", err)
		return st
	}
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
