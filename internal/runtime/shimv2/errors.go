package shimv2

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusClasses are the errdefs classes of the gRPC codes a shim's ttrpc
// answers carry (ttrpc uses gRPC's status package).
var statusClasses = map[codes.Code]error{
	codes.InvalidArgument:    errdefs.ErrInvalidArgument,
	codes.AlreadyExists:      errdefs.ErrAlreadyExists,
	codes.NotFound:           errdefs.ErrNotFound,
	codes.Unavailable:        errdefs.ErrUnavailable,
	codes.FailedPrecondition: errdefs.ErrFailedPrecondition,
	codes.Unimplemented:      errdefs.ErrNotImplemented,
	codes.Canceled:           context.Canceled,
	codes.DeadlineExceeded:   context.DeadlineExceeded,
	codes.Aborted:            errdefs.ErrAborted,
	codes.Unauthenticated:    errdefs.ErrUnauthenticated,
	codes.PermissionDenied:   errdefs.ErrPermissionDenied,
	codes.Internal:           errdefs.ErrInternal,
	codes.DataLoss:           errdefs.ErrDataLoss,
	codes.OutOfRange:         errdefs.ErrOutOfRange,
	codes.ResourceExhausted:  errdefs.ErrResourceExhausted,
	codes.Unknown:            errdefs.ErrUnknown,
}

// fromShim turns a shim's ttrpc error into one that errdefs classifies,
// with the shim's message. It does what errdefs/pkg/errgrpc.ToNative does
// for these codes without linking that package, whose typeurl dependency
// brings gogo/protobuf into crind: about 250 KiB of binary, and so of
// resident memory (docs/memory.md). An error without a status is
// returned as it is.
func fromShim(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	cls, known := statusClasses[st.Code()]
	if !known {
		cls = errdefs.ErrUnknown
	}
	if msg := st.Message(); msg != "" && msg != cls.Error() {
		return fmt.Errorf("%s: %w", msg, cls)
	}
	return cls
}
