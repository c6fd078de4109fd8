package shimv2

import (
	"context"
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFromShim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		is      error
		message string
	}{
		{"not found", status.Error(codes.NotFound, "container abc: not found"), errdefs.ErrNotFound, "container abc: not found: not found"},
		{"bare class", status.Error(codes.FailedPrecondition, "failed precondition"), errdefs.ErrFailedPrecondition, "failed precondition"},
		{"deadline", status.Error(codes.DeadlineExceeded, "wait"), context.DeadlineExceeded, "wait: context deadline exceeded"},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "no space"), errdefs.ErrResourceExhausted, "no space: resource exhausted"},
		{"unknown code", status.Error(codes.Code(99), "odd"), errdefs.ErrUnknown, "odd: unknown"},
		{"not a status keeps its identity", ttrpc.ErrClosed, ttrpc.ErrClosed, ttrpc.ErrClosed.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromShim(tc.err)
			if !errors.Is(got, tc.is) || got.Error() != tc.message {
				t.Errorf("fromShim(%v) = %q, want %q, errors.Is %v", tc.err, got, tc.message, tc.is)
			}
		})
	}
	if fromShim(nil) != nil {
		t.Error("fromShim(nil) is not nil")
	}
}
