package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// AttachRequest says where a container's output goes while attached.
type AttachRequest struct {
	// Stdout and Stderr receive the container's output from the moment of
	// attaching; nil discards a stream.
	Stdout, Stderr io.Writer
}

// Attacher is the optional capability of attaching to a container's
// output. It is found by type assertion on a Runtime.
type Attacher interface {
	// Attach copies the container's output to req's writers until the
	// container has exited and its output drained (nil), or ctx ends
	// (ctx's error). An unknown container is errdefs.ErrNotFound, one that
	// has exited or has no live shim errdefs.ErrFailedPrecondition.
	Attach(ctx context.Context, id string, req AttachRequest) error
}

var _ Attacher = (*OCI)(nil)

// Attach asks the container's shim for its output (shim.OpAttach). A
// client too slow for the output is cut off (shim.ErrAttachLagged).
func (o *OCI) Attach(ctx context.Context, id string, req AttachRequest) error {
	dir, err := o.known(id)
	if err != nil {
		return err
	}
	err = shim.Attach(ctx, shim.SocketPath(dir), req.Stdout, req.Stderr)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shim.ErrShimGone):
		return fmt.Errorf("attach to container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("attach to container %s: %w", id, err)
}
