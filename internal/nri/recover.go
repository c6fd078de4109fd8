package nri

import (
	"context"
	"runtime/debug"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recoverCalls is the Runtime service's unary interceptor: a panic in
// serving one plugin call fails that call with Internal, is logged once
// with its stack and counted, and leaves crind and the plugin's
// connection up.
func (a *Adaptation) recoverCalls(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (rsp any, err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		a.log.ErrorContext(ctx, "nri runtime service panicked", "method", info.FullMethod,
			"panic", r, "stack", string(debug.Stack()))
		if pm, ok := a.metrics.(PanicMetrics); ok {
			pm.ObservePanic(info.FullMethod)
		}
		rsp, err = nil, status.Errorf(codes.Internal, "crin: panic serving %s", info.FullMethod)
	}()
	return method(ctx, unmarshal)
}
