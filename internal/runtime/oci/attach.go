package oci

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

var _ runtime.Attacher = (*Runtime)(nil)

// Attach asks the container's shim for its stdio (shim.OpAttach): the shim
// holds the container's stdin and terminal, so an attach works the same
// after crind restarted. A client too slow for the output is cut off
// (shim.ErrAttachLagged).
func (o *Runtime) Attach(ctx context.Context, id string, req runtime.AttachRequest) error {
	dir, err := o.known(id)
	if err != nil {
		return err
	}
	sock, err := shimSocket(dir)
	if err == nil {
		err = shim.Attach(ctx, sock, id, shim.AttachStreams{
			Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Resize: req.Resize,
		})
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shim.ErrShimGone):
		return fmt.Errorf("attach to container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("attach to container %s: %w", id, err)
}
