// Package serving is how crind answers requests: the CRI gRPC server
// with its interceptors (request ids, logs, metrics, the one mapping of
// errors to gRPC codes, panic recovery), the size bound of a CRI
// request, and the panic recovery and request ids of crind's HTTP servers
// (streaming, admin, metrics). It serves whatever implements the CRI
// services; it does not know the hub (internal/cri), which imports it.
package serving

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/trace"
)

// MaxRequestSize is the largest CRI request crind's gRPC server takes;
// a larger one is refused with ResourceExhausted before it is decoded.
// It is what containerd takes and what kubelet's client may send (16
// MiB): the gRPC default of 4 MiB refused CreateContainer configs that
// environment variables from large ConfigMaps made bigger.
const MaxRequestSize = 16 << 20

// CRI is what the server serves: the two CRI v1 services.
type CRI interface {
	runtimeapi.RuntimeServiceServer
	runtimeapi.ImageServiceServer
}

// NewServer returns a gRPC server of svc's RuntimeService and
// ImageService, taking requests of up to MaxRequestSize, every one of
// them through Interceptor or StreamInterceptor. It only builds the
// server: the caller serves it on a listener and stops it.
func NewServer(log *slog.Logger, m *Metrics, svc CRI) *grpc.Server {
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRequestSize),
		grpc.UnaryInterceptor(Interceptor(log, m)),
		grpc.StreamInterceptor(StreamInterceptor(log, m)),
	)
	runtimeapi.RegisterRuntimeServiceServer(srv, svc)
	runtimeapi.RegisterImageServiceServer(srv, svc)
	return srv
}

// Interceptor is the CRI server's unary interceptor: it gives every
// request an id (carried by every log line written with its context, see
// NewContextHandler), records metrics, fails a request that panics with
// Internal instead of crashing crind, and maps errors to gRPC status codes
// (Code): the one place that does, so handlers never import
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
			st := Status(err)
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
			st := Status(err)
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

func rpcName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}
